"""One run as the span fold follows it: the spans it has open and where its events belong.

The fold decides which spans an event opens, closes or notes; a ``RunSpans`` keeps the run's
bookkeeping (the open model call, the open tool calls by call id, the calls asked for, the
sub-agents started) and builds the operations, so that every span of a run carries the run's
base attributes and the spans still open can be closed when the run ends or the log stops.
"""

from __future__ import annotations

from typing import Any

from agentledger.core.events import Event, RunStarted, ToolSpec
from agentledger.core.projections import TranscriptProjection

from ._otlp_model import Attributes, Closed, Noted, Opened, SpanKey

__all__ = ("RunSpans", "note")


class RunSpans:
    """What the fold knows about one run, and the spans of it still open."""

    def __init__(self, started: RunStarted, root: str, content: bool) -> None:
        self.started = started
        self.root = root
        self.agent = SpanKey(started.run_id, "agent")
        self.options: dict[str, Any] = dict(started.options)
        self.specs: dict[str, ToolSpec] = {spec.name: spec for spec in started.tools}
        self.transcript = TranscriptProjection() if content else None
        self.chat: SpanKey | None = None
        self.calls: dict[str, SpanKey] = {}  # open tool spans by call id
        self.requested: dict[str, str] = {}  # call id -> the tool name the model asked for
        self.children: dict[str, str] = {}  # child run id -> call id
        self.seen: dict[str, int] = {}  # how often each call id was requested
        self.spans: dict[SpanKey, None] = {}  # the open spans, in the order they opened
        self.last_at = started.at
        self.provider: Attributes = {}
        self.base: Attributes = {"agentledger.run_id": started.run_id}
        if started.session_id is not None:
            self.base["gen_ai.conversation.id"] = started.session_id
            self.base["session.id"] = started.session_id

    def open(self, key: SpanKey, parent: SpanKey | None, name: str, kind: int, at: int,
             attributes: Attributes) -> Opened:  # fmt: skip
        self.spans[key] = None
        return Opened(
            key=key, parent=parent, root_run_id=self.root, name=name, kind=kind, at=at,
            attributes={**self.base, **attributes},
        )  # fmt: skip

    def close(self, key: SpanKey, at: int, attributes: Attributes, **status: Any) -> Closed:
        self.spans.pop(key, None)
        return Closed(key=key, at=at, attributes=attributes, **status)

    def abandon(self, at: int, *, keep: SpanKey | None = None) -> list[Closed]:
        """Close every span still open but ``keep`` at ``at``, innermost first, marked incomplete."""
        keys = [key for key in reversed(self.spans) if key != keep]
        return [self.close(key, at, {"agentledger.incomplete": True}) for key in keys]

    def target(self, call_id: str | None) -> SpanKey:
        """The innermost open span an event of ``call_id`` belongs to."""
        if call_id is not None and call_id in self.calls:
            return self.calls[call_id]
        return self.chat if self.chat is not None else self.agent

    def tool_key(self, call_id: str) -> SpanKey:
        """A new tool span's key: the call id, numbered when the model asks for it again."""
        count = self.seen.get(call_id, 0)
        self.seen[call_id] = count + 1
        return SpanKey(self.started.run_id, "tool", call_id if count == 0 else f"{call_id}#{count + 1}")


def note(key: SpanKey, event: Event, name: str, attributes: Attributes) -> Noted:
    """A span event ``agentledger.<name>`` for ``event`` on the span ``key``."""
    attributes = {"agentledger.seq": event.seq, **attributes}
    return Noted(key=key, name=f"agentledger.{name}", at=event.at, attributes=attributes)

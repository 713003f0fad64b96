"""A live structlog sink: one structured log line per event, as the run happens.

::

    sink = StructlogSink()                # structlog.get_logger("agentledger"), or logger=...
    with sink.attached():
        await agent.run("...")

Each line's event name is the event type (``ToolCalled``); ``run_id`` and ``seq`` are bound, and
the event's other fields follow (``at`` in nanoseconds). Content (messages, instructions,
arguments, results, session values, ``function_invocation_kwargs`` values) is left out unless
``include_content=True``; session changes keep their keys and operations, model responses the
names of the tools they call. Secrets are never written: the events hold no ``client_kwargs``
values, ``function_invocation_kwargs`` only as redacted, and each line is made from the event
as ``agentledger.redaction.redact_event`` gives it. Tool specs appear by name.

Failures log at ``warning`` (a failed model or tool call, rejected arguments, an unknown tool)
and ``error`` (a failed run); everything else at ``info``. Replays are not logged (see
``LiveRuns``).
"""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
import structlog

from agentledger.core.events import (
    ArgumentsRejected,
    Event,
    ModelFailed,
    ModelResponded,
    RunFailed,
    SessionUpdated,
    ToolFailed,
    ToolNotFound,
)
from agentledger.redaction import redact_event
from agentledger.run.recorder import watching

from ._otel_live import LiveRuns

__all__ = ("StructlogSink", "event_fields")

_CONTENT = frozenset(
    {"instructions", "messages", "arguments", "result", "tool_result", "text", "function_invocation_kwargs"}
)
"""Fields that hold content in any event type (``message`` is content only in ``ModelResponded``;
elsewhere it is an error's text)."""
_ENVELOPE = ("type", "run_id", "seq")
_LEVELS: dict[type, str] = {
    ModelFailed: "warning",
    ToolFailed: "warning",
    ArgumentsRejected: "warning",
    ToolNotFound: "warning",
    RunFailed: "error",
}


def event_fields(event: Event, *, include_content: bool = False) -> dict[str, Any]:
    """The fields one log line carries for ``event`` (without ``type``, ``run_id`` and ``seq``),
    as ``redact_event`` gives them: no credential reaches a line."""
    event = redact_event(event)
    fields: dict[str, Any] = msgspec.to_builtins(event)
    for name in _ENVELOPE:
        fields.pop(name, None)
    tools = fields.get("tools")
    if isinstance(tools, list | tuple) and tools and isinstance(tools[0], dict):
        fields["tools"] = [spec["name"] for spec in tools]  # specs by name: schemas make long lines
    if include_content:
        return fields
    kwargs = fields.get("function_invocation_kwargs")
    for name in _CONTENT.intersection(fields):
        del fields[name]
    if isinstance(kwargs, dict):
        fields["function_invocation_kwargs_keys"] = list(kwargs)
    if type(event) is ModelResponded:
        del fields["message"]
        fields["tool_calls"] = [call.name for call in event.message.function_calls]
    elif type(event) is SessionUpdated:
        fields["changes"] = [{"key": change.key, "op": change.op} for change in event.changes]
    return fields


class StructlogSink:
    """A sink (``sink(event)``) that logs each event of a live run through structlog."""

    def __init__(self, logger: Any = None, *, include_content: bool = False) -> None:
        # Any: structlog loggers are duck-typed (bound loggers, proxies, stdlib wrappers).
        self.logger: Any = logger if logger is not None else structlog.get_logger("agentledger")
        self.include_content = include_content
        self.live = LiveRuns()

    def __call__(self, event: Event) -> None:
        for live in self.live(event):
            log = self.logger.bind(run_id=live.run_id, seq=live.seq)
            fields = event_fields(live, include_content=self.include_content)
            getattr(log, _LEVELS.get(type(live), "info"))(type(live).__name__, **fields)

    def attached(self) -> contextlib.AbstractContextManager[None]:
        """Log every run started inside the block, sub-agents included."""
        return watching(self)

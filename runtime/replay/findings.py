"""What a replay finds: divergences, drift and what could not be replayed, each with its place.

A **divergence** is an event the agent's current code records differently from the log (or not
at all, or in addition). **Drift** is a change of what the run is configured with (instructions,
options, tool specs, middleware, limits): the rerun uses the current configuration, but its
model answers come from the log, so a replay cannot say what the model would answer now.
**Cannot replay** is a part of the run tree the replay could not rerun (a sub-agent whose log is
missing, a call the log has no answer for); it names why.

Every finding names its place in the run tree (``path``: the lead run, then for a sub-agent the
call and the sub-agent's name, then the child run), the seq on each side, the event type, the
field and both values.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import msgspec

from ..core.events import Event
from ..core.messages import Message
from ..response import AgentResponse

__all__ = ("CallHow", "Finding", "FindingKind", "ReplayReport", "ReplayedCall", "describe_input", "text_diff")

FindingKind = Literal["divergence", "drift", "cannot_replay"]
CallHow = Literal["ran", "double", "recorded", "refused"]
"""How a replay answered a tool call: ``ran`` (the tool's current code ran, a sub-agent's rerun
included), ``double`` (the test double its ``@tool(replay=...)`` names ran in its place),
``recorded`` (the recorded outcome stood in), ``refused`` (a tool marked never to run in a
replay, with no recorded outcome to answer it: the call failed with ``ReplayRefusedError``)."""


class ReplayedCall(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call of a replay and how it was answered."""

    run_id: str
    """The run of the call: the replay's own id of the lead or of a sub-agent's run."""
    call_id: str
    tool: str
    how: CallHow


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One difference between a recorded run tree and its replay."""

    kind: FindingKind
    run_id: str
    """The run (lead or sub-agent) the finding is in."""
    path: tuple[str, ...]
    """Where in the run tree: ``("run_1",)`` for the lead, ``("run_1", "call_2 (researcher)",
    "run_3")`` inside the sub-agent that call ran."""
    seq: int | None = None
    """The recorded event's seq (None: the rerun recorded an event the log does not have)."""
    rerun_seq: int | None = None
    """The rerun's event's seq (None: the rerun did not record the event)."""
    event_type: str | None = None
    field: str = ""
    """The field that differs, as a dotted path with list indexes (``message.contents[0].text``);
    empty for a whole event missing on one side."""
    recorded: Any = None
    rerun: Any = None
    detail: str = ""
    """More to read: a text diff of changed instructions, why a part could not be replayed."""
    call: str = ""
    """The tool call the event is of, as ``call_1 (price)``; empty for an event of no call."""

    @property
    def where(self) -> str:
        return " > ".join(self.path)

    def describe(self) -> str:
        """The finding on one line (``detail`` aside)."""
        at = f"seq {self.seq}" if self.seq is not None else f"rerun seq {self.rerun_seq}"
        if self.seq is not None and self.rerun_seq is not None and self.rerun_seq != self.seq:
            at += f" (rerun seq {self.rerun_seq})"
        kind = {"divergence": "diverged", "drift": "drift", "cannot_replay": "cannot replay"}[self.kind]
        if self.kind == "cannot_replay":
            return f"{self.where}: {kind}: {self.detail}"
        head = f"{self.where}: {kind} at {at}, {self.event_type}"
        of = f", in {self.call}" if self.call else ""
        if self.seq is None:
            return f"{head}: only in the rerun{of}"
        if self.rerun_seq is None:
            return f"{head}: missing from the rerun{of}"
        if self.field == "type" and isinstance(self.rerun, dict):
            return f"{head}: the rerun recorded {self.rerun.get('type')} instead{of}"
        return f"{head}.{self.field}: {_short(self.recorded)} -> {_short(self.rerun)}{of}"

    def to_dict(self) -> dict[str, Any]:
        """The finding as plain JSON-ready values (what ``agentledger replay --json`` prints)."""
        data: dict[str, Any] = msgspec.to_builtins(self)
        data["where"] = self.where
        return data


def _short(value: Any, limit: int = 80) -> str:
    text = msgspec.json.encode(value).decode() if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def text_diff(recorded: str | None, rerun: str | None) -> str:
    """A unified diff of two texts (changed instructions), line by line."""
    return "\n".join(
        difflib.unified_diff(
            (recorded or "").splitlines(), (rerun or "").splitlines(), "recorded", "current", lineterm=""
        )
    )


def describe_input(messages: Sequence[Message], width: int | None = None) -> str:
    """A run's input on one line, to know the run by: its text, and what holds no text said in
    brackets (an approval a resumed run answers: ``[approves call_1]``), cut to ``width``."""
    parts = []
    for message in messages:
        for content in message.contents:
            if content.type == "text" and content.text:
                parts.append(content.text)
            elif content.type == "function_approval_response":
                answer = "approves" if content.approved else "refuses"
                parts.append(f"[{answer} {content.call_id}]")
            elif content.type == "function_result":
                parts.append(f"[result of {content.call_id}]")
            elif content.type != "text":
                parts.append(f"[{content.type}]")
    text = " ".join(" ".join(parts).split())
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


class ReplayReport:
    """A replayed run tree: every finding, the rerun's response, the runs it replayed."""

    def __init__(
        self,
        run_id: str,
        findings: Iterable[Finding],
        response: AgentResponse | None,
        events: dict[str, list[Event]],
        calls: Iterable[ReplayedCall] = (),
    ) -> None:
        self.run_id = run_id
        self.findings = list(findings)
        self.response = response
        self.events = events
        """The rerun's events by run id: the lead's and every sub-agent's it replayed."""
        self.calls = list(calls)
        """Every tool call of the tree, in the order it started, and how it was answered: run,
        run by a double, answered from the log, refused (``ReplayedCall``)."""

    def count(self, how: CallHow) -> int:
        """How many calls were answered ``how``."""
        return sum(call.how == how for call in self.calls)

    @property
    def divergences(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "divergence"]

    @property
    def drift(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "drift"]

    @property
    def cannot_replay(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "cannot_replay"]

    @property
    def runs(self) -> list[str]:
        """The runs replayed, lead first."""
        return list(self.events)

    def passed(self, *, accept_drift: bool = False) -> bool:
        """No divergence, nothing that could not be replayed, and no drift unless accepted."""
        return not any(f.kind != "drift" or not accept_drift for f in self.findings)

    def first(
        self, kinds: Sequence[FindingKind] = ("divergence", "cannot_replay", "drift")
    ) -> Finding | None:
        """The first finding of the first of ``kinds`` that has one."""
        for kind in kinds:
            for finding in self.findings:
                if finding.kind == kind:
                    return finding
        return None

    def __repr__(self) -> str:
        counts = {
            k: sum(f.kind == k for f in self.findings) for k in ("divergence", "drift", "cannot_replay")
        }
        return f"ReplayReport(run_id={self.run_id!r}, runs={len(self.events)}, {counts})"

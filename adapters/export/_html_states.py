"""The state of a run after each of its events, folded once and stored as differences.

``RecordedRun.state_at(seq)`` folds the log from the start for one seq. The viewer needs the state
after every event, so this module folds the log once, with the same machine and projections as
``state_at``, and records each step as what changed since the step before:

``p`` phase, ``i`` iteration, ``t`` index of the tool set offered, ``k``/``m`` the transcript
(keep the first ``k`` messages, then append message indexes ``m``), ``c`` the pending calls,
``s``/``x`` session keys set (``[key, value]`` pairs) and deleted. A key is present only when its
part changed. Tool specs, tool sets, messages and contents are interned in pools, so a message
that stays in the transcript for 500 steps is written once.

``expand`` is the reference reading of that form; the page's script does the same, and the tests
check both against ``state_at`` for every seq.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from agentledger.core.events import Event, SessionUpdated
from agentledger.core.machine import RunMachine
from agentledger.core.projections import SessionProjection
from agentledger.replay import RecordedRun

__all__ = ("compact_states", "expand")

Scrub = Callable[[str, Any], Any]
"""Applied to every pooled value: ``scrub(kind, builtins)`` with kind spec, message, content or value."""


def _keep(kind: str, value: Any) -> Any:
    return value


class _Pool:
    """Values written once, referred to by index; objects are recognised by identity."""

    def __init__(self, kind: str, scrub: Scrub) -> None:
        self.kind = kind
        self.scrub = scrub
        self.items: list[Any] = []
        self._index: dict[int, int] = {}
        self._alive: list[object] = []

    def ref(self, obj: msgspec.Struct) -> int:
        index = self._index.get(id(obj))
        if index is None:
            index = self._index[id(obj)] = len(self.items)
            self.items.append(self.scrub(self.kind, msgspec.to_builtins(obj)))
            self._alive.append(obj)
        return index


class _Folder:
    """Folds one run and writes the steps."""

    def __init__(self, recorded: RecordedRun, scrub: Scrub) -> None:
        self.recorded = recorded
        self.scrub = scrub
        self.machine = RunMachine(recorded.history())
        self.session = SessionProjection(recorded.session_id)
        for event in recorded.prior:
            self.session.apply(event)
        self.specs = _Pool("spec", scrub)
        self.messages = _Pool("message", scrub)
        self.contents = _Pool("content", scrub)
        self.toolsets: list[list[int]] = []
        self._toolset_index: dict[tuple[int, ...], int] = {}
        self.last: dict[str, Any] = {"p": "new", "i": 0, "t": -1, "c": []}
        self.transcript: list[object] = []
        self.state: dict[str, Any] = {}

    def step(self, event: Event, first: bool) -> dict[str, Any]:
        self.machine.observe(event, strict=False)
        self.session.apply(event)
        step: dict[str, Any] = {}
        for key, value in (("p", self.machine.phase.value), ("i", self.machine.iteration)):
            self._put(step, key, value)
        self._put(step, "t", self._toolset())
        self._transcript(step)
        self._put(step, "c", self._pending())
        if first or type(event) is SessionUpdated:
            self._session(step)
        return step

    def _put(self, step: dict[str, Any], key: str, value: Any) -> None:
        if value != self.last[key]:
            step[key] = self.last[key] = value

    def _toolset(self) -> int:
        refs = tuple(self.specs.ref(spec) for spec in self.machine.tools.specs.values())
        index = self._toolset_index.get(refs)
        if index is None:
            index = self._toolset_index[refs] = len(self.toolsets)
            self.toolsets.append(list(refs))
        return index

    def _transcript(self, step: dict[str, Any]) -> None:
        now: list[object] = [*self.machine.history, *self.machine.transcript.messages]
        keep = 0
        for old, new in zip(self.transcript, now, strict=False):
            if old is not new:
                break
            keep += 1
        if keep != len(self.transcript):
            step["k"] = keep
        if len(now) > keep:
            step["m"] = [self.messages.ref(m) for m in now[keep:]]  # type: ignore[arg-type]
        self.transcript = now

    def _pending(self) -> list[int]:
        transcript = self.machine.transcript
        pending = {*transcript.pending, *self.machine.awaiting_approval}
        if not pending:
            return []
        calls = [c for m in transcript.messages for c in m.function_calls if c.call_id in pending]
        return [self.contents.ref(c) for c in calls]

    def _session(self, step: dict[str, Any]) -> None:
        old, new = self.state, self.session.state
        sets = [[k, self.scrub("value", v)] for k, v in new.items() if k not in old or old[k] is not v]
        deleted = [k for k in old if k not in new]
        if sets:
            step["s"] = sets
        if deleted:
            step["x"] = deleted
        self.state = dict(new)


def compact_states(recorded: RecordedRun, scrub: Scrub = _keep) -> dict[str, Any]:
    """Every state of ``recorded`` (one per event, in log order) in the compact form above."""
    folder = _Folder(recorded, scrub)
    steps = [folder.step(event, index == 0) for index, event in enumerate(recorded.events)]
    return {
        "specs": folder.specs.items,
        "toolsets": folder.toolsets,
        "messages": folder.messages.items,
        "contents": folder.contents.items,
        "steps": steps,
    }


def expand(compact: dict[str, Any]) -> list[dict[str, Any]]:
    """The states written by ``compact_states``, shaped like ``msgspec.to_builtins(RunState)``."""
    phase, iteration, toolset = "new", 0, -1
    transcript: list[int] = []
    pending: Sequence[int] = []
    session: dict[str, Any] = {}
    states: list[dict[str, Any]] = []
    for seq, step in enumerate(compact["steps"]):
        phase = step.get("p", phase)
        iteration = step.get("i", iteration)
        toolset = step.get("t", toolset)
        if "k" in step or "m" in step:
            transcript = transcript[: step.get("k", len(transcript))] + step.get("m", [])
        pending = step.get("c", pending)
        session = {k: v for k, v in session.items() if k not in step.get("x", ())}
        session.update(dict(step.get("s", [])))
        states.append(
            {
                "seq": seq,
                "phase": phase,
                "iteration": iteration,
                "tools": [compact["specs"][i] for i in compact["toolsets"][toolset]] if toolset >= 0 else [],
                "session": session,
                "transcript": [compact["messages"][i] for i in transcript],
                "pending_calls": [compact["contents"][i] for i in pending],
            }
        )
    return states

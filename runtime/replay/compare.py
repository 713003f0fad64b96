"""Comparing a rerun's events with the recorded ones: by value, call by call within a batch."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ..core.events import (
    ApprovalResolved,
    ArgumentsRejected,
    BatchClaimed,
    BatchResumed,
    ChildRunStarted,
    Event,
    MiddlewareShortCircuit,
    ModelResponded,
    RunTerminated,
    SessionUpdated,
    ToolCalled,
    ToolFailed,
    ToolNotFound,
    ToolReturned,
    ToolsAdded,
    ToolsRemoved,
)
from ..errors import ReplayDivergence

__all__ = ("call_of", "canonical", "compare")


_IGNORED = frozenset({"at", "seq", "child_run_id", "origin_run_id", "origin_seq"})


def call_of(event: Event, children: Mapping[str, str]) -> str | None:
    """The tool call of this run that an event belongs to, if any."""
    if type(event) is SessionUpdated:
        if event.origin_run_id is None:
            return event.by
        return children.get(event.by.split("/", 1)[0])  # a copy from a sub-agent: by = "<child run>/..."
    if isinstance(event, ToolsAdded | ToolsRemoved):
        return event.by_call_id
    if isinstance(event, ToolCalled | ToolReturned | ToolFailed | ChildRunStarted):
        return event.call_id
    return None


_BLANK: dict[str, Any] = {"at": 0, "seq": 0, "child_run_id": "", "origin_run_id": None, "origin_seq": None}


def _normalized(event: Event) -> Event:
    """The event with the fields a rerun may change blanked, for comparing by value."""
    blank = {name: _BLANK[name] for name in _IGNORED if name in event.__struct_fields__}
    if type(event) is SessionUpdated and event.origin_run_id is not None:
        blank["by"] = event.by.split("/", 1)[-1]  # "<sub-agent run>/<writer>": new runs get new ids
    return msgspec.structs.replace(event, **blank)


def _comparable(event: Event) -> dict[str, Any]:
    """The event as JSON values for a readable diff (the ignored fields left out)."""
    data = msgspec.to_builtins(event)
    return {k: v for k, v in data.items() if k not in _IGNORED}


def _diff(expected: Event | None, actual: Event | None) -> str:
    def lines(event: Event | None) -> list[str]:
        if event is None:
            return ["<no event>"]
        return msgspec.json.format(msgspec.json.encode(_comparable(event)), indent=2).decode().splitlines()

    return "\n".join(difflib.unified_diff(lines(expected), lines(actual), "recorded", "rerun", lineterm=""))


def _lane(event: Event, children: Mapping[str, str]) -> str | None:
    if isinstance(event, RunTerminated):
        return event.by or None
    if isinstance(event, ArgumentsRejected | ToolNotFound | MiddlewareShortCircuit | ApprovalResolved):
        return event.call_id
    return call_of(event, children)


def _opens_batch(event: Event) -> tuple[str | None, ...] | None:
    """The call ids of the batch ``event`` opens, in call order, or None."""
    if type(event) is ModelResponded and event.message.function_calls:
        return tuple(c.call_id for c in event.message.function_calls)
    if type(event) is BatchResumed:
        return event.call_ids
    return None


def canonical(events: Sequence[Event]) -> list[Event]:
    """The log with each batch's events grouped by call (model order), each call's kept in order."""
    children = {e.child_run_id: e.call_id for e in events if type(e) is ChildRunStarted}
    out: list[Event] = []
    batch: list[Event] = []
    order: dict[str | None, int] = {}
    for event in events:
        if type(event) is BatchClaimed:
            continue  # a later run's claim on this paused run: nothing a rerun of it does
        opened = _opens_batch(event)
        if opened is not None:
            out.extend(_sorted(batch, order, children))
            out.append(event)
            batch = []
            order = {call_id: i for i, call_id in enumerate(opened)}
            continue
        if type(event) is ApprovalResolved and event.call_id not in order:
            order[event.call_id] = len(order)  # a resumed batch, in the order its answers settle
        lane = _lane(event, children) if order else None
        if order and lane in order:
            batch.append(event)
            continue
        if order and type(event).__name__ in ("ApprovalRequested",):
            batch.append(event)
            continue
        out.extend(_sorted(batch, order, children))
        batch, order = [], {}
        out.append(event)
    out.extend(_sorted(batch, order, children))
    return out


def _sorted(batch: list[Event], order: Mapping[str | None, int], children: Mapping[str, str]) -> list[Event]:
    return sorted(batch, key=lambda e: order.get(_lane(e, children), -1))


def compare(recorded: Sequence[Event], actual: Sequence[Event]) -> None:
    """Raise ``ReplayDivergence`` at the first event that differs (see the module docstring).

    ``seq`` of the error is the recorded event's seq (or the rerun's, past the recorded end).
    """
    left, right = canonical(recorded), canonical(actual)
    for index in range(max(len(left), len(right))):
        expected = left[index] if index < len(left) else None
        got = right[index] if index < len(right) else None
        if expected is None or got is None or _normalized(expected) != _normalized(got):
            seq = expected.seq if expected is not None else (got.seq if got is not None else index)
            raise ReplayDivergence(seq, expected, got, _diff(expected, got))

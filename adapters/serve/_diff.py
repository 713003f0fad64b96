"""The diff page's rows: ``agentledger.replay.diff_runs``'s findings, each placed at its
iteration and call in both runs.

``diff_runs`` already lines two runs up by iteration and call (calls matched by their place in
the run); this only says, for each finding, which iteration of each run its event falls in and
which call it concerns (the call id and tool in run A, and in run B), so the page can group the
differences as the runs went.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from agentledger.core.events import Event, ModelCalled, ModelResponded
from agentledger.replay import diff_runs
from agentledger.replay.findings import Finding

__all__ = ("DiffRow", "diff_rows")


class Place(msgspec.Struct, frozen=True, kw_only=True):
    """Where an event sits in its run: the iteration (0 before the first model call) and the
    call it concerns, with its tool."""

    seq: int
    iteration: int
    call_id: str | None = None
    tool: str | None = None


class DiffRow(msgspec.Struct, frozen=True, kw_only=True):
    """One difference: where in run A and run B (``None``: only in the other), what differs."""

    a: Place | None
    b: Place | None
    event_type: str
    field: str
    a_value: Any
    b_value: Any

    @property
    def iteration(self) -> int:
        place = self.a or self.b
        return place.iteration if place is not None else 0


def _places(events: Sequence[Event]) -> dict[int, Place]:
    places: dict[int, Place] = {}
    iteration = 0
    tools: dict[str, str] = {}
    for event in events:
        if isinstance(event, ModelCalled):
            iteration = event.iteration
        elif isinstance(event, ModelResponded):
            tools.update((c.call_id or "", c.name or "") for c in event.message.function_calls)
        call_id = getattr(event, "call_id", None)
        call = call_id if isinstance(call_id, str) else None
        places[event.seq] = Place(
            seq=event.seq, iteration=iteration, call_id=call, tool=tools.get(call or "")
        )
    return places


def diff_rows(a: Sequence[Event], b: Sequence[Event]) -> list[DiffRow]:
    """Every difference between runs ``a`` and ``b``, in run order, each with its places."""
    left, right = _places(a), _places(b)
    return [_row(f, left, right) for f in diff_runs(a, b)]


def _row(finding: Finding, left: dict[int, Place], right: dict[int, Place]) -> DiffRow:
    return DiffRow(
        a=left.get(finding.seq) if finding.seq is not None else None,
        b=right.get(finding.rerun_seq) if finding.rerun_seq is not None else None,
        event_type=finding.event_type or "",
        field=finding.field,
        a_value=finding.recorded,
        b_value=finding.rerun,
    )

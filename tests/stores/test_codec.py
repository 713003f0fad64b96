"""``check_sequence`` against its definition: event ``i`` of a stream read from ``first`` must be
seq ``first + i`` of that stream, and the first event that is not is named."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentledger.adapters.stores._codec import check_sequence
from agentledger.core.events import Event, ModelCalled
from agentledger.errors import LogCorruptError

STREAM = "run_a"

# Each change is applied to one event: its seq moved, or its run id replaced.
changes = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=40),
        st.sampled_from(["seq+1", "seq-1", "seq=0", "run_b", "run_a ", "", "run_A"]),
    ),
    max_size=3,
)


def _stream(first: int, count: int, edits: list[tuple[int, str]]) -> list[Event]:
    events: list[Event] = [
        ModelCalled(run_id=STREAM, seq=first + index, at=0, iteration=index) for index in range(count)
    ]
    for index, change in edits:
        if index >= count:
            continue
        event = events[index]
        if change == "seq+1":
            events[index] = ModelCalled(run_id=event.run_id, seq=event.seq + 1, at=0, iteration=0)
        elif change == "seq-1":
            events[index] = ModelCalled(run_id=event.run_id, seq=event.seq - 1, at=0, iteration=0)
        elif change == "seq=0":
            events[index] = ModelCalled(run_id=event.run_id, seq=0, at=0, iteration=0)
        else:
            events[index] = ModelCalled(run_id=change, seq=event.seq, at=0, iteration=0)
    return events


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=5), st.integers(min_value=0, max_value=40), changes)
def test_check_sequence_names_the_first_event_out_of_place(
    first: int, count: int, edits: list[tuple[int, str]]
) -> None:
    events = _stream(first, count, edits)
    bad = [i for i, e in enumerate(events) if e.seq != first + i or e.run_id != STREAM]
    if not bad:
        assert check_sequence(events, STREAM, first, lambda i: f"line {i}") is events
        return
    with pytest.raises(LogCorruptError) as caught:
        check_sequence(events, STREAM, first, lambda i: f"line {i}")
    index = bad[0]
    assert caught.value.where == f"line {index}"
    found = events[index]
    assert f"expected seq {first + index} of {STREAM!r}, found seq {found.seq} of {found.run_id!r}" in str(
        caught.value
    )

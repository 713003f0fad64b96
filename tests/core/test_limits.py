"""The append gate against the slow, obvious definitions it stands in for.

``may_overflow`` looks at encoded JSON without decoding it. It may raise a false alarm (digits
inside a string), never miss: a miss would let a value into the log that does not read back. It
is compared here with a definition that parses the text, and ``check_event`` with what reads back.
(``too_deep``, the nesting check, is ``core/depth.py``'s: ``test_depth.py``.)
"""

from __future__ import annotations

import json
import re

import msgspec
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentledger.core.depth import MAX_DEPTH
from agentledger.core.errors import UnrecordableError
from agentledger.core.events import (
    Event,
    MiddlewareShortCircuit,
    ModelResponded,
    ToolCalled,
    ToolNotFound,
    ToolReturned,
    encode_event,
)
from agentledger.core.limits import INT64_MAX, INT64_MIN, check_event, may_overflow
from agentledger.core.messages import Content, Message
from tests.core._nesting import depth_of, nested


def _holds_a_big_int(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return not INT64_MIN <= value <= INT64_MAX
    if isinstance(value, dict):
        return any(map(_holds_a_big_int, value.values()))
    if isinstance(value, list):
        return any(map(_holds_a_big_int, value))
    return False


_edge_ints = st.sampled_from(
    [INT64_MAX, INT64_MAX + 1, INT64_MIN, INT64_MIN - 1, 10**18, 10**19, 9 * 10**18, -9 * 10**18, 2**64]
)
_ints = st.one_of(st.integers(), _edge_ints, st.integers(min_value=10**18, max_value=10**20))
_leaves = st.one_of(st.none(), st.booleans(), _ints, st.text(max_size=30), st.floats(allow_nan=False))
_values = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(_values)
def test_may_overflow_never_misses_an_integer_past_64_bits(value: object) -> None:
    data = json.dumps(value).encode()
    if _holds_a_big_int(value):
        assert may_overflow(data), data


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=INT64_MIN, max_value=INT64_MAX), max_size=8))
def test_may_overflow_is_quiet_for_numbers_that_fit_outside_strings(values: list[int]) -> None:
    # Numbers that fit, none of 19 digits starting with 9 (the only ones that might not).
    fits = [v for v in values if not re.fullmatch(rb"-?9\d{18}", str(v).encode())]
    assert not may_overflow(json.dumps({"at": 1_780_000_000_000_000_000, "values": fits}).encode())


def test_may_overflow_checks_every_19_digit_number_not_only_the_first() -> None:
    ok = 1_780_000_000_000_000_000
    assert not may_overflow(msgspec.json.encode([ok, ok, ok]))
    assert may_overflow(msgspec.json.encode([ok, ok, INT64_MAX + 1]))
    assert may_overflow(msgspec.json.encode({"a": ok, "b": -(2**63) - 1}))
    assert not may_overflow(b'{"id":"run_9223372036854775808x"}')  # inside a string, after a letter


def test_may_overflow_sees_a_number_at_either_end_of_the_text() -> None:
    """A number that opens or closes the text, with nothing before or after its digits."""
    assert may_overflow(b"12345678901234567890")
    assert may_overflow(b"9223372036854775808")
    assert not may_overflow(b"1234567890123456789")
    assert not may_overflow(b"[1,1234567890123456789")
    assert may_overflow(b"[1,1234567890123456789,1,12345678901234567890")
    assert may_overflow(b"[1780000000000000000,-12345678901234567890123]")


_plain = st.one_of(st.none(), st.booleans(), _ints, st.text(max_size=10), st.floats(allow_nan=False))


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=6),
        st.one_of(
            _plain, st.lists(_plain, max_size=3), st.dictionaries(st.text(max_size=4), _plain, max_size=3)
        ),
        max_size=10,
    )
)
def test_the_gate_refuses_arguments_exactly_when_they_hold_an_integer_past_64_bits(
    arguments: dict[str, object],
) -> None:
    """A few plain values are checked one by one, others on the text: the same answer either way."""
    event = ToolCalled(run_id="r", seq=1, at=1, call_id="c", name="t", arguments=arguments)
    assert _refused(event) == _holds_a_big_int(arguments), arguments


def _refused(event: Event) -> bool:
    """Whether the gate refuses ``event`` (``UnrecordableError``)."""
    try:
        check_event(event)
    except UnrecordableError:
        return True
    return False


def test_the_gate_gives_the_bytes_a_store_writes() -> None:
    """What ``check_event`` returns is ``encode_event``'s encoding, for either path of the gate."""
    answer = Message("assistant", (Content.from_function_call("c", "t", arguments='{"n": 1}'),))
    events: list[Event] = [
        ToolCalled(run_id="r", seq=1, at=1, call_id="c", name="t", arguments={"n": 1}),
        ModelResponded(run_id="r", seq=2, at=2, iteration=1, message=answer),
    ]
    assert [check_event(event) for event in events] == [encode_event(event) for event in events]


_results = st.one_of(
    _values,
    st.dictionaries(st.text(max_size=6), _plain, max_size=10),  # a few plain values, or more
    st.builds(
        lambda depth: nested(depth, 0, "x"), st.integers(min_value=MAX_DEPTH - 2, max_value=MAX_DEPTH + 2)
    ),
)


@settings(max_examples=400, deadline=None)
@given(_results, st.one_of(st.none(), _results), st.sampled_from(["returned", "short_circuit"]))
@example(INT64_MAX + 1, None, "returned")  # a number on its own, checked in place
@example("ok", INT64_MIN - 1, "returned")
@example(2**64, None, "short_circuit")
@example({"n": INT64_MAX + 1}, None, "returned")
def test_the_gate_refuses_a_result_exactly_when_it_would_not_read_back(
    result: object, tool_result: object, kind: str
) -> None:
    """A tool's result (and the value middleware replaced) is checked by its type's own check:
    text and numbers in place, containers on the text; refused exactly when a value holds an
    integer past 64 bits or nests deeper than the log reads."""
    event: Event
    if kind == "returned":
        event = ToolReturned(
            run_id="r", seq=1, at=1, call_id="c", name="t", result=result, tool_result=tool_result
        )
        values = [result, tool_result]
    else:
        event = MiddlewareShortCircuit(run_id="r", seq=1, at=1, call_id="c", middleware="m", result=result)
        values = [result]
    # The event's own level of nesting counts: a value at the limit is one deeper in the record.
    expected = any(_holds_a_big_int(v) for v in values) or any(depth_of(v) + 1 > MAX_DEPTH for v in values)
    assert _refused(event) == expected, values


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([INT64_MIN - 1, INT64_MIN, -1, 0, INT64_MAX, INT64_MAX + 1]), st.booleans())
def test_the_gate_checks_the_stamp_of_an_event_with_no_free_value(value: int, in_seq: bool) -> None:
    seq, at = (value, 1) if in_seq else (1, value)
    event = ToolNotFound(run_id="r", seq=seq, at=at, call_id="c", name="t", reason="unknown")
    fits = INT64_MIN <= value <= INT64_MAX  # what the log holds; the machine checks the order
    assert _refused(event) == (not fits)

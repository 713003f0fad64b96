"""``core/depth.py``: ``too_deep`` measures how deep JSON lines nest from their bytes alone, and
must say what parsing them would (a miss would let a record in that no reader can decode)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from agentledger.core.depth import MAX_DEPTH, too_deep
from tests.core._nesting import depth_of, nested


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def test_nesting_up_to_the_limit_passes_and_one_level_more_does_not() -> None:
    assert not too_deep(_deep(MAX_DEPTH))
    assert too_deep(_deep(MAX_DEPTH + 1))
    assert too_deep(b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1))  # objects count too


def test_a_limit_of_its_own_is_applied() -> None:
    assert not too_deep(_deep(3), limit=3)
    assert too_deep(_deep(4), limit=3)
    assert too_deep(_deep(MAX_DEPTH - 1), limit=40)


def test_brackets_inside_strings_count_for_nothing() -> None:
    text = json.dumps(["[" * (MAX_DEPTH + 5) + "{" * 5]).encode()
    assert not too_deep(text)
    escaped = json.dumps(['say \\"' + "[" * (MAX_DEPTH + 5) + '" ok']).encode()  # an escaped quote
    assert not too_deep(escaped)


def test_openers_that_close_again_do_not_add_up() -> None:
    """Many shallow containers side by side hold more openers than the limit, but nest two deep."""
    wide = json.dumps([[i] for i in range(3 * MAX_DEPTH)]).encode()
    assert not too_deep(wide)
    assert too_deep(wide[:-1] + b"," + _deep(MAX_DEPTH) + b"]")  # one deep sibling: one level more


def test_each_line_is_measured_on_its_own() -> None:
    """The openers of several lines are never added together: a block is as deep as its deepest line."""
    half = _deep(MAX_DEPTH // 2 + 1)
    assert not too_deep(b"\n".join([half] * 10))
    assert too_deep(b"\n".join([half, _deep(MAX_DEPTH + 1), half]))


def test_a_short_record_or_a_scalar_is_never_too_deep() -> None:
    assert not too_deep(b"")
    assert not too_deep(b"1")
    assert not too_deep(b"[" * MAX_DEPTH)  # openers up to the limit, and no more, never go past it


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=2 * MAX_DEPTH), st.integers(min_value=0, max_value=300))
def test_too_deep_agrees_with_the_nesting_of_the_value(depth: int, siblings: int) -> None:
    value: object = "leaf"
    for _ in range(depth):
        value = [value]
    wide = {"deep": value, "wide": [[i] for i in range(siblings)]}  # many openers, shallow
    data = json.dumps(wide).encode()
    assert too_deep(data) == (depth_of(wide) > MAX_DEPTH)


blocks = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=2 * MAX_DEPTH + 2),
        st.integers(min_value=0, max_value=700),  # lines from a few bytes to past 4 KiB
        st.sampled_from(["", "[[[[{{{{", "]}"]),
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=200, deadline=None)
@given(blocks, st.sampled_from([MAX_DEPTH, MAX_DEPTH - 1, MAX_DEPTH - 3, 40, 3]))
def test_too_deep_of_a_block_agrees_with_its_deepest_line(
    lines: list[tuple[int, int, str]], limit: int
) -> None:
    """Short records and long blocks take different paths; both say what the lines' depths say."""
    values = [nested(*line) for line in lines]
    data = b"".join(json.dumps(value, separators=(",", ":")).encode() + b"\n" for value in values)
    assert too_deep(data, limit) == any(depth_of(value) > limit for value in values)

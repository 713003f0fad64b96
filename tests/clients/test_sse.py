"""The server-sent-events parser: fed whole, byte by byte, in arbitrary pieces, and with trailing data."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentledger.adapters.chat._sse import ServerSentEvent, SSEDecoder

STREAM = (
    b": a comment the parser skips\n"
    b"data: first\n"
    b"\n"
    b"event: update\n"
    b"id: 7\n"
    b"data: line one\n"
    b"data:line two\n"
    b"\n"
    b'data: {"text": "caf\xc3\xa9 \xe2\x98\x95"}\n'
    b"\n"
)

EXPECTED = [
    ServerSentEvent("first"),
    ServerSentEvent("line one\nline two", event="update", id="7"),
    ServerSentEvent('{"text": "café ☕"}', id="7"),
]


def whole(data: bytes) -> list[bytes]:
    return [data]


def byte_by_byte(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def pairs(data: bytes) -> list[bytes]:
    return [data[i : i + 2] for i in range(0, len(data), 2)]


def parse(pieces: list[bytes]) -> tuple[list[ServerSentEvent], SSEDecoder]:
    decoder = SSEDecoder()
    events = [event for piece in pieces for event in decoder.feed(piece)]
    return events, decoder


@pytest.mark.parametrize("split", [whole, byte_by_byte, pairs])
def test_events_are_the_same_however_the_stream_is_split(split: Callable[[bytes], list[bytes]]) -> None:
    """Whole, byte by byte or in pairs, the same events come out and nothing is left pending."""
    events, decoder = parse(split(STREAM))
    assert events == EXPECTED
    assert not decoder.pending


@pytest.mark.parametrize("split", [whole, byte_by_byte])
@pytest.mark.parametrize("newline", [b"\r\n", b"\r", b"\n"])
def test_every_line_ending_is_accepted(newline: bytes, split: Callable[[bytes], list[bytes]]) -> None:
    """CRLF, CR and LF all end lines, also when a CRLF is split across two pieces."""
    data = STREAM.replace(b"\n", newline)
    events, decoder = parse(split(data))
    assert events == EXPECTED
    assert not decoder.pending


@pytest.mark.parametrize("split", [whole, byte_by_byte])
def test_trailing_partial_event_is_held_back_and_reported_pending(
    split: Callable[[bytes], list[bytes]],
) -> None:
    """Data after the last complete event is not dispatched; ``pending`` says it is there."""
    events, decoder = parse(split(STREAM + b"data: unfinished"))
    assert events == EXPECTED
    assert decoder.pending
    assert decoder.feed(b"\n\n") == [ServerSentEvent("unfinished", id="7")]
    assert not decoder.pending


def test_fields_without_the_blank_line_are_pending() -> None:
    """A complete field line whose event was not yet closed by a blank line is still pending."""
    events, decoder = parse([b"data: one\n\ndata: two\n"])
    assert events == [ServerSentEvent("one")]
    assert decoder.pending


def test_half_a_utf8_character_is_pending() -> None:
    """Bytes of a character not yet complete count as pending input."""
    decoder = SSEDecoder()
    assert decoder.feed(b"data: \xe2\x98") == []
    assert decoder.pending
    assert decoder.feed(b"\x95\n\n") == [ServerSentEvent("☕")]


def test_leading_byte_order_mark_is_dropped() -> None:
    """A UTF-8 BOM at the start of the stream is not part of the first field name."""
    events, _ = parse(byte_by_byte(b"\xef\xbb\xbfdata: x\n\n"))
    assert events == [ServerSentEvent("x")]


def test_block_without_data_dispatches_nothing_and_resets_the_type() -> None:
    """An event type without data is dropped, and does not leak into the next event."""
    events, _ = parse([b"event: ping\n\ndata: after\n\n"])
    assert events == [ServerSentEvent("after")]


def test_field_forms() -> None:
    """``data`` alone is an empty line, only one space is stripped, unknown fields are ignored."""
    events, _ = parse([b"data\ndata:  two spaces\nfoo: bar\n\n"])
    assert events == [ServerSentEvent("\n two spaces")]


def test_last_event_id_persists_and_ignores_values_with_nul() -> None:
    """The id carries over to later events; an id containing NUL is ignored."""
    events, decoder = parse([b"id: a\ndata: 1\n\ndata: 2\n\nid: b\x00c\ndata: 3\n\nid\ndata: 4\n\n"])
    assert [e.id for e in events] == ["a", "a", "a", ""]
    assert decoder.last_event_id == ""


def test_retry_field_takes_digits_only() -> None:
    """``retry`` with ASCII digits is read; any other value is ignored."""
    events, _ = parse([b"retry: 1500\ndata: a\n\nretry: soon\ndata: b\n\n"])
    assert [e.retry for e in events] == [1500, None]


def test_openai_done_sentinel_is_plain_data() -> None:
    """``data: [DONE]`` is an ordinary event to the parser; the client gives it its meaning."""
    events, _ = parse([b"data: {}\n\ndata: [DONE]\n\n"])
    assert [e.data for e in events] == ["{}", "[DONE]"]


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_gives_the_events_of_the_whole(cuts: list[int]) -> None:
    """Invariant: cutting the stream at any positions changes nothing in what is parsed."""
    points = [0, *sorted(cuts), len(STREAM)]
    pieces = [STREAM[a:b] for a, b in itertools.pairwise(points)]
    events, decoder = parse(pieces)
    assert events == EXPECTED
    assert not decoder.pending

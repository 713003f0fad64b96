"""A fresh journal reading a stream whose lines open and close the file decodes every line once
and indexes the file from the events; it must give what indexing the file first gives."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from agentledger.adapters.stores.jsonl import JsonlEventStore
from agentledger.core.events import encode_event
from agentledger.errors import LogCorruptError
from agentledger.testing.stores import make_events

_DEEP = (
    b'{"type":"ToolCalled","run_id":"run_a","seq":0,"at":0,"call_id":"c","name":"n","arguments":{"x":'
    + (b"[" * 300 + b"]" * 300)
    + b"}}"
)


def _line(kind: str, seq: int) -> bytes:
    if kind in ("run_a", "run_b"):
        return encode_event(make_events(kind, seq, 1, kind)[0])
    return {
        "garbage": b"not json",
        "envelope": b'{"run_id":"run_a"}',
        "deep": _DEEP,
        "other type": b'{"type":"Nope","run_id":"run_a","seq":0,"at":0}',
    }[kind]


kinds = st.sampled_from(["run_a", "run_a", "run_a", "run_b", "garbage", "envelope", "deep", "other type"])
lines = st.lists(st.tuples(kinds, st.integers(0, 6)), max_size=12)


def _outcome(store: JsonlEventStore, after: int, index_first: bool) -> object:
    try:
        if index_first:
            store.streams_sync()
        return store.read_sync("run_a", after)
    except LogCorruptError as exc:
        return ("corrupt", exc.where)
    finally:
        store.close()


@settings(max_examples=300, deadline=None)
@given(lines, st.booleans(), st.integers(-1, 8))
def test_a_fresh_journal_reads_a_stream_as_one_that_indexed_the_file_first(
    middle: list[tuple[str, int]], framed: bool, after: int
) -> None:
    """Whatever lies between (other streams, lines out of order, lines that are no event or are
    too deep), the events read or the line named as corrupt are the same."""
    if framed:  # the stream's lines open and close the file: the fresh read decodes it whole
        middle = [("run_a", 0), *middle, ("run_a", len(middle) + 1)]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "runs.jsonl"
        path.write_bytes(b"".join(_line(kind, seq) + b"\n" for kind, seq in middle))
        fresh = _outcome(JsonlEventStore(path), after, index_first=False)
        indexed = _outcome(JsonlEventStore(path), after, index_first=True)
        assert fresh == indexed


def test_a_fresh_journal_of_one_stream_reads_it_whole() -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "runs.jsonl"
        events = make_events("run_a", 0, 50, "a")
        path.write_bytes(b"".join(encode_event(e) + b"\n" for e in events))
        assert JsonlEventStore(path).read_sync("run_a") == events
        assert JsonlEventStore(path).read_sync("run_a", 47) == events[48:]
        assert JsonlEventStore(path).read_sync("run_b") == []


def _each(store: JsonlEventStore, streams: list[str], together: bool) -> object:
    try:
        if together:
            store.streams_sync()  # as a rebuild lists the streams first
            return store.read_many_sync(streams)
        return {stream: store.read_sync(stream) for stream in streams}
    except LogCorruptError as exc:
        return ("corrupt", exc.where)
    finally:
        store.close()


@settings(max_examples=200, deadline=None)
@given(lines, st.booleans())
def test_read_many_of_a_journal_reads_as_each_stream_alone(
    middle: list[tuple[str, int]], batched: bool
) -> None:
    """Streams whose lines lie in a row (taken as one slice) or not, and hostile lines between."""
    if batched:  # each stream's lines in a row, in order: a journal its runs appended in batches
        middle = sorted(middle, key=lambda line: line[0] != "run_a")
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "runs.jsonl"
        path.write_bytes(b"".join(_line(kind, seq) + b"\n" for kind, seq in middle))
        streams = ["run_a", "run_b", "run_c"]
        alone = _each(JsonlEventStore(path), streams, together=False)
        assert _each(JsonlEventStore(path), streams, together=True) == alone

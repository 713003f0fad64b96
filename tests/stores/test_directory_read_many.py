"""A JSONL directory's ``read_many`` reads every file in one loop; it must give what reading the
streams one by one gives: the same events, or the same file and line named as corrupt, whatever
the files hold (torn tails, lines that are no event, too deep, out of order or of another
stream, blank lines, missing files, names no file can have)."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from agentledger.adapters.stores._codec import check_sequence, decode_block
from agentledger.adapters.stores.jsonl import JsonlEventStore, TornTailWarning, _Directory
from agentledger.core.events import Event, encode_event
from agentledger.errors import LogCorruptError
from agentledger.testing.stores import make_events

STREAMS = ["run_a", "run_b", "run_c"]
_DEEP = (
    b'{"type":"ToolCalled","run_id":"run_a","seq":0,"at":0,"call_id":"c","name":"n","arguments":{"x":'
    + (b"[" * 300 + b"]" * 300)
    + b"}}"
)


def _line(stream: str, kind: str, seq: int) -> bytes:
    if kind == "event":
        return encode_event(make_events(stream, seq, 1, stream)[0]) + b"\n"
    return {
        "other stream": encode_event(make_events("run_z", seq, 1, "z")[0]) + b"\n",
        "garbage": b"not json\n",
        "blank": b"\n",
        "deep": _DEEP + b"\n",
        "torn": encode_event(make_events(stream, seq, 1, stream)[0])[:20],
    }[kind]


kinds = st.sampled_from(["event"] * 12 + ["other stream", "garbage", "blank", "deep", "torn"])
files = st.lists(st.tuples(kinds, st.integers(0, 5)), max_size=6)
plain = st.lists(st.integers(0, 5).map(lambda n: ("event", n)), max_size=6)
layouts = st.dictionaries(st.sampled_from(STREAMS), st.one_of(files, plain, plain.map(sorted)))
asked = st.lists(st.sampled_from([*STREAMS, "run_missing", ""]), max_size=6)


def _write(directory: Path, layout: dict[str, list[tuple[str, int]]]) -> None:
    directory.mkdir()
    for stream, lines in layout.items():
        # the torn part of a file is its last bytes, whatever comes after it in the list
        data = b"".join(_line(stream, kind, seq) for kind, seq in lines if kind != "torn")
        data += b"".join(_line(stream, kind, seq) for kind, seq in lines if kind == "torn")[:20]
        (directory / f"{stream}.jsonl").write_bytes(data)


def _old_read(store: JsonlEventStore, stream: str) -> list[Event]:
    """The directory's read as it was before ``LineFile.read_from``: ``locked``, then ``block``."""
    layout = store._layout
    assert isinstance(layout, _Directory)
    try:
        file = layout._file(stream)
    except ValueError:
        return []
    with file.locked(create=False) as handle:
        if handle is None or not file.count:
            return []
        count, data = file.count, handle.block(0, file.count)
    where = lambda i: f"{file.path}:{i + 1}"  # noqa: E731
    return check_sequence(decode_block(data, count, where), stream, 0, where)


def _one_by_one(store: JsonlEventStore, streams: list[str]) -> object:
    try:
        return {stream: _old_read(store, stream) for stream in streams}
    except LogCorruptError as exc:
        return ("corrupt", exc.where)


def _each(store: JsonlEventStore, streams: list[str]) -> object:
    try:
        return {stream: store.read_sync(stream) for stream in streams}
    except LogCorruptError as exc:
        return ("corrupt", exc.where)


def _together(store: JsonlEventStore, streams: list[str]) -> object:
    try:
        return store.read_many_sync(streams)
    except LogCorruptError as exc:
        return ("corrupt", exc.where)


@settings(max_examples=300, deadline=None)
@given(layouts, asked, st.booleans())
def test_read_many_of_a_directory_reads_as_each_stream_alone(
    layout: dict[str, list[tuple[str, int]]], streams: list[str], read_only: bool
) -> None:
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore", TornTailWarning)
        first, second = Path(folder) / "first", Path(folder) / "second"
        _write(first, layout)
        _write(second, layout)
        alone = _one_by_one(JsonlEventStore(first, read_only=read_only), streams)
        together = _together(JsonlEventStore(second, read_only=read_only), streams)
        assert str(together).replace("second", "first") == str(alone)
        store = JsonlEventStore(second, read_only=read_only)  # and again, on files a read repaired
        again = _together(store, streams)
        assert str(again).replace("second", "first") == str(_one_by_one(JsonlEventStore(first), streams))
        assert _together(store, streams) == again  # a store that read the files before
        assert str(_one_by_one(store, streams)) == str(again)
        assert str(_each(JsonlEventStore(second, read_only=read_only), streams)) == str(again)


def test_read_many_of_a_directory_after_appends() -> None:
    """A store that appended, then reads many streams, reads what it appended."""
    with tempfile.TemporaryDirectory() as folder:
        store = JsonlEventStore(Path(folder) / "runs")
        for stream in STREAMS:
            store.append_sync(stream, make_events(stream, 0, 3, stream), 0)
        assert store.read_many_sync([*STREAMS, "run_missing"]) == {
            **{stream: make_events(stream, 0, 3, stream) for stream in STREAMS},
            "run_missing": [],
        }
        more = make_events("run_b", 3, 2, "more")
        store.append_sync("run_b", more, 3)
        assert store.read_many_sync(["run_b"]) == {"run_b": make_events("run_b", 0, 3, "run_b") + more}
        assert store.read_sync("run_b", 2) == more

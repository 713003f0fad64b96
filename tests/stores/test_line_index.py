"""A ``LineFile`` indexes what other writers appended, in one or many catch-ups, exactly as
splitting the file's bytes at its line ends would; a torn last record is never a line."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentledger.adapters.stores._lines import LineFile
from agentledger.errors import LogCorruptError, TornTailWarning

records = st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")), max_size=12)


def _expected(data: bytes) -> tuple[list[int], int]:
    """Where each whole line of ``data`` starts, and where the whole lines end."""
    whole = data[: data.rfind(b"\n") + 1]
    starts, at = [], 0
    for line in whole.split(b"\n")[:-1]:
        starts.append(at)
        at += len(line) + 1
    return starts, at


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(records, st.booleans(), st.booleans()), min_size=1, max_size=4),
    st.binary(max_size=5).map(lambda b: b.replace(b"\n", b"")),
)
def test_catching_up_indexes_every_whole_line(
    batches: list[tuple[list[bytes], bool, bool]], torn: bytes
) -> None:
    """Lines counted by either pass (``decoding`` or not), indexed at once or only later, after
    more lines were counted."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "lines.jsonl"
        path.write_bytes(b"")
        reader = LineFile(path, fsync=False, read_only=True)
        written = b""
        for batch, decoding, index in batches:  # another writer appends; the reader catches up
            written += b"".join(record + b"\n" for record in batch)
            path.write_bytes(written + torn)
            starts, end = _expected(written)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", TornTailWarning)
                with reader.locked(create=False, decoding=decoding) as handle:
                    assert handle is not None
                    assert (reader.count, reader.end) == (len(starts), end)
                    whole = handle.block(0, reader.count)
                    assert whole == written
                    if index:
                        handle.index_lines()
                        assert list(reader.starts) == starts
                        assert [handle.block(n, n + 1) for n in range(reader.count)] == [
                            line + b"\n" for line in whole.split(b"\n")[:-1]
                        ]
                    assert handle.lines(range(0, reader.count, 2)) == whole.split(b"\n")[:-1][::2]
            assert list(reader.starts) == starts[: len(reader.starts)]  # what is indexed is right


def test_lines_changed_in_place_are_corrupt() -> None:
    """Lines counted, then rewritten in place with their line ends elsewhere, cannot be indexed."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "lines.jsonl"
        path.write_bytes(b"a\nbb\nccc\n")
        reader = LineFile(path, fsync=False)
        with reader.locked(create=False) as handle:
            assert handle is not None
            assert reader.count == 3
        path.write_bytes(b"aaaa\nb\ncc\n")  # the same size and file
        with reader.locked(create=False) as handle:
            assert handle is not None
            with pytest.raises(LogCorruptError, match="changed in place"):
                handle.block(1, 2)

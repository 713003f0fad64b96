"""A ``LineFile`` indexes what other writers appended, in one or many catch-ups, exactly as
splitting the file's bytes at its line ends would; a torn last record is never a line."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from agentledger.adapters.stores._lines import LineFile
from agentledger.errors import TornTailWarning

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
@given(st.lists(records, min_size=1, max_size=4), st.binary(max_size=5).map(lambda b: b.replace(b"\n", b"")))
def test_catching_up_indexes_every_whole_line(batches: list[list[bytes]], torn: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "lines.jsonl"
        path.write_bytes(b"")
        reader = LineFile(path, fsync=False, read_only=True)
        written = b""
        for batch in batches:  # another writer appends; the reader catches up after each batch
            written += b"".join(record + b"\n" for record in batch)
            path.write_bytes(written + torn)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", TornTailWarning)
                with reader.locked(create=False) as handle:
                    assert handle is not None
                    whole = handle.block(0, reader.count)
            starts, end = _expected(written)
            assert (list(reader.starts), reader.end) == (starts, end)
            assert whole == written

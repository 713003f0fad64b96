"""How the SQLite store checks and inserts a group of appends inside its transaction.

Theory of operation. ``StreamVersions`` keeps, per stream, the id and version this store's
connection committed last (the most recently written 10,000 streams). While ``PRAGMA
data_version`` is unchanged no other connection has written, so they are still true; otherwise
they are dropped. Streams not known are read in one query. Each append is then checked in queue
order (a stale one fails alone, writing nothing) and the accepted batches are inserted by a few
multi-row statements (``insert_rows``: chunks of up to 128 rows). The primary key and the trigger
back the check: a row in the wrong place raises ``sqlite3.IntegrityError``, and the store then
takes the group back and runs ``insert_each``, which checks and inserts append by append, each
checked against the database itself.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

from agentledger.errors import ConflictError

from ._group import Append, remember

__all__ = ("StreamVersions", "insert_each", "insert_rows")

_KNOWN_STREAMS = 10_000
"""How many streams' ids and versions a store keeps between commits (the most recently written)."""
_LOOKUP_CHUNK = 500
"""Streams looked up per query (older SQLite allows 999 parameters)."""
Length = Callable[[sqlite3.Connection, str], int]
"""How many events a stream holds, read from the database."""
_INSERT = "INSERT INTO events (stream, seq, last, data) VALUES (?, ?, ?, ?)"
_CHUNKS = (128, 64, 32, 16, 8, 4, 2, 1)
"""Rows per insert statement of a group: a few statements (and at most ``len(_CHUNKS)`` distinct
ones, each prepared once) instead of a step per row. Each step lets go of the GIL and takes it
back, and taking it back from a busy event loop thread costs both threads a switch; 128 rows are
512 parameters, under older SQLite's 999."""
_INSERT_MANY = {
    count: "INSERT INTO events (stream, seq, last, data) VALUES " + ", ".join(["(?, ?, ?, ?)"] * count)
    for count in _CHUNKS
}


class StreamVersions:
    """Stream ids and versions as this connection committed them; see the module docstring."""

    def __init__(self) -> None:
        self.known: dict[str, tuple[int, int]] = {}
        self.data_version: int | None = None

    def insert_group(
        self, connection: sqlite3.Connection, group: list[Append[bytes]]
    ) -> tuple[list[Append[bytes]], dict[str, tuple[int, int]]]:
        """Check each append in queue order; insert the accepted batches at once.

        Returns the accepted appends and the versions they leave, to ``remember`` once committed.
        """
        data_version = connection.execute("PRAGMA data_version").fetchone()[0]
        if data_version != self.data_version:  # another connection wrote: what we knew may be stale
            self.known.clear()
            self.data_version = data_version
        known = self.known
        missing = [append.stream for append in group if append.stream not in known]
        versions = _lookup(connection, missing) if missing else {}
        accepted: list[Append[bytes]] = []
        rows: list[tuple[int, int, int, bytes]] = []
        for append in group:
            stream = append.stream
            found = versions.get(stream) or known.get(stream)
            stream_id, version = found if found is not None else (0, 0)
            if version != append.expected:
                append.fail(ConflictError(stream, append.expected, version))
                continue
            accepted.append(append)
            records = append.records
            if not records:
                continue
            if found is None:
                stream_id = _new_stream(connection, stream)
            rows.append((stream_id, version, version + len(records) - 1, b"\n".join(records)))
            versions[stream] = (stream_id, version + len(records))
        if rows:
            insert_rows(connection, rows)
        return accepted, versions

    def remember(self, committed: dict[str, tuple[int, int]]) -> None:
        """Keep the versions a commit left."""
        remember(self.known, committed, _KNOWN_STREAMS)

    def forget(self) -> None:
        """Drop every version kept (after a refused row, or a commit whose outcome is not known)."""
        self.known.clear()


def insert_rows(connection: sqlite3.Connection, rows: Sequence[tuple[int, int, int, bytes]]) -> None:
    """Insert ``rows`` in order, with a statement per chunk of ``_CHUNKS`` rows.

    SQLite inserts a statement's rows one after the other, each checked by the trigger against
    the rows before it, as separate statements would be; a refused row undoes its statement and
    raises ``sqlite3.IntegrityError``.
    """
    start, left = 0, len(rows)
    for count in _CHUNKS:
        while left >= count:
            chunk = rows[start : start + count]
            connection.execute(_INSERT_MANY[count], [value for row in chunk for value in row])
            start += count
            left -= count


def insert_each(
    connection: sqlite3.Connection, group: list[Append[bytes]], version: Length
) -> list[Append[bytes]]:
    """Check and insert the group append by append, each against ``version`` (the stream's length
    read from the database); a conflict fails only its own append."""
    accepted: list[Append[bytes]] = []
    for append in group:
        stream, expected = append.stream, append.expected
        try:
            _insert(connection, stream, append.records, expected, version)
        except ConflictError as exc:  # checked before anything was written
            append.fail(exc)
            continue
        except sqlite3.IntegrityError as exc:  # the key refused a row at a taken seq: nothing inserted
            _drop_empty_stream(connection, stream)
            conflict = ConflictError(stream, expected, version(connection, stream))
            conflict.__cause__ = exc
            append.fail(conflict)
            continue
        accepted.append(append)
    return accepted


def _insert(
    connection: sqlite3.Connection,
    stream: str,
    records: Sequence[bytes],
    expected: int,
    version: Length,
) -> None:
    row = connection.execute("SELECT id FROM streams WHERE name = ?", (stream,)).fetchone()
    actual = version(connection, stream) if row is not None else 0
    if actual != expected:
        raise ConflictError(stream, expected, actual)
    if not records:
        return
    stream_id = row[0] if row is not None else _new_stream(connection, stream)
    connection.execute(_INSERT, (stream_id, expected, expected + len(records) - 1, b"\n".join(records)))


def _lookup(connection: sqlite3.Connection, streams: list[str]) -> dict[str, tuple[int, int]]:
    """The id and version of each of ``streams`` that exists."""
    found: dict[str, tuple[int, int]] = {}
    names = list(dict.fromkeys(streams))
    for start in range(0, len(names), _LOOKUP_CHUNK):
        chunk = names[start : start + _LOOKUP_CHUNK]
        query = (
            "SELECT name, id, coalesce((SELECT last FROM events WHERE stream = streams.id"
            " ORDER BY seq DESC LIMIT 1), -1) + 1"
            f" FROM streams WHERE name IN ({', '.join('?' * len(chunk))})"
        )
        for name, stream_id, version in connection.execute(query, chunk):
            found[name] = (stream_id, version)
    return found


def _drop_empty_stream(connection: sqlite3.Connection, stream: str) -> None:
    """Take back a stream row created for a batch that was refused (a failed insert is undone alone)."""
    connection.execute(
        "DELETE FROM streams WHERE name = ? AND NOT EXISTS (SELECT 1 FROM events WHERE stream = streams.id)",
        (stream,),
    )


def _new_stream(connection: sqlite3.Connection, stream: str) -> int:
    cursor = connection.execute("INSERT INTO streams (name) VALUES (?)", (stream,))
    assert cursor.lastrowid is not None
    return cursor.lastrowid

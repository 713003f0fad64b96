"""SqliteEventStore: every stream in one SQLite database (the standard library's ``sqlite3``).

Two tables. ``streams`` gives each stream an integer id in creation order; ``events`` holds one row
per appended batch, in append order (its rowid ``id``), with ``stream``, ``seq`` (the batch's first
seq), ``last`` (its last seq) and ``data``, its events as ``encode_event`` JSON lines. A row per
batch rather than per event makes a read one row per step of a run instead of one per event, and
a stream decodes in one call. Append order keeps a group commit's rows, whatever their streams,
on the table's last pages: keyed by ``(stream, seq)`` instead (schema version 2), a group of 60
runs' batches dirtied a page per stream, about four times the WAL. The unique index ``events_position``
on ``(stream, seq)`` finds a stream's rows in seq order, gives the listing its first and last
rows, and refuses a second batch at a taken seq.

Appends are committed in groups (``_group``): a group runs in one ``BEGIN IMMEDIATE`` transaction
(one writer at a time, others wait up to ``busy_timeout``) that, for each append in turn, compares
the stream's length with its ``expected_version`` (a stale one fails alone, writing nothing),
inserts the other batches' rows with a few multi-row statements, then commits once, so a batch is stored
whole or not at all. The lengths come from what this connection committed last, while ``PRAGMA
data_version`` shows no other writer, or from one query. The unique index and a trigger back the
check: a batch can never start anywhere but right after its stream's last event, and if that were
attempted the group is checked again append by append, where it surfaces as ``ConflictError``.

Databases of schema versions 1 (a row per event) and 2 (a row per batch, keyed by ``(stream,
seq)``) are migrated on a writable open, in one transaction that reads the version under the
write lock (two stores opening one old file migrate it once). A read-only store reads version 2
as it is (same columns) and refuses version 1, saying to open the file writable once; every store
refuses a newer version.

The database runs in WAL mode (readers never block the writer) with ``synchronous=FULL`` by
default, so a committed append survives power loss. Reads check that the rows they return have no
gaps and decode each row with the typed event decoder; a bad row raises ``LogCorruptError``
naming the stream and seq.

The connection is opened on first use, inside the worker thread, and shared by this store's
threads under a lock; open one store per process (after any fork).
"""

from __future__ import annotations

import operator
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import anyio

from agentledger.core.collector import collector_paused
from agentledger.core.events import Event
from agentledger.errors import LogCorruptError, StoreError
from agentledger.listing import RunQuery, RunSummary

from . import _sqlite_runs
from ._codec import check_sequence, decode_block, decode_records, encode_records
from ._group import Append, appending
from ._listing import report
from ._sqlite_append import StreamVersions, insert_each
from ._threaded import ThreadedStore

__all__ = ("SCHEMA_VERSION", "SqliteEventStore")

SCHEMA_VERSION = 3
"""Stored in ``PRAGMA user_version``; older versions are migrated on a writable open, newer ones refused."""

_READABLE = 2
"""The oldest schema a read-only store reads as it is: version 2 has the columns every read
uses (``stream``, ``seq``, ``last``, ``data``), only keyed differently, so a database an older
agentledger wrote stays readable, by the command line too, without a write."""

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]

_STREAMS = """
CREATE TABLE IF NOT EXISTS streams (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
)"""
# Rows in append order (the rowid): a group of batches for many streams lands on the table's last
# pages instead of one page per stream. The unique index finds a stream's rows and refuses a
# second batch at a taken seq.
_EVENTS = """
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    stream INTEGER NOT NULL REFERENCES streams (id),
    seq INTEGER NOT NULL,
    last INTEGER NOT NULL,
    data BLOB NOT NULL
)"""
_POSITIONS = "CREATE UNIQUE INDEX IF NOT EXISTS events_position ON events (stream, seq)"
# A batch must start right after the stream's last event: no gap, no overlap, whatever the
# writer believed. (The version check in the append transaction is the first line of defence.)
_FOLLOW = """
CREATE TRIGGER IF NOT EXISTS events_follow BEFORE INSERT ON events
WHEN NEW.seq != coalesce(
    (SELECT last FROM events WHERE stream = NEW.stream ORDER BY seq DESC LIMIT 1), -1) + 1
    OR NEW.last < NEW.seq
BEGIN
    SELECT RAISE(ABORT, 'a batch must start right after the stream''s last event');
END"""
_SCHEMA = (_STREAMS, _EVENTS, _POSITIONS, _FOLLOW)
# Each older version's rows move into a fresh ``events`` table, a stream's batches in seq order;
# the index and the trigger are created after, with the rest of the schema.
_MIGRATE: dict[int, tuple[str, ...]] = {
    # Version 1 had a row per event, keyed (stream, seq) without a rowid: each becomes a batch of one.
    1: (
        "ALTER TABLE events RENAME TO events_old",
        _EVENTS,
        "INSERT INTO events (stream, seq, last, data) SELECT stream, seq, seq, data FROM events_old"
        " ORDER BY stream, seq",
        "DROP TABLE events_old",
    ),
    # Version 2 had a row per batch, keyed (stream, seq) without a rowid, and the same trigger.
    2: (
        "DROP TRIGGER IF EXISTS events_follow",
        "ALTER TABLE events RENAME TO events_old",
        _EVENTS,
        "INSERT INTO events (stream, seq, last, data) SELECT stream, seq, last, data FROM events_old"
        " ORDER BY stream, seq",
        "DROP TABLE events_old",
    ),
}
# What a read-only handle on a file that holds no events yet reads: empty tables in memory.
_EMPTY = """
CREATE TEMP TABLE streams (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TEMP TABLE events (id INTEGER PRIMARY KEY, stream INTEGER, seq INTEGER, last INTEGER, data BLOB);
CREATE UNIQUE INDEX temp.events_position ON events (stream, seq);
"""
_LISTED = "SELECT 1 FROM streams WHERE name = ?"
# Many whole streams at once (``read_many``), in chunks of ``_MANY`` names. The names listed are
# read before the rows: a stream is created with its first events in one commit and its rows are
# never deleted, so one listed then and without rows after is corruption, never a race.
_MANY = 500
_READ_MANY = (
    "SELECT s.name, e.seq, e.last, e.data FROM streams AS s JOIN events AS e ON e.stream = s.id"
    " WHERE s.name IN ({}) ORDER BY e.stream, e.seq"
)
_LISTED_MANY = "SELECT name FROM streams WHERE name IN ({})"
_READ = (
    "SELECT seq, last, data FROM events WHERE stream = (SELECT id FROM streams WHERE name = ?)"
    " AND last > ? ORDER BY seq"
)


class SqliteEventStore(ThreadedStore):
    """An ``EventStore`` in a SQLite database file; see the module docstring.

    ``synchronous`` is SQLite's durability setting (``"FULL"``: each commit is on disk before
    ``append`` returns; ``"NORMAL"``: a power loss may drop the last commits, never corrupt the
    database). ``busy_timeout`` is how many seconds a writer waits for another one.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 5.0,
        read_only: bool = False,
    ) -> None:
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
        self.path = Path(path)
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self.read_only = read_only
        self._connection: sqlite3.Connection | None = None
        self._immutable = False  # read as a file no one writes: reopened once a writer appears
        self._immutable_stamp: tuple[int, int] | None = None
        self._identity: tuple[int, int] | None = None  # the file the connection opened (device, inode)
        self._lock = threading.Lock()
        self._versions = StreamVersions()  # what this connection committed last, per stream

    def prepare(self, stream: str, events: Sequence[Event], expected_version: int) -> Append[bytes]:
        self._check_open()
        return Append(stream, encode_records(events), expected_version)

    def commit_group(self, group: list[Append[bytes]]) -> None:
        """One transaction, one commit (one sync) for the whole group; each append checked alone.

        The versions come from what this connection knows of its own commits while no other
        connection has written (``PRAGMA data_version`` unchanged), else from one query; the
        group's batches go in with a few multi-row ``INSERT`` statements. A row the key or the
        trigger refuses (a version that was not what it seemed) takes the group back and checks
        it append by append, as a lone writer would.
        """
        with self._lock, self._errors(appending(group)):
            connection = self._connect()
            self._begin(connection)
            try:
                accepted, versions = self._versions.insert_group(connection, group)
                self._commit(connection)
            except sqlite3.IntegrityError:
                connection.rollback()
                self._versions.forget()
                self._begin(connection)
                try:
                    accepted, versions = insert_each(connection, group, self._stream_version), {}
                    self._commit(connection)
                except BaseException:
                    connection.rollback()
                    raise
            except BaseException:
                self._versions.forget()  # the outcome of a failed commit is not known here
                if connection.in_transaction:
                    connection.rollback()
                raise
            self._versions.remember(versions)
        for append in accepted:
            append.succeed()

    def read_sync(self, stream: str, after: int = -1) -> list[Event]:
        first = max(after + 1, 0)
        with self._lock, self._errors(f"reading {stream!r}"):
            connection = self._connect()
            rows: list[tuple[int, int, bytes]] = connection.execute(_READ, (stream, after)).fetchall()
            listed = not rows and after < 0 and connection.execute(_LISTED, (stream,)).fetchone() is not None
            if listed:
                # The two statements see two moments: a writer may have committed the stream and
                # its first events (together) in between. Read again, now that it is listed.
                rows = connection.execute(_READ, (stream, after)).fetchall()
                listed = not rows
        if listed:  # the store names the stream but holds none of its events: they were lost
            raise LogCorruptError("the stream is listed but holds no events", where=self._where(stream, 0))
        return self._events(stream, rows, first)

    def read_many_sync(self, streams: Sequence[str]) -> dict[str, list[Event]]:
        """Several whole streams, a query per few hundred of them instead of one each (and one
        look at the file), each stream checked as ``read_sync`` checks one."""
        asked = list(dict.fromkeys(streams))
        if len(asked) <= 1:
            return super().read_many_sync(streams)
        found: dict[str, list[Event]] = {}
        with collector_paused():
            for start in range(0, len(asked), _MANY):
                chunk = asked[start : start + _MANY]
                marks = ", ".join("?" * len(chunk))
                with self._lock, self._errors(f"reading {len(chunk)} streams"):
                    connection = self._connect()
                    listed = {name for (name,) in connection.execute(_LISTED_MANY.format(marks), chunk)}
                    query = _READ_MANY.format(marks)
                    rows: list[tuple[str, int, int, bytes]] = connection.execute(query, chunk).fetchall()
                by_stream: dict[str, list[tuple[int, int, bytes]]] = {}
                for name, seq, last, data in rows:
                    by_stream.setdefault(name, []).append((seq, last, data))
                for name in chunk:
                    held = by_stream.get(name)
                    if held is None:
                        if name in listed:  # listed, yet holds none of its events: they were lost
                            raise LogCorruptError(
                                "the stream is listed but holds no events", where=self._where(name, 0)
                            )
                        continue
                    found[name] = self._events(name, held, 0)
        return {stream: found.get(stream, []) for stream in streams}

    def _events(self, stream: str, rows: list[tuple[int, int, bytes]], first: int) -> list[Event]:
        """The events of ``stream`` from seq ``first`` in its ``rows``, checked and decoded."""
        if not rows:
            return []
        self._check_types(stream, rows)
        self._check_contiguous(stream, rows, first)
        start, end = rows[0][0], rows[-1][1]
        count = end - start + 1
        try:
            block = b"\n".join([*map(_data, rows), b""])  # a line end after each row: one copy
            events = decode_block(block, count, _no_position)
        except (LogCorruptError, TypeError):
            events = self._decode_rows(stream, rows)  # names the bad record's seq
        # Each record's own seq and run id must be those of its place in the rows: a record
        # edited, copied or moved by hand is corruption, not an event at another position.
        check_sequence(events, stream, start, self._positions(stream, start))
        return events[first - start :] if first > start else events

    def _decode_rows(self, stream: str, rows: list[tuple[int, int, bytes]]) -> list[Event]:
        events: list[Event] = []
        for seq, last, data in rows:
            lines = data.split(b"\n") if isinstance(data, bytes) else [data]
            if len(lines) != last - seq + 1:
                where = self._where(stream, seq)
                raise LogCorruptError(
                    f"expected {last - seq + 1} events in the row, found {len(lines)}", where=where
                )
            events.extend(decode_records(lines, self._positions(stream, seq)))
        return events

    def _positions(self, stream: str, seq: int) -> Callable[[int], str]:
        return lambda index: self._where(stream, seq + index)

    def _check_types(self, stream: str, rows: list[tuple[int, int, bytes]]) -> None:
        """Refuse a row whose ``seq`` or ``last`` is not an integer (a row edited by hand)."""
        for row in rows:
            if type(row[0]) is not int or type(row[1]) is not int:
                where = f"{self.path}: stream {stream!r} row {row[0]!r}"
                raise LogCorruptError(
                    f"expected integer seq and last, found {row[0]!r} and {row[1]!r}", where=where
                )

    def _check_contiguous(self, stream: str, rows: list[tuple[int, int, bytes]], first: int) -> None:
        expected = min(first, rows[0][0])
        if rows[0][0] > first:
            raise LogCorruptError(
                f"expected seq {first}, found {rows[0][0]}", where=self._where(stream, rows[0][0])
            )
        for seq, last, _ in rows:
            if seq != expected or last < seq:
                raise LogCorruptError(f"expected seq {expected}, found {seq}", where=self._where(stream, seq))
            expected = last + 1

    def streams_sync(self) -> list[str]:
        with self._lock, self._errors("listing streams"):
            rows = self._connect().execute("SELECT name FROM streams ORDER BY id").fetchall()
        for row in rows:
            if not isinstance(row[0], str):
                raise LogCorruptError(
                    f"expected a stream name as text, found {row[0]!r}", where=str(self.path)
                )
        return [row[0] for row in rows]

    async def list_runs(self, query: RunQuery) -> list[RunSummary]:
        """Run summaries, newest first, from each stream's first and last rows (``SupportsRunListing``)."""
        self._check_open()
        listing = await anyio.to_thread.run_sync(_sqlite_runs.list_runs, self._fetch, self.path, query)
        return report(listing)

    def _fetch(self, statement: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        with self._lock, self._errors("listing runs"):
            rows: list[tuple[Any, ...]] = self._connect().execute(statement, params).fetchall()
        return rows

    def close(self) -> None:
        """Close the database connection; later calls raise ``StoreError``."""
        super().close()
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def _connect(self) -> sqlite3.Connection:
        self._check_open()
        if self._connection is not None and self._identity != self._path_identity():
            self._replaced()
        if self._immutable and self._connection is not None and (
            self._wal().exists() or self._stamp() != self._immutable_stamp
        ):
            # A writer opened the database since (read through its files), or wrote and closed
            # it again (an immutable connection would go on reading what it cached).
            self._connection.close()
            self._connection = None
        if self._connection is None:
            with self._errors("opening the event database"):
                self._connection = self._open()
                self._identity = self._path_identity()  # after: opening may create the file
        return self._connection

    def _stamp(self) -> tuple[int, int] | None:
        """When the database file was last written, and its size (None: no file there)."""
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def _path_identity(self) -> tuple[int, int] | None:
        """The device and inode the path names now (None: no file there)."""
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_dev, stat.st_ino

    def _replaced(self) -> None:
        """The path names another file than the one this store opened (a restore from a backup, a
        file renamed over it, a deletion). A writer refuses to go on: its appends would land in
        the old file, which nobody reads any more. A reader reopens the path."""
        assert self._connection is not None
        self._connection.close()
        self._connection = None
        if not self.read_only:
            self._closed = True
            raise StoreError(
                f"{self.path}: the file was replaced or removed since this store opened it; appends "
                "through the old file would be lost, so the store refuses them: open the store again"
            )

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:  # also a file that is no database, a damaged page or schema
            raise StoreError(f"{self.path}: {doing} failed: {exc}") from exc
        except (UnicodeDecodeError, ValueError, TypeError, OverflowError) as exc:  # damaged text or numbers
            raise LogCorruptError(
                f"{doing} failed: {type(exc).__name__}: {exc}", where=str(self.path)
            ) from exc

    def _open(self) -> sqlite3.Connection:
        if self.read_only:
            return self._open_read_only()
        connection = sqlite3.connect(
            self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
        )
        try:
            connection.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            _use_wal(connection)
            connection.execute(f"PRAGMA synchronous = {self.synchronous}")
            self._create_or_migrate(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def _create_or_migrate(self, connection: sqlite3.Connection) -> None:
        """Create what is missing of the schema (a dropped trigger too), migrating an older
        version first, in one transaction.

        The version is read under the write lock, so of two stores opening one old database at
        once, the second finds it migrated already.
        """
        self._begin(connection)
        try:
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION, *_MIGRATE):
                raise StoreError(
                    f"{self.path}: event schema version {version}, expected {SCHEMA_VERSION}"
                    + ("; upgrade agentledger to open it" if version > SCHEMA_VERSION else "")
                )
            for statement in (*_MIGRATE.get(version, ()), *_SCHEMA):
                connection.execute(statement)
            if version != SCHEMA_VERSION:
                connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            connection.execute("COMMIT")
        except BaseException:
            connection.rollback()
            raise

    def _open_read_only(self) -> sqlite3.Connection:
        """Open without writing the file: no schema created, no migration, no journal mode change.

        A file that is not an event database yet (empty) reads as a store with no streams. A WAL
        database with no ``-wal`` file beside it (no writer has it open, none left a log to
        recover) is read as immutable, so the reader creates no ``-wal`` or ``-shm`` file of its
        own; with a ``-wal`` file there, it is read through the files its writers use. Where
        SQLite cannot even create a reader's shared-memory file (a read-only directory), the
        database is read as immutable too.
        """
        if not self.path.is_file():
            raise StoreError(f"{self.path}: no event database there")
        uri = f"file:{quote(str(self.path.absolute()))}?mode=ro"
        self._immutable = not self._wal().exists()
        self._immutable_stamp = self._stamp()
        connection = _connect_read_only(uri + ("&immutable=1" if self._immutable else ""), self.busy_timeout)
        try:
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: event schema version {version} is newer than this agentledger reads"
                    f" ({SCHEMA_VERSION}); upgrade agentledger to read it"
                )
            if 0 < version < _READABLE:
                raise StoreError(
                    f"{self.path}: event schema version {version}, older than this agentledger reads"
                    f" ({_READABLE} or later); open it once writable (read_only=False) to migrate it"
                )
            tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
            if "streams" not in tables or "events" not in tables:  # nothing written yet
                connection.execute("PRAGMA temp_store = MEMORY")
                connection.executescript(_EMPTY)
        except BaseException:
            connection.close()
            raise
        return connection

    def _wal(self) -> Path:
        return self.path.with_name(self.path.name + "-wal")

    def _begin(self, connection: sqlite3.Connection) -> None:
        try:
            connection.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StoreError(f"{self.path}: no write access within {self.busy_timeout} s: {exc}") from exc

    def _stream_version(self, connection: sqlite3.Connection, stream: str) -> int:
        return _version(connection, stream)

    def _commit(self, connection: sqlite3.Connection) -> None:
        connection.execute("COMMIT")

    def _where(self, stream: str, seq: int) -> str:
        return f"{self.path}: stream {stream!r} seq {seq}"

    def __repr__(self) -> str:
        return f"SqliteEventStore({str(self.path)!r})"


def _use_wal(connection: sqlite3.Connection) -> None:
    """Switch the database to WAL (a lasting setting), waiting out a connection that is creating it.

    Changing the journal mode does not wait for other connections the way statements do (it
    fails at once with "database is locked"), so when two connections open a new database
    together, the one that loses waits for the other's write lock, with the busy timeout, and
    looks again.
    """
    for _ in range(10):
        if connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
            return
        try:
            connection.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("ROLLBACK")
    connection.execute("PRAGMA journal_mode = WAL")


def _connect_read_only(uri: str, busy_timeout: float) -> sqlite3.Connection:
    connection = sqlite3.connect(
        uri, uri=True, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )
    try:
        connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError:  # a WAL database whose directory this process cannot write
        connection.close()
        connection = sqlite3.connect(
            uri + "&immutable=1", uri=True, isolation_level=None, check_same_thread=False
        )
    except BaseException:  # a file that is no database: the caller reports it, nothing stays open
        connection.close()
        raise
    return connection


def _version(connection: sqlite3.Connection, stream: str) -> int:
    """How many events ``stream`` holds, read from the database."""
    query = (
        "SELECT last FROM events WHERE stream = (SELECT id FROM streams WHERE name = ?)"
        " ORDER BY seq DESC LIMIT 1"
    )
    row = connection.execute(query, (stream,)).fetchone()
    return 0 if row is None else int(row[0]) + 1


_data = operator.itemgetter(2)  # a row's records


def _no_position(index: int) -> str:
    return f"record {index}"

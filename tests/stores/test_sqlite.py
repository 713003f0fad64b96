"""SqliteEventStore against the durable store contract, and what SQLite adds of its own."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentledger.adapters.stores import sqlite as sqlite_store
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.core.events import Event, encode_event
from agentledger.errors import ConflictError, LogCorruptError, StoreError
from agentledger.listing import RunQuery
from agentledger.store import EventStore
from agentledger.testing.stores import (
    CrashOutcome,
    DurableStoreContract,
    make_events,
)

from .._runs import run_events


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class TestSqlite(DurableStoreContract):
    atomic_batches = True
    crash_outcomes: ClassVar[Mapping[str, CrashOutcome]] = {
        "idle": CrashOutcome(0, repaired=False),
        "before-commit": CrashOutcome(0, repaired=False),
    }
    location_name = "events.sqlite"

    @classmethod
    def install_fault(cls, store: EventStore, point: str, hang: Callable[[], None]) -> None:
        """The batch written but not committed: then ``hang``."""
        if point != "before-commit" or not isinstance(store, SqliteEventStore):
            super().install_fault(store, point, hang)
            return

        def hang_commit(connection: sqlite3.Connection) -> None:
            hang()

        store._commit = hang_commit  # type: ignore[method-assign]

    def open_store(self, location: Path) -> SqliteEventStore:
        return SqliteEventStore(location)

    async def corrupt(self, stream: str, seq: int, data: bytes) -> str:
        with sqlite3.connect(self.location) as connection:
            first, blob = connection.execute(
                "SELECT seq, data FROM events WHERE seq <= ? AND last >= ?", (seq, seq)
            ).fetchone()
            lines = blob.split(b"\n")
            lines[seq - first] = data
            connection.execute("UPDATE events SET data = ? WHERE seq = ?", (b"\n".join(lines), first))
        connection.close()
        return f"{self.location}: stream {stream!r} seq {seq}"

    @pytest.fixture(params=["idle", "before-commit", "loop"])
    def crash_point(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)


def test_sqlite_runs_in_wal_with_full_sync(tmp_path: Path) -> None:
    """The database is in WAL mode with synchronous=FULL and a busy timeout by default."""
    store = SqliteEventStore(tmp_path / "e.sqlite", busy_timeout=2.5)
    assert store.streams_sync() == []
    connection = store._connect()
    assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert connection.execute("PRAGMA synchronous").fetchone() == (2,)
    assert connection.execute("PRAGMA busy_timeout").fetchone() == (2500,)
    store.close()


def test_sqlite_missing_row_is_corrupt(tmp_path: Path) -> None:
    """A gap in a stream's seq raises LogCorruptError naming the stream and seq."""
    store = SqliteEventStore(tmp_path / "e.sqlite")
    events = make_events("run_1", 0, 4, "x")
    for seq, event in enumerate(events):  # a row per append: one per event here
        store.append_sync("run_1", [event], seq)
    with sqlite3.connect(tmp_path / "e.sqlite") as connection:
        connection.execute("DELETE FROM events WHERE seq = 2")
    connection.close()
    with pytest.raises(LogCorruptError, match="expected seq 2, found 3") as info:
        store.read_sync("run_1")
    assert info.value.where == f"{tmp_path / 'e.sqlite'}: stream 'run_1' seq 3"
    assert len(store.read_sync("run_1", after=2)) == 1
    store.close()


def test_sqlite_waits_busy_timeout_then_fails(tmp_path: Path) -> None:
    """While another connection holds the write lock, an append gives up after busy_timeout."""
    path = tmp_path / "e.sqlite"
    store = SqliteEventStore(path, busy_timeout=0.05)
    assert store.streams_sync() == []
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    with pytest.raises(StoreError, match="no write access"):
        store.append_sync("run_1", make_events("run_1", 0, 1, "x"), 0)
    blocker.execute("ROLLBACK")
    blocker.close()
    assert store.append_sync("run_1", make_events("run_1", 0, 1, "x"), 0) == 1
    store.close()


def test_sqlite_refuses_another_schema_version(tmp_path: Path) -> None:
    """A database written with another schema version is refused with StoreError."""
    path = tmp_path / "e.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA user_version = 99")
    connection.close()
    store = SqliteEventStore(path)
    with pytest.raises(StoreError, match="schema version 99"):
        store.streams_sync()
    store.close()


def test_sqlite_stores_opening_a_new_database_together(tmp_path: Path) -> None:
    """Stores that open one new database at the same moment all get a working WAL database."""
    path, errors = tmp_path / "e.sqlite", []
    barrier = threading.Barrier(6)

    def open_and_list() -> None:
        store = SqliteEventStore(path)
        barrier.wait()
        try:
            store.streams_sync()
        except StoreError as exc:
            errors.append(exc)
        finally:
            store.close()

    _in_threads(open_and_list, 6)
    assert errors == []


def test_sqlite_primary_key_backs_the_version_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Should the version check be passed wrongly, the (stream, seq) key still refuses the batch."""
    store = SqliteEventStore(tmp_path / "e.sqlite")
    events = make_events("run_1", 0, 3, "x")
    store.append_sync("run_1", events, 0)
    with monkeypatch.context() as patch:
        patch.setattr(sqlite_store, "_version", lambda connection, stream: 1)
        with pytest.raises(ConflictError):
            store.append_sync("run_1", make_events("run_1", 1, 2, "late"), 1)
    assert store.read_sync("run_1") == events
    store.close()


# The schemas of earlier versions, as those versions created them.
_STREAMS = "CREATE TABLE streams (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);"
_OLD_SCHEMAS = {
    1: _STREAMS + "CREATE TABLE events (stream INTEGER NOT NULL REFERENCES streams (id),"
    " seq INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (stream, seq)) WITHOUT ROWID;",
    2: _STREAMS + "CREATE TABLE events (stream INTEGER NOT NULL REFERENCES streams (id),"
    " seq INTEGER NOT NULL, last INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (stream, seq))"
    " WITHOUT ROWID;"
    " CREATE TRIGGER events_follow BEFORE INSERT ON events WHEN NEW.seq != coalesce("
    "(SELECT last FROM events WHERE stream = NEW.stream ORDER BY seq DESC LIMIT 1), -1) + 1"
    " OR NEW.last < NEW.seq BEGIN SELECT RAISE(ABORT, 'a batch must start right after the"
    " stream''s last event'); END;",
}


def _old_streams() -> dict[str, list[list[Event]]]:
    """Streams as batches: runs of every ending, and a stream of several batches of several events."""
    return {
        "run_a": [(events := run_events("run_a", session="s1"))[:1], events[1:]],
        "run_b": [(events := run_events("run_b", agent="Booker", ending="failed"))[:1], events[1:]],
        "run_c": [run_events("run_c", ending="incomplete")],
        "long": [
            make_events("long", 0, 3, "x"),
            make_events("long", 3, 1, "y"),
            make_events("long", 4, 5, "z"),
        ],
    }


def _write_old_database(path: Path, version: int, streams: dict[str, list[list[Event]]]) -> None:
    """A database as version 1 (a row per event) or 2 (a row per batch) wrote it; batches interleaved."""
    connection = sqlite3.connect(path, isolation_level=None)
    connection.executescript(_OLD_SCHEMAS[version] + f" PRAGMA user_version = {version};")
    ids = {name: index + 1 for index, name in enumerate(streams)}
    connection.executemany("INSERT INTO streams (id, name) VALUES (?, ?)", [(i, n) for n, i in ids.items()])
    for step in range(max(len(batches) for batches in streams.values())):
        for name, batches in streams.items():
            if step >= len(batches):
                continue
            batch = batches[step]
            if version == 1:
                rows = [(ids[name], event.seq, encode_event(event)) for event in batch]
                connection.executemany("INSERT INTO events (stream, seq, data) VALUES (?, ?, ?)", rows)
            else:
                data = b"\n".join(encode_event(event) for event in batch)
                row = (ids[name], batch[0].seq, batch[-1].seq, data)
                connection.execute("INSERT INTO events (stream, seq, last, data) VALUES (?, ?, ?, ?)", row)
    connection.close()


def _in_threads(target: Callable[[], None], count: int) -> None:
    """Run ``target`` in ``count`` threads at once and wait for all of them."""
    threads = [threading.Thread(target=target) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _user_version(path: Path) -> int:
    connection = sqlite3.connect(path)
    try:
        return int(connection.execute("PRAGMA user_version").fetchone()[0])
    finally:
        connection.close()


@pytest.mark.parametrize("version", [1, 2])
def test_sqlite_migrates_an_older_database_keeping_every_stream(tmp_path: Path, version: int) -> None:
    """A database of schema 1 or 2 is migrated on a writable open: every stream reads as it was
    written, in creation order, lists its runs, takes appends at its version and refuses stale ones."""
    path, streams = tmp_path / "old.sqlite", _old_streams()
    _write_old_database(path, version, streams)
    written = {name: [event for batch in batches for event in batch] for name, batches in streams.items()}
    store = SqliteEventStore(path)
    assert store.streams_sync() == list(streams)
    for name, events in written.items():
        assert store.read_sync(name) == events
        assert store.read_sync(name, after=1) == events[2:]
    runs = anyio.run(store.list_runs, RunQuery())
    assert [(run.run_id, run.outcome, run.events) for run in runs] == [
        ("run_c", "incomplete", 2),
        ("run_b", "failed", 3),
        ("run_a", "completed", 4),
    ]
    for name, events in written.items():
        with pytest.raises(ConflictError):
            store.append_sync(name, make_events(name, len(events) - 1, 1, "stale"), len(events) - 1)
        more = make_events(name, len(events), 2, "more")
        assert store.append_sync(name, more, len(events)) == len(events) + 2
        written[name] = events + more
    assert store.append_sync("new", make_events("new", 0, 2, "n"), 0) == 2
    store.close()
    assert _user_version(path) == 3
    connection = sqlite3.connect(path)
    (events_table,) = connection.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchone()
    assert "WITHOUT ROWID" not in events_table  # rows in append order now
    assert connection.execute("SELECT name FROM sqlite_master WHERE name LIKE 'events_old%'").fetchall() == []
    connection.close()
    reopened = SqliteEventStore(path, read_only=True)
    assert reopened.streams_sync() == [*streams, "new"]
    for name, events in written.items():
        assert reopened.read_sync(name) == events
    reopened.close()


@pytest.mark.parametrize("version", [1, 2])
def test_sqlite_migrated_database_keeps_the_trigger_and_the_key(tmp_path: Path, version: int) -> None:
    """After the migration the database itself still refuses a batch after a gap or at a taken seq."""
    path = tmp_path / "old.sqlite"
    _write_old_database(path, version, _old_streams())
    store = SqliteEventStore(path)
    assert len(store.read_sync("long")) == 9  # migrated on this first use
    store.close()
    connection = sqlite3.connect(path, isolation_level=None)
    insert = "INSERT INTO events (stream, seq, last, data) VALUES (4, ?, ?, x'7b7d')"
    for seq, last in [(10, 10), (8, 9), (3, 3), (9, 8)]:  # after a gap, overlapping, taken, backwards
        with pytest.raises(sqlite3.IntegrityError):
            connection.execute(insert, (seq, last))
    connection.execute("DROP TRIGGER events_follow")
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        connection.execute(insert, (3, 3))
    connection.close()


def test_sqlite_read_only_refuses_schema_1_and_leaves_it(tmp_path: Path) -> None:
    """A read-only store does not migrate: it says to open the database once writable, and the
    file stays as it was (an older agentledger can still use it)."""
    path = tmp_path / "old.sqlite"
    _write_old_database(path, 1, _old_streams())
    before = path.read_bytes()
    store = SqliteEventStore(path, read_only=True)
    with pytest.raises(StoreError, match=r"schema version 1.*open it once writable"):
        store.streams_sync()
    store.close()
    assert path.read_bytes() == before
    assert _user_version(path) == 1


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads the open files from /proc")
@pytest.mark.parametrize("read_only", [True, False])
def test_sqlite_a_file_that_is_no_database_is_refused_and_left_closed(
    tmp_path: Path, read_only: bool
) -> None:
    """Opening a file that is not a SQLite database fails with StoreError, and the connection
    tried on it is closed there and then, not left to the collector (the failure is kept)."""
    path = tmp_path / "notes.sqlite"
    path.write_bytes(b"these are not the pages of a database " * 200)
    store = SqliteEventStore(path, read_only=read_only)
    with pytest.raises(StoreError, match="not a database") as caught:
        store.streams_sync()
    assert caught.value.__cause__ is not None  # its traceback, frames and all, is still held here
    assert _open_files_under(tmp_path) == []
    store.close()


def _open_files_under(folder: Path) -> list[str]:
    """The files of ``folder`` this process holds open (Linux: its descriptors in /proc)."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the descriptor of the listing itself, closed by now
            continue
        if target.startswith(str(folder)):
            held.append(target)
    return held


def test_sqlite_read_only_reads_schema_2_as_it_is(tmp_path: Path) -> None:
    """Schema 2 has the columns every read uses: a read-only store (the command line's) reads
    its streams, events and runs without migrating, and the file stays as it was."""
    path, streams = tmp_path / "old.sqlite", _old_streams()
    _write_old_database(path, 2, streams)
    before = path.read_bytes()
    store = SqliteEventStore(path, read_only=True)
    assert store.streams_sync() == list(streams)
    for name, batches in streams.items():
        events = [event for batch in batches for event in batch]
        assert store.read_sync(name) == events
        assert store.read_sync(name, after=1) == events[2:]
    runs = anyio.run(store.list_runs, RunQuery())
    assert [(run.run_id, run.outcome, run.events) for run in runs] == [
        ("run_c", "incomplete", 2),
        ("run_b", "failed", 3),
        ("run_a", "completed", 4),
    ]
    store.close()
    assert path.read_bytes() == before
    assert _user_version(path) == 2


@pytest.mark.parametrize("read_only", [False, True])
def test_sqlite_refuses_a_newer_schema(tmp_path: Path, read_only: bool) -> None:
    """A database of a newer schema version is refused, written or read, and left as it is."""
    path = tmp_path / "new.sqlite"
    _write_old_database(path, 2, _old_streams())
    connection = sqlite3.connect(path)
    with connection:
        connection.execute(f"PRAGMA user_version = {sqlite_store.SCHEMA_VERSION + 1}")
    connection.close()
    store = SqliteEventStore(path, read_only=read_only)
    with pytest.raises(StoreError, match=f"schema version {sqlite_store.SCHEMA_VERSION + 1}.*upgrade"):
        store.streams_sync()
    store.close()
    assert _user_version(path) == sqlite_store.SCHEMA_VERSION + 1


def test_sqlite_stores_migrating_one_database_together(tmp_path: Path) -> None:
    """Stores that open one old database at the same moment migrate it once: no event lost or doubled."""
    path, streams = tmp_path / "old.sqlite", _old_streams()
    _write_old_database(path, 2, streams)
    barrier, errors, read = threading.Barrier(4), [], []

    def open_and_read() -> None:
        store = SqliteEventStore(path)
        barrier.wait()
        try:
            read.append({name: store.read_sync(name) for name in store.streams_sync()})
        except StoreError as exc:
            errors.append(exc)
        finally:
            store.close()

    _in_threads(open_and_read, 4)
    assert errors == []
    written = {name: [event for batch in batches for event in batch] for name, batches in streams.items()}
    assert read == [written] * 4


def test_sqlite_migration_that_fails_leaves_the_old_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A migration stopped midway (here: a statement that fails after the rows were copied) is
    rolled back whole: the file keeps its old version and every event, and opens again."""
    path, streams = tmp_path / "old.sqlite", _old_streams()
    _write_old_database(path, 2, streams)
    failing = (*sqlite_store._MIGRATE[2][:-1], "SELECT no_such_function()")
    with monkeypatch.context() as patch:
        patch.setitem(sqlite_store._MIGRATE, 2, failing)
        store = SqliteEventStore(path)
        with pytest.raises(StoreError, match="no_such_function"):
            store.streams_sync()
        store.close()
    assert _user_version(path) == 2
    connection = sqlite3.connect(path)
    batches = sum(len(stream) for stream in streams.values())
    assert connection.execute("SELECT count(*) FROM events").fetchone() == (batches,)
    assert connection.execute("SELECT name FROM sqlite_master WHERE name = 'events_old'").fetchall() == []
    connection.close()
    store = SqliteEventStore(path)
    written = {name: [event for batch in batches for event in batch] for name, batches in streams.items()}
    assert {name: store.read_sync(name) for name in store.streams_sync()} == written
    store.close()


def test_sqlite_read_many_in_chunks_equals_reading_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streams read many at a time (several chunks of names) come back as ``read_sync`` gives
    each, in the order asked, an unknown one empty."""
    monkeypatch.setattr(sqlite_store, "_MANY", 3)
    store = SqliteEventStore(tmp_path / "events.sqlite")
    names = [f"run_{i}" for i in range(8)]
    for i, name in enumerate(names):
        store.append_sync(name, make_events(name, 0, 1 + i % 3, name), 0)
        store.append_sync(name, make_events(name, 1 + i % 3, 2, name), 1 + i % 3)  # two rows
    asked = [*reversed(names), "run_nope", names[0]]
    many = store.read_many_sync(asked)
    assert list(many) == [*reversed(names), "run_nope"]
    assert many == {name: store.read_sync(name) for name in asked}
    store.close()


def test_sqlite_read_many_refuses_what_read_refuses(tmp_path: Path) -> None:
    """A stream listed without events, a gap, or a record out of place in any of the streams
    read at once is LogCorruptError naming that stream, as reading it alone is."""
    path = tmp_path / "events.sqlite"
    store = SqliteEventStore(path)
    for name in ("run_a", "run_b", "run_c"):
        store.append_sync(name, make_events(name, 0, 2, name), 0)
        store.append_sync(name, make_events(name, 2, 2, name), 2)
    store.close()
    edits = {
        "DELETE FROM events WHERE stream = 2": "listed but holds no events",
        "DELETE FROM events WHERE stream = 2 AND seq = 0": "seq",
        (
            "UPDATE events SET data = (SELECT data FROM events WHERE stream = 1 AND seq = 2)"
            " WHERE stream = 2 AND seq = 2"
        ): "run_a",
    }
    for edit, problem in edits.items():
        copy = tmp_path / "copy.sqlite"
        copy.write_bytes(path.read_bytes())
        connection = sqlite3.connect(copy, isolation_level=None)
        connection.execute(edit)
        connection.close()
        reader = SqliteEventStore(copy)
        with pytest.raises(LogCorruptError, match=problem) as alone:
            reader.read_sync("run_b")
        with pytest.raises(LogCorruptError, match=problem) as many:
            reader.read_many_sync(["run_a", "run_b", "run_c"])
        assert (str(many.value), many.value.where) == (str(alone.value), alone.value.where), edit
        reader.close()
        copy.unlink()


_EDITS = st.sampled_from(
    [
        "UPDATE events SET data = (SELECT data FROM events WHERE id = {other}) WHERE id = {row}",
        "UPDATE events SET data = CAST(data || X'0A' || data AS BLOB) WHERE id = {row}",
        "UPDATE events SET data = CAST(substr(data, 1, instr(data, X'0A') - 1) AS BLOB) WHERE id = {row}",
        'UPDATE events SET data = CAST(\'{{"type": "RunStarted"\' AS BLOB) WHERE id = {row}',
        "UPDATE events SET data = CAST('" + "[" * 300 + "]" * 300 + "' AS BLOB) WHERE id = {row}",
        "UPDATE events SET data = CAST(data AS TEXT) WHERE id = {row}",
        "UPDATE events SET seq = seq + 7 WHERE id = {row}",
        "DELETE FROM events WHERE id = {row}",
        "DELETE FROM events WHERE stream = (SELECT stream FROM events WHERE id = {row})",
        # the next row's first line moved to the end of this one: the records, joined, are as
        # they should be, but neither row holds as many lines as its seq and last say
        "UPDATE events SET data = CAST(data || X'0A' || substr((SELECT data FROM events"
        " WHERE id = {row} + 1), 1, instr((SELECT data FROM events WHERE id = {row} + 1), X'0A') - 1)"
        " AS BLOB) WHERE id = {row};"
        " UPDATE events SET data = CAST(substr(data, instr(data, X'0A') + 1) AS BLOB) WHERE id = {row} + 1",
    ]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(_EDITS, st.integers(1, 8), st.integers(1, 8)), max_size=3))
def test_sqlite_read_many_equals_reading_each_stream_alone_on_hostile_rows(
    tmp_path_factory: pytest.TempPathFactory, edits: list[tuple[str, int, int]]
) -> None:
    """Whatever was done to the rows (records copied between rows, lines added or cut off, a
    record that is no event or is nested too deep, text for bytes, a row moved or deleted, a
    stream's rows deleted), ``read_many_sync`` gives what reading each stream alone gives, or
    raises what reading the first stream that fails alone raises."""
    path = tmp_path_factory.mktemp("many") / "events.sqlite"
    names = ["run_a", "run_b", "run_c", "run_d"]
    store = SqliteEventStore(path)
    for name in names:  # two rows each, of 3 and 2 events (row ids 1 to 8)
        store.append_sync(name, make_events(name, 0, 3, name), 0)
        store.append_sync(name, make_events(name, 3, 2, name), 3)
    store.close()
    connection = sqlite3.connect(path, isolation_level=None)
    for edit, row, other in edits:
        with contextlib.suppress(sqlite3.IntegrityError):  # a record copied from a deleted row
            connection.executescript(edit.format(row=row, other=other))
    connection.close()
    reader = SqliteEventStore(path)
    try:
        alone: dict[str, list[Event]] = {}
        failure: LogCorruptError | None = None
        for name in names:
            try:
                alone[name] = reader.read_sync(name)
            except LogCorruptError as exc:
                failure = exc
                break
        if failure is None:
            assert reader.read_many_sync(names) == alone
        else:
            with pytest.raises(LogCorruptError) as many:
                reader.read_many_sync(names)
            assert (str(many.value), many.value.where) == (str(failure), failure.where)
    finally:
        reader.close()


def test_sqlite_reader_sees_what_a_writer_appended_and_closed_since(tmp_path: Path) -> None:
    """A read-only store opened while no writer had the database open reads it as immutable; a
    writer that then opens, appends and closes again (leaving no ``-wal`` file) is still seen:
    the new stream is listed, read and counted as a run."""
    path = tmp_path / "runs.sqlite"
    writer = SqliteEventStore(path)
    writer.append_sync("first", make_events("first", 0, 2, "a"), 0)
    writer.close()
    reader = SqliteEventStore(path, read_only=True)
    assert reader.streams_sync() == ["first"]
    assert not path.with_name(path.name + "-wal").exists()
    writer = SqliteEventStore(path)
    writer.append_sync("second", run_events("second"), 0)
    writer.close()
    assert not path.with_name(path.name + "-wal").exists()
    assert reader.streams_sync() == ["first", "second"]
    assert reader.read_sync("second") == run_events("second")
    assert [run.run_id for run in anyio.run(reader.list_runs, RunQuery())] == ["second"]
    reader.close()

"""SqliteEventStore against the durable store contract, and what SQLite adds of its own."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar

import pytest

from agentledger.adapters.stores import sqlite as sqlite_store
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.core.events import encode_event
from agentledger.errors import ConflictError, LogCorruptError, StoreError
from agentledger.store import EventStore
from agentledger.testing.stores import (
    CrashOutcome,
    DurableStoreContract,
    make_events,
)


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

    threads = [threading.Thread(target=open_and_list) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
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


def test_sqlite_migrates_a_row_per_event_database(tmp_path: Path) -> None:
    """A schema-1 database (a row per event) is migrated on open and reads the same events."""
    path = tmp_path / "old.sqlite"
    events = make_events("run_1", 0, 3, "x")
    with sqlite3.connect(path) as connection:
        connection.executescript(
            "CREATE TABLE streams (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);"
            "CREATE TABLE events (stream INTEGER NOT NULL, seq INTEGER NOT NULL, data BLOB NOT NULL,"
            " PRIMARY KEY (stream, seq)) WITHOUT ROWID;"
            "INSERT INTO streams (id, name) VALUES (1, 'run_1');"
            "PRAGMA user_version = 1;"
        )
        connection.executemany(
            "INSERT INTO events (stream, seq, data) VALUES (1, ?, ?)",
            [(event.seq, encode_event(event)) for event in events],
        )
    connection.close()
    store = SqliteEventStore(path)
    assert store.read_sync("run_1") == events
    assert store.read_sync("run_1", after=1) == events[2:]
    more = make_events("run_1", 3, 2, "y")
    assert store.append_sync("run_1", more, 3) == 5
    assert store.read_sync("run_1") == events + more
    store.close()
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA user_version").fetchone() == (2,)
    connection.close()

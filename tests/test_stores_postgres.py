"""PostgresEventStore against the store contract, and what PostgreSQL adds of its own.

These tests need a PostgreSQL server (see ``_temporal_env``): they skip when it is unreachable,
and fail under ``CI=true``. Each test works in a fresh schema, dropped afterwards. The module is
also the second process of the crash tests: ``python -m tests.test_stores_postgres DSN SCHEMA
STREAM MODE`` appends from another process and talks to the test through its standard streams.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentledger.errors import ConflictError, LogCorruptError, StoreError
from agentledger.store import EventStore

from ._temporal_env import drop_schema, require_postgres, unique_schema

pytest.register_assert_rewrite("tests.store_contract")

from .store_contract import StoreContract  # noqa: E402 (after the rewrite hook)
from .store_crash_child import make_events  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dsn() -> str:
    return require_postgres()


@pytest.fixture
def schema(dsn: str) -> Iterator[str]:
    name = unique_schema()
    yield name
    drop_schema(dsn, name)


def _store(dsn: str, schema: str, **options: Any) -> Any:
    from agentledger.adapters.stores.postgres import PostgresEventStore

    return PostgresEventStore(dsn, schema=schema, **options)


@contextlib.asynccontextmanager
async def _connection(dsn: str) -> AsyncIterator[Any]:
    import psycopg

    connection = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    try:
        yield connection
    finally:
        await connection.close()


class TestPostgres(StoreContract):
    @pytest.fixture
    async def store(self, tmp_path: Path, dsn: str, schema: str) -> AsyncIterator[EventStore]:
        self.location = tmp_path
        self.dsn, self.schema = dsn, schema
        self.opened: list[EventStore] = []
        yield self.another()
        for opened in self.opened:
            await opened.aclose()  # type: ignore[attr-defined]

    def open_store(self, location: Path) -> EventStore:
        store: EventStore = _store(self.dsn, self.schema)
        return store


# -- schema and migrations ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_schema_is_created_on_first_use_with_its_version(dsn: str, schema: str) -> None:
    """The first call creates the schema and records every migration in schema_version."""
    from agentledger.adapters.stores.postgres import MIGRATIONS

    async with _store(dsn, schema) as store:
        assert await store.streams() == []
    async with _connection(dsn) as connection:
        cursor = await connection.execute(f"SELECT version FROM {schema}.schema_version ORDER BY version")
        assert [row[0] for row in await cursor.fetchall()] == [m.version for m in MIGRATIONS]


@pytest.mark.anyio
async def test_older_schema_is_migrated_and_keeps_its_events(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schema left at version 1 is upgraded on first use, its events intact."""
    from agentledger.adapters.stores import postgres

    events = make_events("run_1", 0, 3, "old")
    with monkeypatch.context() as patch:
        patch.setattr(postgres, "MIGRATIONS", postgres.MIGRATIONS[:1])
        patch.setattr(postgres, "SCHEMA_VERSION", 1)
        async with _store(dsn, schema) as old:
            await old.append("run_1", events, 0)
    async with _store(dsn, schema) as new:
        assert await new.read("run_1") == events
        assert await new.claim_call("run_1/1/call_1") == (1, None)
    async with _connection(dsn) as connection:
        cursor = await connection.execute(f"SELECT max(version) FROM {schema}.schema_version")
        assert await cursor.fetchone() == (postgres.SCHEMA_VERSION,)


@pytest.mark.anyio
async def test_newer_schema_is_refused(dsn: str, schema: str) -> None:
    """A schema written by newer code is refused with StoreError, not guessed at."""
    async with _store(dsn, schema) as store:
        await store.migrate()
    async with _connection(dsn) as connection:
        await connection.execute(f"INSERT INTO {schema}.schema_version VALUES (99, 'from the future')")
    async with _store(dsn, schema) as store:
        with pytest.raises(StoreError, match="version 99, newer than this code knows"):
            await store.streams()


@pytest.mark.anyio
async def test_stores_starting_together_migrate_once(dsn: str, schema: str) -> None:
    """Stores opening a new schema at the same moment all work and apply each migration once."""
    from agentledger.adapters.stores.postgres import MIGRATIONS

    stores = [_store(dsn, schema) for _ in range(6)]
    async with anyio.create_task_group() as group:
        for store in stores:
            group.start_soon(store.migrate)
    for store in stores:
        await store.aclose()
    async with _connection(dsn) as connection:
        cursor = await connection.execute(f"SELECT version FROM {schema}.schema_version ORDER BY version")
        assert [row[0] for row in await cursor.fetchall()] == [m.version for m in MIGRATIONS]


# -- reading back -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_corrupt_record_names_its_position(dsn: str, schema: str) -> None:
    """A stored record that does not decode raises LogCorruptError naming the stream and seq."""
    async with _store(dsn, schema) as store:
        await store.append("run_bad", make_events("run_bad", 0, 5, "x"), 0)
        async with _connection(dsn) as connection:
            bad = '{"type": "ToolCalled", "run_id": "run_bad", "seq": 2}'
            await connection.execute(f"UPDATE {schema}.events SET data = %s WHERE seq = 2", (bad,))
        with pytest.raises(LogCorruptError, match="missing required field `at`") as info:
            await store.read("run_bad")
    assert info.value.where == f"postgresql {schema}.events: stream 'run_bad' seq 2"


@pytest.mark.anyio
async def test_missing_row_is_a_gap(dsn: str, schema: str) -> None:
    """A row deleted from the middle of a stream raises LogCorruptError at the seq after it."""
    async with _store(dsn, schema) as store:
        await store.append("run_1", make_events("run_1", 0, 4, "x"), 0)
        async with _connection(dsn) as connection:
            await connection.execute(f"DELETE FROM {schema}.events WHERE seq = 2")
        with pytest.raises(LogCorruptError, match="expected seq 2, found 3"):
            await store.read("run_1")
        assert len(await store.read("run_1", after=2)) == 1


@pytest.mark.anyio
async def test_closed_store_refuses_work(dsn: str, schema: str) -> None:
    """Every call on a closed store raises StoreError."""
    store = _store(dsn, schema)
    await store.aclose()
    with pytest.raises(StoreError, match="closed"):
        await store.read("run_1")


@pytest.mark.anyio
async def test_unreachable_server_is_a_store_error() -> None:
    """A server that cannot be reached raises StoreError naming the problem."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with _store(f"postgresql://postgres@127.0.0.1:{port}/test", "unused") as store:
        with pytest.raises(StoreError, match="cannot connect to PostgreSQL"):
            await store.streams()


# -- tailing ------------------------------------------------------------------------------------


async def _take(tail: Any, count: int) -> list[Any]:
    return [await anext(tail) for _ in range(count)]


@pytest.mark.anyio
@pytest.mark.parametrize("listen", [True, False], ids=["notify", "polling"])
async def test_tail_follows_appends_of_other_handles(dsn: str, schema: str, listen: bool) -> None:
    """tail() yields what other handles append after it was entered, in position order."""
    async with (
        _store(dsn, schema, listen=listen, poll_interval=0.02) as follower,
        _store(dsn, schema) as writer,
    ):
        await writer.append("run_old", make_events("run_old", 0, 2, "old"), 0)
        async with follower.tail() as tail:
            got: list[Any] = []
            async with anyio.create_task_group() as group:

                async def collect() -> None:
                    got.extend(await _take(tail, 5))

                group.start_soon(collect)
                await writer.append("run_a", make_events("run_a", 0, 2, "a"), 0)
                await writer.append("run_b", make_events("run_b", 0, 1, "b"), 0)
                await writer.append("run_a", make_events("run_a", 2, 2, "a2"), 2)
    assert [(item.stream, item.event.seq) for item in got] == [
        ("run_a", 0), ("run_a", 1), ("run_b", 0), ("run_a", 2), ("run_a", 3),
    ]  # fmt: skip
    positions = [item.position for item in got]
    assert positions == sorted(positions)


@pytest.mark.anyio
async def test_tail_resumes_from_a_cursor(dsn: str, schema: str) -> None:
    """A tail given a position yields exactly the events after it, then waits for more."""
    async with _store(dsn, schema) as store:
        await store.append("run_a", make_events("run_a", 0, 3, "a"), 0)
        async with store.tail(after=0) as tail:
            first = await _take(tail, 3)
        async with store.tail(after=first[0].position) as tail:
            rest = await _take(tail, 2)
        assert rest == first[1:]


@pytest.mark.anyio
async def test_tail_of_one_stream_follows_its_seq(dsn: str, schema: str) -> None:
    """tail(stream) yields only that stream's events, after the given seq."""
    async with _store(dsn, schema) as store:
        await store.append("run_a", make_events("run_a", 0, 3, "a"), 0)
        await store.append("run_b", make_events("run_b", 0, 2, "b"), 0)
        async with store.tail("run_a", after=0) as tail:
            got = await _take(tail, 2)
            await store.append("run_b", make_events("run_b", 2, 1, "b"), 2)
            await store.append("run_a", make_events("run_a", 3, 1, "a"), 3)
            got.append(await anext(tail))
    assert [(item.stream, item.event.seq) for item in got] == [("run_a", 1), ("run_a", 2), ("run_a", 3)]


# -- idempotency records ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_call_outcomes_keep_the_first_recorded(dsn: str, schema: str) -> None:
    """claim_call counts attempts; complete_call keeps the first outcome and returns it."""
    async with _store(dsn, schema) as store:
        assert await store.claim_call("run_1/1/c1") == (1, None)
        assert await store.complete_call("run_1/1/c1", b"first") == b"first"
        assert await store.claim_call("run_1/1/c1") == (2, b"first")
        assert await store.complete_call("run_1/1/c1", b"second") == b"first"
        with pytest.raises(StoreError, match="never claimed"):
            await store.complete_call("run_1/1/other", b"x")


# -- another process, killed in the middle ------------------------------------------------------


def _spawn(dsn: str, schema: str, stream: str, mode: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "tests.test_stores_postgres", dsn, schema, stream, mode]
    pipe = subprocess.PIPE
    return subprocess.Popen(command, stdin=pipe, stdout=pipe, stderr=pipe, text=True, cwd=ROOT)


def _expect_ready(child: subprocess.Popen[str]) -> None:
    assert child.stdout is not None
    line = child.stdout.readline()
    if line.strip() != "ready":
        child.kill()
        _, err = child.communicate(timeout=60)
        pytest.fail(f"the child said {line!r}, not 'ready':\n{err}")


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["before-commit", "loop"])
async def test_kill_9_mid_append_leaves_whole_batches(dsn: str, schema: str, mode: str) -> None:
    """A writer killed inside its append transaction leaves whole batches only; appends go on."""
    stream = "run_crash"
    child = _spawn(dsn, schema, stream, mode)
    _expect_ready(child)
    child.kill()
    child.communicate(timeout=60)
    async with _store(dsn, schema) as store:
        events = await store.read(stream)
        assert len(events) % 3 == 0
        assert len(events) >= 6
        assert events == [e for k in range(len(events) // 3) for e in make_events(stream, 3 * k, 3, f"b{k}")]
        more = make_events(stream, len(events), 2, "after")
        assert await store.append(stream, more, len(events)) == len(events) + 2


@pytest.mark.anyio
async def test_two_processes_race_one_conflicts(dsn: str, schema: str) -> None:
    """Two processes appending at the same version: one ConflictError, the other's batch whole."""
    children = [_spawn(dsn, schema, "run_race", f"race-{tag}") for tag in "ab"]
    for child in children:
        _expect_ready(child)
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    outcomes = sorted(child.communicate(timeout=60)[0].strip() for child in children)
    assert outcomes == ["conflict 2", "ok 2"]
    async with _store(dsn, schema) as store:
        assert len(await store.read("run_race")) == 2


async def _child(argv: Sequence[str]) -> None:
    dsn, schema, stream, mode = argv
    store = _store(dsn, schema)
    await store.migrate()
    if mode.startswith("race-"):
        print("ready", flush=True)
        sys.stdin.readline()
        try:
            print(f"ok {await store.append(stream, make_events(stream, 0, 2, mode), 0)}", flush=True)
        except ConflictError as exc:
            print(f"conflict {exc.actual}", flush=True)
        await store.aclose()
        return
    for k in range(2):
        await store.append(stream, make_events(stream, 3 * k, 3, f"b{k}"), 3 * k)
    if mode == "before-commit":

        async def hang() -> None:
            print("ready", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)

        store._before_commit = hang
        await store.append(stream, make_events(stream, 6, 3, "b2"), 6)
        raise SystemExit("the test should have killed this process")
    print("ready", flush=True)
    k = 2
    while True:
        await store.append(stream, make_events(stream, 3 * k, 3, f"b{k}"), 3 * k)
        k += 1


if __name__ == "__main__":
    anyio.run(_child, sys.argv[1:])

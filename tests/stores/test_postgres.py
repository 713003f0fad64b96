"""PostgresEventStore against the store contract, and what PostgreSQL adds of its own.

These tests need a PostgreSQL server (see ``_temporal_env``): they skip when it is unreachable,
and fail under ``CI=true``. Each test works in a fresh schema, dropped afterwards. The durable
contract's other processes open the same schema with ``TestPostgres.reopen``.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

from agentledger.errors import ConflictError, LogCorruptError, StoreError
from agentledger.store import EventStore, SupportsReadMany
from agentledger.testing.stores import (
    CrashOutcome,
    DurableStoreContract,
    make_events,
)
from tests._temporal_env import drop_schema, require_postgres, unique_schema


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


class TestPostgres(DurableStoreContract):
    atomic_batches = True
    crash_outcomes: ClassVar[Mapping[str, CrashOutcome]] = {
        "idle": CrashOutcome(0, repaired=False),
        "before-commit": CrashOutcome(0, repaired=False),
    }

    @pytest.fixture(autouse=True)
    def _database(self, dsn: str, schema: str) -> None:
        """Every handle of a test opens the same fresh schema."""
        self.dsn, self.schema = dsn, schema

    @pytest.fixture(params=["idle", "before-commit", "loop"])
    def crash_point(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    def open_store(self, location: Path) -> EventStore:
        store: EventStore = _store(self.dsn, self.schema)
        return store

    async def corrupt(self, stream: str, seq: int, data: bytes) -> str:
        async with _connection(self.dsn) as connection:
            update = f"UPDATE {self.schema}.events SET data = %s WHERE stream = %s AND seq = %s"
            await connection.execute(update, (data.decode(), stream, seq))
        return f"postgresql {self.schema}.events: stream {stream!r} seq {seq}"

    def reopen_args(self) -> list[str]:
        return [self.dsn, self.schema]

    @classmethod
    def reopen(cls, args: list[str]) -> EventStore:
        store: EventStore = _store(args[0], args[1])
        return store

    @classmethod
    def install_fault(cls, store: EventStore, point: str, hang: Callable[[], None]) -> None:
        """The batch inserted and notified, its transaction still open: then ``hang``."""
        if point != "before-commit":
            super().install_fault(store, point, hang)
            return

        async def before_commit() -> None:
            hang()

        store._before_commit = before_commit  # type: ignore[attr-defined]


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
    from agentledger.adapters.stores import _pg_schema, postgres

    events = make_events("run_1", 0, 3, "old")
    with monkeypatch.context() as patch:
        patch.setattr(_pg_schema, "MIGRATIONS", postgres.MIGRATIONS[:1])
        patch.setattr(_pg_schema, "SCHEMA_VERSION", 1)
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
async def test_a_schema_at_the_current_version_opens_without_the_migration_lock(
    dsn: str, schema: str
) -> None:
    """Opening a schema already at this code's version is one query: it does not wait for the
    migration lock (held here by another connection) nor write anything."""
    from agentledger.adapters.stores._pg_pool import lock_key

    async with _store(dsn, schema) as store:
        await store.append("run_1", make_events("run_1", 0, 2, "x"), 0)
    async with _connection(dsn) as holder:
        await holder.execute("SELECT pg_advisory_lock(%s)", (lock_key("migrate", schema),))
        async with _store(dsn, schema) as store:
            with anyio.fail_after(10):
                assert len(await store.read("run_1")) == 2
                await store.append("run_1", make_events("run_1", 2, 1, "x"), 2)


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
async def test_a_record_whose_own_seq_is_not_its_row_is_corruption(dsn: str, schema: str) -> None:
    """A record claiming another seq than its row's (copied over by hand) is LogCorruptError."""
    async with _store(dsn, schema) as store:
        await store.append("run_1", make_events("run_1", 0, 4, "x"), 0)
        async with _connection(dsn) as connection:
            await connection.execute(
                f"UPDATE {schema}.events SET data = jsonb_set(data::jsonb, '{{seq}}', '0')::json"
                " WHERE seq = 2"
            )
        with pytest.raises(LogCorruptError, match="expected seq 2 of 'run_1', found seq 0") as caught:
            await store.read("run_1")
        assert caught.value.where.endswith("stream 'run_1' seq 2")


@pytest.mark.anyio
async def test_a_read_decodes_blocks_as_they_arrive_and_rereads_rows_when_they_are_out_of_order(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``read`` decodes a stream a block of 1,024 rows at a time as the blocks arrive; blocks that
    arrive out of seq order (nothing in SQL promises their order) send it to the rows, which give
    the same events, and a record that does not decode in a later block is named at its seq."""
    from agentledger.adapters.stores import _pg_read
    from agentledger.adapters.stores.postgres import PostgresEventStore

    class Counting(PostgresEventStore):
        row_reads = 0

        async def fetch(self, connection: Any, query: Any, params: Any, *, rows: bool = True) -> Any:
            self.row_reads += "ORDER BY seq" in query.as_string(None)
            return await super().fetch(connection, query, params, rows=rows)

    async with _store(dsn, schema) as writer:
        for start in range(0, 2600, 1000):
            await writer.append("run_1", make_events("run_1", start, min(1000, 2600 - start), "x"), start)
        expected = await writer.read("run_1")
    assert len(expected) == 2600
    async with Counting(dsn, schema=schema) as store:
        assert await store.read("run_1") == expected
        assert await store.read("run_1", after=1500) == expected[1501:]
        assert store.row_reads == 0  # read as blocks
        monkeypatch.setattr(_pg_read, "READ", _pg_read.READ + " ORDER BY x.low DESC")
        assert await store.read("run_1") == expected
        assert await store.read("run_1", after=1500) == expected[1501:]
        assert store.row_reads == 2  # the blocks came last first: read again as rows
        monkeypatch.undo()
        async with _connection(dsn) as connection:
            await connection.execute(f"UPDATE {schema}.events SET data = '[1]' WHERE seq = 2100")
        with pytest.raises(LogCorruptError) as caught:
            await store.read("run_1", after=10)
        assert caught.value.where.endswith("stream 'run_1' seq 2100")
        assert await store.read("run_1", after=2100) == expected[2101:]  # the connection is usable


@pytest.mark.anyio
async def test_a_read_cancelled_while_its_blocks_arrive_leaves_the_collector_on_and_the_store_usable(
    dsn: str, schema: str
) -> None:
    """The collector is paused from a read's first block to its last, across the waits for the
    next: a read cancelled at any point turns it back on, and the store reads on."""
    import gc

    async with _store(dsn, schema) as store:
        for start in range(0, 6000, 1000):
            await store.append("run_1", make_events("run_1", start, 1000, "x"), start)
        assert gc.isenabled()
        for delay in (0.0005, 0.002, 0.005, 0.01, 0.02, 0.05):
            with anyio.move_on_after(delay):
                await store.read("run_1")
            assert gc.isenabled()
            assert len(await store.read("run_1", after=5000)) == 999


@pytest.mark.anyio
async def test_read_many_reads_in_one_query_and_checks_each_stream_as_read_does(
    dsn: str, schema: str
) -> None:
    """Several streams come back whole in the order asked, an unknown one empty; a gap or a record
    out of place in any of them is LogCorruptError naming that stream and seq."""
    async with _store(dsn, schema) as store:
        reader = store
        assert isinstance(reader, SupportsReadMany)  # what read_many() looks for
        for name, count in (("run_b", 3), ("run_a", 2), ("run_c", 4)):
            await store.append(name, make_events(name, 0, count, name), 0)
        many = await store.read_many(["run_c", "run_nope", "run_a"])
        assert list(many) == ["run_c", "run_nope", "run_a"]
        assert many == {name: await store.read(name) for name in ["run_c", "run_nope", "run_a"]}
        assert [len(v) for v in many.values()] == [4, 0, 2]
        async with _connection(dsn) as connection:
            await connection.execute(f"DELETE FROM {schema}.events WHERE stream = 'run_c' AND seq = 1")
        with pytest.raises(LogCorruptError, match="expected seq 1, found 2") as gap:
            await store.read_many(["run_a", "run_c"])
        assert gap.value.where.endswith("stream 'run_c' seq 2")
        async with _connection(dsn) as connection:
            await connection.execute(
                f"UPDATE {schema}.events SET data = jsonb_set(data::jsonb, '{{seq}}', '0')::json"
                " WHERE stream = 'run_b' AND seq = 2"
            )
        with pytest.raises(LogCorruptError, match="expected seq 2 of 'run_b', found seq 0") as moved:
            await store.read_many(["run_a", "run_b"])
        assert moved.value.where.endswith("stream 'run_b' seq 2")


_CORRUPTIONS = [
    None,
    "DELETE FROM {schema}.events WHERE stream = %(stream)s AND seq = %(seq)s",
    "UPDATE {schema}.events SET seq = seq + 5000 WHERE stream = %(stream)s AND seq = %(seq)s",
    "UPDATE {schema}.events SET data = jsonb_set(data::jsonb, '{{seq}}', '7')::json"
    " WHERE stream = %(stream)s AND seq = %(seq)s",
    "UPDATE {schema}.events SET data = jsonb_set(data::jsonb, '{{run_id}}', '\"run_x\"')::json"
    " WHERE stream = %(stream)s AND seq = %(seq)s",
    'UPDATE {schema}.events SET data = \'{{"type": "Nope"}}\' WHERE stream = %(stream)s AND seq = %(seq)s',
    "UPDATE {schema}.events SET data = '[1, 2]' WHERE stream = %(stream)s AND seq = %(seq)s",
]


def _by_definition(rows: list[tuple[str, int, str]], stream: str, first: int) -> list[Any]:
    """What reading ``stream``'s ``rows`` (from ``first`` on) must give, by the definition: its
    events if the rows hold seqs ``first``, ``first + 1``, ... each decoding to the event of that
    stream and seq; else ``LogCorruptError`` at the first row that does not."""
    from agentledger.core.events import decode_event

    events = []
    for expected, (_, seq, _text) in enumerate(rows, first):
        if seq != expected:
            raise LogCorruptError(f"expected seq {expected}, found {seq}", where=f"seq {seq}")
    for expected, (_, seq, text) in enumerate(rows, first):
        try:
            event = decode_event(text.encode())
        except Exception as exc:
            raise LogCorruptError(str(exc), where=f"seq {seq}") from exc
        if event.seq != expected or event.run_id != stream:
            raise LogCorruptError("out of place", where=f"seq {seq}")
        events.append(event)
    return events


async def _outcome(read: Any) -> Any:
    """The events read, or where the read found corruption."""
    try:
        return await read
    except LogCorruptError as exc:
        return ("corrupt", exc.where.rsplit("seq ", 1)[1])


def test_reads_in_blocks_give_what_the_rows_define(dsn: str, schema: str) -> None:
    """``read`` and ``read_many`` fetch blocks of up to 1,024 rows joined by the server; whatever
    a stream's rows hold (a row missing or moved, a record of another seq or stream, a record
    that is no event), they give what reading the rows one by one defines, and a corrupt stream
    is named at the same seq."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    names = iter(range(10**6))

    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        lengths=st.lists(st.sampled_from([0, 1, 3, 1023, 1024, 1025, 2050]), min_size=1, max_size=3),
        corruption=st.sampled_from(_CORRUPTIONS),
        where=st.floats(0, 1),
        after=st.integers(-1, 1100),
    )
    def check(lengths: list[int], corruption: str | None, where: float, after: int) -> None:
        async def run() -> None:
            streams = [f"run_{next(names)}" for _ in lengths]
            async with _store(dsn, schema) as store:
                await store.migrate()
                for stream, length in zip(streams, lengths, strict=True):
                    for start in range(0, length, 1000):
                        events = make_events(stream, start, min(1000, length - start), stream)
                        await store.append(stream, events, start)
                hit = streams[0]
                async with _connection(dsn) as connection:
                    if corruption is not None and lengths[0]:
                        params = {"stream": hit, "seq": int(where * (lengths[0] - 1))}
                        await connection.execute(corruption.format(schema=schema), params)
                    cursor = await connection.execute(
                        f"SELECT stream, seq, data::text FROM {schema}.events"
                        " WHERE stream = ANY(%s) ORDER BY stream, seq",
                        (streams,),
                    )
                    rows = await cursor.fetchall()

                async def defined(stream: str, first: int) -> Any:
                    mine = [row for row in rows if row[0] == stream and row[1] >= first]
                    return _by_definition(mine, stream, first)

                for stream in streams:
                    assert await _outcome(store.read(stream)) == await _outcome(defined(stream, 0))
                first = max(after + 1, 0)
                assert await _outcome(store.read(hit, after)) == await _outcome(defined(hit, first))
                many = await _outcome(store.read_many(streams))
                if not isinstance(many, tuple):
                    assert many == {stream: await defined(stream, 0) for stream in streams}
                else:  # the first corrupt stream, in name order, is named
                    corrupt = [await _outcome(defined(stream, 0)) for stream in sorted(streams)]
                    assert many == next(o for o in corrupt if isinstance(o, tuple))

        anyio.run(run)

    check()


async def _schema_exists(dsn: str, schema: str) -> bool:
    async with _connection(dsn) as connection:
        cursor = await connection.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,))
        row = await cursor.fetchone()
    return bool(row and row[0])


@pytest.mark.anyio
async def test_a_read_only_store_on_an_empty_database_creates_nothing(dsn: str, schema: str) -> None:
    """Reading a database without the schema lists no runs and leaves the database as it was."""
    from agentledger.store import list_runs

    async with _store(dsn, schema, read_only=True) as store:
        assert await store.streams() == []
        assert await store.read("run_1") == []
        assert await store.version("run_1") == 0
        assert await list_runs(store) == []
        with pytest.raises(StoreError, match="read-only"):
            await store.append("run_1", make_events("run_1", 0, 1, "x"), 0)
        with pytest.raises(StoreError, match="read-only"):
            await store.migrate()
    assert not await _schema_exists(dsn, schema)


@pytest.mark.anyio
async def test_a_read_only_store_reads_in_read_only_transactions(dsn: str, schema: str) -> None:
    async with _store(dsn, schema) as writer:
        await writer.append("run_1", make_events("run_1", 0, 3, "x"), 0)
    async with _store(dsn, schema, read_only=True) as store:
        assert len(await store.read("run_1")) == 3
        assert await store.streams() == ["run_1"]
        async with store.connection() as connection:
            cursor = await connection.execute("SHOW transaction_read_only")
            assert await cursor.fetchone() == ("on",)


@pytest.mark.anyio
async def test_the_stores_connections_do_not_compile_statements(dsn: str, schema: str) -> None:
    """The store's connections run without JIT: its reads are planned far above
    ``jit_above_cost`` (a block's range looks large to the planner), and compiling them took
    longer than running them."""
    for read_only in (False, True):
        async with _store(dsn, schema, read_only=read_only) as store:
            await store.streams()
            async with store.connection() as connection:
                cursor = await connection.execute("SHOW jit")
                assert await cursor.fetchone() == ("off",)


def test_the_command_line_opens_postgresql_read_only_for_reading(dsn: str) -> None:
    from agentledger.cli import open_store

    assert open_store(dsn).read_only is True  # type: ignore[attr-defined]
    assert open_store(dsn, create=True).read_only is False  # type: ignore[attr-defined]


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


@pytest.mark.anyio
async def test_two_stores_on_one_schema_see_each_others_appends(dsn: str, schema: str) -> None:
    """Two stores (as two processes would) take turns on one stream: each sees the other's appends."""
    async with _store(dsn, schema) as one, _store(dsn, schema) as two:
        assert await one.append("run_a", make_events("run_a", 0, 1, "1"), 0) == 1
        assert await two.append("run_a", make_events("run_a", 1, 1, "2"), 1) == 2
        with pytest.raises(ConflictError) as raised:
            await one.append("run_a", make_events("run_a", 1, 1, "stale"), 1)
        assert (raised.value.expected, raised.value.actual) == (1, 2)
        assert await one.append("run_a", make_events("run_a", 2, 1, "3"), 2) == 3
        with pytest.raises(ConflictError):
            await two.append("run_a", make_events("run_a", 2, 1, "stale"), 2)
        with pytest.raises(ConflictError):
            await two.append("run_a", [], 2)
        assert await two.append("run_a", [], 3) == 3
        with pytest.raises(ConflictError):
            await two.append("run_a", make_events("run_a", 0, 1, "again"), 0)
        expected = [make_events("run_a", seq, 1, str(seq + 1))[0] for seq in range(3)]
        assert await two.read("run_a") == expected
        assert await two.streams() == ["run_a"]


@pytest.mark.anyio
async def test_a_conflict_after_a_rolled_back_group_names_a_version_the_stream_had(
    dsn: str, schema: str
) -> None:
    """Two appends to one stream share a group; the first is speculatively accepted, the second
    refused at the version the first would lead to; then the group is rolled back (another
    process wrote the stream meanwhile). The refusal names the stream's real version."""
    release, entered = anyio.Event(), anyio.Event()
    held: list[int] = []
    errors: list[ConflictError] = []

    async def before_commit() -> None:
        held.append(1)
        if len(held) == 2:  # the commit of run_other, after run_s's first append
            entered.set()
            await release.wait()

    async def append(events: int, expected: int) -> None:
        try:
            await one.append("run_s", make_events("run_s", expected, events, f"x{expected}"), expected)
        except ConflictError as exc:
            errors.append(exc)

    async with _store(dsn, schema) as one, _store(dsn, schema) as two:
        one._before_commit = before_commit
        await one.append("run_s", make_events("run_s", 0, 2, "a"), 0)  # one knows run_s at 2
        await two.append("run_s", make_events("run_s", 2, 1, "b"), 2)  # the stream is at 3 now
        async with anyio.create_task_group() as group:
            group.start_soon(one.append, "run_other", make_events("run_other", 0, 1, "o"), 0)
            await entered.wait()  # that commit holds the lead: the next two queue into one group
            group.start_soon(append, 2, 2)
            group.start_soon(append, 1, 2)
            await anyio.wait_all_tasks_blocked()
            release.set()
        assert len(await two.read("run_s")) == 3
        assert [(e.expected, e.actual) for e in errors] == [(2, 3), (2, 3)]


@pytest.mark.anyio
async def test_a_cancelled_append_still_waits_for_its_commit(dsn: str, schema: str) -> None:
    """Cancelled while queued behind a commit, an append is settled first, then cancelled."""
    release, entered = anyio.Event(), anyio.Event()
    held: list[int] = []
    outcomes: list[str] = []
    scopes: list[anyio.CancelScope] = []

    async def before_commit() -> None:
        held.append(1)
        if len(held) == 1:
            entered.set()
            await release.wait()

    async def cancelled_append() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await store.append("run_c", make_events("run_c", 0, 2, "c"), 0)
            outcomes.append("returned")
        outcomes.append("cancelled" if scope.cancelled_caught else "not cancelled")

    async with _store(dsn, schema) as store:
        await store.migrate()
        store._before_commit = before_commit
        async with anyio.create_task_group() as group:
            group.start_soon(store.append, "run_first", make_events("run_first", 0, 1, "first"), 0)
            await entered.wait()  # the first commit is held, inside its transaction
            group.start_soon(cancelled_append)
            await anyio.wait_all_tasks_blocked()
            scopes[0].cancel()
            await anyio.wait_all_tasks_blocked()
            assert outcomes == []  # still waiting for the held commit
            release.set()
        assert outcomes == ["cancelled"]
        assert held == [1, 1]
        assert await store.read("run_c") == make_events("run_c", 0, 2, "c")


# -- listing runs -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_list_runs_filters_in_sql_and_skips_a_stream_that_does_not_decode(
    dsn: str, schema: str
) -> None:
    """Newest first, each filter applied by the query; a stream whose first event does not decode is
    skipped with one warning, and does not take a place of the limit."""
    from agentledger.errors import UnreadableStreamWarning
    from agentledger.store import RunQuery, SupportsRunListing, list_runs
    from tests._runs import T0, record, run_events

    async with _store(dsn, schema) as opened:
        store: EventStore = opened
        assert isinstance(opened, SupportsRunListing)
        await record(store, run_events("run_a", agent="Planner", session="s1", at=T0))
        await record(store, run_events("run_b", agent="Booker", session="s1", at=T0 + 10, ending="failed"))
        await record(store, run_events("run_c", session="s2", at=T0 + 20, ending="incomplete"))
        await record(store, run_events("run_d", agent="Planner", session="s2", at=T0 + 30, parent="run_c"))

        async def ids(**query: Any) -> list[str]:
            return [run.run_id for run in await list_runs(store, RunQuery(**query))]

        assert await ids() == ["run_d", "run_c", "run_b", "run_a"]
        assert await ids(limit=2) == ["run_d", "run_c"]
        assert await ids(agent="Planner") == ["run_d", "run_c", "run_a"]
        assert await ids(session="s1") == ["run_b", "run_a"]
        assert await ids(outcome="completed") == ["run_d", "run_a"]
        assert await ids(outcome="failed") == ["run_b"]
        assert await ids(outcome="incomplete") == ["run_c"]
        assert await ids(since=T0 + 10) == ["run_d", "run_c", "run_b"]
        (d,) = await list_runs(store, RunQuery(limit=1))
        assert (d.events, d.parent_run_id, d.answer) == (4, "run_c", "answer of run_d")
        async with _connection(dsn) as connection:
            await connection.execute(
                f"UPDATE {schema}.events SET data = %s WHERE stream = 'run_d' AND seq = 0",
                ('{"type":"RunStarted","run_id":"run_d","seq":"zero"}',),
            )
        with pytest.warns(UnreadableStreamWarning, match="skipped stream 'run_d': postgresql") as warned:
            assert await ids(limit=2) == ["run_c", "run_b"]
        assert len(warned) == 1


@pytest.mark.anyio
async def test_a_connection_lost_at_commit_is_an_unknown_outcome(dsn: str, schema: str) -> None:
    """Killed as it commits, an append raises CommitUnknownError (its outcome is not known),
    not the StoreError that says nothing was written; the stream reads back either way."""
    from agentledger.errors import CommitUnknownError

    name = f"kill_{schema[-8:]}"
    separator = "&" if "?" in dsn else "?"
    kill = {"on": False}

    async def before_commit() -> None:
        if kill["on"]:
            async with _connection(dsn) as killer:
                terminate = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = "
                await killer.execute(terminate + "%s", (name,))

    async with _store(f"{dsn}{separator}application_name={name}", schema) as store:
        store._before_commit = before_commit
        await store.append("run_1", make_events("run_1", 0, 2, "a"), 0)
        kill["on"] = True
        with pytest.raises(CommitUnknownError, match="may have been written"):
            await store.append("run_1", make_events("run_1", 2, 1, "b"), 2)
        kill["on"] = False
        assert len(await store.read("run_1")) in (2, 3)

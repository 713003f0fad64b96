"""PostgresEventStore: every stream in one PostgreSQL schema, for logs shared by many processes.

Theory of operation. ``streams`` gives each stream a position in creation order; ``events`` holds
one row per event with the event as ``encode_event`` JSON, keyed by ``(stream, seq)``, and a
``position`` that orders all events of the schema. Appends that arrive while one is committing
are committed together (``_group``), in one transaction sent as one pipeline: under the append
lock, each append is checked in queue order against its stream's version (a stale one fails with
``ConflictError`` and writes nothing) and the other batches' rows go in with one statement. The
versions this store committed last are kept, not read again; the primary key backs them: a row
they did not foresee (another process wrote) rolls the group back, and its appends go one by
one, each in its own transaction, guarded by the key and by the row before the batch.

Positions are allocated under a transaction-scoped advisory lock, so they are handed out in commit
order and a reader that has seen position ``p`` will never see a smaller one commit later: that is
what makes a cursor on ``position`` a safe way to follow new events. ``tail()`` follows them: it
listens on a channel that every append notifies at commit (LISTEN/NOTIFY), and reads after its
cursor whenever a notification arrives or ``poll_interval`` passes without one, so a missed
notification (or a server where LISTEN is unavailable: ``listen=False``) costs latency, never
events.

The schema is created on first use. ``schema_version`` records each migration applied; on first
use a store applies the migrations it knows beyond the recorded version, in one transaction under
an advisory lock (several processes starting at once apply them once), and refuses a schema newer
than it knows. See ``docs/postgres.md``.

The store also keeps ``call_outcomes``: the outcome of each tool call run by a distributed
executor, under an idempotency key, so that a retried call returns what was recorded instead of
running again (``claim_call``/``complete_call``; used by ``agentledger.adapters.temporal``).

The schema and its migrations are in ``_pg_schema``, reading in ``_pg_read``, following (``Tail``)
in ``_pg_tail``, the pool in ``_pg_pool``; this module is the store itself: appends, the entry
points of reads, and the call records.

Connections come from a small pool opened lazily, in the event loop that first uses the store; a
store belongs to that loop. Close it with ``await store.aclose()`` or ``async with``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any, NamedTuple, Self

import anyio

from agentledger.core.events import Event
from agentledger.errors import CommitUnknownError, ConflictError, StoreError
from agentledger.listing import RunQuery, RunSummary

from ._codec import encode_records
from ._group import Append, LoopGroups, appending, remember
from ._listing import report

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg import sql
except ImportError:  # pragma: no cover - exercised only without the extra
    raise ImportError("PostgresEventStore needs psycopg 3: pip install 'agentledger[postgres]'") from None

from . import _pg_read, _pg_runs, _pg_schema
from ._pg_pool import Pool, lock_key
from ._pg_schema import (
    GROUP_INSERT,
    GROUP_NOTIFY,
    GROUP_STREAMS,
    GROUP_VERSIONS,
    INSERT_AT,
    MIGRATIONS,
    SCHEMA_VERSION,
    Migration,
)
from ._pg_tail import StoredEvent, Tail

__all__ = (
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "CallRecord",
    "Migration",
    "PostgresEventStore",
    "StoredEvent",
    "Tail",
)


_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,47}$")
_KNOWN_STREAMS = 10_000
"""How many streams' versions a store keeps between commits (the most recently written)."""

_Row = tuple[str, str]
"""An event to insert: its type and its JSON text."""


class CallRecord(NamedTuple):
    """A claimed idempotency key: how many attempts claimed it, and the outcome once recorded."""

    attempts: int
    outcome: bytes | None


def _lost(connection: psycopg.AsyncConnection[Any], exc: psycopg.Error) -> bool:
    """Whether ``exc`` is the connection going away, not the server refusing a statement (a
    refusal has an SQLSTATE and leaves the connection usable: the transaction was rolled back)."""
    if connection.broken or connection.closed:
        return True
    return isinstance(exc, psycopg.OperationalError) and not exc.sqlstate


class _Behind(Exception):
    """The stream is shorter than the expected version: nothing was inserted."""


class PostgresEventStore:
    """An ``EventStore`` in a PostgreSQL schema; see the module docstring.

    ``conninfo`` is a libpq connection string or URL (``postgresql://user@host/db``). ``schema``
    names the PostgreSQL schema holding the tables (created on first use). ``max_connections``
    bounds the pool; ``tail()`` uses one more connection per follower while ``listen`` is on.

    ``read_only=True`` never writes: every transaction is read-only (the server refuses writes),
    no schema is created or migrated (a database without one reads as a store with no streams; a
    schema of another version is refused), and appends and call records raise ``StoreError``.
    """

    def __init__(
        self,
        conninfo: str = "",
        *,
        schema: str = "agentledger",
        max_connections: int = 10,
        listen: bool = True,
        poll_interval: float = 1.0,
        read_only: bool = False,
    ) -> None:
        if not _SCHEMA_NAME.match(schema):
            raise ValueError(
                f"schema must be a lowercase identifier of at most 48 characters, not {schema!r}"
            )
        self.conninfo = conninfo
        self.schema = schema
        self.listen = listen
        self.poll_interval = poll_interval
        self.channel = f"{schema}_appended"
        self.read_only = read_only
        self._pool = Pool(conninfo, max_connections, read_only=read_only)
        self._append_key = lock_key("append", schema)
        self._migrate_key = lock_key("migrate", schema)
        self._migrated = False
        self._present = False  # whether the schema is there (a read-only store never creates it)
        self._migrating: anyio.Lock | None = None
        self._closed = False
        self._groups: LoopGroups[_Row] = LoopGroups(self._commit_group)
        self._statements: dict[str, bytes] = {}
        self._known: dict[str, int] = {}  # stream -> version, as this store's last commit to it left it

    # -- the EventStore protocol ------------------------------------------------------------------

    async def append(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        """Append ``events`` if the stream holds exactly ``expected_version`` events."""
        if expected_version < 0:
            raise ValueError(f"expected_version must be >= 0, not {expected_version}")
        if not stream:
            raise ValueError("a stream name must be non-empty")
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        self._refuse_read_only("append to it")
        rows = [(type(e).__name__, r.decode()) for e, r in zip(events, encode_records(events), strict=True)]
        return await self._groups.run(Append(stream, rows, expected_version))

    async def read(self, stream: str, after: int = -1) -> list[Event]:
        """The stream's events with ``seq > after``, in order ([] for an unknown stream).

        The server joins each run of up to 1,024 rows into one block of lines, read a block at a
        time; blocks whose count and bounds do not show whole consecutive seqs are read again
        row by row, which names the first gap or misplaced record (see ``_pg_read``).
        """
        if not await self._has_schema():
            return []
        return await _pg_read.read(self, stream, after)

    async def read_many(self, streams: Sequence[str]) -> dict[str, list[Event]]:
        """Several whole streams in one query (``SupportsReadMany``): every stream asked for, in
        the order asked, ``[]`` for an unknown one; each read in blocks of lines, decoded and
        checked as ``read`` does (see ``_pg_read``)."""
        asked = list(dict.fromkeys(streams))
        if not asked or not await self._has_schema():
            return {stream: [] for stream in streams}
        return await _pg_read.read_many(self, streams, asked)

    async def blocks(self, connection: psycopg.AsyncConnection[Any], query: sql.Composed, params: Any) -> Any:
        """The rows of a query for blocks of lines, fetched in binary (a block arrives as
        ``bytes``); ``None`` when a block outgrew what the server can make of one value."""
        try:
            cursor = await connection.execute(query, params, binary=True)
            return await cursor.fetchall()
        except (pg_errors.ProgramLimitExceeded, pg_errors.OutOfMemory):
            return None
        except psycopg.Error as exc:
            raise StoreError(f"{self}: {exc}") from exc

    async def streams(self) -> list[str]:
        """Every stream's name, oldest first."""
        query = self.query("SELECT name FROM {schema}.streams ORDER BY position")
        if not await self._has_schema():
            return []
        async with self.connection() as connection:
            rows: list[tuple[str]] = await self.fetch(connection, query, ())
        return [row[0] for row in rows]

    async def list_runs(self, query: RunQuery) -> list[RunSummary]:
        """Run summaries, newest first, from each stream's first and last events (``SupportsRunListing``)."""
        if not await self._has_schema():
            return []
        return report(await _pg_runs.list_runs(self, query))

    # -- beyond the protocol ----------------------------------------------------------------------

    async def version(self, stream: str) -> int:
        """How many events ``stream`` holds (0 for an unknown stream)."""
        if not await self._has_schema():
            return 0
        async with self.connection() as connection:
            return await self._version(connection, stream)

    def tail(self, stream: str | None = None, after: int | None = None) -> Tail:
        """Follow the events appended by any process: ``async with store.tail() as events``.

        With ``stream``, ``after`` is a seq of that stream; without, a position across every
        stream. ``after=None`` follows what is appended once the tail is entered.
        """
        return Tail(self, stream, after)

    async def claim_call(self, key: str) -> CallRecord:
        """Count one more attempt at the call ``key``; its outcome if one is recorded."""
        self._refuse_read_only("record calls in it")
        query = self.query(
            "INSERT INTO {schema}.call_outcomes AS c (key, attempts) VALUES (%s, 1) "
            "ON CONFLICT (key) DO UPDATE SET attempts = c.attempts + 1 RETURNING attempts, outcome"
        )
        async with self.connection() as connection:
            rows: list[tuple[int, bytes | None]] = await self.fetch(connection, query, (key,))
        attempts, outcome = rows[0]
        return CallRecord(attempts, bytes(outcome) if outcome is not None else None)

    async def complete_call(self, key: str, outcome: bytes) -> bytes:
        """Record the outcome of ``key`` unless one already is; returns the recorded outcome."""
        self._refuse_read_only("record calls in it")
        update = self.query(
            "UPDATE {schema}.call_outcomes SET outcome = %s, completed_at = now() "
            "WHERE key = %s AND outcome IS NULL"
        )
        select = self.query("SELECT outcome FROM {schema}.call_outcomes WHERE key = %s")
        async with self.connection() as connection:
            await self.fetch(connection, update, (outcome, key), rows=False)
            rows: list[tuple[bytes | None]] = await self.fetch(connection, select, (key,))
        if not rows or rows[0][0] is None:
            raise StoreError(f"call {key!r} was never claimed")
        return bytes(rows[0][0])

    async def migrate(self) -> int:
        """Create or upgrade the schema now (first use does it anyway); returns its version."""
        self._refuse_read_only("create or migrate its schema")
        async with self.connection():
            return _pg_schema.SCHEMA_VERSION

    async def aclose(self) -> None:
        """Close the pool's connections; later calls raise ``StoreError``."""
        self._closed = True
        await self._pool.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"PostgresEventStore(schema={self.schema!r}{', read_only=True' if self.read_only else ''})"

    # -- appending --------------------------------------------------------------------------------

    async def _commit_group(self, group: list[Append[_Row]]) -> None:
        """The group in one transaction (one WAL flush at commit); each append checked alone."""
        async with self.connection() as connection:
            committing: list[bool] = []
            try:
                accepted, refused, versions = await self._insert_group(connection, group, committing)
            except pg_errors.UniqueViolation:  # a row the versions did not show: one by one, as before
                self._known.clear()
                for append in group:
                    if not append.settled:
                        await self._append_alone(connection, append)
                return
            except psycopg.Error as exc:
                self._known.clear()
                if committing and _lost(connection, exc):
                    raise CommitUnknownError(
                        f"{self}: the connection was lost while {appending(group)} was being committed: "
                        f"it may have been written; read the streams back before appending again ({exc})"
                    ) from exc
                raise StoreError(f"{self}: {appending(group)} failed: {exc}") from exc
            except BaseException:
                self._known.clear()
                raise
        remember(self._known, versions, _KNOWN_STREAMS)
        for append in accepted:
            append.succeed()
        for append, conflict in refused:  # the versions they name are committed now
            append.fail(conflict)

    async def _insert_group(
        self, connection: psycopg.AsyncConnection[Any], group: list[Append[_Row]], committing: list[bool]
    ) -> tuple[list[Append[_Row]], list[tuple[Append[_Row], ConflictError]], dict[str, int]]:
        """Check each append in queue order and insert the batches: one pipeline, one or two round
        trips. Streams whose version is not known here, and appends without events, are read first.

        Nothing is settled here: an append refused after an earlier one of the group to the same
        stream names the version that one leads to, which is true only once the group commits
        (if it is rolled back, the appends are checked again one by one).
        """
        known = self._known
        lookup = [a.stream for a in group if not a.records or known.get(a.stream, 0) != a.expected]
        writing = any(append.records for append in group)
        accepted: list[Append[_Row]] = []
        refused: list[tuple[Append[_Row], ConflictError]] = []
        versions: dict[str, int] = {}
        async with connection.pipeline(), connection.transaction():
            if writing:  # positions are handed out in commit order: see the module docstring
                await connection.execute("SELECT pg_advisory_xact_lock(%s)", (self._append_key,))
            if lookup:
                names = list(dict.fromkeys(lookup))
                cursor = await connection.execute(self._statement(GROUP_VERSIONS), (names,))
                found = {str(name): int(next_seq) for name, next_seq in await cursor.fetchall()}
                versions = {name: found.get(name, 0) for name in names}
            new: list[str] = []
            streams: list[str] = []
            seqs: list[int] = []
            kinds: list[str] = []
            texts: list[str] = []
            for append in group:
                stream = append.stream
                version = versions[stream] if stream in versions else known.get(stream, 0)
                if version != append.expected:
                    refused.append((append, ConflictError(stream, append.expected, version)))
                    continue
                accepted.append(append)
                records = append.records
                if not records:
                    continue
                versions[stream] = version + len(records)
                if version == 0:
                    new.append(stream)
                streams.extend([stream] * len(records))
                seqs.extend(range(version, version + len(records)))
                kinds.extend(kind for kind, _ in records)
                texts.extend(text for _, text in records)
            if texts:
                if new:
                    await connection.execute(self._statement(GROUP_STREAMS), (new,))
                await connection.execute(self._statement(GROUP_INSERT), (streams, seqs, kinds, texts))
                await connection.execute(GROUP_NOTIFY, (self.channel, list(dict.fromkeys(streams))))
                await self._before_commit()
                committing.append(True)  # leaving the block commits: a connection lost now leaves it unknown
        return accepted, refused, versions

    async def _append_alone(self, connection: psycopg.AsyncConnection[Any], append: Append[_Row]) -> None:
        params = {
            "stream": append.stream,
            "start": append.expected,
            "types": [kind for kind, _ in append.records],
            "data": [data for _, data in append.records],
        }
        try:
            await self._append(connection, params)
        except StoreError as exc:
            append.fail(exc)
        else:
            append.succeed()

    async def _append(self, connection: psycopg.AsyncConnection[Any], params: dict[str, Any]) -> None:
        stream, start = params["stream"], params["start"]
        committing = False
        try:
            async with connection.transaction():
                if not params["data"]:
                    actual = await self._version(connection, stream)
                    if actual != start:
                        raise ConflictError(stream, start, actual)
                    return
                await connection.execute("SELECT pg_advisory_xact_lock(%s)", (self._append_key,))
                if start == 0:
                    insert = "INSERT INTO {schema}.streams (name) VALUES (%s) ON CONFLICT (name) DO NOTHING"
                    await connection.execute(self.query(insert), (stream,))
                cursor = await connection.execute(self.query(INSERT_AT), params)
                if cursor.rowcount != len(params["data"]):
                    raise _Behind
                await connection.execute("SELECT pg_notify(%s, %s)", (self.channel, stream))
                await self._before_commit()
                committing = True
        except (pg_errors.UniqueViolation, _Behind) as exc:
            raise ConflictError(stream, start, await self._version(connection, stream)) from exc
        except psycopg.Error as exc:
            if committing and _lost(connection, exc):
                raise CommitUnknownError(
                    f"{self}: the connection was lost while appending to {stream!r} was being committed: "
                    f"it may have been written; read the stream back before appending again ({exc})",
                    stream=stream,
                ) from exc
            raise StoreError(f"{self}: appending to {stream!r} failed: {exc}") from exc

    async def _before_commit(self) -> None:
        """Runs inside an append's transaction just before it commits (a seam for crash tests)."""

    async def _version(self, connection: psycopg.AsyncConnection[Any], stream: str) -> int:
        query = self.query("SELECT coalesce(max(seq) + 1, 0) FROM {schema}.events WHERE stream = %s")
        rows: list[tuple[int]] = await self.fetch(connection, query, (stream,))
        return int(rows[0][0])

    # -- connections and queries (``Tail`` reads through these too) -------------------------------

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection to a ready schema, for the ``async with`` block."""
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        async with self._pool.connection() as connection:
            if not self._migrated:
                await self._ensure_schema(connection)
            yield connection

    async def open_connection(self) -> psycopg.AsyncConnection[Any]:
        """A new connection outside the pool, to a ready schema; the caller closes it."""
        if self.read_only:
            await self._has_schema()
        else:
            await self.migrate()
        return await self._pool.open()

    async def _ensure_schema(self, connection: psycopg.AsyncConnection[Any]) -> None:
        if self._migrating is None:
            self._migrating = anyio.Lock()
        async with self._migrating:
            if self._migrated:
                return
            try:
                if self.read_only:
                    self._present = await _pg_schema.inspect(connection, self.schema, str(self))
                else:
                    await _pg_schema.upgrade(connection, self.schema, self._migrate_key, str(self))
                    self._present = True
            except psycopg.Error as exc:
                raise StoreError(f"{self}: cannot create or upgrade the schema: {exc}") from exc
            self._migrated = True

    async def _has_schema(self) -> bool:
        """Whether the schema is there to read (a writable store creates it on first use)."""
        if not self._migrated:
            async with self.connection():
                pass
        return self._present

    def _refuse_read_only(self, doing: str) -> None:
        if self.read_only:
            raise StoreError(f"{self} is read-only: it cannot {doing}")

    async def fetch(
        self, connection: psycopg.AsyncConnection[Any], query: sql.Composed, params: Any, *, rows: bool = True
    ) -> Any:
        """Run ``query`` on ``connection``: its rows (None with ``rows=False``); errors as ``StoreError``."""
        try:
            cursor = await connection.execute(query, params)
            return await cursor.fetchall() if rows else None
        except psycopg.Error as exc:
            raise StoreError(f"{self}: {exc}") from exc

    def query(self, template: str) -> sql.Composed:
        """``template`` as SQL, with ``{schema}`` standing for this store's schema."""
        return sql.SQL(template).format(schema=sql.Identifier(self.schema))

    def _statement(self, template: str) -> bytes:
        """``query(template)`` rendered once (an append runs the same few statements again and again)."""
        statement = self._statements.get(template)
        if statement is None:
            statement = self._statements[template] = self.query(template).as_bytes(None)
        return statement

    def where(self, stream: str, seq: int) -> str:
        """Where the event at ``seq`` of ``stream`` is kept, for error messages."""
        return f"postgresql {self.schema}.events: stream {stream!r} seq {seq}"

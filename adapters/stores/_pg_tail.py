"""Following a PostgreSQL store: new events, from any process, in position order.

A ``Tail`` listens on the channel every append notifies at commit (LISTEN/NOTIFY) and reads after
its cursor whenever a notification arrives or ``poll_interval`` passes without one, so a missed
notification (or ``listen=False``, for servers without LISTEN) costs latency, never events.
Positions are handed out in commit order (see ``postgres``), which is what makes the cursor safe.
"""

from __future__ import annotations

import collections
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, NamedTuple, Protocol

import anyio
import psycopg
from psycopg import sql

from agentledger.core.events import Event
from agentledger.errors import StoreError

from ._codec import decode_records

__all__ = ("StoredEvent", "Tail", "TailSource")

_PAGE = 500
_COLUMNS = "SELECT position, stream, seq, data::text FROM {schema}.events"


class StoredEvent(NamedTuple):
    """An event as ``tail()`` yields it: with its stream and its position in the schema."""

    position: int
    stream: str
    event: Event


class TailSource(Protocol):
    """What a ``Tail`` needs of the store it follows (``PostgresEventStore`` provides it)."""

    listen: bool
    """Whether to LISTEN for notifications, or only poll."""
    poll_interval: float
    """Seconds to wait for a notification before reading anyway."""
    channel: str
    """The channel every append notifies at commit."""

    async def version(self, stream: str) -> int:
        """How many events ``stream`` holds."""
        ...

    def connection(self) -> AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]:
        """A pooled connection to a ready schema, for the ``async with`` block."""
        ...

    async def open_connection(self) -> psycopg.AsyncConnection[Any]:
        """A new connection outside the pool, to a ready schema; the caller closes it."""
        ...

    async def fetch(self, connection: psycopg.AsyncConnection[Any], query: sql.Composed, params: Any) -> Any:
        """Run ``query`` on ``connection`` and return its rows; errors as ``StoreError``."""
        ...

    def query(self, template: str) -> sql.Composed:
        """``template`` as SQL, with ``{schema}`` standing for the store's schema."""
        ...

    def where(self, stream: str, seq: int) -> str:
        """Where the event at ``seq`` of ``stream`` is kept, for error messages."""
        ...


class Tail:
    """New events of a schema (or of one stream) as they are appended; see ``tail()``.

    An async iterator and an async context manager: entering starts listening and fixes where
    ``after=None`` begins; leaving (or ``aclose()``) releases the connection it listens on.
    """

    def __init__(self, store: TailSource, stream: str | None, after: int | None) -> None:
        self.store = store
        self.stream = stream
        self.cursor = after
        self._listener: psycopg.AsyncConnection[Any] | None = None
        self._started = False
        self._buffer: collections.deque[StoredEvent] = collections.deque()

    async def start(self) -> None:
        """Listen, and take the current end as the cursor when ``after`` was None."""
        if self._started:
            return
        self._started = True
        if self.store.listen:
            self._listener = await self._listen()
        if self.cursor is None:
            self.cursor = await self._head()

    def __aiter__(self) -> Tail:
        return self

    async def __anext__(self) -> StoredEvent:
        await self.start()
        assert self.cursor is not None
        while not self._buffer:
            batch = await self._since(self.cursor)
            if not batch:
                await self._wait()
            self._buffer.extend(batch)
        item = self._buffer.popleft()
        self.cursor = item.event.seq if self.stream is not None else item.position
        return item

    async def aclose(self) -> None:
        """Stop following; the listening connection is closed."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with anyio.CancelScope(shield=True):
                await listener.close()

    async def __aenter__(self) -> Tail:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- reading and waiting ----------------------------------------------------------------------

    async def _listen(self) -> psycopg.AsyncConnection[Any]:
        store = self.store
        connection = await store.open_connection()
        try:
            await connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(store.channel)))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await connection.close()
            raise
        return connection

    async def _head(self) -> int:
        if self.stream is not None:
            return await self.store.version(self.stream) - 1
        query = self.store.query("SELECT coalesce(max(position), 0) FROM {schema}.events")
        async with self.store.connection() as connection:
            rows: list[tuple[int]] = await self.store.fetch(connection, query, ())
        return int(rows[0][0])

    async def _since(self, cursor: int) -> list[StoredEvent]:
        store = self.store
        if self.stream is None:
            query = f"{_COLUMNS} WHERE position > %s ORDER BY position LIMIT {_PAGE}"
            params: tuple[Any, ...] = (cursor,)
        else:
            query = f"{_COLUMNS} WHERE stream = %s AND seq > %s ORDER BY seq LIMIT {_PAGE}"
            params = (self.stream, cursor)
        async with store.connection() as connection:
            rows: list[tuple[int, str, int, str]] = await store.fetch(connection, store.query(query), params)
        events = decode_records(
            [row[3].encode() for row in rows], lambda i: store.where(rows[i][1], rows[i][2])
        )
        return [StoredEvent(row[0], row[1], event) for row, event in zip(rows, events, strict=True)]

    async def _wait(self) -> None:
        """Until a notification arrives or ``poll_interval`` passes."""
        if self._listener is None:
            await anyio.sleep(self.store.poll_interval)
            return
        try:
            async for _ in self._listener.notifies(timeout=self.store.poll_interval, stop_after=1):
                pass
        except psycopg.Error as exc:
            raise StoreError(f"{self.store}: lost the notification connection: {exc}") from exc

"""The PostgreSQL store's connections: a small pool, and advisory lock keys per schema."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import psycopg
from psycopg.pq import TransactionStatus

from agentledger.errors import StoreError

__all__ = ("Pool", "lock_key")


def lock_key(purpose: str, schema: str) -> int:
    digest = hashlib.blake2b(f"agentledger:{purpose}:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class Pool:
    """A few autocommit connections, opened on demand and reused while they are healthy."""

    def __init__(self, conninfo: str, size: int, *, read_only: bool = False) -> None:
        self.conninfo = conninfo
        self.size = size
        self.read_only = read_only
        self.idle: list[psycopg.AsyncConnection[Any]] = []
        self.slots: anyio.Semaphore | None = None

    async def open(self) -> psycopg.AsyncConnection[Any]:
        try:
            connection = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL: {exc}") from exc
        # No JIT compilation: the store's statements are key lookups and range scans, whose
        # compiling (100 ms and more once a plan's estimated cost passes ``jit_above_cost``, as a
        # read of many blocks or streams does) would cost more than running them. A read-only
        # store's transactions are all read-only: the server refuses writes.
        setup = "SET jit = off" + ("; SET default_transaction_read_only = on" if self.read_only else "")
        try:
            await connection.execute(setup)
        except psycopg.Error as exc:
            await connection.close()
            raise StoreError(f"cannot connect to PostgreSQL: {exc}") from exc
        return connection

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if self.slots is None:
            self.slots = anyio.Semaphore(self.size)
        async with self.slots:
            connection = self.idle.pop() if self.idle else await self.open()
            try:
                yield connection
            finally:
                healthy = not connection.broken and not connection.closed
                if healthy and connection.info.transaction_status == TransactionStatus.IDLE:
                    self.idle.append(connection)
                else:
                    with anyio.CancelScope(shield=True):
                        await connection.close()

    async def close(self) -> None:
        idle, self.idle = self.idle, []
        with anyio.CancelScope(shield=True):
            for connection in idle:
                await connection.close()

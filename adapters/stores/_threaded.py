"""The async half of the durable stores: each method runs its blocking twin in a worker thread.

File and database IO (and ``fsync``, which can take milliseconds) would stall the event loop, so
``append``, ``read`` and ``streams`` hand the work to ``anyio.to_thread``. A cancelled caller
waits for the thread to finish, so an append is never left half-done by cancellation. The
blocking twins (``append_sync``, ``read_sync``, ``streams_sync``) are public for scripts, tools
and benchmarks that have no event loop.
"""

from __future__ import annotations

import abc
import gc
from collections.abc import Sequence
from types import TracebackType
from typing import Self

import anyio

from agentledger.core.events import Event
from agentledger.errors import StoreError

__all__ = ("ThreadedStore",)


class ThreadedStore(abc.ABC):
    """``EventStore`` on top of blocking ``*_sync`` methods."""

    _closed: bool = False

    @abc.abstractmethod
    def append_sync(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        """``append``, blocking the calling thread."""

    @abc.abstractmethod
    def read_sync(self, stream: str, after: int = -1) -> list[Event]:
        """``read``, blocking the calling thread."""

    @abc.abstractmethod
    def streams_sync(self) -> list[str]:
        """``streams``, blocking the calling thread."""

    async def append(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        """Append ``events`` if the stream holds exactly ``expected_version`` events."""
        batch = tuple(events)
        return await anyio.to_thread.run_sync(self.append_sync, stream, batch, expected_version)

    async def read(self, stream: str, after: int = -1) -> list[Event]:
        """The stream's events with ``seq > after``, in order ([] for an unknown stream)."""
        return await anyio.to_thread.run_sync(self.read_sync, stream, after)

    async def streams(self) -> list[str]:
        """Every stream's name, oldest first."""
        return await anyio.to_thread.run_sync(self.streams_sync)

    def read_many_sync(self, streams: Sequence[str]) -> dict[str, list[Event]]:
        """``read_many``, blocking the calling thread.

        The cycle collector is paused meanwhile, as for one large read: the events of many short
        runs are many small containers in no cycle, and collections triggered by their number
        would scan the heap again and again.
        """
        paused = gc.isenabled() and len(streams) > 1
        if paused:
            gc.disable()
        try:
            return {stream: self.read_sync(stream) for stream in streams}
        finally:
            if paused:
                gc.enable()

    async def read_many(self, streams: Sequence[str]) -> dict[str, list[Event]]:
        """Several whole streams in one trip to a worker thread (for rebuilding many runs)."""
        return await anyio.to_thread.run_sync(self.read_many_sync, list(streams))

    def close(self) -> None:
        """Release what the store holds; later calls raise ``StoreError``."""
        self._closed = True

    async def aclose(self) -> None:
        """``close``, for code that closes every store (or any anyio resource) with ``await``."""
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self!r} is closed")

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

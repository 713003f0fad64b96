"""The async half of the durable stores: each method runs its blocking twin in a worker thread.

File and database IO (and ``fsync``, which can take milliseconds) would stall the event loop, so
``append``, ``read`` and ``streams`` hand the work to ``anyio.to_thread``. A cancelled caller
waits for the thread to finish, so an append is never left half-done by cancellation. The
blocking twins (``append_sync``, ``read_sync``, ``streams_sync``) are public for scripts, tools
and benchmarks that have no event loop.

Appends are committed in groups (see ``_group``): appends that arrive while a commit is in
flight, from any task or thread, are written together by the store's committer thread with one
flush (``commit_group``), and each caller is woken when its own append is settled.
A subclass implements ``prepare`` (encode and check one append, raising on bad input before it
joins a group) and ``commit_group``.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import Self

import anyio

from agentledger.core.collector import collector_paused
from agentledger.core.events import Event
from agentledger.errors import StoreError

from ._group import Append, Committer

__all__ = ("ThreadedStore",)

_creating = threading.Lock()


class ThreadedStore(abc.ABC):
    """``EventStore`` on top of blocking ``*_sync`` methods, with appends committed in groups."""

    _closed: bool = False
    _commits: Committer[bytes] | None = None

    @abc.abstractmethod
    def prepare(self, stream: str, events: Sequence[Event], expected_version: int) -> Append[bytes]:
        """One append, its events encoded; bad input (or a closed store) raises here."""

    @abc.abstractmethod
    def commit_group(self, group: list[Append[bytes]]) -> None:
        """Write ``group`` durably, settling each append (see ``_group``); raise if all failed."""

    def append_sync(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        """``append``, blocking the calling thread."""
        return self._committer().run_sync(self.prepare(stream, events, expected_version))

    def _committer(self) -> Committer[bytes]:
        committer = self._commits
        if committer is None:
            with _creating:
                committer = self._commits
                if committer is None:
                    committer = self._commits = Committer(self.commit_group, repr(self))
        return committer

    @abc.abstractmethod
    def read_sync(self, stream: str, after: int = -1) -> list[Event]:
        """``read``, blocking the calling thread."""

    @abc.abstractmethod
    def streams_sync(self) -> list[str]:
        """``streams``, blocking the calling thread."""

    async def append(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        """Append ``events`` if the stream holds exactly ``expected_version`` events."""
        return await self._committer().run(self.prepare(stream, events, expected_version))

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
        if len(streams) <= 1:
            return {stream: self.read_sync(stream) for stream in streams}
        with collector_paused():
            return {stream: self.read_sync(stream) for stream in streams}

    async def read_many(self, streams: Sequence[str]) -> dict[str, list[Event]]:
        """Several whole streams in one trip to a worker thread (for rebuilding many runs)."""
        return await anyio.to_thread.run_sync(self.read_many_sync, list(streams))

    def close(self) -> None:
        """Release what the store holds; later calls raise ``StoreError``."""
        committer = self._commits
        if committer is not None:
            committer.close()  # commits what is queued first
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

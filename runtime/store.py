"""Event stores: append-only streams of events with optimistic concurrency.

A stream is one run's log, named by its run id (every event in it carries that ``run_id``); it
exists once it holds an event. ``append`` takes the version the writer last saw (the number of
events it knows in the stream); if another writer got there first the append fails with
``ConflictError`` and nothing is written. ``MemoryEventStore`` is the reference implementation:
every other store passes the same contract tests (``agentledger.testing.stores``).

Beyond the three methods of ``EventStore``, a store may offer capabilities, each a small protocol
that callers check with ``isinstance`` instead of probing for attributes:

- ``SupportsReadMany``: ``read_many(streams)`` reads several whole streams in one call;
- ``SupportsAclose``: ``aclose()`` releases what the store holds (connections, a pool);
- ``SupportsAppendNowait``: ``append_nowait(...)`` appends without awaiting (a store without IO).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .core.events import Event
from .errors import ConflictError

__all__ = (
    "EventStore",
    "MemoryEventStore",
    "SupportsAclose",
    "SupportsAppendNowait",
    "SupportsReadMany",
    "read_many",
)


@runtime_checkable
class EventStore(Protocol):
    """Where runs' events are kept."""

    async def append(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        """Append ``events`` if the stream holds exactly ``expected_version`` events.

        Returns the new version. Raises ``ConflictError`` (and writes nothing) otherwise.
        """
        ...

    async def read(self, stream: str, after: int = -1) -> list[Event]:
        """The stream's events with ``seq > after``, in order ([] for an unknown stream)."""
        ...

    async def streams(self) -> list[str]:
        """Every stream's name, oldest first."""
        ...


@runtime_checkable
class SupportsReadMany(Protocol):
    """A store that reads several whole streams in one call (durable stores: one trip to their IO)."""

    async def read_many(self, streams: Sequence[str]) -> dict[str, list[Event]]:
        """Every stream in ``streams``, whole ([] for an unknown one), keyed by name in that order."""
        ...


@runtime_checkable
class SupportsAclose(Protocol):
    """A store that holds resources and releases them with ``await store.aclose()``."""

    async def aclose(self) -> None:
        """Release what the store holds; a durable store refuses later calls with ``StoreError``."""
        ...


@runtime_checkable
class SupportsAppendNowait(Protocol):
    """A store that does no IO, so an append needs no await (the in-memory store)."""

    def append_nowait(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        """``append`` without awaiting: the same result, the same ``ConflictError``."""
        ...


class MemoryEventStore:
    """Keeps every stream in memory; the reference implementation of ``EventStore``."""

    def __init__(self) -> None:
        self._streams: dict[str, list[Event]] = {}

    def append_nowait(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        """``append`` without awaiting (the store does no IO)."""
        log = self._streams.get(stream)
        current = len(log) if log is not None else 0
        if current != expected_version:
            raise ConflictError(stream, expected_version, current)
        if events:
            if log is None:
                log = self._streams[stream] = []
            log.extend(events)
        return current + len(events)

    async def append(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        return self.append_nowait(stream, events, expected_version)

    def read_nowait(self, stream: str, after: int = -1) -> list[Event]:
        log = self._streams.get(stream, [])
        return log[after + 1 :] if after >= 0 else list(log)

    async def read(self, stream: str, after: int = -1) -> list[Event]:
        return self.read_nowait(stream, after)

    async def streams(self) -> list[str]:
        return list(self._streams)

    async def read_many(self, streams: Sequence[str]) -> dict[str, list[Event]]:
        return {stream: self.read_nowait(stream) for stream in streams}

    async def aclose(self) -> None:
        """Nothing to release; here so every store closes the same way."""

    def __len__(self) -> int:
        return len(self._streams)


async def read_many(store: EventStore, streams: Sequence[str]) -> dict[str, list[Event]]:
    """Several whole streams: in one call where the store offers ``read_many``, else one by one.

    Durable stores do their IO in a worker thread; reading many short runs one call each spends
    more time getting to that thread than reading.
    """
    if isinstance(store, SupportsReadMany):
        return await store.read_many(streams)
    return {stream: await store.read(stream) for stream in streams}

"""Event stores: append-only streams of events with optimistic concurrency.

A stream is one run's log, named by its run id. ``append`` takes the version the writer last saw
(the number of events it knows in the stream); if another writer got there first the append fails
with ``ConflictError`` and nothing is written. ``MemoryEventStore`` is the reference
implementation: every other store passes the same contract tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import anyio

from .core.events import Event
from .errors import ConflictError

__all__ = ("EventStore", "MemoryEventStore")


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


class MemoryEventStore:
    """Keeps every stream in memory; the reference implementation of ``EventStore``."""

    def __init__(self) -> None:
        self._streams: dict[str, list[Event]] = {}
        self._lock = anyio.Lock(fast_acquire=True)

    def append_nowait(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        """``append`` without awaiting (the store does no IO)."""
        log = self._streams.setdefault(stream, [])
        if len(log) != expected_version:
            if not log:
                del self._streams[stream]
            raise ConflictError(stream, expected_version, len(log))
        log.extend(events)
        return len(log)

    async def append(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        return self.append_nowait(stream, events, expected_version)

    def read_nowait(self, stream: str, after: int = -1) -> list[Event]:
        log = self._streams.get(stream, [])
        return log[after + 1 :] if after >= 0 else list(log)

    async def read(self, stream: str, after: int = -1) -> list[Event]:
        return self.read_nowait(stream, after)

    async def streams(self) -> list[str]:
        return list(self._streams)

    def __len__(self) -> int:
        return len(self._streams)

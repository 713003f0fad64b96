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
- ``SupportsAppendNowait``: ``append_nowait(...)`` appends without awaiting (a store without IO);
- ``SupportsEviction``: ``session_evicted(session_id)`` says whether a bounded store dropped runs
  of that session, whose state and history a rebuild would then miss;
- ``SupportsRunListing``: ``list_runs(query)`` lists run summaries, newest first, reading only
  the first and last event of each stream (``list_runs(store, query)`` works with any store).

``MemoryEventStore`` keeps everything unless given limits. ``Agent`` gives itself a bounded one
(``DEFAULT_MAX_RUNS`` finished runs, ``DEFAULT_MAX_EVENTS`` events) so a long-lived process does
not grow without end: the oldest finished runs are evicted first, a run still going never is, and
asking for an evicted run raises ``RunEvictedError``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .core.events import BatchClaimed, Event, RunCompleted, RunFailed, RunStarted, SessionUpdated
from .errors import ConflictError, LogCorruptError, RunEvictedError
from .listing import RunQuery, RunSummary, report_unreadable, select, summarize

__all__ = (
    "DEFAULT_MAX_EVENTS",
    "DEFAULT_MAX_RUNS",
    "EventStore",
    "MemoryEventStore",
    "RunQuery",
    "RunSummary",
    "SupportsAclose",
    "SupportsAppendNowait",
    "SupportsEviction",
    "SupportsReadMany",
    "SupportsRunListing",
    "list_runs",
    "read_many",
)

DEFAULT_MAX_RUNS = 1_000
"""Finished runs the default store of an ``Agent`` keeps (runs still going are never evicted)."""
DEFAULT_MAX_EVENTS = 100_000
"""Events the default store of an ``Agent`` keeps (about 30 MiB at 300 bytes an event)."""

_REMEMBER = 100_000  # evicted names a store bounded by events alone remembers
_FINISHED = frozenset({RunCompleted, RunFailed, BatchClaimed})


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


@runtime_checkable
class SupportsEviction(Protocol):
    """A bounded store, which drops old runs to stay within its limits."""

    def session_evicted(self, session_id: str) -> bool:
        """Whether the store dropped a run of ``session_id`` (its state and history are incomplete)."""
        ...


@runtime_checkable
class SupportsRunListing(Protocol):
    """A store that lists runs from the first and last event of each stream, filtering as it goes."""

    async def list_runs(self, query: RunQuery) -> list[RunSummary]:
        """The runs matching ``query``, newest first (the reverse of ``streams()``), at most
        ``query.limit``. A stream that does not decode is skipped and reported with an
        ``UnreadableStreamWarning``; a stream that does not start with ``RunStarted`` is no run."""
        ...


class MemoryEventStore:
    """Keeps streams in memory; the reference implementation of ``EventStore``.

    Without limits it keeps every event. With ``max_runs`` (finished runs kept) and/or
    ``max_events`` (events kept, across all runs), a run that ends with ``RunCompleted`` or
    ``RunFailed`` may be evicted, oldest finished first, once a limit is passed; a run still
    going is never evicted, so the limits can be exceeded while many runs are in flight. Reading
    or appending to an evicted run raises ``RunEvictedError``; the store remembers the names of
    the last ``remember`` evicted runs (and their sessions) to say so, and reads a run it never
    had, or forgot, as empty. By default ``remember`` is ten times ``max_runs`` (10,000 names,
    about 1.4 MiB, for an agent's default store), or 100,000 when only ``max_events`` is set.
    """

    def __init__(
        self, *, max_runs: int | None = None, max_events: int | None = None, remember: int | None = None
    ) -> None:
        for name, limit in (("max_runs", max_runs), ("max_events", max_events), ("remember", remember)):
            if limit is not None and (type(limit) is not int or limit < 0):
                raise ValueError(f"{name} must be a whole number >= 0 or None, not {limit!r}")
        self.max_runs = max_runs
        self.max_events = max_events
        if remember is None:
            remember = 10 * max_runs if max_runs is not None else _REMEMBER
        self.remember = remember
        self.evicted = 0
        """How many runs were evicted so far."""
        self._streams: dict[str, list[Event]] = {}
        self._bounded = max_runs is not None or max_events is not None
        # Ordered sets as OrderedDicts: a plain dict whose oldest entry is deleted again and again
        # has its next oldest found past every deleted slot (a scan that grew with the limit).
        self._finished: OrderedDict[str, None] = OrderedDict()  # finished streams, oldest first
        self._events = 0
        self._evicted: OrderedDict[str, None] = OrderedDict()  # the last `remember` evicted streams
        self._evicted_sessions: OrderedDict[str, None] = OrderedDict()

    def append_nowait(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        """``append`` without awaiting (the store does no IO)."""
        log = self._streams.get(stream)
        current = len(log) if log is not None else 0
        if current != expected_version:
            if log is None and stream in self._evicted:
                raise RunEvictedError(stream)
            raise ConflictError(stream, expected_version, current)
        if events:
            if log is None:
                log = self._streams[stream] = []
            log.extend(events)
            if self._bounded:  # the bookkeeping inline: a run appends before every step
                self._events += len(events)
                finished = self._finished
                if type(log[-1]) in _FINISHED:
                    finished[stream] = None
                    finished.move_to_end(stream)
                elif stream in finished:  # a finished run written to again is in flight again
                    del finished[stream]
                elif self.max_events is None:  # only a run finishing can pass max_runs
                    return current + len(events)
                if finished and (
                    (self.max_runs is not None and len(finished) > self.max_runs)
                    or (self.max_events is not None and self._events > self.max_events)
                ):
                    self._make_room()
        return current + len(events)

    async def append(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        return self.append_nowait(stream, events, expected_version)

    def read_nowait(self, stream: str, after: int = -1) -> list[Event]:
        log = self._streams.get(stream)
        if log is None:
            if stream in self._evicted:
                raise RunEvictedError(stream)
            return []
        return log[after + 1 :] if after >= 0 else list(log)

    def session_evicted(self, session_id: str) -> bool:
        """Whether a run of ``session_id`` (started in it, or writing its state) was evicted."""
        return session_id in self._evicted_sessions

    def _make_room(self) -> None:
        """Evict finished runs, oldest finished first, until both limits hold (or none is left)."""
        max_runs, max_events, finished = self.max_runs, self.max_events, self._finished
        while finished and (
            (max_runs is not None and len(finished) > max_runs)
            or (max_events is not None and self._events > max_events)
        ):
            self._evict(finished.popitem(last=False)[0])

    def _evict(self, stream: str) -> None:
        log = self._streams.pop(stream)
        self._events -= len(log)
        self.evicted += 1
        sessions: dict[str, None] = {}
        first = log[0]
        if type(first) is RunStarted and first.session_id is not None:
            sessions[first.session_id] = None
        if SessionUpdated in map(type, log):  # a scan in C; most runs write no session state
            sessions.update(dict.fromkeys(e.session_id for e in log if type(e) is SessionUpdated))
        _remember(self._evicted, [stream], self.remember)
        if sessions:
            _remember(self._evicted_sessions, list(sessions), self.remember)

    async def read(self, stream: str, after: int = -1) -> list[Event]:
        return self.read_nowait(stream, after)

    async def streams(self) -> list[str]:
        return list(self._streams)

    async def read_many(self, streams: Sequence[str]) -> dict[str, list[Event]]:
        return {stream: self.read_nowait(stream) for stream in streams}

    async def list_runs(self, query: RunQuery) -> list[RunSummary]:
        """Run summaries, newest first (see ``SupportsRunListing``)."""
        logs = reversed(self._streams.values())
        return select((summarize(log[0], log[-1]) for log in logs if log), query)

    def __repr__(self) -> str:
        if not self._bounded:
            return "MemoryEventStore()"
        return f"MemoryEventStore(max_runs={self.max_runs!r}, max_events={self.max_events!r})"

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


async def list_runs(store: EventStore, query: RunQuery | None = None) -> list[RunSummary]:
    """The runs of ``store`` matching ``query`` (by default the 50 newest), newest first.

    A store that offers ``list_runs`` reads two records a stream; for another, each stream is read
    whole, newest first, until the limit is reached. Either way, a stream that does not decode is
    skipped and reported with an ``UnreadableStreamWarning``.
    """
    query = query if query is not None else RunQuery()
    if isinstance(store, SupportsRunListing):
        return await store.list_runs(query)
    selected: list[RunSummary] = []
    for stream in reversed(await store.streams()):
        if query.limit is not None and len(selected) >= query.limit:
            break
        try:
            log = await store.read(stream)
        except LogCorruptError as exc:
            report_unreadable(stream, exc)
            continue
        selected += select([summarize(log[0], log[-1])] if log else [], query)
    return selected


def _remember(names: OrderedDict[str, None], new: Sequence[str], limit: int) -> None:
    """Add ``new`` to an ordered set that keeps its last ``limit`` names."""
    for name in new:
        names[name] = None
        names.move_to_end(name)
    while len(names) > limit:
        names.popitem(last=False)

"""Group commit: appends that arrive while a commit is in flight share the next commit.

Theory of operation. A durable append costs one flush to disk (``fsync``, a WAL flush), which
takes far longer than writing the records; with many runs appending at once, each waiting for
its own flush, the disk's latency bounds the throughput. Here an append is an ``Append``: the
stream, its encoded records, the expected version, and room for the outcome. The first append to
arrive while nothing is being committed *leads*: it commits at once (a lone writer never waits
for company, and no timer is involved) every append queued so far, its own included. Appends
that arrive meanwhile queue; when the commit ends, the leader wakes the appends it settled and
hands the lead to the first queued one, which commits everything queued by then in one go.

A store's commit function settles each append of a group on its own: ``succeed`` once the group
is durable, or ``fail`` with that append's own error (``ConflictError`` for a stale version,
checked in queue order, so two appends at the same version in one group behave as they would one
after the other). If the commit function raises, the group as a whole failed (nothing of it is
durable) and every append not yet settled fails with that error.

Two ways to run the commits share ``Append``. ``LoopGroups`` is for a store that does its IO on
the event loop (PostgreSQL): the appends of the loop's tasks queue there. ``Committer`` is for a
store that does blocking IO (SQLite, JSONL): appends from any thread or event loop queue in one
list, and one committer thread commits group after group for as long as appends keep coming,
without waiting for an event loop between two commits (the next flush starts while the loop
wakes the runs of the last one). Each append says how to wake its caller: a waiting thread's
event, or a callback scheduled on the caller's event loop (one call per loop and group).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

import anyio
import anyio.lowlevel

from agentledger.errors import StoreError

__all__ = ("Append", "Committer", "LoopGroups", "appending")

Payload = TypeVar("Payload")


class Append(Generic[Payload]):
    """One append waiting to be committed; ``records`` are what the store writes for it."""

    __slots__ = ("error", "expected", "loop", "notify", "records", "settled", "stream", "wake")

    def __init__(self, stream: str, records: Sequence[Payload], expected: int) -> None:
        self.stream = stream
        self.records = records
        self.expected = expected
        self.settled = False
        self.error: BaseException | None = None
        self.wake: anyio.Event | None = None
        self.notify: Callable[[], object] | None = None
        self.loop: Any = None  # the caller's event loop, when ``notify`` must run there

    def succeed(self) -> None:
        """The append is durable."""
        self.settled = True

    def fail(self, error: BaseException) -> None:
        """The append wrote nothing; its caller gets ``error``."""
        self.error = error
        self.settled = True

    def result(self) -> int:
        """The stream's new version, or the append's error raised."""
        if self.error is not None:
            error, self.error = self.error, None  # a raised error keeps a traceback: drop our reference
            raise error
        return self.expected + len(self.records)


def appending(group: Sequence[Append[Payload]]) -> str:
    """What committing ``group`` is doing, for error messages."""
    streams = list(dict.fromkeys(append.stream for append in group))
    if len(streams) == 1:
        return f"appending to {streams[0]!r}"
    named = ", ".join(map(repr, streams[:3]))
    return f"appending to {len(streams)} streams ({named}{', ...' if len(streams) > 3 else ''})"


def _settle_all(group: Sequence[Append[Payload]], error: BaseException) -> None:
    for append in group:
        if not append.settled:
            append.fail(error)


class Committer(Generic[Payload]):
    """Group commit for a blocking store: one committer thread drains the queue, group by group."""

    def __init__(self, commit: Callable[[list[Append[Payload]]], None], name: str) -> None:
        self._commit = commit
        self._name = name
        self._lock = threading.Lock()
        self._queue: list[Append[Payload]] = []
        self._draining = False
        self._closed = False
        self._thread: ThreadPoolExecutor | None = None

    async def run(self, append: Append[Payload]) -> int:
        """Commit ``append`` from a task; its new version, or its error raised.

        A cancelled caller still waits for its append to be settled (never half-done); the
        cancellation reaches it at its next checkpoint.
        """
        wake = append.wake = anyio.Event()
        append.notify = wake.set
        append.loop = anyio.lowlevel.current_token().native_token
        self.submit(append)
        with anyio.CancelScope(shield=True):
            await wake.wait()
        return append.result()

    def run_sync(self, append: Append[Payload]) -> int:
        """Commit ``append`` from a thread, blocking it; its new version, or its error raised."""
        done = threading.Event()
        append.notify = done.set
        self.submit(append)
        done.wait()
        return append.result()

    def submit(self, append: Append[Payload]) -> None:
        with self._lock:
            if self._closed:
                append.fail(StoreError(f"{self._name} is closed"))
                _notify([append])
                return
            self._queue.append(append)
            if self._draining:
                return
            self._draining = True
            if self._thread is None:
                self._thread = ThreadPoolExecutor(1, thread_name_prefix="agentledger-commit")
            thread = self._thread
        thread.submit(self._drain)

    def _drain(self) -> None:
        while True:
            with self._lock:
                group, self._queue = self._queue, []
                if not group:
                    self._draining = False
                    return
            try:
                self._commit(group)
            except BaseException as exc:  # the group failed as a whole: each append reports it
                _settle_all(group, exc)
            _settle_all(group, StoreError(f"{self._name}: an append was left unsettled"))
            _notify(group)

    def close(self) -> None:
        """Commit what is queued, then stop the committer thread; later appends fail."""
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.shutdown(wait=True)


def _notify(group: Sequence[Append[Any]]) -> None:
    """Wake each append's caller: threads at once, each event loop with one scheduled call."""
    loops: dict[int, tuple[Any, list[Callable[[], object]]]] = {}
    for append in group:
        if append.notify is None:
            continue
        if append.loop is None:
            append.notify()
        else:
            loops.setdefault(id(append.loop), (append.loop, []))[1].append(append.notify)
    for loop, wakes in loops.values():
        schedule = getattr(loop, "call_soon_threadsafe", None) or loop.run_sync_soon  # asyncio, trio
        with contextlib.suppress(RuntimeError):  # a closed event loop: nobody waits there any more
            schedule(_call_all, wakes)


def _call_all(calls: list[Callable[[], object]]) -> None:
    for call in calls:
        call()


class LoopGroups(Generic[Payload]):
    """Group commit between the tasks of one event loop; see the module docstring."""

    def __init__(self, commit: Callable[[list[Append[Payload]]], Awaitable[None]]) -> None:
        self._commit = commit
        self._queue: list[Append[Payload]] = []
        self._busy = False

    async def run(self, append: Append[Payload]) -> int:
        """Commit ``append`` in the next group; its new version, or its error raised.

        A cancelled caller still waits for its append to be settled (never half-done); the
        cancellation reaches it at its next checkpoint.
        """
        self._queue.append(append)
        with anyio.CancelScope(shield=True):
            if self._busy:
                append.wake = anyio.Event()
                await append.wake.wait()
            if not append.settled:  # the lead is ours
                await self._lead()
        return append.result()

    async def _lead(self) -> None:
        self._busy = True
        group, self._queue = self._queue, []
        try:
            await self._commit(group)
        except BaseException as exc:
            _settle_all(group, exc)
        finally:
            if self._queue:  # the lead passes on first, so the next commit overlaps the wakers' work
                following = self._queue[0].wake
                assert following is not None, "an append queued behind a commit waits for it"
                following.set()
            else:
                self._busy = False
            for append in group:
                if append.wake is not None:
                    append.wake.set()

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
the event loop (PostgreSQL): the appends of the loop's tasks queue there, and a leader lets the
loop's ready tasks run once before it takes its group. The runs a commit wakes become ready
together; without that pass the first of them to append commits alone and the rest wait for
that commit to end (at 100 runs in flight, groups of 1 and of about 98 alternated).
``Committer`` is for a store that does blocking IO (SQLite, JSONL): appends from any thread or
event loop queue in one list, and one committer thread commits group after group for as long as
appends keep coming, without waiting for an event loop between two commits (the next flush
starts while the loop wakes the runs of the last one). Each append says how to wake its caller:
a waiting thread's event, or a callback scheduled on the caller's event loop (one call per loop
and group).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

import anyio
import anyio.lowlevel

from agentledger.errors import StoreError

__all__ = ("Append", "Committer", "LoopGroups", "appending", "remember")

Payload = TypeVar("Payload")


class Append(Generic[Payload]):
    """One append waiting to be committed; ``records`` are what the store writes for it."""

    __slots__ = (
        "error",
        "expected",
        "loop",
        "notify",
        "records",
        "settled",
        "stream",
        "waiter",
        "wake",
        "woken",
    )

    def __init__(self, stream: str, records: Sequence[Payload], expected: int) -> None:
        self.stream = stream
        self.records = records
        self.expected = expected
        self.settled = False
        self.error: BaseException | None = None
        self.wake: Any = None  # what the caller waits on: an asyncio future, or an anyio event
        self.notify: Callable[[], object] | None = None
        self.loop: Any = None  # the caller's event loop, when it must be woken there
        self.woken = False  # the caller's wake-up ran (on its event loop)
        self.waiter: anyio.Event | None = None  # a cancelled caller waiting for the outcome

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


Known = TypeVar("Known")


def remember(known: dict[str, Known], committed: dict[str, Known], bound: int) -> None:
    """Keep what a store just committed per stream in ``known``: the latest last, at most ``bound``."""
    for stream, value in committed.items():
        known.pop(stream, None)
        known[stream] = value
    excess = len(known) - bound
    if excess > 0:
        for stream in list(itertools.islice(known, excess)):
            del known[stream]


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
        cancellation reaches it at its next checkpoint. On asyncio the caller waits on a bare
        future, woken with the rest of its group by one call on its loop; a cancellation found
        waiting there waits again, shielded, until the append is settled.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another event loop (trio): anyio's event, shielded
            return await self._run_anyio(append)
        woken = append.wake = loop.create_future()
        append.loop = loop
        self.submit(append)
        try:
            await woken
        except BaseException:
            await _shielded_wait(append)
            raise
        return append.result()

    async def _run_anyio(self, append: Append[Payload]) -> int:
        wake = anyio.Event()
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
    loops: dict[int, tuple[Any, list[Append[Any]]]] = {}
    for append in group:
        if append.loop is None:
            if append.notify is not None:
                append.notify()
        else:
            loops.setdefault(id(append.loop), (append.loop, []))[1].append(append)
    for loop, appends in loops.values():
        schedule = getattr(loop, "call_soon_threadsafe", None) or loop.run_sync_soon  # asyncio, trio
        with contextlib.suppress(RuntimeError):  # a closed event loop: nobody waits there any more
            schedule(_wake_all, appends)


def _wake_all(appends: list[Append[Any]]) -> None:
    """On the callers' event loop: wake each append's caller."""
    for append in appends:
        _wake(append)


def _wake(append: Append[Any]) -> None:
    """Wake the caller of ``append``, however it waits (on the event loop it waits on)."""
    append.woken = True
    wake = append.wake
    if wake is not None and not wake.done():
        wake.set_result(None)
    if append.notify is not None:
        append.notify()
    if append.waiter is not None:
        append.waiter.set()


async def _shielded_wait(append: Append[Any]) -> None:
    """Wait, shielded from cancellation, until the caller of ``append`` is woken."""
    if not append.woken:
        waiter = append.waiter = anyio.Event()
        with anyio.CancelScope(shield=True):
            await waiter.wait()


class LoopGroups(Generic[Payload]):
    """Group commit between the tasks of one event loop; see the module docstring."""

    def __init__(self, commit: Callable[[list[Append[Payload]]], Awaitable[None]]) -> None:
        self._commit = commit
        self._queue: list[Append[Payload]] = []
        self._busy = False

    async def run(self, append: Append[Payload]) -> int:
        """Commit ``append`` in the next group; its new version, or its error raised.

        A cancelled caller still waits for its append to be settled (never half-done), leading
        its group if the lead comes to it; the cancellation reaches it at its next checkpoint.
        """
        self._queue.append(append)
        if self._busy:
            try:
                await self._woken(append)
            except BaseException:
                await _shielded_wait(append)
                await self._lead_unless_settled(append)
                raise
        await self._lead_unless_settled(append)
        return append.result()

    async def _woken(self, append: Append[Payload]) -> None:
        """Wait until a commit settles ``append`` or hands it the lead."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another event loop (trio)
            await _shielded_wait(append)
            return
        append.wake = loop.create_future()
        await append.wake

    async def _lead_unless_settled(self, append: Append[Payload]) -> None:
        if not append.settled:  # the lead is ours
            with anyio.CancelScope(shield=True):
                await self._lead()

    async def _lead(self) -> None:
        self._busy = True
        # The tasks already scheduled to run (most often those the last commit woke) run before the
        # group is taken, so that their appends join it; one pass of the loop, not a timer.
        await anyio.lowlevel.cancel_shielded_checkpoint()
        group, self._queue = self._queue, []
        try:
            await self._commit(group)
        except BaseException as exc:
            _settle_all(group, exc)
        finally:
            if self._queue:  # the lead passes on first, so the next commit overlaps the wakers' work
                _wake(self._queue[0])
            else:
                self._busy = False
            for append in group:
                _wake(append)

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

Two levels use the same ``Append``: ``LoopGroups`` queues the appends of the tasks of one event
loop (no thread hop per append: one per group), and ``ThreadGroups`` the groups and single
appends of several threads (``append_sync``, other event loops), so one store has one commit in
flight at a time, whoever calls it.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import anyio

__all__ = ("Append", "LoopGroups", "ThreadGroups", "appending")

Payload = TypeVar("Payload")


class Append(Generic[Payload]):
    """One append waiting to be committed; ``records`` are what the store writes for it."""

    __slots__ = ("error", "expected", "records", "settled", "stream", "wake")

    def __init__(self, stream: str, records: Sequence[Payload], expected: int) -> None:
        self.stream = stream
        self.records = records
        self.expected = expected
        self.settled = False
        self.error: BaseException | None = None
        self.wake: anyio.Event | None = None

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


class ThreadGroups(Generic[Payload]):
    """Group commit between threads: one thread commits, the others wait for their outcome."""

    def __init__(self, commit: Callable[[list[Append[Payload]]], None]) -> None:
        self._commit = commit
        self._condition = threading.Condition(threading.Lock())
        self._queue: list[Append[Payload]] = []
        self._leading = False

    def run(self, appends: Sequence[Append[Payload]]) -> None:
        """Commit ``appends`` (with whatever else is queued); returns once each is settled."""
        with self._condition:
            self._queue.extend(appends)
            while self._leading:
                self._condition.wait()
                if all(append.settled for append in appends):
                    return
            self._leading = True
            group, self._queue = self._queue, []
        try:
            self._commit(group)
        except BaseException as exc:  # the group failed as a whole: each append reports it
            _settle_all(group, exc)
        finally:
            with self._condition:
                self._leading = False
                self._condition.notify_all()


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
            for append in group:
                if append.wake is not None:
                    append.wake.set()
            if self._queue:
                following = self._queue[0].wake
                assert following is not None, "an append queued behind a commit waits for it"
                following.set()  # the lead passes on; still busy
            else:
                self._busy = False

"""Telling open pages that the store changed: one watcher per server, a ping per subscriber.

A PostgreSQL store is followed with its ``tail()`` (LISTEN/NOTIFY, with its own polling as a
fallback): a run starting, ending or being claimed changes what the pages show. Any other store
is polled: every ``interval`` seconds the newest page of the listing is read (one indexed page,
never a scan of the store), and a change of its summary is a change. The watcher runs only
while some page listens.

Each subscriber holds at most one pending ping (``changed`` carries only a version number, and
pages read what changed themselves), so a slow page costs one slot, never a growing queue.

A subscriber is ``ready`` once the watcher looks at the store after it subscribed (a poll's
summary taken, or the tail open): a change made from then on reaches it. A page that says hello
before then could miss a change made just after it connected (the watcher, started by the first
subscriber, would take that change for where it started).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
from anyio.abc import TaskGroup

from agentledger.core.events import BatchClaimed, RunCompleted, RunFailed, RunStarted
from agentledger.listing import RunQuery
from agentledger.store import EventStore, list_runs

__all__ = ("ChangeFeed", "Subscription", "watching")

_WATCHED = (RunStarted, RunCompleted, RunFailed, BatchClaimed)
_log = logging.getLogger("agentledger.serve")


class Subscription:
    """One subscriber: its event is set when a change happened since it last looked."""

    def __init__(self, looks: int = 0) -> None:
        self.event = anyio.Event()
        self.looks = looks
        """How many times the watcher had looked at the store when this subscriber came."""

    async def next(self, within: float) -> bool:
        """Wait up to ``within`` seconds for a change; whether one came (and it is now seen)."""
        with anyio.move_on_after(within):
            await self.event.wait()
        if not self.event.is_set():
            return False
        self.event = anyio.Event()
        return True


class ChangeFeed:
    """The store's changes as versions, and the pages waiting for the next one."""

    def __init__(self, store: EventStore, *, interval: float = 1.0, page: int = 50) -> None:
        self.store = store
        self.interval = interval
        self.page = page
        self.version = 0
        self._subscribers: set[Subscription] = set()
        self._wake = anyio.Event()
        self._looks = 0  # summaries taken (polling), tails opened (listening)
        self._looked = anyio.Event()  # set at the next look
        self._listening = False  # a tail is open: every change from now on is seen
        self.mode = "listen" if callable(getattr(store, "tail", None)) else "poll"

    async def run(self, group: TaskGroup) -> None:
        """Watch the store for as long as ``group`` lives."""
        group.start_soon(self._watch)

    @contextlib.contextmanager
    def subscription(self) -> Iterator[Subscription]:
        """A subscriber for the block: ``await sub.next(timeout)`` says whether a change came."""
        waiter = Subscription(self._looks)
        self._subscribers.add(waiter)
        self._wake.set()
        try:
            yield waiter
        finally:
            self._subscribers.discard(waiter)

    async def ready(self, subscription: Subscription, within: float) -> bool:
        """Wait up to ``within`` seconds until the watcher has looked at the store since
        ``subscription`` began, so that every change from then on reaches it; whether it has."""
        with anyio.move_on_after(within):
            while not self._listening and self._looks <= subscription.looks:
                await self._looked.wait()
        return self._listening or self._looks > subscription.looks

    def _look(self) -> None:
        self._looks += 1
        looked, self._looked = self._looked, anyio.Event()
        looked.set()

    def changed(self) -> None:
        """Count one change and wake every subscriber."""
        self.version += 1
        for waiter in list(self._subscribers):
            waiter.event.set()

    async def _watch(self) -> None:
        while True:
            if not self._subscribers:
                self._wake = anyio.Event()
                await self._wake.wait()
            try:
                if self.mode == "listen":
                    await self._listen()
                else:
                    await self._poll()
            except Exception as exc:  # a store that went away: say so, retry after a pause
                _log.warning("watching the store failed: %s: %s", type(exc).__name__, exc)
                await anyio.sleep(self.interval)

    async def _listen(self) -> None:
        tail: Any = self.store.tail()  # type: ignore[attr-defined]  # a PostgresEventStore
        async with tail as events:
            self._listening = True
            self._look()
            try:
                await self._follow(events)
            finally:
                self._listening = False

    async def _follow(self, events: Any) -> None:
        async for stored in events:
            if isinstance(stored.event, _WATCHED):
                self.changed()
            if not self._subscribers:
                return

    async def _poll(self) -> None:
        seen = await self._summary()
        self._look()
        while self._subscribers:
            await anyio.sleep(self.interval)
            now = await self._summary()
            self._look()
            if now != seen:
                seen = now
                self.changed()

    async def _summary(self) -> tuple[Any, ...]:
        # The newest runs only: one indexed page, however large the store. A paused run that is
        # decided or resumed anywhere starts the run that carries it on, which is the newest.
        runs = await list_runs(self.store, RunQuery(limit=self.page))
        return tuple((r.run_id, r.events, r.outcome, r.resumed_by) for r in runs)


@contextlib.asynccontextmanager
async def watching(feed: ChangeFeed) -> AsyncIterator[ChangeFeed]:
    """``feed`` watching its store inside the block."""
    async with anyio.create_task_group() as group:
        await feed.run(group)
        try:
            yield feed
        finally:
            group.cancel_scope.cancel()

"""``adapters/serve/_live.py``: the change feed a page's event stream waits on.

A subscriber is ready once the watcher has looked at the store after it subscribed; from then on
every change reaches it. The page's hello waits for that, so a run appended just after a page
connected is never taken for where the watcher started.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentledger import MemoryEventStore
from agentledger.adapters.serve._live import ChangeFeed, watching
from agentledger.listing import RunQuery, RunSummary
from tests._runs import run_events

pytestmark = pytest.mark.anyio


class _HeldStore(MemoryEventStore):
    """A store whose listing waits until ``release`` is set (``listing`` says it was asked)."""

    def __init__(self) -> None:
        super().__init__()
        self.listing = anyio.Event()
        self.release = anyio.Event()

    async def list_runs(self, query: RunQuery) -> list[RunSummary]:
        self.listing.set()
        await self.release.wait()
        return await super().list_runs(query)


async def test_a_subscriber_is_ready_only_once_the_watcher_has_looked() -> None:
    store = _HeldStore()
    feed = ChangeFeed(store, interval=0.01)
    assert feed.mode == "poll"
    answers: list[bool] = []
    answered = anyio.Event()

    async def wait_ready(subscription: Any) -> None:
        answers.append(await feed.ready(subscription, 30))
        answered.set()

    with anyio.fail_after(30):
        async with watching(feed), anyio.create_task_group() as group:
            with feed.subscription() as subscription:
                group.start_soon(wait_ready, subscription)
                await store.listing.wait()  # the watcher is taking its first look
                assert not answered.is_set()  # ...and the subscriber waits for it
                store.release.set()
                await answered.wait()
                assert answers == [True]
                # From now on a change reaches it, however soon after it comes.
                await store.append("run_new", run_events("run_new"), 0)
                assert await subscription.next(30)
                assert feed.version == 1


async def test_a_store_that_cannot_be_read_gets_no_ready_but_an_answer_in_time() -> None:
    store = _HeldStore()  # never released: the watcher's look never ends
    feed = ChangeFeed(store, interval=0.01)
    async with watching(feed):
        with feed.subscription() as subscription:
            await store.listing.wait()
            assert await feed.ready(subscription, 0.05) is False
            store.release.set()  # let the watcher end with the block

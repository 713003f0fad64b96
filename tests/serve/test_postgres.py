"""serve over PostgreSQL: the change feed follows the store's LISTEN/NOTIFY tail instead of
polling, and a run appended by another connection reaches an open page's event stream.

Needs the PostgreSQL server of ``_temporal_env``: skips when it is unreachable, fails under
``CI=true``. Each test uses a fresh schema, dropped afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from agentledger.adapters.serve._live import ChangeFeed, watching
from agentledger.adapters.stores.postgres import PostgresEventStore
from tests._runs import run_events
from tests._temporal_env import drop_schema, require_postgres, unique_schema

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def dsn() -> str:
    return require_postgres()


@pytest.fixture
def schema(dsn: str) -> Iterator[str]:
    name = unique_schema()
    yield name
    drop_schema(dsn, name)


async def test_the_feed_listens_and_a_run_from_another_connection_is_a_change(dsn: str, schema: str) -> None:
    """A PostgreSQL store is followed through its tail (no polling interval involved): a run
    appended by another store object wakes the subscriber."""
    async with (
        PostgresEventStore(dsn, schema=schema) as served,
        PostgresEventStore(dsn, schema=schema) as other,
    ):
        await served.migrate()
        feed = ChangeFeed(served, interval=3600.0)  # a poll would never come in time
        assert feed.mode == "listen"
        async with watching(feed):
            with feed.subscription() as subscription, anyio.fail_after(30):
                # The tail follows what is appended once it is entered, which the watcher does
                # when the subscription wakes it: ready says it is open.
                assert await feed.ready(subscription, 30)
                await other.append("run_pg0", run_events("run_pg0"), 0)
                assert await subscription.next(30)
        assert feed.version >= 1  # its start and its end, each a change


async def test_the_app_hears_of_a_run_appended_elsewhere(dsn: str, schema: str) -> None:
    """The app over PostgreSQL: its feed (what ``/events`` pushes) hears of a run another
    connection appends, and the app's runs listing then shows it."""
    from agentledger.adapters.serve import create_app

    async with (
        PostgresEventStore(dsn, schema=schema) as served,
        PostgresEventStore(dsn, schema=schema) as other,
    ):
        await served.migrate()
        app: Any = create_app(served, token="t" * 32, poll_interval=3600.0)
        feed = app.app.state.feed
        transport = httpx.ASGITransport(app=app)
        async with (
            watching(feed),
            httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client,
        ):
            with anyio.fail_after(30):
                with feed.subscription() as subscription:
                    number = 0
                    while True:
                        await other.append(f"run_pg{number}", run_events(f"run_pg{number}"), 0)
                        if await subscription.next(1.0):
                            break
                        number += 1
                listing = (await client.get("/api/runs")).json()
        assert listing["runs"][0]["run_id"] == f"run_pg{number}"

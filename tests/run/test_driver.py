"""A run cancelled while its append is being committed still ends with ``RunFailed``.

The durable stores commit in a worker thread (SQLite, JSONL) or over a connection (PostgreSQL),
and the caller awaits the outcome. A cancellation that arrives in that wait leaves the events
committed while the run only sees the cancellation. The run then reads its stream back before it
records anything else, so ``RunFailed`` follows at the right version instead of being refused as
a conflict and lost.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import anyio
import pytest

from agentledger import Agent, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.stores.jsonl import JsonlEventStore
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.core import RunFailed
from agentledger.core.events import Event
from agentledger.errors import StoreError
from agentledger.store import EventStore
from agentledger.testing import FixedClock, SequentialIds

pytestmark = pytest.mark.anyio


class CommitsThenWaits:
    """A store whose ``nth`` append is committed by the real store, then waits to be cancelled,
    as an append does when the cancellation arrives after its commit and before it returns."""

    def __init__(self, inner: EventStore, nth: int) -> None:
        self.inner = inner
        self.nth = nth
        self.appends = 0
        self.committed = anyio.Event()

    async def append(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        self.appends += 1
        version = await self.inner.append(stream, events, expected_version)
        if self.appends == self.nth:
            self.committed.set()
            await anyio.sleep_forever()
        return version

    async def read(self, stream: str, after: int = -1) -> list[Event]:
        return await self.inner.read(stream, after)

    async def streams(self) -> list[str]:
        return await self.inner.streams()


@tool
def echo(text: str) -> str:
    """Say it back."""
    return text


@pytest.fixture(params=["sqlite", "jsonl", "postgres"])
async def durable(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    if request.param == "sqlite":
        store: EventStore = SqliteEventStore(tmp_path / "events.db")
    elif request.param == "jsonl":
        store = JsonlEventStore(tmp_path / "runs")
    else:
        from agentledger.adapters.stores.postgres import PostgresEventStore
        from tests._temporal_env import drop_schema, require_postgres, unique_schema

        dsn, schema = require_postgres(), unique_schema()
        store = PostgresEventStore(dsn, schema=schema)
    yield store
    await store.aclose()  # type: ignore[attr-defined]
    if request.param == "postgres":
        drop_schema(dsn, schema)


@pytest.mark.parametrize("nth", [1, 2, 3])
async def test_a_run_cancelled_during_a_committed_append_ends_with_run_failed(
    durable: EventStore, nth: int
) -> None:
    store = CommitsThenWaits(durable, nth)
    client = ScriptedChatClient([Call("echo", {"text": "a"}), Call("echo", {"text": "b"}), "done"])
    agent = Agent(client=client, tools=[echo], store=store, clock=FixedClock(), ids=SequentialIds())
    async with anyio.create_task_group() as group:
        group.start_soon(agent.run, "go")
        await store.committed.wait()
        group.cancel_scope.cancel()
    log = await durable.read("run_1")
    assert [e.seq for e in log] == list(range(len(log)))
    assert isinstance(log[-1], RunFailed)
    assert log[-1].error_type == "Cancelled"


class InDoubt(StoreError):
    """What a store raises when it cannot say whether an append was written."""


class CommitsThenFails(CommitsThenWaits):
    """A store whose ``nth`` append is committed, then reported as failed with an unknown outcome
    (a connection lost at COMMIT)."""

    async def append(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        self.appends += 1
        version = await self.inner.append(stream, events, expected_version)
        if self.appends == self.nth:
            raise InDoubt("the connection was lost at commit")
        return version


@pytest.mark.parametrize("nth", [1, 2, 3])
async def test_a_run_whose_append_is_in_doubt_reads_back_before_recording_its_end(
    durable: EventStore, nth: int
) -> None:
    """An append that raised after it was written: the run fails with that error, and its
    RunFailed follows the events the store holds, none of them twice."""
    store = CommitsThenFails(durable, nth)
    client = ScriptedChatClient([Call("echo", {"text": "a"}), Call("echo", {"text": "b"}), "done"])
    agent = Agent(client=client, tools=[echo], store=store, clock=FixedClock(), ids=SequentialIds())
    with pytest.raises(InDoubt):
        await agent.run("go")
    log = await durable.read("run_1")
    assert [e.seq for e in log] == list(range(len(log)))
    assert isinstance(log[-1], RunFailed)
    assert log[-1].error_type == "InDoubt"

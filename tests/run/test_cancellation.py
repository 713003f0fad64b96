"""Cancelling a run: every call of the batch in flight is cancelled, and the log says so."""

from __future__ import annotations

import anyio
import pytest

from agentledger import Agent, MemoryEventStore, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core import RunFailed
from agentledger.testing import FixedClock, SequentialIds

pytestmark = pytest.mark.anyio


async def test_cancelling_a_batch_cancels_every_call(clock: FixedClock, ids: SequentialIds) -> None:
    """A cancelled run stops all its running calls and records RunFailed with error_type Cancelled."""
    started: list[int] = []
    stopped: list[int] = []
    never = anyio.Event()

    @tool
    async def wait(n: int) -> str:
        started.append(n)
        try:
            await never.wait()
        finally:
            stopped.append(n)
        return "unreachable"

    store = MemoryEventStore()
    client = ScriptedChatClient([[Call("wait", {"n": i}) for i in range(5)], "never"])
    agent = Agent(client=client, tools=[wait], clock=clock, ids=ids, store=store)
    async with anyio.create_task_group() as group:
        group.start_soon(agent.run, "go")
        await anyio.wait_all_tasks_blocked()
        assert sorted(started) == [0, 1, 2, 3, 4]
        group.cancel_scope.cancel()
    assert sorted(stopped) == [0, 1, 2, 3, 4]
    events = await store.read("run_1")
    assert isinstance(events[-1], RunFailed)
    assert events[-1].error_type == "Cancelled"

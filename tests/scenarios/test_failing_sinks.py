"""A sink that raises does not decide what the log holds.

Sinks (``event_sinks``, ``watching``, the exporters' live bridges) observe a run: one that raises
on an event, the first or the last included, leaves the run and its log exactly as they would be
without it. The event is kept and stored, the other sinks still see it, and the failure is
logged on ``agentledger.sinks`` (once per sink and run, with its traceback).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agentledger import Agent, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.core.events import Event
from agentledger.testing import FixedClock, SequentialIds, event_types

pytestmark = pytest.mark.anyio

WHOLE_RUN = ["RunStarted", "ModelCalled", "ModelResponded", "ToolCalled", "ToolReturned", "ModelCalled",
             "ModelResponded", "RunCompleted"]  # fmt: skip


@tool
def add(a: int) -> int:
    """Add one."""
    return a + 1


@pytest.mark.parametrize("fails_on", sorted(set(WHOLE_RUN)))
async def test_a_sink_raising_on_an_event_leaves_the_run_and_its_log_whole(
    tmp_path: Path, fails_on: str, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[Event] = []

    def failing(event: Event) -> None:
        if type(event).__name__ == fails_on:
            raise RuntimeError("the log shipper is down")

    store = SqliteEventStore(tmp_path / "events.db")
    agent = Agent(
        client=ScriptedChatClient([Call("add", {"a": 1}), "two"]),
        tools=[add],
        store=store,
        clock=FixedClock(),
        ids=SequentialIds(),
        event_sinks=[failing, seen.append],
    )
    with caplog.at_level(logging.ERROR, logger="agentledger.sinks"):
        response = await agent.run("hi")
    assert response.text == "two"
    stored = await store.read("run_1")
    assert event_types(stored) == WHOLE_RUN
    assert stored == response.events
    assert seen == stored  # the sink after the failing one saw every event
    [record] = [r for r in caplog.records if r.name == "agentledger.sinks"]
    assert fails_on in record.getMessage()
    assert record.exc_info is not None
    store.close()


async def test_a_sink_raising_on_every_event_is_logged_once_per_run(caplog: pytest.LogCaptureFixture) -> None:
    def always(event: Event) -> None:
        raise ValueError("no")

    agent = Agent(client=ScriptedChatClient(["a", "b"]), clock=FixedClock(), ids=SequentialIds(),
                  event_sinks=[always])  # fmt: skip
    with caplog.at_level(logging.ERROR, logger="agentledger.sinks"):
        await agent.run("one")
        await agent.run("two")
    assert [r.getMessage().split(" of run ")[1][:7] for r in caplog.records] == ["'run_1'", "'run_2'"]

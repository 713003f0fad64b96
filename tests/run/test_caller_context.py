"""A run leaves its caller's context as it found it: no variable of a finished run stays set in
it (a caller that runs an agent many times would otherwise keep every run's variables alive).
The one variable that may stay is the process-wide current run, set back to None."""

from __future__ import annotations

import contextvars

import pytest

from agentledger import Agent, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry

pytestmark = pytest.mark.anyio


@tool
def ping(n: int) -> str:
    """Answer a ping."""
    return "ok"


@tool
async def pong(n: int) -> str:
    """Answer a pong."""
    return "ok"


@pytest.mark.parametrize("sequential", [False, True])
async def test_runs_leave_the_callers_context_unchanged(sequential: bool) -> None:
    batch = [Call("ping", {"n": 1}), Call("pong", {"n": 2})]
    script: list[ScriptEntry] = [batch, Call("pong", {"n": 3}), "done"]
    agent = Agent(client=ScriptedChatClient(script * 3), tools=[ping, pong], sequential_tools=sequential)
    before = dict(contextvars.copy_context())
    assert (await agent.run("go")).text == "done"
    after_one = dict(contextvars.copy_context())
    for _ in range(2):
        assert (await agent.run("go")).text == "done"
    assert dict(contextvars.copy_context()) == after_one
    assert {k: v for k, v in after_one.items() if k in before} == before
    assert [v for k, v in after_one.items() if k not in before] in ([], [None])

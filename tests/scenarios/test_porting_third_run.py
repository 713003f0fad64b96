"""Ported programs that change the tool list while a batch runs behave as on the reference
(agent-framework-core 1.23.0, measured with the same script on both): a removal takes effect at
the next model call, so the batch's later calls of the removed tool still run, in parallel and
sequential batches alike; removing a name the run does not have is no error."""

from __future__ import annotations

import warnings

import pytest

from agentledger import Agent, FunctionInvocationContext, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.core.events import RunStarted, ToolNotFound, ToolReturned, ToolsRemoved
from agentledger.replay import RecordedRun, rerun
from agentledger.testing import capture_events

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::FutureWarning")]


@tool
def first(ctx: FunctionInvocationContext) -> str:
    """Remove ``second`` from the tools offered."""
    ctx.remove_tools("second")
    return "first done"


@tool
def second() -> str:
    """The tool ``first`` removes."""
    return "second done"


@tool
def ghost(ctx: FunctionInvocationContext) -> str:
    """Remove a tool name the run does not have."""
    ctx.remove_tools("nope")
    return "no error"


def _agent(sequential: bool) -> Agent:
    script: list[ScriptEntry] = [[Call("first", {}, call_id="c1"), Call("second", {}, call_id="c2")], "end"]
    return Agent(client=ScriptedChatClient(script), tools=[first, second], sequential_tools=sequential)


@pytest.mark.parametrize("sequential", [False, True])
async def test_a_tool_removed_during_its_batch_still_answers_the_batchs_call(sequential: bool) -> None:
    """The reference answered c2 with ``'second done'`` (not an error): so does agentledger, and
    the removal is recorded before the next model call, which no longer offers the tool; the
    run replays without a difference."""
    agent = _agent(sequential)
    with warnings.catch_warnings(), capture_events() as events:
        warnings.simplefilter("ignore")
        response = await agent.run("go")
    results = {
        c.call_id: c.result for m in response.messages for c in m.contents if c.type == "function_result"
    }
    assert results == {"c1": "first done", "c2": "second done"}
    assert not any(isinstance(e, ToolNotFound) for e in events)
    assert [e.call_id for e in events if isinstance(e, ToolReturned)] == ["c1", "c2"]
    [removed] = [e for e in events if isinstance(e, ToolsRemoved)]
    assert list(removed.names) == ["second"]
    assert response.text == "end"
    again = await rerun(RecordedRun(list(events)), _agent(sequential))  # raises on any divergence
    assert again is not None
    assert again.text == "end"


async def test_removing_a_name_the_run_does_not_have_is_no_error() -> None:
    """The reference ignored the unknown name (the tool returned ``'no error'``): so does agentledger."""
    agent = Agent(client=ScriptedChatClient([[Call("ghost", {}, call_id="c1")], "end"]), tools=[ghost])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        response = await agent.run("go")
    results = [c.result for m in response.messages for c in m.contents if c.type == "function_result"]
    assert results == ["no error"]


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def test_tools_given_in_a_runs_options_are_offered_and_run() -> None:
    """The reference offered ``options={"tools": [add]}`` to the model and ran the call (result
    ``"3"``); agentledger ignored it (the call was "not found"). Now they are the run's tools, as
    ``run(tools=...)``: offered, run, recorded in ``RunStarted``, and the run replays."""
    script: list[ScriptEntry] = [Call("add", {"a": 1, "b": 2}, call_id="c1"), "three"]
    agent = Agent(client=ScriptedChatClient(script))
    with capture_events() as events:
        response = await agent.run("1 + 2?", options={"tools": [add]})
    results = [c.result for m in response.messages for c in m.contents if c.type == "function_result"]
    assert results == ["3"]
    assert not any(isinstance(e, ToolNotFound) for e in events)
    [started] = [e for e in events if isinstance(e, RunStarted)]
    assert "add" in [getattr(t, "name", t) for t in started.tools]
    again = await rerun(RecordedRun(list(events)), Agent(client=ScriptedChatClient([])))
    assert again is not None
    assert again.text == "three"

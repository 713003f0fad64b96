"""How a call's ending is recorded, whoever ended it, and that reruns and forks reproduce it."""

from __future__ import annotations

from typing import Any

import pytest

from agentledger import (
    Agent,
    FunctionInvocationContext,
    FunctionMiddleware,
    MemoryEventStore,
    MiddlewareTermination,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.core.events import (
    MiddlewareShortCircuit,
    RunTerminated,
    ToolCalled,
    ToolFailed,
    ToolReturned,
)
from agentledger.errors import ArgumentsError
from agentledger.replay import fork, load, rerun
from agentledger.testing import FixedClock, SequentialIds, event_types, events_of

pytestmark = pytest.mark.anyio
CallNext = Any


@tool
def echo(a: int) -> int:
    """Return a."""
    return a


@tool
def nested_check(a: int) -> int:
    """Fails the way a tool calling another tool with bad arguments does."""
    raise ArgumentsError("nested validation failed")


@tool
def stop(a: int) -> int:
    """Ends the run, with its own answer."""
    raise MiddlewareTermination("stop", result="R")


class StopBefore(FunctionMiddleware):
    async def process(self, context: FunctionInvocationContext, call_next: CallNext) -> None:
        context.result = "quota exceeded"
        raise MiddlewareTermination("quota")


class StopAfter(FunctionMiddleware):
    async def process(self, context: FunctionInvocationContext, call_next: CallNext) -> None:
        await call_next()
        context.result = "redacted"
        raise MiddlewareTermination("done")


class PassThrough(FunctionMiddleware):
    async def process(self, context: FunctionInvocationContext, call_next: CallNext) -> None:
        await call_next()


def _agent(script: list[ScriptEntry], tools: list[Any], **options: Any) -> Agent:
    client = ScriptedChatClient(script)
    return Agent(client=client, tools=tools, clock=FixedClock(), ids=SequentialIds(), **options)


async def test_middleware_result_before_termination_is_the_answer() -> None:
    """Middleware that sets context.result and terminates before call_next answers with it."""
    response = await _agent([Call("echo", {"a": 1}), "x"], [echo], middleware=[StopBefore()]).run("go")
    [short] = events_of(response.events, MiddlewareShortCircuit)
    assert (short.middleware, short.result) == ("termination", "quota exceeded")
    assert not events_of(response.events, ToolCalled)


async def test_middleware_result_after_the_tool_replaces_its_value_on_termination() -> None:
    """Middleware that replaces the result after call_next, then terminates: its result is recorded."""
    response = await _agent([Call("echo", {"a": 1}), "x"], [echo], middleware=[StopAfter()]).run("go")
    [returned] = events_of(response.events, ToolReturned)
    assert returned.result == "redacted"
    assert response.finish_reason == "terminated"


async def test_arguments_error_raised_by_the_tool_is_a_tool_failure() -> None:
    """ArgumentsError from inside a tool is the tool failing, not the model's arguments rejected."""
    store = MemoryEventStore()
    response = await _agent([Call("nested_check", {"a": 1}), "x"], [nested_check], store=store).run("go")
    [failed] = events_of(response.events, ToolFailed)
    assert failed.error_type == "ArgumentsError"
    assert "ArgumentsRejected" not in event_types(response.events)
    await rerun(await load(store, response.run_id), _agent([], [nested_check], store=False))


async def test_state_of_a_later_session_run_folds_without_its_session() -> None:
    """A session's second run folds on its own: its model calls count the history it was given."""
    store = MemoryEventStore()
    agent = _agent([Call("echo", {"a": 1}), "one", "two"], [echo], store=store)
    session = agent.create_session()
    await agent.run("go", session=session)
    second = await agent.run("again", session=session)
    recorded = await load(store, second.run_id, with_session=False)
    assert recorded.state_at(len(recorded.events) - 1).phase == "done"


@pytest.mark.parametrize("middleware", [[], [PassThrough()]], ids=["plain", "middleware"])
async def test_termination_raised_by_a_tool_replays(middleware: list[Any]) -> None:
    """A tool that ended the run ends it again in a rerun and in a fork from before the end."""
    store = MemoryEventStore()
    agent = _agent([Call("stop", {"a": 1}), "x"], [stop], store=store, middleware=middleware)
    response = await agent.run("go")
    assert response.finish_reason == "terminated"
    assert [e.by for e in events_of(response.events, RunTerminated)] == ["call_1"]
    recorded = await load(store, response.run_id)
    again = _agent([], [stop], store=False, middleware=middleware)
    await rerun(recorded, again)
    forked = await fork(recorded, again, at=len(recorded.events) - 2, client=ScriptedChatClient(["late"]))
    assert forked.finish_reason == "terminated"

"""How runs end and what middleware is handed, as a program written for the reference framework
(agent-framework-core 1.23) sees them: the fail-closed ``MiddlewareFailure``, an answer set before
``MiddlewareTermination``, agent middleware ending a run before the loop, argument text that is no
JSON object, and the instructions and ``None`` values of a run's options. Each test runs the
program shape that was run on the reference; docs/differences.md lists where the outcome differs
on purpose."""

from __future__ import annotations

from typing import Any

import pytest

from agentledger import (
    Agent,
    FunctionInvocationContext,
    function_middleware,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.core.events import ArgumentsRejected, ToolCalled
from agentledger.testing import FixedClock, SequentialIds, events_of

pytestmark = pytest.mark.anyio
CallNext = Any
ran: list[Any] = []


@tool
def greet(name: str = "world", greeting: str = "hello") -> str:
    """Greet someone (every parameter has a default)."""
    ran.append((name, greeting))
    return f"{greeting} {name}"


@tool
def need(name: str) -> str:
    """Echo a name (required)."""
    ran.append(name)
    return name


def _agent(script: list[ScriptEntry], **options: Any) -> tuple[Agent, ScriptedChatClient]:
    ran.clear()
    client = ScriptedChatClient(script)
    return Agent(client=client, clock=FixedClock(), ids=SequentialIds(), **options), client


def _results(response: Any) -> list[tuple[Any, Any]]:
    return [
        (c.result, c.exception) for m in response.messages for c in m.contents if c.type == "function_result"
    ]


# -- argument text that is no JSON object -----------------------------------------------------------


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '"ada"'], ids=["text", "array", "string"])
@pytest.mark.parametrize("with_middleware", [False, True], ids=["bare", "middleware"])
async def test_a_tool_with_only_defaults_runs_on_text_that_is_no_json_object(
    text: str, with_middleware: bool
) -> None:
    """As on the reference: the text is taken as {"raw": text}, which names no parameter, so the
    tool runs on its defaults; middleware is handed the valid part of it (nothing)."""
    seen: list[dict[str, Any]] = []

    @function_middleware
    async def look(context: FunctionInvocationContext, call_next: CallNext) -> None:
        seen.append(dict(context.arguments))
        await call_next()

    middleware = [look] if with_middleware else []
    agent, _ = _agent([Call("greet", text), "done"], tools=[greet], middleware=middleware)
    response = await agent.run("go")
    assert ran == [("world", "hello")]
    assert _results(response) == [("hello world", None)]
    assert seen == ([{}] if with_middleware else [])
    [called] = events_of(response.events, ToolCalled)
    assert called.arguments == {"name": "world", "greeting": "hello"}


async def test_middleware_gets_text_that_is_no_json_object_as_raw_to_repair() -> None:
    """A tool with a required parameter: middleware sees {"raw": text} and may repair it; left
    unrepaired (or without middleware) the call is rejected and the tool does not run."""
    seen: list[dict[str, Any]] = []

    @function_middleware
    async def repair(context: FunctionInvocationContext, call_next: CallNext) -> None:
        seen.append(dict(context.arguments))
        if context.arguments.get("raw") == "<ada>":
            context.arguments = {"name": "ada"}
        await call_next()

    agent, _ = _agent(
        [[Call("need", "<ada>"), Call("need", "not json")], "done"], tools=[need], middleware=[repair]
    )
    response = await agent.run("go")
    assert seen == [{"raw": "<ada>"}, {"raw": "not json"}]
    assert ran == ["ada"]
    assert [r for r, _ in _results(response)] == ["ada", "Error: Argument parsing failed."]
    [rejected] = events_of(response.events, ArgumentsRejected)
    assert (rejected.call_id, "name" in rejected.reason) == ("call_2", True)

    bare, _ = _agent([Call("need", "not json"), "done"], tools=[need])
    response = await bare.run("go")
    assert ran == []
    [rejected] = events_of(response.events, ArgumentsRejected)
    assert "not valid JSON" in rejected.reason


async def test_context_arguments_keep_what_middleware_handed_on() -> None:
    """After call_next(), context.arguments holds what the model sent (no defaults filled in), as
    on the reference; the tool itself still gets its defaults."""
    after: list[dict[str, Any]] = []

    @function_middleware
    async def look(context: FunctionInvocationContext, call_next: CallNext) -> None:
        await call_next()
        after.append(dict(context.arguments))

    agent, _ = _agent([Call("greet", {"name": "ada"}), "done"], tools=[greet], middleware=[look])
    response = await agent.run("go")
    assert after == [{"name": "ada"}]
    assert ran == [("ada", "hello")]
    [called] = events_of(response.events, ToolCalled)
    assert called.arguments == {"name": "ada", "greeting": "hello"}

"""FunctionTool.execute: the one way a run calls a tool, sync or async, and what its result becomes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import pytest

from agentledger import FunctionInvocationContext, FunctionTool, ToolDefinitionError, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient

pytestmark = pytest.mark.anyio


async def test_a_sync_tool_runs_in_a_worker_thread() -> None:
    """A sync tool runs off the event loop's thread and its result comes back."""
    seen: list[int] = []

    @tool
    def where(x: int) -> int:
        seen.append(threading.get_ident())
        return x + 1

    assert await where.execute({"x": 1}) == 2
    [thread] = seen
    assert thread != threading.get_ident()


async def test_an_async_tool_is_awaited_on_the_loop() -> None:
    """An async tool is awaited in the caller's thread and its result comes back."""
    seen: list[int] = []

    @tool
    async def where(x: int) -> int:
        seen.append(threading.get_ident())
        return x * 10

    assert await where.execute({"x": 4}) == 40
    assert seen == [threading.get_ident()]


async def test_an_awaitable_from_a_sync_tool_is_awaited() -> None:
    """A sync tool that returns a coroutine gives the coroutine's result, not the coroutine."""

    async def doubled(x: int) -> int:
        return 2 * x

    @tool
    def later(x: int) -> Coroutine[Any, Any, int]:
        return doubled(x)

    assert await later.execute({"x": 21}) == 42


@pytest.mark.parametrize("is_async", [False, True])
async def test_what_the_tool_raises_propagates(is_async: bool) -> None:
    """An exception raised by a sync or an async tool reaches the caller unchanged."""

    def fail() -> None:
        raise LookupError("no such record")

    async def fail_async() -> None:
        fail()

    broken = FunctionTool(fail_async if is_async else fail, name="broken")
    with pytest.raises(LookupError, match="no such record"):
        await broken.execute({})


async def test_the_context_reaches_the_context_parameter() -> None:
    """The context given to execute is the one the tool's context parameter receives."""

    @tool
    def who(ctx: FunctionInvocationContext) -> str:
        return str(ctx.call_id)

    context = FunctionInvocationContext(function=who, call_id="call_7")
    assert await who.execute({}, context) == "call_7"


async def test_an_overridden_bind_call_is_what_runs() -> None:
    """A subclass that binds calls itself (as agent tools do) is run through its bind_call."""

    async def placeholder(task: str) -> str:
        return "not called"

    class Echo(FunctionTool):
        def bind_call(self, arguments: Mapping[str, Any], context: Any) -> Callable[[], Any]:
            async def echo() -> str:
                return f"echo {arguments['task']}"

            return echo

    assert await Echo(placeholder).execute({"task": "hello"}) == "echo hello"


async def test_invoke_validates_then_executes() -> None:
    """invoke converts the arguments to the declared types, then runs a sync tool off the loop."""
    seen: list[int] = []

    @tool
    def add(a: int, b: int) -> int:
        seen.append(threading.get_ident())
        return a + b

    assert await add.invoke({"a": "2"}, b=3) == 5
    [thread] = seen
    assert thread != threading.get_ident()


async def test_a_tool_returning_text_as_bytes_answers_the_text() -> None:
    """Bytes that are UTF-8 reach the model as their text (the reference sends their repr, which
    a model reads as b'...'); other bytes are base64."""
    import base64

    @tool
    def read_file(name: str) -> bytes:
        """A file's contents."""
        return "héllo".encode() if name == "text" else b"\xff\x00"

    calls = [
        Call("read_file", {"name": "text"}, call_id="c1"),
        Call("read_file", {"name": "bin"}, call_id="c2"),
    ]
    agent = ScriptedChatClient([calls, "done"]).as_agent(name="Files", tools=[read_file])
    response = await agent.run("read")
    results = {
        c.call_id: c.result for m in response.messages for c in m.contents if c.type == "function_result"
    }
    assert results == {"c1": "héllo", "c2": base64.b64encode(b"\xff\x00").decode()}


def test_replay_takes_run_recorded_or_a_function() -> None:
    """@tool(replay=...) is "run" by default, "recorded" or a double; anything else is refused
    at definition, and a tool class's bound tools keep it."""

    def lookup(city: str) -> str:
        return city

    assert tool(lookup).replay == "run"
    assert tool(replay="recorded")(lookup).replay == "recorded"
    assert tool(replay=str.upper)(lookup).replay is str.upper
    with pytest.raises(ToolDefinitionError, match="replay must be 'run', 'recorded' or a function"):
        tool(replay="never")(lookup)  # type: ignore[call-overload]

    class Shop:
        @tool(replay="recorded")
        def pay(self, amount: int) -> str:
            return f"paid {amount}"

    assert Shop().pay.replay == "recorded"


def test_a_misspelt_approval_mode_is_refused() -> None:
    """approval_mode="always_required" fails at definition instead of running unapproved."""
    misspelt: Any = "always_required"

    def wire(amount: int) -> str:
        return "sent"

    with pytest.raises(ToolDefinitionError, match="always_required"):
        tool(approval_mode=misspelt)(wire)


def test_approval_mode_none_means_never_require() -> None:
    """approval_mode=None, the reference's default spelling, means never_require."""
    unset: Any = None

    def plain() -> str:
        return "x"

    assert tool(approval_mode=unset)(plain).approval_mode == "never_require"


def test_parsed_arguments_hold_every_parameter_in_order() -> None:
    """A call's arguments hold each parameter in the signature's order, defaults filled in: the
    same mapping ``validate`` gives for the same values."""

    @tool
    async def pick(b: int, a: str = "x", c: float | None = None) -> str:
        return a

    parsed = pick.arguments_from('{"c": 1.5, "b": 2}')
    assert list(parsed.items()) == [("b", 2), ("a", "x"), ("c", 1.5)]
    assert parsed == pick.validate({"c": 1.5, "b": 2})

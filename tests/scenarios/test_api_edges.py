"""API edges: what users of the reference API try, answered clearly."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from agentledger import (
    Agent,
    AgentContext,
    AgentMiddleware,
    FunctionInvocationContext,
    MiddlewareError,
    agent_middleware,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core import ToolFailed, ToolNotFound
from agentledger.testing import FixedClock, SequentialIds

pytestmark = pytest.mark.anyio


async def test_replacing_ctx_tools_is_refused(clock: FixedClock, ids: SequentialIds) -> None:
    """Assigning ctx.tools in a run is a TypeError (recorded as the call's failure), never a silent no-op."""

    @tool
    def setup(ctx: FunctionInvocationContext) -> str:
        ctx.tools = None
        return "replaced"

    agent = Agent(client=ScriptedChatClient([Call("setup"), "done"]), tools=[setup], clock=clock, ids=ids)
    response = await agent.run("go")
    [failed] = [e for e in response.events if isinstance(e, ToolFailed)]
    assert failed.error_type == "TypeError"


async def test_role_content_dicts_are_messages(clock: FixedClock, ids: SequentialIds) -> None:
    """{"role": ..., "content": ...} dicts are read as messages, not as lists of keys."""
    client = ScriptedChatClient(["4"])
    await Agent(client=client, clock=clock, ids=ids).run([{"role": "user", "content": "What is 2+2?"}])
    assert [(m.role, m.text) for m in client.requests[0].messages] == [("user", "What is 2+2?")]


async def test_session_must_be_a_session(clock: FixedClock, ids: SequentialIds) -> None:
    """session= with something else is a clear TypeError; assigning session.state replaces it, recorded."""
    agent = Agent(client=ScriptedChatClient(["ok"]), clock=clock, ids=ids)
    with pytest.raises(TypeError, match="AgentSession"):
        await agent.run("hi", session="abc")  # type: ignore[call-overload]
    session = agent.create_session()
    session.state = {"user": "ann"}
    response = await agent.run("hi", session=session)
    assert session.state.snapshot() == {"user": "ann"}
    assert "SessionUpdated" in [type(e).__name__ for e in response.events]


def test_class_middleware_needs_an_async_process() -> None:
    """A middleware class whose process() is not async is refused when the agent is built."""

    class Stamp(AgentMiddleware):
        def process(self, context: AgentContext, call_next: Callable[[], Awaitable[None]]) -> None:  # type: ignore[override]
            pass

    with pytest.raises(MiddlewareError, match="async"):
        Agent(client=ScriptedChatClient([]), middleware=[Stamp()])


async def test_agent_middleware_calling_next_twice(clock: FixedClock, ids: SequentialIds) -> None:
    """Agent middleware calling call_next() twice gets a MiddlewareError saying so."""

    @agent_middleware
    async def twice(context: AgentContext, call_next: Callable[[], Awaitable[None]]) -> None:
        await call_next()
        await call_next()

    agent = Agent(client=ScriptedChatClient(["a", "b"]), middleware=[twice], clock=clock, ids=ids)
    with pytest.raises(MiddlewareError, match="twice"):
        await agent.run("hi")


async def test_a_call_without_a_name_is_an_unknown_tool(clock: FixedClock, ids: SequentialIds) -> None:
    """A function call with an empty name is answered as an unknown tool; the run goes on."""
    agent = Agent(client=ScriptedChatClient([Call("", {}), "ok"]), clock=clock, ids=ids)
    response = await agent.run("hi")
    assert response.text == "ok"
    assert [e.name for e in response.events if isinstance(e, ToolNotFound)] == [""]

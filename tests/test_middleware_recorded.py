"""Every middleware change to what a run uses is recorded, so reruns and rebuilds stay exact."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from agentledger import (
    Agent,
    AgentContext,
    ChatContext,
    FunctionInvocationContext,
    Message,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core import ModelRequestRewritten, RunInputRewritten, TranscriptProjection
from agentledger.redaction import REDACTED
from agentledger.testing import FixedClock, SequentialIds

pytestmark = pytest.mark.anyio
Next = Callable[[], Awaitable[None]]


async def test_agent_middleware_kwargs_change_is_recorded_and_used(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """Agent middleware adding runtime values: tools see them and RunInputRewritten records them redacted."""
    seen: list[dict[str, object]] = []

    @tool
    def probe(ctx: FunctionInvocationContext) -> str:
        seen.append(dict(ctx.kwargs))
        return "ok"

    async def stamp(context: AgentContext, call_next: Next) -> None:
        context.kwargs["tenant"] = "contoso"
        context.kwargs["api_token"] = "t-123"
        await call_next()

    client = ScriptedChatClient([Call("probe"), "done"])
    agent = Agent(client=client, tools=[probe], middleware=[stamp], clock=clock, ids=ids)
    response = await agent.run("go", function_invocation_kwargs={"user_id": "u"})
    assert seen == [{"user_id": "u", "tenant": "contoso", "api_token": "t-123"}]
    [rewritten] = [e for e in response.events if isinstance(e, RunInputRewritten)]
    assert rewritten.function_invocation_kwargs == {
        "user_id": "u",
        "tenant": "contoso",
        "api_token": REDACTED,
    }


async def test_chat_middleware_rewrite_is_recorded(clock: FixedClock, ids: SequentialIds) -> None:
    """Chat middleware changing messages and tools is recorded; sent_at gives what the model saw."""

    @tool
    def hidden() -> str:
        return "x"

    async def trim(context: ChatContext, call_next: Next) -> None:
        context.messages = [Message("system", ["be brief"]), *context.messages]
        context.options["tools"] = []
        context.options["temperature"] = 0.0
        await call_next()

    client = ScriptedChatClient(["brief answer"])
    agent = Agent(client=client, tools=[hidden], middleware=[trim], clock=clock, ids=ids)
    response = await agent.run("hello")
    [rewritten] = [e for e in response.events if isinstance(e, ModelRequestRewritten)]
    assert rewritten.tools == ()
    assert rewritten.options == {"temperature": 0.0}
    transcript = TranscriptProjection.from_events(response.events)
    assert transcript.sent_at(1) == list(client.requests[0].messages)
    assert client.requests[0].messages[0].text == "be brief"
    assert client.requests[0].tools == ()


async def test_unchanged_requests_record_nothing(clock: FixedClock, ids: SequentialIds) -> None:
    """Middleware that only looks records no rewrite."""

    async def look(context: ChatContext, call_next: Next) -> None:
        await call_next()

    async def look_agent(context: AgentContext, call_next: Next) -> None:
        await call_next()

    client = ScriptedChatClient(["fine"])
    agent = Agent(client=client, middleware=[look, look_agent], clock=clock, ids=ids)
    response = await agent.run("hello", options={"temperature": 0.5})
    names = [type(e).__name__ for e in response.events]
    assert "ModelRequestRewritten" not in names
    assert "RunInputRewritten" not in names

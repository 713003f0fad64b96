"""Code written for the reference framework behaves as it did there (see docs/differences.md for
where it deliberately does not): failed calls are marked, approval holds the whole batch, limits
end with a plain answer, unknown tools can end a run, middleware may repair arguments, and
definitions are checked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from agentledger import (
    Agent,
    AgentContext,
    AgentResponseUpdate,
    BaseChatClient,
    ChatOptions,
    ChatResponse,
    Content,
    FunctionInvocationContext,
    Message,
    OptionsError,
    UnknownToolError,
    agent_middleware,
    function_middleware,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.core.approvals import paused_calls
from agentledger.core.events import ArgumentsRejected, RunFailed, RunStarted, ToolCalled, ToolNotFound
from agentledger.testing import FixedClock, SequentialIds, capture_events, event_types, events_of

pytestmark = pytest.mark.anyio
CallNext = Any
ran: list[str] = []


@tool
def divide(a: int, b: int) -> float:
    """a / b."""
    ran.append("divide")
    return a / b


@tool
def greet(name: str, greeting: str = "hello") -> str:
    """Greet someone."""
    ran.append("greet")
    return f"{greeting} {name}"


@tool(approval_mode="always_require")
def pay(amount: int) -> str:
    """Pay (a person approves first)."""
    ran.append("pay")
    return f"paid {amount}"


def _agent(script: list[ScriptEntry], tools: list[Any], **options: Any) -> tuple[Agent, ScriptedChatClient]:
    ran.clear()
    client = ScriptedChatClient(script)
    agent = Agent(client=client, tools=tools, clock=FixedClock(), ids=SequentialIds(), **options)
    return agent, client


async def test_failed_calls_carry_an_exception() -> None:
    """A raising tool, an unknown tool and bad arguments each get a result marked with exception,
    in the response and in what the client is sent; a good result has none."""
    calls = [Call("divide", {"a": 1, "b": 0}), Call("ghost"), Call("divide", {"a": "x", "b": 1})]
    agent, client = _agent([[*calls, Call("greet", {"name": "ada"})], "done"], [divide, greet])
    response = await agent.run("go")
    sent = {
        c.call_id: c for m in client.requests[1].messages for c in m.contents if c.type == "function_result"
    }
    kept = {c.call_id: c for m in response.messages for c in m.contents if c.type == "function_result"}
    assert sent == kept
    assert sent["call_1"].exception == "division by zero"
    assert sent["call_2"].exception == 'Function "ghost" not found.'
    assert "int" in (sent["call_3"].exception or "")
    assert sent["call_4"].exception is None
    assert sent["call_1"].result == "Error: Function failed."  # the text is unchanged


async def test_a_limit_ends_with_a_plain_answer() -> None:
    """Erroring batches up to the limit end with the limit's message, not an invented tool result."""
    script: list[ScriptEntry] = [Call("divide", {"a": 1, "b": 0})] * 3
    agent, client = _agent(script, [divide], max_consecutive_errors=2)
    response = await agent.run("go")
    assert [r.tool_choice for r in client.requests][-1] == "none"
    assert response.text == "Function invocation limit reached before a final answer could be produced."
    assert not response.messages[-1].function_calls


async def test_terminate_on_unknown_calls_fails_the_run_before_the_batch_runs() -> None:
    """With terminate_on_unknown_calls a hallucinated tool raises UnknownToolError (a KeyError)."""
    agent, client = _agent(
        [[Call("greet", {"name": "ada"}), Call("ghost")], "x"], [greet], terminate_on_unknown_calls=True
    )
    with pytest.raises(UnknownToolError) as info:
        await agent.run("go")
    assert isinstance(info.value, KeyError)
    assert str(info.value) == 'Error: Requested function "ghost" not found.'
    assert ran == []
    assert len(client.requests) == 1
    events = await agent.store.read(info.value.run_id)  # type: ignore[union-attr]
    assert event_types(events)[-2:] == ["ToolNotFound", "RunFailed"]
    assert events_of(events, RunFailed)[0].error_type == "UnknownToolError"


async def test_unknown_calls_are_answered_by_default() -> None:
    """Without the setting an unknown tool is an error result and the run goes on."""
    agent, _ = _agent([Call("ghost"), "fine"], [greet])
    response = await agent.run("go")
    assert response.text == "fine"
    assert events_of(response.events, ToolNotFound)


async def test_middleware_sees_what_the_model_sent() -> None:
    """Function middleware sees the arguments as sent, typed, without defaults filled in."""
    seen: list[dict[str, Any]] = []

    @function_middleware
    async def look(context: FunctionInvocationContext, call_next: CallNext) -> None:
        seen.append(dict(context.arguments))
        await call_next()

    agent, _ = _agent(
        [Call("greet", {"name": "ada"}), Call("divide", '{"a": "6", "b": 3}'), "x"],
        [greet, divide],
        middleware=[look],
    )
    await agent.run("go")
    assert seen == [{"name": "ada"}, {"a": 6, "b": 3}]


async def test_middleware_may_supply_a_missing_argument() -> None:
    """A call missing a required argument still reaches middleware, which may repair it."""

    @function_middleware
    async def repair(context: FunctionInvocationContext, call_next: CallNext) -> None:
        context.arguments.setdefault("name", "repaired")
        context.arguments.setdefault("greeting", "hi")  # the seed's "add only if missing"
        await call_next()

    agent, _ = _agent([Call("greet", {}), "x"], [greet], middleware=[repair])
    response = await agent.run("go")
    [called] = events_of(response.events, ToolCalled)
    assert called.arguments == {"name": "repaired", "greeting": "hi"}
    assert response.messages[1].contents[0].result == "hi repaired"


async def test_arguments_middleware_does_not_repair_are_rejected() -> None:
    """Arguments still invalid after middleware are rejected; the tool does not run."""

    @function_middleware
    async def passthrough(context: FunctionInvocationContext, call_next: CallNext) -> None:
        await call_next()

    agent, _ = _agent([Call("greet", {}), "x"], [greet], middleware=[passthrough])
    response = await agent.run("go")
    assert events_of(response.events, ArgumentsRejected)
    assert not events_of(response.events, ToolCalled)
    assert ran == []


@pytest.mark.parametrize(
    "choice",
    ["requird", {"mode": "bogus"}, {"mode": "required", "required_function_name": "not_offered"}],
    ids=["typo", "bad-mode", "not-offered"],
)
async def test_a_tool_choice_no_model_accepts_is_refused(choice: Any) -> None:
    """An invalid tool_choice fails run() with OptionsError before anything is recorded."""
    agent, client = _agent(["x"], [greet])
    with pytest.raises(OptionsError):
        await agent.run("go", options={"tool_choice": choice})
    assert client.requests == []


@pytest.mark.parametrize(
    "choice", [None, "auto", "none", "required", {"mode": "required", "required_function_name": "greet"}]
)
async def test_valid_tool_choices_are_sent(choice: Any) -> None:
    """Every valid tool_choice form reaches the client on the first call."""
    agent, client = _agent([Call("greet", {"name": "ada"}), "x"], [greet])
    await agent.run("go", options={"tool_choice": choice})
    assert client.requests[0].tool_choice == choice


async def test_a_gated_call_that_middleware_may_repair_waits_for_approval() -> None:
    """With function middleware, a gated call with incomplete arguments is asked about, not run."""

    @function_middleware
    async def complete(context: FunctionInvocationContext, call_next: CallNext) -> None:
        context.arguments.setdefault("amount", 1)
        await call_next()

    agent, _ = _agent([Call("pay", {}), "paid"], [pay], middleware=[complete])
    session = agent.create_session()
    paused = await agent.run("pay", session=session)
    assert paused.finish_reason == "awaiting_approval"
    assert ran == []
    answers = tuple(r.to_approval_response(True) for r in paused.user_input_requests)
    resumed = await agent.run(Message("user", answers), session=session)
    assert ran == ["pay"]
    assert resumed.text == "paid"


def test_reference_spellings_work() -> None:
    """tool.parameters() (the reference's method) and agentledger.openai import as ported code expects."""
    assert greet.parameters()["required"] == ["name"]
    assert greet.parameters["properties"]["greeting"]["default"] == "hello"
    from agentledger.adapters.chat import openai as adapter
    from agentledger.openai import OpenAIChatClient, OpenAIResponsesClient

    assert OpenAIChatClient is adapter.OpenAIChatClient
    assert OpenAIResponsesClient is adapter.OpenAIResponsesClient


class _Recording(BaseChatClient):
    """A custom client in the reference's style: extra keyword arguments in get_response."""

    def __init__(self) -> None:
        self.extra: list[dict[str, Any]] = []

    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        options: ChatOptions | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ChatResponse:
        self.extra.append(kwargs)
        return ChatResponse(Message("assistant", (Content.from_text("ok"),)))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_legacy_run_kwargs_reach_the_client_too(stream: bool) -> None:
    """Values passed as **kwargs to run() (deprecated) reach tools and the client's get_response."""
    client = _Recording()
    agent = Agent(client=client)
    if stream:
        with pytest.warns(DeprecationWarning, match="deprecated"):
            updates = agent.run("hi", stream=True, user_tier="gold")  # type: ignore[call-overload]
        async for _ in updates:
            pass
    else:
        with pytest.warns(DeprecationWarning, match="deprecated"):
            await agent.run("hi", user_tier="gold")  # type: ignore[call-overload]
    assert client.extra == [{"user_tier": "gold"}]


@pytest.mark.parametrize("kind", ["plain", "async"])
async def test_a_sub_agent_can_stream_to_a_callback(kind: str) -> None:
    """as_tool(stream_callback=...) hands each update of the child's run to the callback."""
    seen: list[str] = []

    def plain(update: AgentResponseUpdate) -> None:
        seen.append(update.text)

    async def later(update: AgentResponseUpdate) -> None:
        seen.append(update.text)

    child = Agent(client=ScriptedChatClient(["the tides follow the moon"]), name="Researcher")
    research = child.as_tool(name="research", stream_callback=plain if kind == "plain" else later)
    lead, _ = _agent([Call("research", {"task": "tides"}), "done"], [research])
    response = await lead.run("why tides?")
    assert "".join(seen) == "the tides follow the moon"
    assert response.messages[1].contents[0].result == "the tides follow the moon"


async def test_a_streamed_run_gives_its_final_response() -> None:
    """stream.get_final_response() after (or instead of) iterating is the run's AgentResponse."""
    agent, _ = _agent([Call("greet", {"name": "ada"}), "greeted"], [greet])
    stream = agent.run("go", stream=True)
    texts = [update.text async for update in stream]
    response = await stream.get_final_response()
    assert response.text == "greeted"
    assert "".join(texts).endswith("greeted")
    untouched = _agent(["direct"], [])[0].run("go", stream=True)
    assert (await untouched.get_final_response()).text == "direct"


async def _paused(middleware: tuple[Any, ...] = ()) -> tuple[Agent, Any, Any]:
    agent, _ = _agent(
        [[Call("pay", {"amount": 5}), Call("greet", {"name": "ada"})], "ok"],
        [pay, greet],
        middleware=list(middleware),
    )
    session = agent.create_session()
    paused = await agent.run("pay", session=session)
    return agent, session, paused


async def test_answers_come_alone_and_before_the_conversation_goes_on() -> None:
    """Answers mixed with new text, a new turn while a batch waits, or two different answers for
    one call are refused: each would leave a call apart from its result."""
    agent, session, paused = await _paused()
    [request] = paused.user_input_requests
    yes, no = request.to_approval_response(True), request.to_approval_response(False)
    for message in (
        Message("user", (yes, Content.from_text("and also..."))),
        Message("user", (Content.from_text("never mind"),)),
        Message("user", (yes, no)),
    ):
        with pytest.raises(ValueError, match=r"approval|answer"):
            await agent.run(message, session=session)
    assert ran == []
    await agent.run(Message("user", (yes,)), session=session)
    assert sorted(ran) == ["greet", "pay"]


async def test_agent_middleware_rewriting_a_resume_keeps_its_answers() -> None:
    """Agent middleware that rebuilds the input messages does not withdraw the approval answers."""

    @agent_middleware
    async def text_only(context: AgentContext, call_next: CallNext) -> None:
        context.messages = [m for m in context.messages if m.text]
        await call_next()

    agent, session, paused = await _paused((text_only,))
    answers = tuple(r.to_approval_response(True) for r in paused.user_input_requests)
    await agent.run(Message("user", answers), session=session)
    assert sorted(ran) == ["greet", "pay"]
    assert not paused_calls(session.history)


async def test_a_streamed_run_shows_its_approval_requests_and_limit_answer() -> None:
    """Streaming callers see the approval requests of a paused run and the limit's answer."""
    agent, _ = _agent([[Call("pay", {"amount": 5})]], [pay])
    contents = [c async for update in agent.run("pay", stream=True) for c in update.contents]
    assert [c.type for c in contents if c.type == "function_approval_request"] == [
        "function_approval_request"
    ]
    limited, _ = _agent(
        [Call("greet", {"name": "a"}), Call("greet", {"name": "b"})], [greet], max_iterations=1
    )
    texts = [update.text async for update in limited.run("go", stream=True)]
    assert texts[-1] == "Function invocation limit reached before a final answer could be produced."


async def test_agent_middleware_cannot_set_a_tool_choice_no_model_accepts() -> None:
    """An invalid tool_choice set by agent middleware fails the run with OptionsError."""

    @agent_middleware
    async def typo(context: AgentContext, call_next: CallNext) -> None:
        context.options["tool_choice"] = "requird"
        await call_next()

    agent, client = _agent(["x"], [greet], middleware=[typo])
    with pytest.raises(OptionsError):
        await agent.run("go")
    assert client.requests == []


async def test_a_gated_call_whose_arguments_are_no_json_waits_only_if_middleware_may_repair() -> None:
    """A gated call whose arguments are no JSON object is rejected unasked without function
    middleware; with it, middleware gets them as {"raw": text} to repair, so a human is asked."""

    @function_middleware
    async def passthrough(context: FunctionInvocationContext, call_next: CallNext) -> None:
        await call_next()

    agent, _ = _agent([Call("pay", "{not json"), "ok"], [pay])
    response = await agent.run("pay")
    assert response.finish_reason == "completed"
    assert events_of(response.events, ArgumentsRejected)
    agent, _ = _agent([Call("pay", "{not json"), "ok"], [pay], middleware=[passthrough])
    response = await agent.run("pay")
    assert response.finish_reason == "awaiting_approval"
    assert ran == []


class _Polite(Agent):
    """An agent whose run() adds a word to every task: as_tool must go through it."""

    def run(self, messages: Any = None, **options: Any) -> Any:
        return super().run(f"Please: {messages}", **options)


async def test_as_tool_runs_the_agents_own_run() -> None:
    """A subclass overriding run() is honoured when it runs as a sub-agent, and the child's run
    is still linked to the call that started it."""
    child_client = ScriptedChatClient(["done politely"])
    child = _Polite(client=child_client, name="Polite")
    lead, _ = _agent([Call("polite", {"task": "tidy up"}), "ok"], [child.as_tool(name="polite")])
    with capture_events() as events:
        response = await lead.run("go")
    assert child_client.requests[0].messages[-1].text == "Please: tidy up"
    [started] = [e for e in events_of(events, RunStarted) if e.run_id != response.run_id]
    assert (started.parent_run_id, started.parent_call_id) == (response.run_id, "call_1")

"""The Python examples of the runtime-context seed documents, run as written.

Each example keeps its code; only the imports change (``agentledger`` for ``agent_framework``)
and the OpenAI client becomes a ``ScriptedChatClient`` (with the fixed clock and ids of the test
fixtures). Each test checks what the example prints, the events the run recorded and what the
scripted model was sent.
"""

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any

import pytest

from agentledger import (
    AgentSession,
    BaseChatClient,
    ChatOptions,
    ChatResponse,
    Content,
    FunctionInvocationContext,
    Message,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptedRequest
from agentledger.core.events import (
    ChildRunStarted,
    Event,
    ModelCalled,
    RunCompleted,
    RunStarted,
    SessionUpdated,
    StateChange,
    ToolCalled,
    ToolReturned,
)
from agentledger.testing import FixedClock, SequentialIds, capture_events, event_types, events_of

only = events_of


def echo_last_result(request: ScriptedRequest) -> str:
    """A scripted answer that repeats the last function result the model was sent."""
    return str(request.messages[-1].contents[-1].result)


def results_sent(request: ScriptedRequest) -> list[Any]:
    """The function results in the last message of a request."""
    return [c.result for c in request.messages[-1].contents if c.type == "function_result"]


# -- Passing tool-only runtime values ------------------------------------------------------------


@tool(approval_mode="never_require")
def send_email(
    address: Annotated[str, "Recipient email address."],
    ctx: FunctionInvocationContext,
) -> str:
    user_id = ctx.kwargs["user_id"]
    tenant = ctx.kwargs.get("tenant", "default")
    return f"Queued email for {address} from {user_id} ({tenant})"


SEND_EMAIL_SCRIPT: list[Call | Callable[[ScriptedRequest], str]] = [
    Call("send_email", {"address": "finance@example.com"}),
    echo_last_result,
]


@pytest.mark.anyio
async def test_send_email_reads_function_invocation_kwargs(
    clock: FixedClock, ids: SequentialIds, capsys: pytest.CaptureFixture[str]
) -> None:
    """function_invocation_kwargs reach the tool as ctx.kwargs and the result reaches the model."""
    client = ScriptedChatClient(SEND_EMAIL_SCRIPT)
    agent = client.as_agent(
        name="Notifier",
        instructions="Send email updates.",
        tools=[send_email],
        clock=clock,
        ids=ids,
    )

    response = await agent.run(
        "Email the launch update to finance@example.com",
        function_invocation_kwargs={
            "user_id": "user-123",
            "tenant": "contoso",
        },
    )

    print(response.text)

    expected = "Queued email for finance@example.com from user-123 (contoso)"
    assert capsys.readouterr().out == expected + "\n"
    assert event_types(response.events) == [
        "RunStarted",
        "ModelCalled",
        "ModelResponded",
        "ToolCalled",
        "ToolReturned",
        "ModelCalled",
        "ModelResponded",
        "RunCompleted",
    ]
    (started,) = only(response.events, RunStarted)
    assert started.agent_name == "Notifier"
    assert started.instructions == "Send email updates."
    assert started.function_invocation_kwargs == {"user_id": "user-123", "tenant": "contoso"}
    assert started.client_kwargs_keys == ()
    assert [spec.name for spec in started.tools] == ["send_email"]
    assert started.tools[0].parameters["properties"] == {
        "address": {"type": "string", "description": "Recipient email address."}
    }
    assert started.tools[0].parameters["required"] == ["address"]
    (called,) = only(response.events, ToolCalled)
    assert (called.call_id, called.name, called.arguments) == (
        "call_1",
        "send_email",
        {"address": "finance@example.com"},
    )
    (returned,) = only(response.events, ToolReturned)
    assert (returned.call_id, returned.result, returned.overridden_by) == ("call_1", expected, None)
    assert only(response.events, RunCompleted)[0].text == expected

    assert len(client.requests) == 2
    for request in client.requests:
        assert request.tools == ("send_email",)
        assert "ctx" not in request.tool_specs[0].parameters["properties"]
        assert request.client_kwargs == {}
        assert request.function_invocation_kwargs is None
        assert request.options["instructions"] == "Send email updates."
    assert results_sent(client.requests[1]) == [expected]


@pytest.mark.anyio
async def test_send_email_falls_back_to_the_default_tenant(clock: FixedClock, ids: SequentialIds) -> None:
    """ctx.kwargs holds exactly what the caller passed, so .get() falls back to its default."""
    client = ScriptedChatClient(SEND_EMAIL_SCRIPT)
    agent = client.as_agent(name="Notifier", tools=[send_email], clock=clock, ids=ids)

    response = await agent.run(
        "Email the launch update to finance@example.com",
        function_invocation_kwargs={"user_id": "user-123"},
    )

    assert response.text == "Queued email for finance@example.com from user-123 (default)"
    assert only(response.events, RunStarted)[0].function_invocation_kwargs == {"user_id": "user-123"}


# -- Function middleware receives the same context -----------------------------------------------


async def enrich_tool_runtime_context(
    context: FunctionInvocationContext,
    call_next: Callable[[], Awaitable[None]],
) -> None:
    context.kwargs.setdefault("tenant", "contoso")
    context.kwargs.setdefault("request_source", "middleware")
    await call_next()


@pytest.mark.anyio
async def test_enrich_tool_runtime_context_middleware_fills_ctx_kwargs(
    clock: FixedClock, ids: SequentialIds, capsys: pytest.CaptureFixture[str]
) -> None:
    """Function middleware mutating context.kwargs before call_next() is seen by the tool."""
    client = ScriptedChatClient(SEND_EMAIL_SCRIPT)
    agent = client.as_agent(
        name="Notifier",
        instructions="Send email updates.",
        tools=[send_email],
        middleware=[enrich_tool_runtime_context],
        clock=clock,
        ids=ids,
    )
    seen_inside: list[dict[str, Any]] = []

    async def spy(context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]) -> None:
        seen_inside.append(dict(context.kwargs))
        await call_next()

    caller_kwargs = {"user_id": "user-123"}
    response = await agent.run(
        "Email the launch update to finance@example.com",
        function_invocation_kwargs=caller_kwargs,
        middleware=[spy],
    )
    print(response.text)

    expected = "Queued email for finance@example.com from user-123 (contoso)"
    assert capsys.readouterr().out == expected + "\n"
    assert seen_inside == [{"user_id": "user-123", "tenant": "contoso", "request_source": "middleware"}]
    assert caller_kwargs == {"user_id": "user-123"}
    assert only(response.events, RunStarted)[0].function_invocation_kwargs == {"user_id": "user-123"}
    assert only(response.events, ToolReturned)[0].result == expected
    assert event_types(response.events)[3:5] == ["ToolCalled", "ToolReturned"]
    assert all(request.client_kwargs == {} for request in client.requests)


@pytest.mark.anyio
async def test_enrich_tool_runtime_context_keeps_the_callers_tenant(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """setdefault in the middleware leaves a tenant the caller passed untouched."""
    client = ScriptedChatClient(SEND_EMAIL_SCRIPT)
    agent = client.as_agent(
        name="Notifier", tools=[send_email], middleware=[enrich_tool_runtime_context], clock=clock, ids=ids
    )

    response = await agent.run(
        "Email the launch update to finance@example.com",
        function_invocation_kwargs={"user_id": "user-123", "tenant": "fabrikam"},
    )

    assert response.text == "Queued email for finance@example.com from user-123 (fabrikam)"


# -- Using session= for shared runtime state -----------------------------------------------------


@tool(approval_mode="never_require")
def remember_topic(
    topic: Annotated[str, "Topic to remember."],
    ctx: FunctionInvocationContext,
) -> str:
    if ctx.session is None:
        return "No session available."

    ctx.session.state["topic"] = topic
    return f"Stored {topic!r} in session state."


@pytest.mark.anyio
async def test_remember_topic_writes_session_state(
    clock: FixedClock, ids: SequentialIds, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tool writing ctx.session.state changes the caller's session and records SessionUpdated."""
    client = ScriptedChatClient([Call("remember_topic", {"topic": "budget review on Friday"}), "Noted."])
    agent = client.as_agent(
        name="MemoryAgent",
        instructions="Remember important topics.",
        tools=[remember_topic],
        clock=clock,
        ids=ids,
    )

    session = agent.create_session()
    response = await agent.run("Remember that the budget review is on Friday.", session=session)
    print(session.state["topic"])

    assert capsys.readouterr().out == "budget review on Friday\n"
    assert response.text == "Noted."
    assert event_types(response.events) == [
        "RunStarted",
        "ModelCalled",
        "ModelResponded",
        "ToolCalled",
        "SessionUpdated",
        "ToolReturned",
        "ModelCalled",
        "ModelResponded",
        "RunCompleted",
    ]
    assert only(response.events, RunStarted)[0].session_id == session.session_id
    assert only(response.events, ToolCalled)[0].arguments == {"topic": "budget review on Friday"}
    (updated,) = only(response.events, SessionUpdated)
    assert updated.session_id == session.session_id
    assert updated.by == "call_1"
    assert updated.changes == (StateChange("topic", "set", "budget review on Friday"),)
    stored = "Stored 'budget review on Friday' in session state."
    assert only(response.events, ToolReturned)[0].result == stored
    assert [request.tools for request in client.requests] == [("remember_topic",), ("remember_topic",)]
    assert results_sent(client.requests[1]) == [stored]
    assert [m.text for m in session.history if m.role == "user"] == [
        "Remember that the budget review is on Friday."
    ]


@pytest.mark.anyio
async def test_remember_topic_without_a_session(clock: FixedClock, ids: SequentialIds) -> None:
    """Without session= the tool sees ctx.session None and no SessionUpdated is recorded."""
    script: list[Call | Callable[[ScriptedRequest], str]] = [
        Call("remember_topic", {"topic": "budget review"}),
        echo_last_result,
    ]
    client = ScriptedChatClient(script)
    agent = client.as_agent(name="MemoryAgent", tools=[remember_topic], clock=clock, ids=ids)

    response = await agent.run("Remember that the budget review is on Friday.")

    assert response.text == "No session available."
    assert only(response.events, RunStarted)[0].session_id is None
    assert only(response.events, SessionUpdated) == []


# -- Sharing session state with delegated agents -------------------------------------------------


@tool(description="Store findings for later steps.")
def store_findings(findings: str, ctx: FunctionInvocationContext) -> None:
    if ctx.session is not None:
        ctx.session.state["findings"] = findings


RESEARCH_SCRIPT: list[Call | str] = [
    Call("research", {"query": "EU battery regulation"}),
    Call("store_findings", {"findings": "Batteries need a passport from 2027."}),
    "Stored the findings.",
    "Research done: the findings are stored.",
]


async def run_research(
    propagate_session: bool, clock: FixedClock, ids: SequentialIds
) -> tuple[ScriptedChatClient, AgentSession, list[Event], str]:
    """The seed's research agent behind a coordinator agent, on one scripted client."""
    client = ScriptedChatClient(RESEARCH_SCRIPT)

    research_agent = client.as_agent(
        name="ResearchAgent",
        instructions="Research the topic and store findings.",
        tools=[store_findings],
        clock=clock,
        ids=ids,
    )

    research_tool = research_agent.as_tool(
        name="research",
        description="Research a topic and store findings.",
        arg_name="query",
        propagate_session=propagate_session,
    )

    coordinator = client.as_agent(name="Coordinator", tools=[research_tool], clock=clock, ids=ids)
    session = coordinator.create_session()
    with capture_events() as events:
        response = await coordinator.run(
            "Research the EU battery regulation.",
            session=session,
            function_invocation_kwargs={"user_id": "user-123"},
        )
    return client, session, events, response.text


def split_runs(events: list[Event]) -> tuple[list[Event], list[Event]]:
    """The coordinator's events and the research agent's events."""
    parent_id = events[0].run_id
    return [e for e in events if e.run_id == parent_id], [e for e in events if e.run_id != parent_id]


@pytest.mark.anyio
async def test_research_agent_with_propagate_session_writes_the_callers_session(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """propagate_session=True: the child run stores findings in the caller's session state."""
    client, session, events, text = await run_research(True, clock, ids)

    assert text == "Research done: the findings are stored."
    assert session.state == {"findings": "Batteries need a passport from 2027."}
    parent, child = split_runs(events)
    assert event_types(parent) == [
        "RunStarted",
        "ModelCalled",
        "ModelResponded",
        "ToolCalled",
        "ChildRunStarted",
        "SessionUpdated",
        "ToolReturned",
        "ModelCalled",
        "ModelResponded",
        "RunCompleted",
    ]
    assert event_types(child) == [
        "RunStarted",
        "ModelCalled",
        "ModelResponded",
        "ToolCalled",
        "SessionUpdated",
        "ToolReturned",
        "ModelCalled",
        "ModelResponded",
        "RunCompleted",
    ]
    (parent_start,) = only(parent, RunStarted)
    (child_start,) = only(child, RunStarted)
    assert parent_start.tools[0].parameters["properties"] == {
        "query": {"type": "string", "description": "The query for the agent."}
    }
    assert only(parent, ToolCalled)[0].arguments == {"query": "EU battery regulation"}
    assert child_start.agent_name == "ResearchAgent"
    assert (child_start.parent_run_id, child_start.parent_call_id) == (parent_start.run_id, "call_1")
    assert child_start.session_id == session.session_id
    assert child_start.function_invocation_kwargs == {"user_id": "user-123"}
    assert [m.text for m in child_start.messages] == ["EU battery regulation"]
    (linked,) = only(parent, ChildRunStarted)
    assert (linked.call_id, linked.child_run_id) == ("call_1", child_start.run_id)
    assert linked.propagate_session is True
    (updated,) = only(child, SessionUpdated)
    assert (updated.session_id, updated.by) == (session.session_id, "call_2")
    assert updated.changes == (StateChange("findings", "set", "Batteries need a passport from 2027."),)
    (copied,) = only(parent, SessionUpdated)
    assert (copied.session_id, copied.changes) == (session.session_id, updated.changes)
    assert (copied.origin_run_id, copied.origin_seq) == (updated.run_id, updated.seq)
    assert AgentSession.from_events(events, session.session_id).state == session.state
    assert AgentSession.from_events(parent, session.session_id).state == session.state
    assert only(child, ToolReturned)[0].result is None
    assert only(parent, ToolReturned)[0].result == "Stored the findings."
    assert [request.tools for request in client.requests] == [
        ("research",),
        ("store_findings",),
        ("store_findings",),
        ("research",),
    ]
    assert results_sent(client.requests[2]) == ["null"]
    assert results_sent(client.requests[3]) == ["Stored the findings."]
    assert [m.text for m in session.history if m.role == "user"] == ["Research the EU battery regulation."]


@pytest.mark.anyio
async def test_research_agent_without_propagate_session_is_isolated(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """propagate_session=False: the child stores findings in a session of its own, not the caller's."""
    client, session, events, text = await run_research(False, clock, ids)

    assert text == "Research done: the findings are stored."
    assert session.state == {}
    parent, child = split_runs(events)
    assert only(parent, SessionUpdated) == []
    (parent_start,) = only(parent, RunStarted)
    (child_start,) = only(child, RunStarted)
    (linked,) = only(parent, ChildRunStarted)
    assert (linked.call_id, linked.child_run_id) == ("call_1", child_start.run_id)
    assert linked.propagate_session is False
    assert (child_start.parent_run_id, child_start.parent_call_id) == (parent_start.run_id, "call_1")
    assert child_start.session_id is not None
    assert child_start.session_id != session.session_id
    assert child_start.function_invocation_kwargs == {"user_id": "user-123"}
    (updated,) = only(child, SessionUpdated)
    assert updated.session_id == child_start.session_id
    assert updated.changes == (StateChange("findings", "set", "Batteries need a passport from 2027."),)
    assert [request.tools for request in client.requests] == [
        ("research",),
        ("store_findings",),
        ("store_findings",),
        ("research",),
    ]
    assert [m.text for m in session.history if m.role == "user"] == ["Research the EU battery regulation."]


# -- Custom chat clients -------------------------------------------------------------------------


class BucketClient(BaseChatClient):
    """A custom client with the seed's get_response signature; it records each call's buckets."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        options: ChatOptions[Any] | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ChatResponse:
        self.calls.append(
            {
                "messages": list(messages),
                "options": dict(options or {}),
                "function_invocation_kwargs": function_invocation_kwargs,
                "client_kwargs": client_kwargs,
                "kwargs": kwargs,
            }
        )
        if messages[-1].role == "tool":
            result = messages[-1].contents[0].result
            return ChatResponse(text=f"{result} [{dict(client_kwargs or {}).get('deployment')}]")
        call = Content.from_function_call("c-1", "send_email", arguments={"address": "ops@example.com"})
        return ChatResponse(Message("assistant", (call,)), model="custom-1")


@pytest.mark.anyio
async def test_custom_client_get_response_receives_the_explicit_buckets(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """A BaseChatClient subclass gets client_kwargs on every call and never the tool-only kwargs."""
    client = BucketClient()
    agent = client.as_agent(name="Notifier", tools=[send_email], clock=clock, ids=ids)
    client_kwargs = {"deployment": "eu-west"}

    response = await agent.run(
        "Email ops.",
        function_invocation_kwargs={"user_id": "user-123"},
        client_kwargs=client_kwargs,
    )

    assert response.text == "Queued email for ops@example.com from user-123 (default) [eu-west]"
    assert len(client.calls) == 2
    for call in client.calls:
        assert call["function_invocation_kwargs"] is None
        assert call["client_kwargs"] == client_kwargs
        assert call["kwargs"] == {}
        assert [spec.name for spec in call["options"]["tools"]] == ["send_email"]
        assert call["options"]["tool_choice"] is None
    assert [m.role for m in client.calls[1]["messages"]] == ["user", "assistant", "tool"]
    (started,) = only(response.events, RunStarted)
    assert started.client_kwargs_keys == ("deployment",)
    assert started.function_invocation_kwargs == {"user_id": "user-123"}
    assert [e.tools for e in only(response.events, ModelCalled)] == [("send_email",), ("send_email",)]
    assert only(response.events, ToolCalled)[0].call_id == "c-1"
    assert only(response.events, ToolReturned)[0].result == (
        "Queued email for ops@example.com from user-123 (default)"
    )


def test_chat_options_is_generic_as_in_the_seed_signature() -> None:
    """ChatOptions takes a type parameter, as the seed's get_response signature writes it."""
    assert getattr(ChatOptions, "__parameters__", ()) != ()

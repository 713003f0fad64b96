"""Service-side conversations and the last call at a limit, as a program written for the reference
framework (agent-framework-core 1.23.0) sees them. Each test runs the program shape measured on
the reference with the same script on both; the expected values are the reference's, and
docs/differences.md lists where the outcome differs on purpose."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest

from agentledger import (
    Agent,
    AgentContext,
    AgentSession,
    ChatContext,
    ChatResponse,
    Content,
    FunctionInvocationContext,
    Message,
    agent_middleware,
    chat_middleware,
    function_middleware,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.clients import BaseChatClient, ChatOptions, ChatResponseUpdate, merge_updates
from agentledger.core.events import CallsSkipped, ModelResponded, RunCompleted, RunInputRewritten, RunStarted
from agentledger.core.projections import LIMIT_REACHED
from agentledger.replay import RecordedRun, rerun
from agentledger.testing import FixedClock, SequentialIds, capture_events

pytestmark = pytest.mark.anyio


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _answer(
    text: str | None = None, *, calls: tuple[Call, ...] = (), conversation_id: str | None = None
) -> ChatResponse:
    """One model answer, reporting ``conversation_id`` as a service that keeps it would."""
    contents = [Content.from_text(text)] if text else []
    contents += [Content.from_function_call(c.call_id or "", c.name, arguments=c.arguments) for c in calls]
    return ChatResponse(Message("assistant", tuple(contents)), conversation_id=conversation_id)


def _agent(script: list[ScriptEntry], **options: Any) -> tuple[Agent, ScriptedChatClient]:
    client = ScriptedChatClient(script)
    agent = Agent(
        client=client, tools=[add], clock=FixedClock(), ids=SequentialIds(), default_options=options
    )
    return agent, client


async def _run(agent: Agent, stream: bool, text: str, **kwargs: Any) -> None:
    if stream:
        [u async for u in agent.run(text, stream=True, **kwargs)]
    else:
        await agent.run(text, **kwargs)


STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["awaited", "streamed"])


# -- which conversation the session follows ----------------------------------------------------


@STREAMED
async def test_the_session_follows_the_conversation_the_service_answered_in(stream: bool) -> None:
    """Given ``conversation_id="c1"``, a service answering in ``"c2"``: the reference's session
    holds ``"c2"`` afterwards, streamed or not, and its next run sends ``"c2"`` with its input
    alone. So does agentledger's, and a session rebuilt from the log follows the same one."""
    agent, client = _agent([_answer("a", conversation_id="c2"), _answer("b", conversation_id="c3")])
    session = agent.create_session()
    with capture_events() as events:
        await _run(agent, stream, "one", session=session, options={"conversation_id": "c1"})
        assert session.service_session_id == "c2"
        await _run(agent, stream, "two", session=session)
    assert [r.options.get("conversation_id") for r in client.requests] == ["c1", "c2"]
    assert [len(r.messages) for r in client.requests] == [1, 1]
    assert session.service_session_id == "c3"
    rebuilt = AgentSession.from_events(events, session.session_id)
    assert rebuilt.service_session_id == "c3"
    assert rebuilt.history == session.history


@STREAMED
async def test_a_conversation_id_the_service_does_not_answer_in_is_not_followed(stream: bool) -> None:
    """``options={"conversation_id": "c1"}`` on a client that keeps nothing (its answer reports
    no conversation): the reference's session keeps ``service_session_id`` None, streamed or
    not. agentledger's kept ``"c1"``, so its next run sent only its input to a service that holds
    nothing of the conversation. Now the session stays None and the next run sends the whole
    conversation, which the session's history holds; a rebuild from the log and a rerun agree."""
    agent, client = _agent(["a", "b"])
    session = agent.create_session()
    with capture_events() as events:
        await _run(agent, stream, "one", session=session, options={"conversation_id": "c1"})
        assert session.service_session_id is None
        await _run(agent, stream, "two", session=session)
    first, second = client.requests
    assert first.options["conversation_id"] == "c1"  # the run was given it: it is sent
    assert "conversation_id" not in second.options
    assert [m.text for m in second.messages] == ["one", "a", "two"]
    assert AgentSession.from_events(events, session.session_id).service_session_id is None
    [started, _] = [e for e in events if isinstance(e, RunStarted)]
    assert started.options["conversation_id"] == "c1"  # recorded, so a rerun sends it too
    first_run = [e for e in events if e.run_id == started.run_id]
    again = await rerun(RecordedRun(first_run), _agent([])[0])  # raises on any divergence
    assert again is not None
    assert again.text == "a"


@STREAMED
async def test_the_runs_option_is_sent_and_the_sessions_conversation_stays(stream: bool) -> None:
    """A session in ``"s0"`` given ``conversation_id="c1"`` for one run, the service reporting
    nothing: the reference sends ``"c1"`` and the session stays in ``"s0"``; agentledger moved
    the session to ``"c1"``. An agent's default ``conversation_id`` is sent, and not followed
    either."""
    agent, client = _agent(["a"])
    session = agent.get_session("s0")
    await _run(agent, stream, "one", session=session, options={"conversation_id": "c1"})
    assert client.requests[0].options["conversation_id"] == "c1"
    assert session.service_session_id == "s0"

    defaulted, client = _agent(["a"], conversation_id="d1")
    fresh = defaulted.create_session()
    await _run(defaulted, stream, "one", session=fresh)
    assert client.requests[0].options["conversation_id"] == "d1"
    assert fresh.service_session_id is None


@STREAMED
async def test_within_a_run_the_last_conversation_reported_is_followed(stream: bool) -> None:
    """Given ``"c1"``, the service answers a call in ``"c2"`` and the answer after the tool in
    ``"c3"``: the second call continues ``"c2"`` and the session ends in ``"c3"``, as on the
    reference. When the last answer reports none, the session stays in ``"c2"``, where the run's
    last call continued, as on the reference, awaited or streamed. Each answer's conversation is
    in the log, and a session rebuilt from it follows the same one."""
    for last, expected in (("c3", "c3"), (None, "c2")):
        call = Call("add", {"a": 1, "b": 2}, call_id="k1")
        agent, client = _agent(
            [_answer(calls=(call,), conversation_id="c2"), _answer("3", conversation_id=last)]
        )
        session = agent.create_session()
        with capture_events() as events:
            await _run(agent, stream, "sum", session=session, options={"conversation_id": "c1"})
        assert [r.options.get("conversation_id") for r in client.requests] == ["c1", "c2"]
        assert session.service_session_id == expected
        assert [e.conversation_id for e in events if isinstance(e, ModelResponded)] == ["c2", last]
        assert AgentSession.from_events(events, session.session_id).service_session_id == expected


# -- the last call at a limit, streamed ---------------------------------------------------------


class _Updates(BaseChatClient):
    """Streams each call's updates exactly as scripted (a call with no metadata, then a last
    update with the response id and finish reason, as many providers stream them)."""

    def __init__(self, *calls: list[ChatResponseUpdate]) -> None:
        self.calls = list(calls)

    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        options: ChatOptions | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ChatResponse:
        return merge_updates(self.calls.pop(0))

    async def get_streaming_response(
        self,
        messages: Sequence[Message],
        *,
        options: ChatOptions | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatResponseUpdate]:
        for update in self.calls.pop(0):
            yield update


def _call(
    call_id: str, response_id: str, *, text: str = "", tagged: bool = False
) -> list[ChatResponseUpdate]:
    """A call of ``add`` (after ``text``), each piece tagged with the response id or not."""
    tag = response_id if tagged else None
    pieces = [Content.from_text(text)] if text else []
    pieces.append(Content.from_function_call(call_id, "add", arguments='{"a": 1, "b": 2}'))
    return [
        *(ChatResponseUpdate(contents=(piece,), response_id=tag) for piece in pieces),
        ChatResponseUpdate(response_id=response_id, finish_reason="tool_calls"),
    ]


Shown = tuple[str, list[str], str, str | None, str | None]
"""An update as compared: role, content types, text, response id, finish reason."""

FIRST: list[Shown] = [
    ("assistant", ["function_call"], "", None, None),
    ("assistant", [], "", "r1", "tool_calls"),
    ("tool", ["function_result"], "", None, None),
]
"""The reference's updates of the first call and its batch (``max_iterations=1``)."""

AT_THE_LIMIT: dict[str, list[Shown]] = {
    "only a call": [
        ("assistant", [], "", "r2", "tool_calls"),
        ("assistant", ["text"], LIMIT_REACHED, None, "stop"),
    ],
    "text and a call": [
        ("assistant", ["text"], "three", None, None),
        ("assistant", [], "", "r2", "tool_calls"),
    ],
}
"""The reference's updates of the last call (``tool_choice="none"``) when the model still asks
for ``add``: an update that held only the call it will not run is left out."""


@pytest.mark.parametrize("last", list(AT_THE_LIMIT))
async def test_the_last_call_at_the_limit_streams_the_references_updates(last: str) -> None:
    """At ``max_iterations=1`` (the reference's ``function_invocation_configuration``) the model
    asks for a tool, then asks again on the last call. agentledger yielded an empty update for
    the piece that held only that call (one more than the reference) and the limit's answer
    without a finish reason. Now role, content types, text, response id and finish reason are
    the reference's, update by update; the log still records the call the model asked for."""
    text = "three" if last == "text and a call" else ""
    client = _Updates(_call("k1", "r1"), _call("k2", "r2", text=text))
    agent = Agent(client=client, tools=[add], max_iterations=1)
    with capture_events() as events:
        updates = [u async for u in agent.run("sum", stream=True)]
    seen = [(u.role, [c.type for c in u.contents], u.text, u.response_id, u.finish_reason) for u in updates]
    assert seen == [*FIRST, *AT_THE_LIMIT[last]]
    last_answer = [e for e in events if isinstance(e, ModelResponded)][-1]
    assert [c.call_id for c in last_answer.message.function_calls] == ["k2"]  # recorded all the same
    [skipped] = [e for e in events if isinstance(e, CallsSkipped)]
    assert skipped.call_ids == ("k2",)
    [completed] = [e for e in events if isinstance(e, RunCompleted)]
    assert completed.text == (text or LIMIT_REACHED)
    again = await rerun(RecordedRun(list(events)), Agent(client=_Updates(), tools=[add], max_iterations=1))
    assert again is not None
    assert again.text == completed.text


async def test_a_piece_of_the_last_call_that_carries_its_response_id_is_kept_empty() -> None:
    """When each piece carries the response id (the reference: a message id too), the reference
    keeps the piece without its call, empty: so does agentledger."""
    client = _Updates(_call("k1", "r1", tagged=True), _call("k2", "r2", tagged=True))
    agent = Agent(client=client, tools=[add], max_iterations=1)
    updates = [u async for u in agent.run("sum", stream=True)]
    seen = [(u.role, [c.type for c in u.contents], u.text, u.response_id, u.finish_reason) for u in updates]
    assert seen == [
        ("assistant", ["function_call"], "", "r1", None),
        ("assistant", [], "", "r1", "tool_calls"),
        ("tool", ["function_result"], "", None, None),
        ("assistant", [], "", "r2", None),
        ("assistant", [], "", "r2", "tool_calls"),
        ("assistant", ["text"], LIMIT_REACHED, None, "stop"),
    ]


# -- what each middleware layer is handed --------------------------------------------------------


@STREAMED
async def test_middleware_reads_the_references_names(stream: bool) -> None:
    """The reference's agent middleware reads ``context.stream`` and
    ``context.function_invocation_kwargs``, its chat middleware ``context.session``,
    ``context.stream`` and ``context.kwargs`` (the client kwargs), its function middleware the
    call's id in ``context.metadata["call_id"]``: agentledger had none of these names (an
    AttributeError, a KeyError). They hold what the reference's did, and changes made through
    them reach the tools and the client, recorded as any change of ``kwargs``/``client_kwargs``."""
    seen: dict[str, Any] = {}

    @agent_middleware
    async def on_run(context: AgentContext, call_next: Any) -> None:
        seen["agent"] = (context.stream, dict(context.function_invocation_kwargs))
        context.function_invocation_kwargs["tenant"] = "t-1"
        await call_next()

    @chat_middleware
    async def on_request(context: ChatContext, call_next: Any) -> None:
        seen.setdefault("chat", []).append((context.session is session, context.stream, dict(context.kwargs)))
        context.kwargs["trace"] = "changed"
        await call_next()

    @function_middleware
    async def on_call(context: FunctionInvocationContext, call_next: Any) -> None:
        seen["function"] = (context.metadata["call_id"], dict(context.kwargs))
        await call_next()

    client = ScriptedChatClient([Call("add", {"a": 1, "b": 2}, call_id="k1"), "3"])
    agent = Agent(client=client, tools=[add], middleware=[on_run, on_request, on_call])
    session = agent.create_session()
    with capture_events() as events:
        await _run(
            agent,
            stream,
            "sum",
            session=session,
            function_invocation_kwargs={"user": "u1"},
            client_kwargs={"trace": "t"},
        )
    assert seen["agent"] == (stream, {"user": "u1"})
    assert seen["chat"] == [(True, stream, {"trace": "t"})] * 2
    assert seen["function"] == ("k1", {"user": "u1", "tenant": "t-1"})
    assert [r.client_kwargs for r in client.requests] == [{"trace": "changed"}] * 2
    [rewritten] = [e for e in events if isinstance(e, RunInputRewritten)]
    assert rewritten.function_invocation_kwargs == {"user": "u1", "tenant": "t-1"}

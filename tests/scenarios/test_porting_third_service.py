"""Service-side conversations and the last call at a limit, as a program written for the reference
framework (agent-framework-core 1.23.0) sees them. Each test runs the program shape measured on
the reference with the same script on both; the expected values are the reference's, and
docs/differences.md lists where the outcome differs on purpose."""

from __future__ import annotations

from typing import Any

import pytest

from agentledger import Agent, AgentSession, ChatResponse, Content, Message, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.core.events import ModelResponded, RunStarted
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
    last call continued (the reference's streamed run does the same; its awaited run leaves the
    session None, listed in docs/differences.md). Each answer's conversation is in the log."""
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

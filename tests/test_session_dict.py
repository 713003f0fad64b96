"""``AgentSession.to_dict`` / ``from_dict``: a session kept as JSON between runs, as ported code does."""

from __future__ import annotations

import json

import pytest

from agentledger import Agent, AgentSession, FunctionInvocationContext, SessionStateError, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core.events import SessionUpdated
from agentledger.replay import RecordedRun, rerun
from agentledger.testing import FixedClock, SequentialIds

pytestmark = pytest.mark.anyio


@tool
def remember(topic: str, ctx: FunctionInvocationContext) -> str:
    """Keep a topic."""
    if ctx.session is not None:
        ctx.session.state.setdefault("topics", []).append(topic)
    return "kept"


def _agent(script: list[Call | str]) -> Agent:
    return ScriptedChatClient(script).as_agent(
        name="Memo", tools=[remember], ids=SequentialIds(), clock=FixedClock()
    )


async def test_a_session_round_trips_through_json_text_and_runs_on() -> None:
    agent = _agent([Call("remember", {"topic": "tides"}), "Kept.", "You asked about tides."])
    session = agent.create_session()
    first = await agent.run("Remember tides.", session=session)
    session.state["topics"].append("moon")  # an in-place edit between runs
    text = json.dumps(session.to_dict())
    restored = AgentSession.from_dict(json.loads(text))
    assert restored.session_id == session.session_id
    assert restored.state.snapshot() == {"topics": ["tides", "moon"]}
    assert restored.history == session.history
    response = await agent.run("What did I ask?", session=restored)
    assert response.text == "You asked about tides."
    # The edit made before saving is recorded by the next run, as it would have been unsaved.
    [caller] = [e for e in response.events if isinstance(e, SessionUpdated) and e.by == "caller"]
    assert caller.changes[0].value == ["tides", "moon"]
    recorded = RecordedRun(response.events, prior=first.events)
    assert await rerun(recorded, _agent([])) is not None
    assert restored.history[-1].text == "You asked about tides."


def test_the_reference_frameworks_shape_reads() -> None:
    """A dict written by the reference framework (no history) restores its id and state."""
    data = {"type": "session", "session_id": "s-1", "service_session_id": None, "state": {"k": 1}}
    session = AgentSession.from_dict(data)
    assert (session.session_id, session.state.snapshot(), session.history) == ("s-1", {"k": 1}, [])
    assert set(session.to_dict()) >= set(data)


@pytest.mark.parametrize(
    "data",
    [
        None,
        {"session_id": 7},
        {"type": "thread", "session_id": "s"},
        {"session_id": "s", "history": [{"role": 1}]},
        {"session_id": "s", "pending": [{"by": "caller", "changes": [{"key": "k", "op": "burn"}]}]},
    ],
)
def test_what_is_no_saved_session_is_refused(data: object) -> None:
    with pytest.raises(ValueError, match="not a saved session"):
        AgentSession.from_dict(data)


@pytest.mark.parametrize("value", [2**70, {1, 2}, (1, 2), object()])
def test_state_that_could_not_be_recorded_is_refused(value: object) -> None:
    """What assigning to ``session.state`` refuses, ``from_dict`` refuses too (a set is not made a list)."""
    with pytest.raises(SessionStateError):
        AgentSession.from_dict({"session_id": "s", "state": {"k": value}})

"""Property: for random runs, the live projections equal the projections rebuilt from the log."""

from __future__ import annotations

import warnings
from typing import Any

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st

from agentledger import Agent, AgentSession, FunctionInvocationContext, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core import ModelCalled, RunMachine, RunStarted
from agentledger.core.events import Event
from agentledger.core.projections import ToolsProjection, TranscriptProjection
from agentledger.testing import FixedClock, SequentialIds


@tool
def echo(text: str) -> str:
    """Echo the text."""
    return text


@tool
def fail() -> str:
    """Always raises."""
    raise ValueError("broken")


@tool
def put(key: str, value: int, ctx: FunctionInvocationContext) -> str:
    """Set a session key."""
    assert ctx.session is not None
    ctx.session.state[key] = value
    return "ok"


@tool
def push(value: int, ctx: FunctionInvocationContext) -> str:
    """Append to a list in session state (nested mutation)."""
    assert ctx.session is not None
    ctx.session.state.setdefault("log", []).append(value)
    return "ok"


@tool
def extra() -> str:
    """Only offered after unlock."""
    return "extra"


@tool
def unlock(ctx: FunctionInvocationContext) -> str:
    """Offer `extra` from the next model call on."""
    ctx.add_tools(extra)
    return "unlocked"


@tool
def lock(ctx: FunctionInvocationContext) -> str:
    """Stop offering `extra`."""
    ctx.remove_tools("extra")
    return "locked"


CONFIGURED = [echo, fail, put, push, unlock, lock]
NAMES = ["echo", "fail", "put", "push", "unlock", "lock", "extra", "ghost"]

calls = st.one_of(
    st.builds(lambda t: Call("echo", {"text": t}), st.text(max_size=5)),
    st.just(Call("fail")),
    st.builds(lambda k, v: Call("put", {"key": k, "value": v}), st.sampled_from("abc"), st.integers(-5, 5)),
    st.builds(lambda v: Call("push", {"value": v}), st.integers(0, 9)),
    st.sampled_from([Call("unlock"), Call("lock"), Call("extra"), Call("ghost")]),
    st.just(Call("put", "{not json")),
    st.just(Call("put", {"key": "a", "value": "NaN-string"})),
)
batches = st.lists(calls, min_size=1, max_size=3)
runs = st.lists(st.lists(batches, max_size=5), min_size=1, max_size=3)


def _check_run(events: list[Event], requests: list[Any], history: list[Any]) -> None:
    """Each model call saw the folded tools and transcript; the machine refolds the log."""
    calls_seen = [e for e in events if isinstance(e, ModelCalled)]
    assert len(calls_seen) == len(requests)
    started = events[0]
    assert isinstance(started, RunStarted)
    assert [t.name for t in started.tools] == [t.name for t in CONFIGURED]
    for called, request in zip(calls_seen, requests, strict=True):
        prefix = events[: called.seq + 1]
        assert request.tools == ToolsProjection.from_events(prefix).names == called.tools
        transcript = TranscriptProjection.from_events(prefix)
        assert list(request.messages) == history + transcript.seen_at(called.iteration)
    RunMachine.from_events(events, history)


@settings(max_examples=40, deadline=None)
@given(runs)
def test_live_projections_equal_rebuilt(script: list[list[list[Call]]]) -> None:
    """Tools offered, transcript and session state all equal their folds of the log."""

    async def scenario() -> None:
        clock, ids = FixedClock(), SequentialIds()
        session: AgentSession | None = None
        every_event: list[Event] = []
        for run_script in script:
            client = ScriptedChatClient([*run_script, "done"])
            agent = Agent(client=client, tools=CONFIGURED, clock=clock, ids=ids, max_iterations=10)
            session = session or agent.create_session()
            history = list(session.history)
            response = await agent.run("go", session=session)
            _check_run(response.events, client.requests, history)
            every_event.extend(response.events)
        assert session is not None
        rebuilt = AgentSession.from_events(every_event, session.session_id)
        assert rebuilt.state.snapshot() == session.state.snapshot()
        assert rebuilt.history == session.history

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        anyio.run(scenario)

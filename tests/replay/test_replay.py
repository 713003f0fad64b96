"""Replay: state at a point, rerun with divergence detection, fork."""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import Annotated

import pytest

from agentledger import Agent, FunctionInvocationContext, MemoryEventStore, ReplayDivergence, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core import Event, ModelResponded, RunStarted, ToolCalled, ToolReturned
from agentledger.demo import build_demo_agent, run_demo
from agentledger.redaction import REDACTED
from agentledger.replay import RecordedRun, differences, fork, load, rerun
from agentledger.testing import event_types

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _quiet_experimental() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        yield


async def _recorded_demo() -> tuple[RecordedRun, MemoryEventStore]:
    store = MemoryEventStore()
    response, _ = await run_demo(store)
    return await load(store, response.run_id), store


def _silent_agent(**changes: object) -> tuple[object, ScriptedChatClient]:
    agent = build_demo_agent(store=False)
    silent = ScriptedChatClient([])
    agent.client = silent
    for name, value in changes.items():
        setattr(agent, name, value)
    return agent, silent


async def test_demo_reruns_without_divergence() -> None:
    """A recorded demo run reruns against the same code with zero divergence and no model call."""
    recorded, _ = await _recorded_demo()
    agent, silent = _silent_agent()
    response = await rerun(recorded, agent)  # type: ignore[arg-type]
    assert response is not None
    assert response.text.startswith("Lisbon is sunny")
    assert silent.requests == []


async def test_recorded_tools_do_not_run() -> None:
    """With tools="recorded" no tool body runs, yet session writes and tool additions are repeated."""
    recorded, _ = await _recorded_demo()
    ran: list[str] = []
    agent, _ = _silent_agent()

    @tool(name="get_weather")
    def spy(city: Annotated[str, "City name."]) -> str:
        """Today's weather for a city."""
        ran.append(city)
        return "??"

    agent.tools = [spy if t.name == "get_weather" else t for t in agent.tools]  # type: ignore[attr-defined]
    response = await rerun(recorded, agent, tools="recorded")  # type: ignore[arg-type]
    assert ran == []
    assert response is not None
    assert "SessionUpdated" in event_types(response.events)


async def test_changed_tool_diverges_at_its_result() -> None:
    """A tool that now returns something else makes a live rerun diverge at that ToolReturned."""
    recorded, _ = await _recorded_demo()
    agent, _ = _silent_agent()

    @tool(name="get_weather")
    def colder(city: Annotated[str, "City name."]) -> str:
        """Today's weather for a city."""
        return "rain, 9°C"

    agent.tools = [colder if t.name == "get_weather" else t for t in agent.tools]  # type: ignore[attr-defined]
    expected_seq = next(
        e.seq for e in recorded.events if isinstance(e, ToolReturned) and e.name == "get_weather"
    )
    with pytest.raises(ReplayDivergence) as info:
        await rerun(recorded, agent, tools="live")  # type: ignore[arg-type]
    assert info.value.seq == expected_seq
    assert "rain, 9°C" in info.value.diff
    assert isinstance(info.value.expected, ToolReturned)


async def test_changed_middleware_diverges() -> None:
    """Middleware that no longer short-circuits diverges where the recorded short-circuit was."""
    recorded, _ = await _recorded_demo()

    async def passthrough(
        context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]
    ) -> None:
        await call_next()

    agent, _ = _silent_agent()
    agent.middleware = [passthrough]  # type: ignore[attr-defined]
    from agentledger.middleware import split_middleware

    agent._layers = split_middleware([passthrough])  # type: ignore[attr-defined]
    short = next(e.seq for e in recorded.events if type(e).__name__ == "MiddlewareShortCircuit")
    with pytest.raises(ReplayDivergence) as info:
        await rerun(recorded, agent, tools="recorded")  # type: ignore[arg-type]
    assert info.value.seq == short


async def test_state_at_any_point() -> None:
    """state_at folds the log: tools offered, session state, transcript and pending calls."""
    recorded, _ = await _recorded_demo()
    first_answer = next(e for e in recorded.events if isinstance(e, ModelResponded))
    at_answer = recorded.state_at(first_answer.seq)
    assert [c.name for c in at_answer.pending_calls] == ["get_weather", "remember_preference"]
    assert at_answer.session == {}
    assert [t.name for t in at_answer.tools] == ["get_weather", "remember_preference", "load_booking_tools"]
    end = recorded.state_at(len(recorded.events) - 1)
    assert end.session == {"preferences": {"room": "quiet"}}
    assert "book_hotel" in [t.name for t in end.tools]
    assert end.phase == "done"
    assert end.pending_calls == ()
    assert end.transcript[0].text.startswith("Check the weather")
    with pytest.raises(IndexError):
        recorded.state_at(len(recorded.events))


async def test_fork_continues_live_from_a_point() -> None:
    """fork replays up to seq from the log and then asks the new client."""
    recorded, _ = await _recorded_demo()
    answers = [e for e in recorded.events if isinstance(e, ModelResponded)]
    at = answers[1].seq  # after load_booking_tools was requested
    live = ScriptedChatClient([Call("book_hotel", {"city": "Oslo", "nights": 3}), "Booked Oslo instead."])
    agent, silent = _silent_agent()
    response = await fork(recorded, agent, at=at, client=live)  # type: ignore[arg-type]
    assert response.text == "Booked Oslo instead."
    assert silent.requests == []
    assert len(live.requests) == 2
    assert "book_hotel" in live.requests[0].tools
    replayed = [e.message for e in response.events if isinstance(e, ModelResponded)][:2]
    assert replayed == [e.message for e in answers[:2]]


async def test_load_unknown_run_is_a_clear_error() -> None:
    """Loading a run the store does not have names it."""
    from agentledger import AgentLedgerError

    with pytest.raises(AgentLedgerError, match="no run 'nope'"):
        await load(MemoryEventStore(), "nope")


async def test_rerun_never_reaches_live_sinks() -> None:
    """Event sinks see a live run as it happens, and nothing of its rerun."""
    seen: list[str] = []
    store = MemoryEventStore()
    agent = build_demo_agent(store)
    agent.event_sinks = (lambda event: seen.append(type(event).__name__),)
    session = agent.create_session()
    response = await agent.run("Check the weather in Lisbon.", session=session)
    assert seen == event_types(response.events)
    seen.clear()
    agent.client = ScriptedChatClient([])
    await rerun(await load(store, response.run_id), agent)
    assert seen == []


async def test_rerun_with_writes_made_between_runs() -> None:
    """Session writes made before a run (recorded by "caller" at its start) rerun without divergence."""
    store = MemoryEventStore()
    agent = build_demo_agent(store)
    session = agent.create_session()
    await agent.run("Check the weather in Lisbon.", session=session)
    session.state["budget"] = 300
    del session.state["preferences"]
    agent.client = ScriptedChatClient(["Noted."])
    second = await agent.run("Anything else?", session=session)
    assert [type(e).__name__ for e in second.events[1:3]] == ["SessionUpdated", "SessionUpdated"]
    recorded = await load(store, second.run_id)
    silent, _ = _silent_agent()
    response = await rerun(recorded, silent)  # type: ignore[arg-type]
    assert response is not None
    assert response.text == "Noted."


async def test_a_tool_added_during_the_run_refuses_again_what_it_refused() -> None:
    """A tool known only from the log (added by a loader) is stood in from its recorded spec,
    which says less than its signature did: the arguments it refused are refused again."""

    @tool
    def double(n: int) -> int:
        return 2 * n

    @tool
    def load_double(ctx: FunctionInvocationContext) -> str:
        ctx.add_tools(double)
        return "loaded"

    store = MemoryEventStore()
    script: list[Call | str] = [Call("load_double"), Call("double", {"n": "many"})]
    script += [Call("double", {"n": 2}), "4"]
    agent = Agent(client=ScriptedChatClient(script), tools=[load_double], store=store)
    response = await agent.run("Double 2.")
    recorded = await load(store, response.run_id)
    assert "ArgumentsRejected" in event_types(recorded.events)
    replayed = await rerun(recorded, Agent(client=ScriptedChatClient([]), tools=[load_double], store=False))
    assert replayed is not None
    assert replayed.text == "4"


def _returned(result: object, *, kwargs: dict[str, object] | None = None) -> list[Event]:
    started = RunStarted(run_id="r", seq=0, at=0, agent_id="a", function_invocation_kwargs=kwargs or {})
    called = ToolCalled(run_id="r", seq=1, at=1, call_id="c1", name="t")
    return [started, called, ToolReturned(run_id="r", seq=2, at=2, call_id="c1", name="t", result=result)]


def test_a_cassette_value_held_as_redacted_matches_the_rerun_value_it_redacts_to() -> None:
    """A recorded run redaction leaves as it is and that holds the marker (a cassette) is compared
    redacted on both sides: a secret under a secret key or of a known shape matches the marker,
    any other change is found."""
    recorded = _returned({"api_key": REDACTED, "note": f"key {REDACTED}"})
    same = _returned({"api_key": "3f9a" * 8, "note": "key sk-proj-" + "b" * 24})
    assert differences(recorded, same) == []
    other = _returned({"api_key": "3f9a" * 8, "note": "no key"})
    assert [f.field for f in differences(recorded, other)] == ["result.note"]


def test_a_log_with_redacted_kwargs_is_compared_as_it_is() -> None:
    """A log whose kwargs its policy redacted still compares what redaction would hide in an
    artefact: a changed query string is found."""
    recorded = _returned("https://h/search?q=1", kwargs={"api_key": REDACTED})
    rerun = _returned("https://h/search?q=2", kwargs={"api_key": REDACTED})
    assert [f.field for f in differences(recorded, rerun)] == ["result"]

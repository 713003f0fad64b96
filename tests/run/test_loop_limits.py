"""Loop limits, each recorded as ``IterationLimitReached``: ``max_iterations``, consecutive error
batches, ``max_function_calls``, and the input-token and cost limits (a run that would loop forever
stops once its model calls have reported ``max_input_tokens`` input tokens or cost ``max_cost``)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agentledger import (
    Agent,
    MemoryEventStore,
    OptionsError,
    UnpricedCallError,
    Usage,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.core import CallsSkipped, Event, IterationLimitReached, ModelResponded, RunFailed, RunStarted
from agentledger.core.events import RunConfig
from agentledger.core.projections import LIMIT_REACHED
from agentledger.cost import Price, cost_report
from agentledger.replay import load, rerun
from agentledger.testing import FixedClock, SequentialIds, event_types

pytestmark = pytest.mark.anyio


@tool
def again() -> str:
    """Look once more."""
    return "nothing yet"


def _looping(max_input_tokens: int | None = None) -> tuple[Agent, ScriptedChatClient]:
    """A model that asks for ``again`` on every call, forever; no iteration limit to speak of."""
    client = ScriptedChatClient([Call("again")], repeat=True)
    agent = Agent(
        client=client,
        tools=[again],
        clock=FixedClock(),
        ids=SequentialIds(),
        store=MemoryEventStore(),
        max_iterations=10_000,
        max_input_tokens=max_input_tokens,
    )
    return agent, client


def _input_tokens(events: Sequence[Event]) -> list[int]:
    return [e.usage.input_tokens for e in events if isinstance(e, ModelResponded) and e.usage]


async def test_the_limit_stops_a_run_that_would_loop_forever() -> None:
    """Once the summed input tokens reach the limit, the next call is the final one
    (``tool_choice="none"``); its calls are skipped and the run ends with the fallback text."""
    agent, client = _looping(max_input_tokens=10)
    response = await agent.run("keep going")
    used = _input_tokens(response.events)
    assert len(used) == 5
    assert all(n == used[0] for n in used)
    limits = [e for e in response.events if isinstance(e, IterationLimitReached)]
    assert [(e.reason, e.limit, e.iteration) for e in limits] == [("max_input_tokens", 10, 4)]
    assert [r.tool_choice for r in client.requests] == [None, None, None, None, "none"]
    assert [e.call_ids for e in response.events if isinstance(e, CallsSkipped)] == [("call_5",)]
    assert response.finish_reason == "limit_reached"
    assert response.text == LIMIT_REACHED
    started = response.events[0]
    assert isinstance(started, RunStarted)
    assert started.config.max_input_tokens == 10


async def test_a_rerun_of_the_log_reproduces_the_limit() -> None:
    """The limit is the machine's decision from recorded usage: rerunning the log against the
    same code derives the same limit event, the same final call and the same text."""
    agent, _client = _looping(max_input_tokens=10)
    response = await agent.run("keep going")
    assert agent.store is not None
    recorded = await load(agent.store, response.run_id)
    silent = ScriptedChatClient([])
    agent.client = silent
    again_response = await rerun(recorded, agent)
    assert again_response is not None
    assert again_response.text == LIMIT_REACHED
    assert [type(e).__name__ for e in again_response.events] == [type(e).__name__ for e in response.events]

    def limit(events: Sequence[Event]) -> list[tuple[int, int, str, int]]:  # time aside
        return [
            (e.seq, e.iteration, e.reason, e.limit) for e in events if isinstance(e, IterationLimitReached)
        ]

    assert limit(again_response.events) == limit(response.events) == [(17, 4, "max_input_tokens", 10)]
    assert silent.requests == []


async def test_a_run_sets_its_own_limit_which_the_client_never_sees() -> None:
    """``options={"max_input_tokens": n}`` limits one run of an agent that has none; the chat
    client is not sent the option, and a rerun repeats it as the run's own option."""
    agent, client = _looping()
    response = await agent.run("keep going", options={"max_input_tokens": 7})
    limits = [(e.reason, e.limit) for e in response.events if isinstance(e, IterationLimitReached)]
    assert limits == [("max_input_tokens", 7)]
    assert len(client.requests) == 4  # 3 calls reach 9 >= 7, then the final one
    assert all("max_input_tokens" not in r.options for r in client.requests)
    assert agent.store is not None
    recorded = await load(agent.store, response.run_id)
    agent.client = ScriptedChatClient([])
    replayed = await rerun(recorded, agent)
    assert replayed is not None
    assert replayed.finish_reason == "limit_reached"


async def test_a_run_without_the_limit_is_not_stopped_by_tokens() -> None:
    """No limit, no token check: the iteration limit is what ends the loop."""
    client = ScriptedChatClient([Call("again")], repeat=True)
    agent = Agent(client=client, tools=[again], clock=FixedClock(), ids=SequentialIds(), max_iterations=6)
    response = await agent.run("keep going")
    reasons = [e.reason for e in response.events if isinstance(e, IterationLimitReached)]
    assert reasons == ["max_iterations"]
    assert RunConfig().max_input_tokens is None


@pytest.mark.parametrize("value", [0, -5, "100", 2.5, True])
async def test_a_limit_that_is_not_a_positive_integer_is_refused(value: object) -> None:
    """On the agent or the run, a limit other than a positive int is an ``OptionsError``."""
    with pytest.raises(OptionsError, match="max_input_tokens"):
        _looping(max_input_tokens=value)  # type: ignore[arg-type]
    agent, _ = _looping()
    with pytest.raises(OptionsError, match="max_input_tokens"):
        await agent.run("x", options={"max_input_tokens": value})


def _cent(model: str, usage: Usage, at: int) -> float | None:
    """A price table: one cent a call of the scripted model, whatever it read."""
    return 0.01 if model == "scripted-1" else None


def _priced(max_cost: float | None, price: Price | None = _cent) -> tuple[Agent, ScriptedChatClient]:
    client = ScriptedChatClient([Call("again")], repeat=True)
    agent = Agent(
        client=client,
        tools=[again],
        clock=FixedClock(),
        ids=SequentialIds(),
        store=MemoryEventStore(),
        max_iterations=10_000,
        max_cost=max_cost,
        price=price,
    )
    return agent, client


async def test_the_cost_limit_stops_a_looping_run_and_a_rerun_reproduces_it() -> None:
    """Each call's price is recorded in ``ModelResponded.cost``; once they sum to ``max_cost``
    the final call comes, the limit is recorded with the amount, and a rerun stops alike."""
    agent, client = _priced(0.035)
    response = await agent.run("keep going")
    costs = [e.cost for e in response.events if isinstance(e, ModelResponded)]
    assert costs == [0.01] * 5
    [limit] = [e for e in response.events if isinstance(e, IterationLimitReached)]
    assert (limit.reason, limit.iteration, limit.cost_limit, limit.limit) == ("max_cost", 4, 0.035, 0)
    assert client.requests[-1].tool_choice == "none"
    assert response.text == LIMIT_REACHED
    assert cost_report(response.events).total.cost == pytest.approx(0.05)  # the recorded prices
    assert agent.store is not None
    recorded = await load(agent.store, response.run_id)
    agent.client = ScriptedChatClient([])
    replayed = await rerun(recorded, agent)
    assert replayed is not None
    assert [(e.reason, e.seq) for e in replayed.events if isinstance(e, IterationLimitReached)] == [
        ("max_cost", limit.seq)
    ]


async def test_a_run_sets_its_own_cost_limit() -> None:
    agent, client = _priced(None)
    response = await agent.run("keep going", options={"max_cost": 0.02})
    assert [e.reason for e in response.events if isinstance(e, IterationLimitReached)] == ["max_cost"]
    assert len(client.requests) == 3
    assert all("max_cost" not in r.options for r in client.requests)


async def test_a_cost_limit_needs_a_price_table() -> None:
    """Without prices a cost limit could never be reached: refused, on the agent or the run."""
    with pytest.raises(OptionsError, match="price"):
        _priced(1.0, price=None)
    agent, _ = _looping()
    with pytest.raises(OptionsError, match="price"):
        await agent.run("x", options={"max_cost": 1.0})
    for bad in (0, -1.0, float("inf"), float("nan"), "1", True):
        with pytest.raises(OptionsError, match="max_cost"):
            _priced(bad)  # type: ignore[arg-type]


async def test_a_cost_limit_with_a_model_the_table_does_not_know_ends_the_run() -> None:
    """Under ``max_cost``, a call the table cannot price would make the limit no limit: the run
    ends at that answer with ``UnpricedCallError`` and ``RunFailed``, none of its calls run, and
    a rerun of the log ends alike."""
    calls: list[str] = []

    @tool
    def counted() -> str:
        """Count a call."""
        calls.append("ran")
        return "more"

    client = ScriptedChatClient([Call("counted")], repeat=True, model="unknown-model-9")
    store = MemoryEventStore()
    agent = Agent(
        client=client,
        tools=[counted],
        clock=FixedClock(),
        ids=SequentialIds(),
        store=store,
        max_iterations=10_000,
        max_cost=0.05,
        price=_cent,
    )
    with pytest.raises(UnpricedCallError, match="'unknown-model-9'") as raised:
        await agent.run("keep going")
    assert calls == []
    assert len(client.requests) == 1
    events = await store.read(raised.value.run_id)
    assert event_types(events)[-2:] == ["ModelResponded", "RunFailed"]
    assert isinstance(events[-1], RunFailed)
    assert events[-1].error_type == "UnpricedCallError"
    assert raised.value.seq == events[-1].seq
    recorded = await load(store, raised.value.run_id)
    agent.client = ScriptedChatClient([])
    assert await rerun(recorded, agent) is None  # ended alike: no difference, no answer
    assert calls == []


async def test_max_iterations_then_final_answer_without_tools(clock: FixedClock, ids: SequentialIds) -> None:
    """After max_iterations model calls with tools, one last call runs with tool_choice none."""

    @tool
    def again() -> str:
        return "more"

    client = ScriptedChatClient([Call("again"), Call("again"), Call("again"), "giving up"])
    agent = Agent(client=client, tools=[again], clock=clock, ids=ids, max_iterations=2)
    response = await agent.run("loop")
    assert [r.tool_choice for r in client.requests] == [None, None, "none"]
    limits = [e for e in response.events if isinstance(e, IterationLimitReached)]
    assert [(e.reason, e.limit) for e in limits] == [("max_iterations", 2)]
    assert client.remaining == 1


async def test_consecutive_error_batches_stop_the_loop(clock: FixedClock, ids: SequentialIds) -> None:
    """Three erroring batches in a row stop tool calling; a success in between resets the count."""

    @tool
    def flaky(ok: bool) -> str:
        if not ok:
            raise RuntimeError("nope")
        return "fine"

    script: list[ScriptEntry] = [Call("flaky", {"ok": False}), Call("flaky", {"ok": True})]
    script += [Call("flaky", {"ok": False})] * 3 + ["stopped"]
    client = ScriptedChatClient(script)
    response = await Agent(client=client, tools=[flaky], clock=clock, ids=ids).run("x")
    limits = [e for e in response.events if isinstance(e, IterationLimitReached)]
    assert [(e.reason, e.iteration) for e in limits] == [("max_consecutive_errors", 5)]
    assert client.requests[-1].tool_choice == "none"
    assert response.text == "stopped"


async def test_max_function_calls(clock: FixedClock, ids: SequentialIds) -> None:
    """An optional cap on the number of calls ends tool calling once reached."""

    @tool
    def step() -> str:
        return "ok"

    client = ScriptedChatClient([[Call("step"), Call("step")], Call("step"), "capped"])
    agent = Agent(client=client, tools=[step], clock=clock, ids=ids, max_function_calls=2)
    response = await agent.run("x")
    assert event_types(response.events).count("ToolCalled") == 2
    assert [e.reason for e in response.events if isinstance(e, IterationLimitReached)] == [
        "max_function_calls"
    ]
    assert client.requests[1].tool_choice == "none"

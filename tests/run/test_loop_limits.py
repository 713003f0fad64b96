"""The input-token limit: a run that would loop forever stops once its model calls have
reported ``max_input_tokens`` input tokens, recorded like every other loop limit."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import pytest

from agentledger import Agent, MemoryEventStore, ModelResponseError, OptionsError, Usage, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core import CallsSkipped, Event, IterationLimitReached, ModelResponded, RunConfig, RunStarted
from agentledger.core.projections import LIMIT_REACHED
from agentledger.cost import Price, cost_report
from agentledger.replay import load, rerun
from agentledger.testing import FixedClock, SequentialIds

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


async def test_a_model_the_table_does_not_know_costs_nothing_recorded() -> None:
    """A price table that does not know the model records no cost (None): the limit sees none."""
    agent, _ = _priced(None, price=lambda model, usage, at: None)
    agent.config = msgspec.structs.replace(agent.config, max_iterations=3)
    response = await agent.run("keep going")
    assert {e.cost for e in response.events if isinstance(e, ModelResponded)} == {None}


async def test_a_price_table_that_answers_nonsense_fails_the_call() -> None:
    """A price that is not a finite amount is the call's failure, recorded, not a crash."""
    agent, _ = _priced(None, price=lambda model, usage, at: -3.0)
    with pytest.raises(ModelResponseError, match="price"):
        await agent.run("keep going")

"""``run/agent_layers.py``: agent middleware around the loop. What it changed before the loop is
recorded and used; it may end the run before the loop, answer in its place, or replace the
loop's answer; a record the log cannot hold, or an answer whose text cannot be read, fails the
run once, with its events stored."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from agentledger import Agent, AgentSession, MemoryEventStore, Message
from agentledger.adapters.chat.scripted import ScriptedChatClient
from agentledger.context import AgentContext
from agentledger.core import MiddlewareShortCircuit, RunCompleted, RunFailed, RunInputRewritten, RunTerminated
from agentledger.core.errors import UnrecordableError
from agentledger.errors import MiddlewareError, MiddlewareTermination, OptionsError
from agentledger.middleware import CallNext
from agentledger.response import AgentResponse
from agentledger.run.agent_layers import answer_text
from agentledger.testing import event_types
from tests._scripted_runs import agent_run, lookup, scripted_agent, stored_log

pytestmark = pytest.mark.anyio


def test_the_text_of_an_answer_is_its_text_as_the_log_records_it() -> None:
    response = AgentResponse(messages=[Message("assistant", "From a response.")])
    assert answer_text(None) == ""
    assert answer_text("Plain.") == "Plain."
    assert answer_text(response) == "From a response."
    assert answer_text({"b": 2, "a": [1]}) == '{"a":[1],"b":2}'  # keys in order, as result_text writes them


async def test_agent_middleware_calling_call_next_twice_fails_the_run() -> None:
    async def twice(context: AgentContext, call_next: CallNext) -> None:
        await call_next()
        await call_next()

    agent = scripted_agent(["Hi.", "Again."], middleware=[twice])
    with pytest.raises(MiddlewareError, match=r"call_next\(\) twice"):
        await agent_run(agent).execute("Hi.")
    assert type((await stored_log(agent))[-1]) is RunFailed


async def test_what_agent_middleware_changed_before_the_loop_is_recorded_and_used() -> None:
    async def rewrite(context: AgentContext, call_next: CallNext) -> None:
        context.messages = [Message("user", "Weather in Bergen?")]
        context.options["temperature"] = 0.3
        context.kwargs["api_token"] = "tok-secret-1"
        await call_next()

    client = ScriptedChatClient(["Rainy."])
    agent = Agent(client=client, tools=[lookup], middleware=[rewrite], store=MemoryEventStore())
    await agent_run(agent).execute("Weather in Oslo?")
    log = await stored_log(agent)
    (rewritten,) = [e for e in log if isinstance(e, RunInputRewritten)]
    assert rewritten.by == "agent_middleware"
    assert rewritten.messages == (Message("user", "Weather in Bergen?"),)
    assert rewritten.options == {"temperature": 0.3}
    assert rewritten.function_invocation_kwargs is not None
    assert "tok-secret-1" not in repr(rewritten.function_invocation_kwargs)  # redacted as RunStarted is
    assert client.requests[0].messages[-1] == Message("user", "Weather in Bergen?")
    assert client.requests[0].options["temperature"] == 0.3


async def test_agent_middleware_that_changes_nothing_records_no_rewrite() -> None:
    async def looking(context: AgentContext, call_next: CallNext) -> None:
        await call_next()

    agent = scripted_agent(["Hi."], middleware=[looking])
    await agent_run(agent).execute("Hi.")
    assert "RunInputRewritten" not in event_types(await stored_log(agent))


async def test_a_tool_choice_agent_middleware_set_is_checked_like_the_runs_own() -> None:
    async def force(context: AgentContext, call_next: CallNext) -> None:
        context.options["tool_choice"] = {"mode": "required", "required_function_name": "teleport"}
        await call_next()

    agent = scripted_agent(["Hi."], middleware=[force])
    with pytest.raises(OptionsError, match="teleport"):
        await agent_run(agent).execute("Hi.")
    failed = (await stored_log(agent))[-1]
    assert isinstance(failed, RunFailed)
    assert failed.error_type == "OptionsError"


async def test_an_answer_agent_middleware_gave_in_the_runs_place_is_its_end() -> None:
    async def cache(context: AgentContext, call_next: CallNext) -> None:
        context.result = "From the cache."

    agent = scripted_agent([], middleware=[cache])
    session = AgentSession("s")
    response = await agent_run(agent, session).execute("Hi.")
    log = await stored_log(agent)
    (short,) = [e for e in log if isinstance(e, MiddlewareShortCircuit)]
    assert (short.middleware, short.scope, short.result, short.leaves_history) == (
        "cache",
        "run",
        "From the cache.",
        True,
    )
    end = log[-1]
    assert isinstance(end, RunCompleted)
    assert (end.reason, end.text) == ("short_circuit", "From the cache.")
    assert (response.text, response.finish_reason) == ("From the cache.", "short_circuit")
    assert session.history == []  # answered before the loop: the history stays as it was


async def test_agent_middleware_terminating_before_the_loop_ends_the_run_with_its_answer() -> None:
    async def stop(context: AgentContext, call_next: CallNext) -> None:
        raise MiddlewareTermination("closed today", result="We are closed.")

    agent = scripted_agent([], middleware=[stop])
    response = await agent_run(agent).execute("Hi.")
    log = await stored_log(agent)
    (terminated,) = [e for e in log if isinstance(e, RunTerminated)]
    assert (terminated.reason, terminated.by, terminated.leaves_history) == (
        "closed today",
        "agent_middleware",
        True,
    )
    assert isinstance(log[-1], RunCompleted)
    assert (log[-1].reason, log[-1].text) == ("terminated", "We are closed.")
    assert response.text == "We are closed."


async def test_agent_middleware_terminating_after_the_loop_keeps_the_runs_own_answer() -> None:
    async def after(context: AgentContext, call_next: CallNext) -> None:
        await call_next()
        raise MiddlewareTermination("done")

    agent = scripted_agent(["Own answer."], middleware=[after])
    response = await agent_run(agent).execute("Hi.")
    assert response.text == "Own answer."
    assert "RunTerminated" not in event_types(await stored_log(agent))


async def test_an_answer_agent_middleware_replaced_that_the_log_cannot_hold_fails_the_run() -> None:
    async def bad(context: AgentContext, call_next: CallNext) -> None:
        await call_next()
        context.result = AgentResponse(messages=[Message("assistant", "bad \ud800")])

    agent = scripted_agent(["Fine."], middleware=[bad])
    with pytest.raises(UnrecordableError):
        await agent_run(agent).execute("Hi.")
    log = await stored_log(agent)
    assert isinstance(log[-1], RunFailed)
    assert log[-1].error_type == "UnrecordableError"


async def _answer_unrecordable(context: AgentContext, call_next: CallNext) -> None:
    context.result = "bad \ud800"


async def _terminate_unrecordable(context: AgentContext, call_next: CallNext) -> None:
    raise MiddlewareTermination("bad \ud800")


@pytest.mark.parametrize(
    "middleware",
    [_answer_unrecordable, _terminate_unrecordable],
    ids=["answer in the run's place", "termination reason"],
)
async def test_agent_middleware_ending_the_run_with_text_the_log_cannot_hold_fails_it(
    middleware: Callable[[AgentContext, CallNext], Awaitable[None]],
) -> None:
    agent = scripted_agent([], middleware=[middleware])
    with pytest.raises(UnrecordableError):
        await agent_run(agent).execute("Hi.")
    log = await stored_log(agent)
    assert event_types(log) == ["RunStarted", "RunFailed"]
    assert isinstance(log[-1], RunFailed)
    assert log[-1].error_type == "UnrecordableError"


class _NoText:
    """An answer with no JSON form whose ``str`` raises: the run cannot say what it answered."""

    def __str__(self) -> str:
        raise RuntimeError("no text for this answer")


async def _answer_without_text(context: AgentContext, call_next: CallNext) -> None:
    await call_next()
    context.result = _NoText()


async def test_an_answer_whose_text_cannot_be_read_fails_the_run_and_is_stored() -> None:
    agent = scripted_agent(["Fine."], middleware=[_answer_without_text])
    with pytest.raises(RuntimeError, match="no text"):
        await agent_run(agent).execute("Hi.")
    log = await stored_log(agent)
    assert event_types(log) == ["RunStarted", "ModelCalled", "ModelResponded", "RunFailed"]
    assert isinstance(log[-1], RunFailed)
    assert log[-1].error_type == "RuntimeError"

"""``run/lifecycle.py``: ``AgentRun.execute``, one run from ``RunStarted`` to how it ended. Answers
that cannot resume are refused before anything is recorded; agent middleware around the loop
may rewrite the input (recorded), answer or end the run in its place, or fail it; whatever
happens the run's end is recorded once, the session's history grows by the one rule, and the
caller's context is left as it was found."""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable

import anyio
import pytest

from agentledger import Agent, AgentSession, Content, MemoryEventStore, Message, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.context import AgentContext
from agentledger.core import (
    MiddlewareShortCircuit,
    RunCompleted,
    RunFailed,
    RunInputRewritten,
    RunStarted,
    RunTerminated,
)
from agentledger.core.errors import UnrecordableError
from agentledger.errors import (
    ApprovalError,
    MiddlewareError,
    MiddlewareTermination,
    ModelCallError,
    OptionsError,
)
from agentledger.middleware import CallNext
from agentledger.response import AgentResponse
from agentledger.testing import event_types
from tests._scripted_runs import agent_run, lookup, scripted_agent, stored_log

pytestmark = pytest.mark.anyio


async def test_a_run_records_its_start_and_its_end_and_grows_the_history() -> None:
    agent = scripted_agent([Call("lookup", {"city": "Oslo"}), "Sunny."])
    session = AgentSession("s")
    response = await agent_run(agent, session).execute("Weather in Oslo?")
    assert (response.text, response.run_id, response.finish_reason, response.session_id) == (
        "Sunny.",
        "run-1",
        "completed",
        "s",
    )
    log = await stored_log(agent)
    assert (type(log[0]), type(log[-1])) == (RunStarted, RunCompleted)
    assert response.events == log
    assert [m.role for m in session.history] == ["user", "assistant", "tool", "assistant"]


async def test_answers_that_resume_nothing_are_refused_before_anything_is_recorded() -> None:
    agent = scripted_agent([])
    stray = Message("user", (Content.from_approval_response("nowhere", approved=True),))
    with pytest.raises(ApprovalError, match="match no call awaiting approval"):
        await agent_run(agent, AgentSession("s")).execute(stray)
    assert agent.store is not None
    assert await agent.store.streams() == []


async def test_a_model_failure_is_raised_after_the_run_failed_is_recorded() -> None:
    agent = scripted_agent([])  # the script is empty: the first model call raises
    session = AgentSession("s")
    with pytest.raises(ModelCallError) as raised:
        await agent_run(agent, session).execute("Hi.")
    log = await stored_log(agent)
    assert event_types(log)[-2:] == ["ModelFailed", "RunFailed"]
    assert raised.value.seq == log[-2].seq  # the error names its ModelFailed
    assert session.history == []


async def test_an_error_inside_the_loop_fails_the_run_once_and_is_raised() -> None:
    async def boom(context: AgentContext, call_next: CallNext) -> None:
        await call_next()
        raise LookupError("after the loop")

    agent = scripted_agent(["Hi."], middleware=[boom])
    session = AgentSession("s")
    with pytest.raises(LookupError):
        await agent_run(agent, session).execute("Hi.")
    log = await stored_log(agent)
    ends = [e for e in log if isinstance(e, RunCompleted | RunFailed)]
    assert [(type(e), getattr(e, "error_type", None)) for e in ends] == [(RunFailed, "LookupError")]
    assert session.history == []


async def test_a_cancelled_run_records_its_failure_as_cancelled() -> None:
    entered = anyio.Event()

    async def hang(context: AgentContext, call_next: CallNext) -> None:
        entered.set()
        await anyio.sleep_forever()

    agent = scripted_agent([], middleware=[hang])
    async with anyio.create_task_group() as group:
        group.start_soon(agent_run(agent).execute, "Hi.")
        await entered.wait()
        group.cancel_scope.cancel()
    failed = (await stored_log(agent))[-1]
    assert isinstance(failed, RunFailed)
    assert failed.error_type == "Cancelled"


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


async def test_a_paused_run_notes_its_waiting_calls_in_the_session() -> None:
    agent = scripted_agent([Call("wire", {"amount": 5}, call_id="c1")])
    session = AgentSession("s")
    response = await agent_run(agent, session, run_id="paused").execute("Send 5.")
    assert response.finish_reason == "awaiting_approval"
    assert [r.call_id for r in response.user_input_requests] == ["c1"]
    assert session.paused_runs == {"c1": "paused"}


async def test_a_resume_claims_the_paused_batch_in_the_paused_runs_log() -> None:
    agent = scripted_agent([Call("wire", {"amount": 5}, call_id="c1"), "Sent."])
    session = AgentSession("s")
    await agent_run(agent, session, run_id="paused").execute("Send 5.")
    answer = Message("user", (Content.from_approval_response("c1", approved=True),))
    response = await agent_run(agent, session, run_id="resume").execute(answer)
    assert response.text == "Sent."
    paused_log = await stored_log(agent, "paused")
    claim = paused_log[-1]
    assert event_types(paused_log)[-2:] == ["RunCompleted", "BatchClaimed"]
    assert getattr(claim, "by_run_id", None) == "resume"
    assert session.paused_runs == {}


@tool
def ping(n: int) -> str:
    """Answer a ping."""
    return "ok"


@tool
async def pong(n: int) -> str:
    """Answer a pong."""
    return "ok"


@pytest.mark.parametrize("sequential", [False, True])
async def test_runs_leave_the_callers_context_unchanged(sequential: bool) -> None:
    """No variable of a finished run stays set in its caller's context (a caller that runs an
    agent many times would otherwise keep every run's variables alive). The one variable that
    may stay is the process-wide current run, set back to None."""
    batch = [Call("ping", {"n": 1}), Call("pong", {"n": 2})]
    script: list[ScriptEntry] = [batch, Call("pong", {"n": 3}), "done"]
    agent = Agent(client=ScriptedChatClient(script * 3), tools=[ping, pong], sequential_tools=sequential)
    before = dict(contextvars.copy_context())
    assert (await agent.run("go")).text == "done"
    after_one = dict(contextvars.copy_context())
    for _ in range(2):
        assert (await agent.run("go")).text == "done"
    assert dict(contextvars.copy_context()) == after_one
    assert {k: v for k, v in after_one.items() if k in before} == before
    assert [v for k, v in after_one.items() if k not in before] in ([], [None])

"""``run/lifecycle.py``: ``AgentRun.execute``, one run from ``RunStarted`` to how it ended. Answers
that cannot resume are refused before anything is recorded; whatever happens the run's end is
recorded once, the session's history grows by the one rule, and the caller's context is left as
it was found. Agent middleware around the loop is ``tests/run/test_agent_layers.py``'s."""

from __future__ import annotations

import contextvars

import anyio
import pytest

from agentledger import Agent, AgentSession, Content, Message, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.context import AgentContext
from agentledger.core import (
    RunCompleted,
    RunFailed,
    RunStarted,
)
from agentledger.errors import (
    ApprovalError,
    ModelCallError,
)
from agentledger.middleware import CallNext
from agentledger.testing import event_types
from tests._scripted_runs import agent_run, scripted_agent, stored_log

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

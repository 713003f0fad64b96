"""Approval pauses and loop limits, each recorded as events."""

from __future__ import annotations

import pytest

from agentledger import Agent, Content, Message, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.core import ApprovalRequested, ApprovalResolved, IterationLimitReached
from agentledger.errors import AgentLedgerError
from agentledger.testing import FixedClock, SequentialIds, event_types

pytestmark = pytest.mark.anyio


def _agent(client: ScriptedChatClient, clock: FixedClock, ids: SequentialIds, ran: list[str]) -> Agent:
    @tool(approval_mode="always_require")
    def wire_money(amount: int) -> str:
        """Send money (needs a human's approval)."""
        ran.append(f"wire {amount}")
        return f"sent {amount}"

    @tool
    def balance() -> int:
        ran.append("balance")
        return 100

    return Agent(client=client, tools=[wire_money, balance], clock=clock, ids=ids)


async def test_approval_pauses_and_resumes(clock: FixedClock, ids: SequentialIds) -> None:
    """A gated call holds its whole batch; approving it on the same session runs the batch, and the
    model is sent each call followed by its result, without the approval in between."""
    ran: list[str] = []
    client = ScriptedChatClient([[Call("wire_money", {"amount": 5}), Call("balance")], "Sent 5."])
    agent = _agent(client, clock, ids, ran)
    session = agent.create_session()
    paused = await agent.run("send 5", session=session)
    assert ran == []
    assert paused.finish_reason == "awaiting_approval"
    assert [m.role for m in paused.messages] == ["assistant"]
    [request] = paused.user_input_requests
    assert (request.type, request.name, request.call_id) == (
        "function_approval_request",
        "wire_money",
        "call_1",
    )
    assert [e.call_ids for e in paused.events if isinstance(e, ApprovalRequested)] == [("call_1",)]
    resumed = await agent.run(Message("user", (request.to_approval_response(True),)), session=session)
    assert sorted(ran) == ["balance", "wire 5"]
    assert resumed.text == "Sent 5."
    resolved = [e for e in resumed.events if isinstance(e, ApprovalResolved)]
    assert [(e.call_id, e.approved) for e in resolved] == [("call_1", True)]
    seen = client.requests[1].messages
    assert [m.role for m in seen] == ["user", "assistant", "tool"]
    assert [(c.call_id, c.result) for c in seen[2].contents] == [("call_1", "sent 5"), ("call_2", "100")]
    assert [m.role for m in session.history] == ["user", "assistant", "tool", "assistant"]


async def test_rejection_reaches_the_model(clock: FixedClock, ids: SequentialIds) -> None:
    """A rejected call never runs and the model is told it was rejected."""
    ran: list[str] = []
    client = ScriptedChatClient([Call("wire_money", {"amount": 9}), "Understood."])
    agent = _agent(client, clock, ids, ran)
    session = agent.create_session()
    paused = await agent.run("send 9", session=session)
    response = Content.from_approval_response(paused.user_input_requests[0].call_id or "", approved=False)
    resumed = await agent.run(Message("user", (response,)), session=session)
    assert ran == []
    assert resumed.text == "Understood."
    last_tool = [m for m in client.requests[1].messages if m.role == "tool"][-1]
    assert last_tool.contents[0].result == "Error: Tool call invocation was rejected by user."


async def test_approval_without_the_paused_session_is_an_error(clock: FixedClock, ids: SequentialIds) -> None:
    """Approval responses that match no pending call raise a clear error instead of being dropped."""
    ran: list[str] = []
    client = ScriptedChatClient([Call("wire_money", {"amount": 1}), "x"])
    agent = _agent(client, clock, ids, ran)
    paused = await agent.run("send 1")
    answer = paused.user_input_requests[0].to_approval_response(True)
    with pytest.raises(AgentLedgerError, match="call_1"):
        await agent.run(Message("user", (answer,)))
    assert ran == []


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


async def test_invalid_arguments_are_rejected_before_approval(clock: FixedClock, ids: SequentialIds) -> None:
    """A gated call whose arguments cannot run is rejected at once; nobody is asked to approve it."""
    ran: list[str] = []
    client = ScriptedChatClient([Call("wire_money", "{not json"), "Fixed."])
    agent = _agent(client, clock, ids, ran)
    response = await agent.run("send", session=agent.create_session())
    assert response.user_input_requests == []
    assert "ApprovalRequested" not in event_types(response.events)
    assert "ArgumentsRejected" in event_types(response.events)
    assert response.text == "Fixed."

"""Approvals: a gated call pauses its batch, an answer resumes it, each step recorded as events."""

from __future__ import annotations

from typing import Any

import pytest

from agentledger import Agent, AgentSession, Content, FunctionTool, Message, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core import ApprovalRequested, ApprovalResolved
from agentledger.core.approvals import paused_calls
from agentledger.core.events import ToolCalled
from agentledger.errors import AgentLedgerError, ModelCallError
from agentledger.testing import FixedClock, SequentialIds, event_types, events_of

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


async def test_approval_mode_set_after_the_tool_is_built_gates_it(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """Setting approval_mode on a built tool makes its calls wait for approval."""

    def wire(amount: int) -> str:
        return f"sent {amount}"

    gated = FunctionTool(wire)
    gated.approval_mode = "always_require"
    client = ScriptedChatClient([Call("wire", {"amount": 1}), "x"])
    response = await Agent(client=client, tools=[gated], clock=clock, ids=ids).run("go")
    assert response.finish_reason == "awaiting_approval"
    assert events_of(response.events, ApprovalRequested)
    assert not events_of(response.events, ToolCalled)
    with pytest.raises(ValueError, match="approval_mode"):
        gated.approval_mode = "sometimes"  # type: ignore[assignment]


async def test_a_rejected_approval_stops_only_its_call(clock: FixedClock, ids: SequentialIds) -> None:
    """Nothing of a gated batch runs before the answer; after a rejection the other calls run."""
    ran: list[str] = []
    client = ScriptedChatClient([[Call("wire_money", {"amount": 5}), Call("balance")], "ok"])
    agent = _agent(client, clock, ids, ran)
    session = agent.create_session()
    paused = await agent.run("pay and check", session=session)
    assert ran == []
    assert [m.role for m in paused.messages] == ["assistant"]
    answers = tuple(r.to_approval_response(False) for r in paused.user_input_requests)
    resumed = await agent.run(Message("user", answers), session=session)
    assert ran == ["balance"]
    results = [(c.call_id, c.exception) for c in resumed.messages[0].contents]
    assert results == [("call_1", None), ("call_2", None)]
    assert [m.role for m in client.requests[1].messages] == ["user", "assistant", "tool"]


async def test_a_resume_must_answer_every_request_of_the_batch(clock: FixedClock, ids: SequentialIds) -> None:
    """Answering one of two approval requests is refused before anything runs."""
    ran: list[str] = []
    batch = [Call("wire_money", {"amount": 1}), Call("wire_money", {"amount": 2})]
    client = ScriptedChatClient([batch, "ok"])
    agent = _agent(client, clock, ids, ran)
    session = agent.create_session()
    paused = await agent.run("pay twice", session=session)
    first = paused.user_input_requests[0].to_approval_response(True)
    with pytest.raises(ValueError, match="answer every request"):
        await agent.run(Message("user", (first,)), session=session)
    assert ran == []


def _fail(request: Any) -> str:
    raise ConnectionError("model unreachable")


async def test_a_failed_resume_does_not_run_the_approved_call_twice(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """A resume whose batch ran before the model failed keeps the results: the same answer again
    is refused, and the conversation can go on."""
    ran: list[str] = []
    client = ScriptedChatClient([Call("wire_money", {"amount": 5}), _fail, "fine"])
    agent = _agent(client, clock, ids, ran)
    session = agent.create_session()
    paused = await agent.run("pay", session=session)
    answers = tuple(r.to_approval_response(True) for r in paused.user_input_requests)
    with pytest.raises(ModelCallError):
        await agent.run(Message("user", answers), session=session)
    with pytest.raises(ValueError, match="match no call awaiting approval"):
        await agent.run(Message("user", answers), session=session)
    assert ran == ["wire 5"]
    assert not paused_calls(session.history)
    assert (await agent.run("and now?", session=session)).text == "fine"
    store = agent.store
    assert store is not None
    logs = [event for stream in await store.streams() for event in await store.read(stream)]
    assert AgentSession.from_events(logs, session.session_id).history == session.history


async def test_a_rejection_reason_is_recorded_and_not_sent(clock: FixedClock, ids: SequentialIds) -> None:
    """A reason given with an answer is kept on ``ApprovalResolved``; the model is sent only the
    rejection, as without one."""
    ran: list[str] = []
    client = ScriptedChatClient([Call("wire_money", {"amount": 5}), "Not sent."])
    agent = _agent(client, clock, ids, ran)
    session = agent.create_session()
    paused = await agent.run("send 5", session=session)
    [request] = paused.user_input_requests
    answer = request.to_approval_response(False, reason="wrong account")
    resumed = await agent.run(Message("user", (answer,)), session=session)
    assert ran == []
    [resolved] = [e for e in resumed.events if isinstance(e, ApprovalResolved)]
    assert (resolved.approved, resolved.reason) == (False, "wrong account")
    [result] = client.requests[1].messages[-1].contents
    assert "wrong account" not in str(result.result)


async def test_a_call_reusing_an_answered_calls_id_is_asked_resumed_and_run_once(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """Some local servers number each answer's calls from the same id: the gated call reusing
    the id of a call that ran before is the one asked about, its approval resumes it, and the
    conversation goes on after it."""
    ran: list[str] = []

    def answer(call: Content) -> Message:
        return Message("assistant", (call,))

    client = ScriptedChatClient([
        answer(Content.from_function_call("call_0", "balance", arguments="{}")),
        answer(Content.from_function_call("call_0", "wire_money", arguments='{"amount": 5}')),
        "Sent.",
        "Nothing else.",
    ])  # fmt: skip
    agent = _agent(client, clock, ids, ran)
    session = AgentSession("s")
    paused = await agent.run("Check, then pay 5.", session=session)
    (request,) = paused.user_input_requests
    assert (request.call_id, request.name) == ("call_0", "wire_money")
    resumed = await agent.run(Message("user", (request.to_approval_response(True),)), session=session)
    assert resumed.text == "Sent."
    assert (await agent.run("Thanks.", session=session)).text == "Nothing else."
    assert ran == ["balance", "wire 5"]

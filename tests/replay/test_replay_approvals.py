"""A replay never runs an approved call again: an approval allows one execution, and the
recorded run made it. A fork of a resumed run takes the approved call's recorded outcome, from
any point; where the log holds no outcome (the resume crashed inside the call), a fork or a live
rerun refuses the call instead of running it."""

from __future__ import annotations

from typing import Any

import pytest

from agentledger import (
    Agent,
    AgentResponse,
    AgentSession,
    MemoryEventStore,
    Message,
    ReplayDivergence,
    SessionContext,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core import ToolCalled, ToolFailed, ToolReturned
from agentledger.providers import ContextProvider
from agentledger.replay import RecordedRun, fork, load, replay, rerun

pytestmark = pytest.mark.anyio


class Bank:
    def __init__(self) -> None:
        self.sent: list[int] = []
        self.pinged = 0

    def agent(self, client: ScriptedChatClient, store: MemoryEventStore | bool = False) -> Agent:
        @tool(approval_mode="always_require")
        def wire_money(amount: int) -> str:
            """Send money (a human must approve)."""
            self.sent.append(amount)
            return f"sent {amount}"

        @tool
        def balance() -> int:
            """The balance."""
            self.pinged += 1
            return 100

        return Agent(client=client, tools=[wire_money, balance], store=store)


async def _resumed(bank: Bank) -> tuple[AgentResponse, MemoryEventStore]:
    store = MemoryEventStore()
    client = ScriptedChatClient([[Call("wire_money", {"amount": 5}), Call("balance")], "Sent 5."])
    agent = bank.agent(client, store)
    session = AgentSession("s1")
    paused = await agent.run("Send 5.", session=session)
    answers = [request.to_approval_response(True) for request in paused.user_input_requests]
    resumed = await agent.run(Message("user", answers), session=session)
    assert bank.sent == [5]
    return resumed, store


async def test_a_fork_of_a_resumed_run_never_sends_again_from_any_point() -> None:
    bank = Bank()
    resumed, store = await _resumed(bank)
    recorded = await load(store, resumed.run_id)
    for at in range(len(recorded.events)):
        agent, client = bank.agent(ScriptedChatClient([])), ScriptedChatClient(["Forked."])
        forked = await fork(recorded, agent, at=at, client=client)
        results = [e for e in forked.events if type(e) is ToolReturned and e.name == "wire_money"]
        assert [r.result for r in results] == ["sent 5"], at  # the recorded outcome stands in
    assert bank.sent == [5]


async def test_an_approved_call_without_an_outcome_is_refused_not_run() -> None:
    bank = Bank()
    resumed, store = await _resumed(bank)
    loaded = await load(store, resumed.run_id)
    events = loaded.events
    called = next(e.seq for e in events if type(e) is ToolCalled and e.name == "wire_money")
    crashed = RecordedRun(events[: called + 1], prior=loaded.prior)  # the resume died in the call
    agent, client = bank.agent(ScriptedChatClient([])), ScriptedChatClient(["Forked."])
    forked = await fork(crashed, agent, at=0, client=client)
    failed = [e for e in forked.events if type(e) is ToolFailed and e.name == "wire_money"]
    assert [f.error_type for f in failed] == ["ApprovalError"]
    assert "may have taken effect" in failed[0].message
    with pytest.raises(ReplayDivergence):  # the cut log ends where the rerun goes on
        await rerun(crashed, bank.agent(ScriptedChatClient(["Sent 5."])), tools="live")
    assert bank.sent == [5]


async def test_calls_nobody_approved_still_run_live_in_a_fork() -> None:
    bank = Bank()
    resumed, store = await _resumed(bank)
    recorded = await load(store, resumed.run_id)
    assert bank.pinged == 1
    await fork(recorded, bank.agent(ScriptedChatClient([])), at=0, client=ScriptedChatClient(["Forked."]))
    assert bank.pinged == 2  # a fork's later calls are live: that is what a fork is for
    assert bank.sent == [5]


async def test_a_live_rerun_runs_the_other_tools_and_repeats_the_approved_outcome() -> None:
    bank = Bank()
    resumed, store = await _resumed(bank)
    recorded = await load(store, resumed.run_id)
    response = await rerun(recorded, bank.agent(ScriptedChatClient([])), tools="live")
    assert response is not None
    assert response.text == "Sent 5."
    assert (bank.sent, bank.pinged) == ([5], 2)


@pytest.mark.parametrize("loaded", [True, False], ids=["child-loaded", "child-in-its-own-store"])
async def test_a_fork_does_not_run_an_approved_sub_agent_again(loaded: bool) -> None:
    """With the child's log loaded, the child reruns from it with its recorded tool outcomes;
    without it, the call's recorded outcome stands in. Either way nothing is delivered again."""
    deliveries: list[str] = []

    @tool
    def deliver(item: str) -> str:
        """Deliver an item."""
        deliveries.append(item)
        return f"delivered {item}"

    courier = Agent(
        client=ScriptedChatClient([Call("deliver", {"item": "box"}), "Delivered."] * 3),
        name="courier",
        tools=[deliver],
        store=True if loaded else MemoryEventStore(),
    )
    store = MemoryEventStore()
    dispatch = courier.as_tool(name="courier", approval_mode="always_require")
    client = ScriptedChatClient([Call("courier", {"task": "deliver the box"}), "Done."])
    agent = Agent(client=client, tools=[dispatch], store=store)
    session = AgentSession("s2")
    paused = await agent.run("Deliver the box.", session=session)
    answers = [request.to_approval_response(True) for request in paused.user_input_requests]
    resumed = await agent.run(Message("user", answers), session=session)
    assert deliveries == ["box"]
    recorded = await load(store, resumed.run_id)
    assert bool(recorded.children) is loaded
    forked = await fork(recorded, agent, at=0, client=ScriptedChatClient(["Forked."]))
    assert forked.text == "Forked."
    assert deliveries == ["box"]


def _payer(sent: list[int], store: MemoryEventStore | bool, lead: list[object], child: list[object]) -> Agent:
    @tool
    def wire_money(amount: int) -> str:
        """Send money."""
        sent.append(amount)
        return f"sent {amount}"

    payer = Agent(client=ScriptedChatClient(child), name="payer", tools=[wire_money])  # type: ignore[arg-type]
    gated = payer.as_tool(name="pay", approval_mode="always_require")
    return Agent(client=ScriptedChatClient(lead), name="lead", tools=[gated], store=store)  # type: ignore[arg-type]


async def test_a_live_replay_does_not_run_the_tools_of_an_approved_sub_agent_again() -> None:
    """The approval allowed the child's run once: a live replay reruns the child with its tools'
    recorded outcomes (and below it, everything), and finds nothing."""
    sent: list[int] = []
    store = MemoryEventStore()
    agent = _payer(
        sent, store, [Call("pay", {"task": "pay 5"}), "Paid."], [Call("wire_money", {"amount": 5}), "Wired."]
    )
    session = AgentSession("s3")
    paused = await agent.run("Pay 5.", session=session)
    answers = [request.to_approval_response(True) for request in paused.user_input_requests]
    resumed = await agent.run(Message("user", answers), session=session)
    assert sent == [5]
    recorded = await load(store, resumed.run_id)
    assert len(recorded.children) == 1
    report = await replay(recorded, _payer(sent, False, [], []), tools="live")
    assert sent == [5]
    assert report.findings == []
    assert len(report.runs) == 2


async def test_a_live_replay_keeps_an_approved_call_whose_tool_is_no_longer_gated() -> None:
    """Which calls were approved is the log's to say, not the current code's approval mode."""
    bank = Bank()
    resumed, store = await _resumed(bank)
    recorded = await load(store, resumed.run_id)

    @tool  # the same tool, no longer gated
    def wire_money(amount: int) -> str:
        """Send money (a human must approve)."""
        bank.sent.append(amount)
        return f"sent {amount}"

    @tool
    def balance() -> int:
        """The balance."""
        bank.pinged += 1
        return 100

    agent = Agent(client=ScriptedChatClient([]), tools=[wire_money, balance], store=False)
    report = await replay(recorded, agent, tools="live")
    assert bank.sent == [5]
    assert bank.pinged == 2  # the other tool ran live
    assert [(f.kind, f.field) for f in report.findings] == [("drift", "tools[wire_money].approval_mode")]


async def test_a_live_replay_keeps_an_approved_call_of_a_tool_a_provider_offered() -> None:
    paid: list[int] = []

    @tool(approval_mode="always_require")
    def pay(amount: int) -> str:
        """Pay."""
        paid.append(amount)
        return f"paid {amount}"

    class Payments(ContextProvider):
        async def before_run(self, *, agent: Any, session: Any, context: SessionContext, state: Any) -> None:
            context.extend_tools(self.source_id, [pay])

    def agent(client: ScriptedChatClient, store: MemoryEventStore | bool) -> Agent:
        return Agent(client=client, context_providers=[Payments("payments")], store=store)

    store = MemoryEventStore()
    recording = agent(ScriptedChatClient([Call("pay", {"amount": 7}), "Paid."]), store)
    session = AgentSession("s4")
    paused = await recording.run("Pay 7.", session=session)
    answers = [request.to_approval_response(True) for request in paused.user_input_requests]
    resumed = await recording.run(Message("user", answers), session=session)
    assert paid == [7]
    recorded = await load(store, resumed.run_id)
    report = await replay(recorded, agent(ScriptedChatClient([]), False), tools="live")
    assert paid == [7]
    assert report.findings == []


async def test_the_child_of_an_approved_call_replayed_alone_keeps_its_recorded_outcomes() -> None:
    """``load`` of a sub-agent run reads its callers' logs: a child run that answers an approved
    call replays with its tools' recorded outcomes on its own too, live tools or not."""
    sent: list[int] = []
    store = MemoryEventStore()
    lead = _payer(
        sent, store, [Call("pay", {"task": "pay 5"}), "Paid."], [Call("wire_money", {"amount": 5}), "Wired."]
    )
    session = AgentSession("s5")
    paused = await lead.run("Pay 5.", session=session)
    answers = [request.to_approval_response(True) for request in paused.user_input_requests]
    resumed = await lead.run(Message("user", answers), session=session)
    [child] = (await load(store, resumed.run_id)).children.values()
    alone = await load(store, child.run_id)
    assert alone.approved_above
    payer = _payer(sent, False, [], []).tools[0].agent  # type: ignore[attr-defined]
    report = await replay(alone, payer, tools="live")
    assert sent == [5]
    assert report.findings == []
    assert not (await load(store, resumed.run_id)).approved_above  # the lead answers no call

"""Sub-agents as tools: linked logs, session propagation, nesting and recursion."""

from __future__ import annotations

import anyio
import pytest

from agentledger import (
    Agent,
    AgentSession,
    FunctionInvocationContext,
    MemoryEventStore,
    ReplayDivergence,
    timeline,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptedRequest
from agentledger.core import ChildRunStarted, RunFailed, RunStarted, SessionUpdated, ToolFailed
from agentledger.core.events import Event
from agentledger.replay import RecordedRun, load, replay, rerun
from agentledger.store import EventStore
from agentledger.testing import FixedClock, SequentialIds, capture_events, event_types

pytestmark = pytest.mark.anyio


@tool(description="Store findings for later steps.")
def store_findings(findings: str, ctx: FunctionInvocationContext) -> None:
    if ctx.session is not None:
        ctx.session.state["findings"] = findings


def _research(propagate: bool, clock: FixedClock, ids: SequentialIds) -> tuple[Agent, ScriptedChatClient]:
    child_client = ScriptedChatClient([Call("store_findings", {"findings": "tides are lunar"}), "Stored."])
    research_agent = child_client.as_agent(
        name="ResearchAgent",
        instructions="Research the topic and store findings.",
        tools=[store_findings],
        clock=clock,
        ids=ids,
    )
    research_tool = research_agent.as_tool(
        name="research",
        description="Research a topic and store findings.",
        arg_name="query",
        propagate_session=propagate,
    )
    parent_client = ScriptedChatClient([Call("research", {"query": "tides"}), "Research done."])
    parent = parent_client.as_agent(name="Lead", tools=[research_tool], clock=clock, ids=ids)
    return parent, child_client


def _runs(events: list[Event]) -> dict[str, list[Event]]:
    runs: dict[str, list[Event]] = {}
    for event in events:
        runs.setdefault(event.run_id, []).append(event)
    return runs


async def test_propagated_session_is_shared(clock: FixedClock, ids: SequentialIds) -> None:
    """With propagate_session=True the child's write lands in the caller's session and both logs."""
    parent, child_client = _research(True, clock, ids)
    session = parent.create_session()
    with capture_events() as events:
        response = await parent.run("Look into tides.", session=session)
    assert response.text == "Research done."
    assert session.state["findings"] == "tides are lunar"
    runs = _runs(events)
    parent_log, child_log = runs[response.run_id], next(v for k, v in runs.items() if k != response.run_id)
    child_start = child_log[0]
    assert isinstance(child_start, RunStarted)
    assert (child_start.parent_run_id, child_start.parent_call_id) == (response.run_id, "call_1")
    assert child_start.session_id == session.session_id
    assert child_start.session_history is False
    [link] = [e for e in parent_log if isinstance(e, ChildRunStarted)]
    assert (link.child_run_id, link.call_id, link.propagate_session) == (child_start.run_id, "call_1", True)
    [original] = [e for e in child_log if isinstance(e, SessionUpdated)]
    [copy] = [e for e in parent_log if isinstance(e, SessionUpdated)]
    assert copy.changes == original.changes
    assert (copy.origin_run_id, copy.origin_seq) == (original.run_id, original.seq)
    assert child_client.requests[0].messages[0].text == "tides"


async def test_session_rebuilt_from_logs(clock: FixedClock, ids: SequentialIds) -> None:
    """The caller's session rebuilt from the logs equals the live one, sub-agent writes included."""
    parent, _ = _research(True, clock, ids)
    session = parent.create_session()
    session.state["before"] = 1
    with capture_events() as events:
        response = await parent.run("Look into tides.", session=session)
    runs = _runs(events)
    root_only = AgentSession.from_events(runs[response.run_id], session.session_id)
    everything = AgentSession.from_events(events, session.session_id)
    children_first = AgentSession.from_events(
        [e for e in events if e.run_id != response.run_id] + runs[response.run_id], session.session_id
    )
    for rebuilt in (root_only, everything, children_first):
        assert (
            rebuilt.state.snapshot()
            == session.state.snapshot()
            == {"before": 1, "findings": "tides are lunar"}
        )
    assert everything.history == session.history


async def test_child_history_stays_its_own(clock: FixedClock, ids: SequentialIds) -> None:
    """The child's conversation never enters the caller's history or transcript."""
    parent, _ = _research(True, clock, ids)
    session = parent.create_session()
    await parent.run("Look into tides.", session=session)
    texts = [m.text for m in session.history]
    assert "tides" not in texts
    assert "Stored." not in texts
    assert texts[0] == "Look into tides."
    assert texts[-1] == "Research done."


async def test_isolated_session_when_not_propagated(clock: FixedClock, ids: SequentialIds) -> None:
    """With propagate_session=False the child writes into a session of its own."""
    parent, _ = _research(False, clock, ids)
    session = parent.create_session()
    with capture_events() as events:
        response = await parent.run("Look into tides.", session=session)
    assert "findings" not in session.state
    child_start = next(e for e in events if isinstance(e, RunStarted) and e.parent_run_id)
    assert child_start.session_id != session.session_id
    assert not [e for e in events if isinstance(e, SessionUpdated) and e.run_id == response.run_id]
    child_writes = [e for e in events if isinstance(e, SessionUpdated) and e.run_id == child_start.run_id]
    assert [c.key for e in child_writes for c in e.changes] == ["findings"]


async def test_kwargs_flow_to_the_child(clock: FixedClock, ids: SequentialIds) -> None:
    """function_invocation_kwargs of the caller reach the child's tools through ctx.kwargs."""
    seen: list[object] = []

    @tool
    def whoami(ctx: FunctionInvocationContext) -> str:
        seen.append(ctx.kwargs.get("user_id"))
        return "ok"

    child = ScriptedChatClient([Call("whoami"), "child done"]).as_agent(name="Child", tools=[whoami], ids=ids)
    parent = ScriptedChatClient([Call("Child", {"task": "x"}), "done"]).as_agent(
        tools=[child.as_tool()], clock=clock, ids=ids
    )
    await parent.run("go", function_invocation_kwargs={"user_id": "u-1"})
    assert seen == ["u-1"]


async def test_child_failure_is_an_error_result(clock: FixedClock, ids: SequentialIds) -> None:
    """A failing child run is RunFailed in its log and ToolFailed in the caller's; the caller goes on."""
    child = ScriptedChatClient([]).as_agent(name="Broken", ids=ids, clock=clock)
    parent_client = ScriptedChatClient([Call("Broken", {"task": "x"}), "recovered"])
    parent = parent_client.as_agent(tools=[child.as_tool()], clock=clock, ids=ids)
    with capture_events() as events:
        response = await parent.run("go")
    assert response.text == "recovered"
    failed = [e for e in events if isinstance(e, ToolFailed)]
    assert [(e.run_id, e.error_type) for e in failed] == [(response.run_id, "ModelCallError")]
    assert any(isinstance(e, RunFailed) and e.run_id != response.run_id for e in events)


def _delegating(name: str, tools: list[object], ids: SequentialIds) -> Agent:
    def answer(request: ScriptedRequest) -> object:
        if request.messages[-1].role == "tool":
            return f"{name} done"
        return Call(request.tools[0], {"task": "deeper"}) if request.tools else f"{name} leaf"

    return ScriptedChatClient([answer], repeat=True).as_agent(name=name, tools=tools, ids=ids)


async def test_three_levels_deep(ids: SequentialIds) -> None:
    """A sub-agent of a sub-agent of an agent works; the timeline nests each run under its call."""
    leaf = _delegating("Leaf", [], ids)
    middle = _delegating("Middle", [leaf.as_tool()], ids)
    top = _delegating("Top", [middle.as_tool()], ids)
    with capture_events() as events:
        response = await top.run("start")
    assert response.text == "Top done"
    starts = [e for e in events if isinstance(e, RunStarted)]
    assert [s.agent_name for s in starts] == ["Top", "Middle", "Leaf"]
    assert starts[2].parent_run_id == starts[1].run_id
    lines = timeline(events).splitlines()
    assert lines[0] == f"run {starts[0].run_id}"
    assert any(line.startswith("        run ") for line in lines)


async def test_unbounded_recursion_stops(ids: SequentialIds) -> None:
    """An agent that delegates to itself forever stops at the depth limit with a clear error."""

    def answer(request: ScriptedRequest) -> object:
        return "unwound" if request.messages[-1].role == "tool" else Call("Loop", {"task": "again"})

    loop = ScriptedChatClient([answer], repeat=True).as_agent(name="Loop", ids=ids)
    loop.tools.append(loop.as_tool())
    with capture_events() as events:
        response = await loop.run("go")
    assert response.text == "unwound"
    depth_errors = [e for e in events if isinstance(e, ToolFailed) and e.error_type == "SubAgentDepthError"]
    assert len(depth_errors) == 1
    assert "limit 8" in depth_errors[0].message


async def test_concurrent_children_last_write_in_log_order(clock: FixedClock, ids: SequentialIds) -> None:
    """Parallel sub-agents writing one key: the caller's log keeps their writes in the model's
    order of the calls, whichever happened first, and the value is the last write in it."""
    gate = anyio.Event()

    @tool
    async def write(value: str, ctx: FunctionInvocationContext) -> str:
        assert ctx.session is not None
        if value == "first":
            await gate.wait()
        ctx.session.state["k"] = value
        if value == "second":
            gate.set()
        return value

    def child(name: str, value: str) -> Agent:
        client = ScriptedChatClient([Call("write", {"value": value}), "ok"])
        return client.as_agent(name=name, tools=[write], ids=ids)

    tools = [
        child("A", "first").as_tool(propagate_session=True),
        child("B", "second").as_tool(propagate_session=True),
    ]
    parent_client = ScriptedChatClient([[Call("A", {"task": "a"}), Call("B", {"task": "b"})], "both done"])
    parent = parent_client.as_agent(tools=tools, clock=clock, ids=ids)
    session = parent.create_session()
    response = await parent.run("go", session=session)
    copies = [e for e in response.events if isinstance(e, SessionUpdated)]
    assert [e.changes[0].value for e in copies] == ["first", "second"]  # B wrote first, in time
    assert session.state["k"] == "second"
    assert AgentSession.from_events(response.events, session.session_id).state.snapshot() == {"k": "second"}
    assert event_types(response.events).count("ChildRunStarted") == 2


async def test_agent_sinks_see_sub_agent_runs(clock: FixedClock, ids: SequentialIds) -> None:
    """An agent's event sinks receive its sub-agents' events too, as they happen."""
    parent, _ = _research(True, clock, ids)
    seen: list[str] = []
    parent.event_sinks = (lambda event: seen.append(event.run_id),)
    session = parent.create_session()
    with capture_events() as events:
        await parent.run("Look into tides.", session=session)
    assert len(set(seen)) == 2
    assert seen == [e.run_id for e in events]


async def test_child_waiting_for_approval_fails_the_call(clock: FixedClock, ids: SequentialIds) -> None:
    """A sub-agent that pauses for approval gives its caller an error result, never a silent success."""

    @tool(approval_mode="always_require")
    def wire_money(amount: int) -> str:
        return f"sent {amount}"

    child = ScriptedChatClient([Call("wire_money", {"amount": 100}), "sent"]).as_agent(
        name="payer", tools=[wire_money], ids=ids, clock=clock
    )
    parent_client = ScriptedChatClient([Call("payer", {"task": "pay"}), "could not pay"])
    parent = parent_client.as_agent(tools=[child.as_tool()], clock=clock, ids=ids)
    response = await parent.run("pay bob", session=parent.create_session())
    [failed] = [e for e in response.events if isinstance(e, ToolFailed)]
    assert failed.error_type == "SubAgentApprovalError"
    assert "wire_money" in failed.message


async def test_recorded_rerun_leaves_the_child_alone(clock: FixedClock, ids: SequentialIds) -> None:
    """A rerun reruns the sub-agent from its own log: the child's model is not asked again."""
    parent, child_client = _research(True, clock, ids)
    session = parent.create_session()
    with capture_events() as events:
        response = await parent.run("Look into tides.", session=session)
    asked = len(child_client.requests)
    runs = _runs(events)
    [link] = [e for e in response.events if isinstance(e, ChildRunStarted)]
    child = RecordedRun(runs[link.child_run_id])
    recorded = RecordedRun(response.events, children={link.call_id: child})
    rerun_response = await rerun(recorded, parent)
    assert rerun_response is not None
    assert rerun_response.text == "Research done."
    assert len(child_client.requests) == asked


async def test_a_rerun_without_the_childs_log_cannot_replay_it(clock: FixedClock, ids: SequentialIds) -> None:
    """A run built from its own events alone has no sub-agent logs: the rerun says so."""
    parent, _ = _research(True, clock, ids)
    response = await parent.run("Look into tides.", session=parent.create_session())
    with pytest.raises(ReplayDivergence) as raised:
        await rerun(RecordedRun(response.events), parent)
    [finding] = raised.value.findings
    assert finding.kind == "cannot_replay"
    assert "ResearchAgent" in finding.where


def _mailer(store: EventStore | bool = True, ids: SequentialIds | None = None) -> Agent:
    @tool
    def send_mail(to: str) -> str:
        """Send a mail."""
        return f"sent to {to}"

    client = ScriptedChatClient([Call("send_mail", {"to": "ops"}), "Mailed."] * 3)
    return Agent(client=client, name="mailer", tools=[send_mail], store=store, ids=ids)


def _lead(child: Agent, store: EventStore | bool = True, ids: SequentialIds | None = None) -> Agent:
    client = ScriptedChatClient([Call("mailer", {"task": "tell ops"}), "Ops told."] * 3)
    return Agent(client=client, tools=[child.as_tool(name="mailer")], store=store, ids=ids)


async def test_a_sub_agent_with_the_default_store_records_into_its_callers() -> None:
    """Left with the default store, the child's run goes where the calling run's go: the tree
    loads and replays from one store, nothing is reported as not loaded."""
    child = _mailer()
    lead = _lead(child)
    response = await lead.run("Tell ops.")
    [link] = [e for e in response.events if isinstance(e, ChildRunStarted)]
    assert lead.store is not None
    assert child.store is not None
    assert sorted(await lead.store.streams()) == sorted([response.run_id, link.child_run_id])
    assert await child.store.streams() == []
    recorded = await load(lead.store, response.run_id)
    assert list(recorded.children) == [link.call_id]
    report = await replay(recorded, _lead(_mailer(False), False))
    assert report.runs == [response.run_id, link.child_run_id]
    assert report.findings == []


async def test_a_run_of_the_sub_agent_itself_stays_in_its_own_store() -> None:
    child = _mailer()
    await _lead(child).run("Tell ops.")
    own = await child.run("Tell ops yourself.")
    assert child.store is not None
    assert await child.store.streams() == [own.run_id]


async def test_nested_sub_agents_with_default_stores_record_into_the_root_store() -> None:
    mailer = _mailer()
    middle_client = ScriptedChatClient([Call("mailer", {"task": "tell ops"}), "Passed on."])
    middle = Agent(client=middle_client, name="middle", tools=[mailer.as_tool(name="mailer")])
    root_client = ScriptedChatClient([Call("middle", {"task": "pass it on"}), "Done."])
    store = MemoryEventStore()
    root = Agent(client=root_client, tools=[middle.as_tool(name="middle")], store=store)
    response = await root.run("Go.")
    assert len(await store.streams()) == 3
    recorded = await load(store, response.run_id)
    [child] = recorded.children.values()
    assert len(child.children) == 1
    assert middle.store is not None
    assert mailer.store is not None
    assert await middle.store.streams() == []
    assert await mailer.store.streams() == []


@pytest.mark.parametrize("given", ["store", "false", "assigned"])
async def test_a_sub_agent_given_a_store_keeps_recording_there(given: str) -> None:
    own = MemoryEventStore()
    stores: dict[str, EventStore | bool] = {"store": own, "false": False, "assigned": True}
    child = _mailer(stores[given])
    if given == "assigned":
        child.store = own
    lead = _lead(child)
    response = await lead.run("Tell ops.")
    assert lead.store is not None
    assert await lead.store.streams() == [response.run_id]
    [link] = [e for e in response.events if isinstance(e, ChildRunStarted)]
    assert await own.streams() == ([] if given == "false" else [link.child_run_id])
    assert child.child_store(lead.store) is child.store


async def test_a_caller_that_records_nowhere_leaves_the_child_its_own_store() -> None:
    child = _mailer()
    response = await _lead(child, store=False).run("Tell ops.")
    [link] = [e for e in response.events if isinstance(e, ChildRunStarted)]
    assert child.store is not None
    assert await child.store.streams() == [link.child_run_id]


async def test_a_child_run_id_taken_in_the_callers_store_fails_the_call() -> None:
    """Two id sources counting from 1 now share the caller's store: the child's ``run_1`` is the
    caller's, and the call fails before the caller's log links to it."""
    lead = _lead(_mailer(ids=SequentialIds()), ids=SequentialIds())
    response = await lead.run("Tell ops.")
    [failed] = [e for e in response.events if isinstance(e, ToolFailed)]
    assert failed.error_type == "RunIdTakenError"
    assert not [e for e in response.events if isinstance(e, ChildRunStarted)]

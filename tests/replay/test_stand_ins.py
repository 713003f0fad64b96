"""How a replay answers each tool call: per tools mode, for approved calls, and for tools marked
``@tool(replay=...)`` on every replay path (rerun, fork, sub-agents)."""

from __future__ import annotations

from typing import Annotated, Any

import pytest

from agentledger import Agent, Message, ReplayRefusedError, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core.events import ToolFailed, ToolReturned
from agentledger.replay import RecordedRun, fork, replay
from agentledger.testing import FixedClock, SequentialIds, capture_events
from agentledger.tools import ReplayRule
from tests.replay_tree_agents import NoModel

pytestmark = pytest.mark.anyio


class Till:
    """A till whose tools count how often their bodies ran."""

    def __init__(self, replay: ReplayRule = "run", *, pay_replay: ReplayRule = "run") -> None:
        self.paid: list[int] = []
        self.priced: list[str] = []
        till = self

        @tool(replay=replay)
        def price(item: Annotated[str, "What to price."]) -> str:
            """The price of an item."""
            till.priced.append(item)
            return f"{item}: 3 EUR"

        @tool(approval_mode="always_require", replay=pay_replay)
        def pay(amount: Annotated[int, "Euros."]) -> str:
            """Take a payment."""
            till.paid.append(amount)
            return f"paid {amount} EUR"

        self.tools = [price, pay]

    def agent(self, script: list[Any] | None = None) -> Agent:
        client = ScriptedChatClient(script) if script is not None else NoModel()
        return Agent(client=client, name="till", tools=self.tools, ids=SequentialIds(), clock=FixedClock())


async def _paid_run(till: Till) -> tuple[RecordedRun, RecordedRun]:
    """A run that priced tea and asked to pay (paused), and the run that resumed it, approved."""
    agent = till.agent([Call("price", {"item": "tea"}), Call("pay", {"amount": 3}), "Paid."])
    session = agent.create_session()
    with capture_events() as events:
        paused = await agent.run("Buy tea.", session=session)
        [request] = paused.user_input_requests
        resumed = await agent.run(Message("user", [request.to_approval_response(True)]), session=session)
    logs = {run_id: [e for e in events if e.run_id == run_id] for run_id in (paused.run_id, resumed.run_id)}
    return (
        RecordedRun(logs[paused.run_id]),
        RecordedRun(logs[resumed.run_id], prior=logs[paused.run_id]),
    )


async def test_each_mode_answers_calls_by_its_rule() -> None:
    """recorded: the log answers every call; live: bodies run but for the approved payment;
    test: every body runs, the approved payment included. The report says which per call."""
    till = Till()
    first, resumed = await _paid_run(till)
    assert (till.priced, till.paid) == (["tea"], [3])
    hows: dict[str, list[tuple[str, str]]] = {}
    for mode in ("recorded", "live", "test"):
        for recorded in (first, resumed):
            report = await replay(recorded, till.agent(), tools=mode)
            assert report.passed(), report.findings
            hows.setdefault(mode, []).extend((c.tool, c.how) for c in report.calls)
    assert hows == {
        "recorded": [("price", "recorded"), ("pay", "recorded")],
        "live": [("price", "ran"), ("pay", "recorded")],
        "test": [("price", "ran"), ("pay", "ran")],
    }
    assert (till.priced, till.paid) == (["tea", "tea", "tea"], [3, 3])  # live and test priced; test paid


async def test_a_changed_gated_tool_is_caught_only_where_its_code_runs() -> None:
    """The approved call's tool changed: the test mode finds it, naming the call; live keeps
    the recorded run's one execution and cannot."""
    _, resumed = await _paid_run(Till())
    changed = Till()

    @tool(approval_mode="always_require")
    def pay(amount: Annotated[int, "Euros."]) -> str:
        """Take a payment."""
        return f"took {amount} EUR"

    changed.tools[1] = pay
    tested = await replay(resumed, changed.agent(), tools="test")
    finding = tested.divergences[0]  # the result, and then the answer that holds it
    assert finding.call == "call_2 (pay)"
    assert "'paid 3 EUR' -> 'took 3 EUR', in call_2 (pay)" in finding.describe()
    assert (await replay(resumed, changed.agent(), tools="live")).passed()


async def test_a_tool_marked_recorded_never_runs_in_any_mode() -> None:
    """pay, marked replay="recorded", takes its recorded outcome in every mode; its body never runs."""
    till = Till(pay_replay="recorded")
    _, resumed = await _paid_run(till)
    assert till.paid == [3]  # a live run runs it: the mark is about replays only
    for mode in ("recorded", "live", "test"):
        report = await replay(resumed, till.agent(), tools=mode)
        assert report.passed(), report.findings
        assert [(c.tool, c.how) for c in report.calls] == [("pay", "recorded")]
    assert till.paid == [3]


async def test_a_double_runs_in_the_place_of_the_body() -> None:
    """A tool marked with a double: the double runs where the body would, and its answer is
    compared with the recorded one."""
    seen: list[int] = []

    def fake_pay(amount: int) -> str:
        seen.append(amount)
        return f"paid {amount} EUR"

    till = Till(pay_replay=fake_pay)
    _, resumed = await _paid_run(till)
    report = await replay(resumed, till.agent(), tools="test")
    assert report.passed(), report.findings
    assert [(c.tool, c.how) for c in report.calls] == [("pay", "double")]
    assert (till.paid, seen) == ([3], [3])

    async def wrong(amount: int) -> str:
        return "declined"

    till.tools[1].replay = wrong
    finding = (await replay(resumed, till.agent(), tools="test")).divergences[0]
    assert (finding.recorded, finding.rerun) == ("paid 3 EUR", "declined")


async def test_a_fork_refuses_a_new_call_of_a_tool_marked_recorded() -> None:
    """Past the point, the fork's model calls price, marked never to run in a replay: the call
    fails with ReplayRefusedError (the model sees it), the body does not run; with a double, the
    double answers."""
    till = Till(replay="recorded")
    first, _ = await _paid_run(till)
    assert till.priced == ["tea"]
    live = ScriptedChatClient([Call("price", {"item": "jam"}), "No jam today."])
    response = await fork(first, till.agent(), at=0, client=live)
    [failed] = [e for e in response.events if isinstance(e, ToolFailed)]
    assert (failed.name, failed.error_type) == ("price", "ReplayRefusedError")
    assert till.priced == ["tea"]

    till.tools[0].replay = lambda item: f"{item}: 9 EUR"
    live = ScriptedChatClient([Call("price", {"item": "jam"}), "Jam is dear."])
    response = await fork(first, till.agent(), at=0, client=live)
    [returned] = [e for e in response.events if isinstance(e, ToolReturned) and e.name == "price"]
    assert returned.result == "jam: 9 EUR"
    assert till.priced == ["tea"]


def _tree(search_replay: ReplayRule, searched: list[str], *, recording: bool = False) -> Agent:
    @tool(replay=search_replay)
    def search(query: Annotated[str, "What to look up."]) -> str:
        """Search the library."""
        searched.append(query)
        return f"{query}: the moon"

    ids, clock = SequentialIds(), FixedClock()
    child = ScriptedChatClient([Call("search", {"query": "tides"}), "Found."]) if recording else NoModel()
    researcher = Agent(client=child, name="researcher", tools=[search], ids=ids, clock=clock)
    lead = ScriptedChatClient([Call("research", {"task": "tides"}), "The moon."]) if recording else NoModel()
    return Agent(client=lead, name="lead", tools=[researcher.as_tool(name="research")], ids=ids, clock=clock)


async def test_a_sub_agents_marked_tool_never_runs_in_a_replay_of_its_tree() -> None:
    """A sub-agent's search marked replay="recorded": the test mode reruns the sub-agent, and its
    search takes the recorded outcome; a fork that calls the sub-agent live past the point has
    its search refused."""
    searched: list[str] = []
    with capture_events() as events:
        response = await _tree("recorded", searched, recording=True).run("What makes the tides?")
    assert searched == ["tides"]
    from agentledger.replay.cassette import tree_of

    recorded = tree_of(events, response.run_id)
    report = await replay(recorded, _tree("recorded", searched), tools="test")
    assert report.passed(), report.findings
    assert [(c.tool, c.how) for c in report.calls] == [("research", "ran"), ("search", "recorded")]
    assert report.calls[1].run_id != report.calls[0].run_id  # the sub-agent's own run
    assert searched == ["tides"]

    lead = _tree("recorded", searched)
    lead.client = ScriptedChatClient([Call("research", {"task": "waves"}), "Unknown."])
    [research] = lead.tools
    child = research.agent  # type: ignore[attr-defined]
    child.client = ScriptedChatClient([Call("search", {"query": "waves"}), "Nothing found."])
    with capture_events() as forked:
        await fork(recorded, lead, at=0, client=lead.client)
    refused = [e for e in forked if isinstance(e, ToolFailed) and e.name == "search"]
    assert [e.error_type for e in refused] == ["ReplayRefusedError"]
    assert searched == ["tides"]


async def test_outside_a_replay_a_marked_tool_runs() -> None:
    """The mark changes nothing in a run: the body runs, and invoke() runs it too."""
    till = Till(replay="recorded", pay_replay=lambda amount: "never")
    assert await till.tools[0].invoke(item="tea") == "tea: 3 EUR"
    response = await till.agent([Call("price", {"item": "jam"}), "Jam is 3 EUR."]).run("Jam?")
    assert response.text == "Jam is 3 EUR."
    assert till.priced == ["tea", "jam"]


async def test_refused_names_the_tool() -> None:
    """ReplayRefusedError carries the tool's name."""
    error = ReplayRefusedError("no", tool="pay")
    assert error.tool == "pay"

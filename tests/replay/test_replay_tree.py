"""Replaying run trees: a lead agent with a research sub-agent, recorded to SQLite, replayed.

A replay reruns the lead's and the sub-agent's current code, each against its own recorded model
answers; no chat client is ever asked (``NoModel`` fails the test if one is). Changes inside the
sub-agent are found and named by their place in the tree; changed instructions are drift; every
difference is listed, not only the first.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import anyio
import pytest

from agentledger import Agent, MemoryEventStore, ReplayDivergence, ReplayDrift, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.cli import main
from agentledger.core.events import ChildRunStarted, Event, RunStarted, ToolReturned
from agentledger.replay import RecordedRun, differences, fork, load, replay, rerun
from tests import replay_tree_agents as agents
from tests.replay_tree_agents import NoModel, build

pytestmark = pytest.mark.anyio
TREE = "tests.replay_tree_agents"


@pytest.fixture
def no_model() -> Iterator[None]:
    NoModel.calls = 0
    yield
    assert NoModel.calls == 0, "a replay called a model"


@pytest.fixture
def tree(tmp_path: Path) -> tuple[str, str, str]:
    """Record the tree into a SQLite file; (store path, lead run id, child run id)."""
    path = tmp_path / "runs.db"

    async def record() -> tuple[str, str]:
        store = SqliteEventStore(path)
        lead = build(recording=True, store=store)
        response = await lead.run("What makes the tides?", session=lead.create_session())
        [link] = [e for e in response.events if isinstance(e, ChildRunStarted)]
        store.close()
        return response.run_id, link.child_run_id

    lead_id, child_id = anyio.run(record)
    return str(path), lead_id, child_id


async def _recorded(path: str, run_id: str) -> RecordedRun:
    store = SqliteEventStore(path, read_only=True)
    try:
        return await load(store, run_id)
    finally:
        store.close()


def _replay(path: str, *args: str) -> list[str]:
    return ["replay", *args, "--store", path]


@pytest.mark.parametrize("tools", ["recorded", "live"])
def test_unchanged_tree_replays_clean(
    tree: tuple[str, str, str], tools: str, no_model: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """The lead and its sub-agent both rerun and match, in either tools mode, asking no model."""
    path, lead, _ = tree
    assert main(_replay(path, lead, "--agent", f"{TREE}:same", "--tools", tools)) == 0
    out = capsys.readouterr().out
    assert "no divergence" in out
    assert "2 runs replayed" in out


def test_the_child_replays_alone_with_its_own_agent(
    tree: tuple[str, str, str], no_model: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sub-agent's run replays on its own, with the parent fields it recorded."""
    path, _, child = tree
    assert main(_replay(path, child, "--agent", f"{TREE}:same_researcher", "--tools", "live")) == 0
    assert "no divergence" in capsys.readouterr().out


def test_a_changed_sub_agent_tool_body_is_found_and_named(
    tree: tuple[str, str, str], no_model: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Live tools: the sub-agent's tool now returns something else; the finding names the sub-agent."""
    path, lead, child = tree
    assert main(_replay(path, lead, "--agent", f"{TREE}:changed_tool_body", "--tools", "live")) == 1
    err = capsys.readouterr().out
    assert f"{lead} > call_1 (researcher) > {child}: diverged" in err
    assert "ToolReturned.result" in err
    assert "tides follow the wind" in err


@pytest.mark.parametrize(
    ("factory", "where"),
    [
        ("changed_lead_prompt", "{lead}: drift"),
        ("changed_research_prompt", "{lead} > call_1 (researcher) > {child}: drift"),
    ],
)
def test_a_changed_prompt_is_drift_named_with_its_text(
    tree: tuple[str, str, str], factory: str, where: str, no_model: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Changed instructions, of the lead or of the sub-agent: drift, a text diff, a non-zero exit."""
    path, lead, child = tree
    assert main(_replay(path, lead, "--agent", f"{TREE}:{factory}")) == 1
    err = capsys.readouterr().out
    assert where.format(lead=lead, child=child) + " at seq 0, RunStarted.instructions" in err
    assert "cannot tell what the model would answer now" in err
    assert any(
        (line.strip().startswith("+") and "Be brief" in line) or "French" in line for line in err.splitlines()
    )
    assert main(_replay(path, lead, "--agent", f"{TREE}:{factory}", "--accept-drift")) == 0


def test_json_lists_each_finding_then_a_summary(
    tree: tuple[str, str, str], no_model: None, capsys: pytest.CaptureFixture[str]
) -> None:
    path, lead, child = tree
    assert main(_replay(path, lead, "--agent", f"{TREE}:changed_tool_body", "--tools", "live", "--json")) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    *findings, summary = lines
    assert summary["kind"] == "summary"
    assert summary["runs_replayed"] == [lead, child]
    assert summary["divergences"] == len(findings) == 2  # the call's result, the child's final messages
    first = findings[0]
    assert (first["run_id"], first["event_type"], first["field"]) == (child, "ToolReturned", "result")
    assert first["recorded"] == "tides: tides follow the moon"
    assert first["rerun"] == "tides: tides follow the wind"
    # The child's answer to the lead is the same recorded text, so the lead itself matches.
    assert {f["run_id"] for f in findings} == {child}


def test_a_factory_taking_the_recorded_run_gets_it(
    tree: tuple[str, str, str], no_model: None, capsys: pytest.CaptureFixture[str]
) -> None:
    path, lead, _ = tree
    assert main(_replay(path, lead, "--agent", f"{TREE}:from_recording")) == 0
    assert "no divergence" in capsys.readouterr().out


async def test_every_difference_is_listed(tree: tuple[str, str, str], no_model: None) -> None:
    """One change inside the sub-agent: every event it touches is listed, in log order."""
    path, lead, child = tree
    recorded = await _recorded(path, lead)
    report = await replay(recorded, agents.changed_tool_body(), tools="live")
    assert report.runs == [lead, child]
    places = [(f.run_id, f.event_type, f.field) for f in report.divergences]
    assert places == [
        (child, "ToolReturned", "result"),
        (child, "RunCompleted", "messages[1].contents[0].result"),
    ]
    with pytest.raises(ReplayDivergence) as raised:
        await rerun(recorded, agents.changed_tool_body(), tools="live")
    assert [f.describe() for f in raised.value.findings] == [f.describe() for f in report.findings]


async def test_a_changed_description_is_drift_and_hides_nothing(
    tree: tuple[str, str, str], no_model: None
) -> None:
    """A tool description changed and a tool body changed: both are reported, each as what it is."""
    path, lead, _ = tree
    recorded = await _recorded(path, lead)
    report = await replay(recorded, agents.changed_description_and_body(), tools="live")
    assert [f.field for f in report.drift] == ["tools[search].description"]
    assert report.divergences  # the changed body is still found after the drift
    with pytest.raises(ReplayDrift):
        await rerun(recorded, agents.changed_description())
    assert await rerun(recorded, agents.changed_description(), accept_drift=True) is not None


async def test_a_missing_child_log_cannot_replay(tree: tuple[str, str, str], no_model: None) -> None:
    """A lead whose sub-agent's log is not at hand: 'cannot replay', and in live mode no model either."""
    path, lead, child = tree
    full = await _recorded(path, lead)
    alone = RecordedRun(full.events, prior=full.prior)
    for tools in ("recorded", "live"):
        report = await replay(alone, agents.same(), tools=tools)
        [cannot] = report.findings  # the recorded result stands in: nothing else differs
        assert cannot.kind == "cannot_replay"
        assert cannot.where == f"{lead} > call_1 (researcher) > {child}"


def test_a_missing_child_log_exits_125(
    tree: tuple[str, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only the lead's log in the store: `git bisect run` is told to skip (125), in both modes."""
    path, lead, _ = tree
    only_lead = str(tmp_path / "lead-only.db")

    async def copy() -> None:
        source, target = SqliteEventStore(path, read_only=True), SqliteEventStore(only_lead)
        await target.append(lead, await source.read(lead), 0)
        source.close()
        target.close()

    anyio.run(copy)
    for tools in ("recorded", "live"):
        assert main(_replay(only_lead, lead, "--agent", f"{TREE}:same", "--tools", tools)) == 125
        assert "cannot replay" in capsys.readouterr().out


async def test_fork_replays_the_child_before_the_point(tree: tuple[str, str, str]) -> None:
    """A fork after the sub-agent call reruns the child from its log, then goes on live."""
    path, lead, _ = tree
    NoModel.calls = 0
    recorded = await _recorded(path, lead)
    [returned] = [e.seq for e in recorded.events if type(e).__name__ == "ToolReturned"]
    forked = await fork(recorded, agents.same(), at=returned, client=ScriptedChatClient(["Forked answer."]))
    assert forked.text == "Forked answer."
    assert NoModel.calls == 0


async def test_a_reused_parent_field_replays_the_child_run_fields(tree: tuple[str, str, str]) -> None:
    """The child's rerun carries the parent run and call it recorded (replayed alone or in the tree)."""
    path, lead, child = tree
    recorded = await _recorded(path, child)
    report = await replay(recorded, agents.same_researcher())
    [started] = [e for e in report.events[child] if isinstance(e, RunStarted)]
    assert (started.parent_run_id, started.parent_call_id) == (lead, "call_1")
    assert not report.findings


async def test_differences_align_past_an_extra_event(tree: tuple[str, str, str]) -> None:
    """One event more in the middle of a rerun is one finding, not a shift of everything after it."""
    path, lead, _ = tree
    events = (await _recorded(path, lead)).events
    extra = [*events[:3], events[2], *events[3:]]
    found = differences(events, extra)
    assert len(found) == 1
    assert (found[0].seq, found[0].event_type) == (None, type(events[2]).__name__)


async def test_a_run_tree_that_links_back_is_refused() -> None:
    """Logs whose sub-agent links lead back to a run above (run ids that collided, say) are
    refused with a typed error when the tree is loaded, instead of being walked forever."""
    from agentledger import LogCorruptError, MemoryEventStore, RunCycleError

    store = MemoryEventStore()
    lead: list[Event] = [
        RunStarted(run_id="run_1", seq=0, at=0, agent_id="lead"),
        ChildRunStarted(run_id="run_1", seq=1, at=1, call_id="call_1", child_run_id="run_2"),
    ]
    child: list[Event] = [
        RunStarted(
            run_id="run_2", seq=0, at=2, agent_id="child", parent_run_id="run_1", parent_call_id="call_1"
        ),
        ChildRunStarted(run_id="run_2", seq=1, at=3, call_id="call_2", child_run_id="run_1"),
    ]
    await store.append("run_1", lead, 0)
    await store.append("run_2", child, 0)
    with pytest.raises(RunCycleError) as raised:
        await load(store, "run_1")
    assert raised.value.cycle == ("run_1", "run_2", "run_1")
    assert isinstance(raised.value, LogCorruptError)
    assert (await load(store, "run_1", with_children=False)).children == {}


@pytest.mark.parametrize("child_store", ["shared", "default"])
async def test_a_fork_past_a_sub_agent_call_does_not_run_the_childs_tools_again(child_store: str) -> None:
    """The child's run lies before the fork point: it reruns from its log, and its tools repeat
    their recorded outcomes instead of running (a side effect happened once, in the recording)."""
    sent: list[str] = []

    def tree(store: MemoryEventStore | bool) -> Agent:
        @tool
        def send_mail(to: str) -> str:
            """Send a mail."""
            sent.append(to)
            return f"sent to {to}"

        child = Agent(
            client=ScriptedChatClient([Call("send_mail", {"to": "ops"}), "Mailed."]),
            name="mailer",
            tools=[send_mail],
            store=store if child_store == "shared" else True,
        )
        client = ScriptedChatClient([Call("mailer", {"task": "tell ops"}), "Ops told."])
        return Agent(client=client, tools=[child.as_tool(name="mailer")], store=store)

    store = MemoryEventStore()
    response = await tree(store).run("Tell ops.")
    assert sent == ["ops"]
    recorded = await load(store, response.run_id)
    assert len(recorded.children) == 1
    [returned] = [e.seq for e in recorded.events if isinstance(e, ToolReturned)]
    forked = await fork(recorded, tree(False), at=returned, client=ScriptedChatClient(["Forked."]))
    assert forked.text == "Forked."
    assert sent == ["ops"]


@pytest.mark.parametrize("tools", ["recorded", "live"])
async def test_a_sub_agent_given_to_run_is_reported_as_not_rerun(tools: Literal["recorded", "live"]) -> None:
    """A sub-agent tool given to ``run(tools=...)`` is known to a replay by its spec only: its
    child's log is loaded, but the child's current code cannot run, and the report says so."""

    def researcher(instructions: str) -> Agent:
        client = ScriptedChatClient(["The moon."])
        return Agent(client=client, name="researcher", instructions=instructions)

    store = MemoryEventStore()
    lead = Agent(client=ScriptedChatClient([Call("research", {"task": "tides"}), "Moon."]), store=store)
    response = await lead.run("Tides?", tools=[researcher("Research.").as_tool(name="research")])
    recorded = await load(store, response.run_id)
    assert len(recorded.children) == 1
    report = await replay(recorded, Agent(client=ScriptedChatClient([]), store=False), tools=tools)
    [finding] = report.cannot_replay
    assert finding.event_type == "ChildRunStarted"
    assert "was not rerun" in finding.detail
    assert finding.path[-1] == next(iter(recorded.children.values())).run_id


async def test_a_call_id_the_model_gave_twice_is_reported() -> None:
    """Calls are matched by id: a model numbering every answer's calls from call_0 makes two
    calls a replay cannot tell apart, and the report says so where it happens."""

    @tool
    def search(q: str) -> str:
        """Search."""
        return f"{q}: found"

    client = ScriptedChatClient(
        [
            Call("search", {"q": "tides"}, call_id="call_0"),
            Call("search", {"q": "winds"}, call_id="call_0"),
            "Both.",
        ]
    )
    store = MemoryEventStore()
    response = await Agent(client=client, tools=[search], store=store).run("Go.")
    recorded = await load(store, response.run_id)
    report = await replay(recorded, Agent(client=ScriptedChatClient([]), tools=[search], store=False))
    [finding] = report.cannot_replay
    assert (finding.event_type, finding.run_id) == ("ModelResponded", response.run_id)
    assert "'call_0' again in model call 2" in finding.detail

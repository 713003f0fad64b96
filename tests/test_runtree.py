"""Run ids that collide, and run trees that loop back on themselves.

Two agents that share a store, each with ids counting from 1, both name a run ``run_1``. The
store refuses the second run under that id with a typed error, a sub-agent call is refused
before its caller's log links to a run that is not its child, and every reader that walks a run
tree (``timeline``, ``show``, ``view``) refuses a log whose runs link into a cycle instead of
walking it for ever.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from agentledger import Agent, ConflictError, LogCorruptError, timeline
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.export.html import render_html
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.cli import main
from agentledger.core import ChildRunStarted, RunStarted, ToolFailed
from agentledger.core.events import Event
from agentledger.render import plain_run, run_document
from agentledger.store import EventStore, MemoryEventStore
from agentledger.testing import FixedClock, SequentialIds


def _lead_and_child(store: EventStore | None, child_store: EventStore | None) -> Agent:
    child = ScriptedChatClient(["child answer"]).as_agent(
        name="Child", store=child_store, ids=SequentialIds(), clock=FixedClock()
    )
    ask = child.as_tool(name="ask", arg_name="q")
    return ScriptedChatClient([Call("ask", {"q": "x"}), "done"]).as_agent(
        name="Lead", tools=[ask], store=store, ids=SequentialIds(), clock=FixedClock()
    )


async def _events(store: EventStore) -> dict[str, list[Event]]:
    return {stream: await store.read(stream) for stream in await store.streams()}


@pytest.mark.anyio
@pytest.mark.parametrize("shared", [True, False], ids=["one store", "two stores"])
async def test_a_sub_agent_whose_run_id_is_taken_is_refused_before_it_is_linked(shared: bool) -> None:
    store = MemoryEventStore()
    lead = _lead_and_child(store, store if shared else MemoryEventStore())
    response = await lead.run("hi")
    logs = await _events(store)
    assert list(logs) == ["run_1"]  # one run: the lead's, and only its events are in it
    log = logs["run_1"]
    assert all(e.run_id == "run_1" for e in log)
    assert not [e for e in log if isinstance(e, ChildRunStarted)]  # no link from the run to itself
    [failed] = [e for e in log if isinstance(e, ToolFailed)]
    assert failed.error_type == "RunIdTakenError"
    assert "run id 'run_1' is taken" in failed.message
    assert response.text == "done"  # the model saw the error and answered; the run completed
    timeline(log)  # the lead's own log reads as a tree


@pytest.mark.anyio
async def test_a_run_under_an_id_the_store_holds_is_refused_with_a_typed_error() -> None:
    store = MemoryEventStore()
    for attempt in range(2):
        client = ScriptedChatClient(["hello"])
        agent = Agent(client=client, store=store, ids=SequentialIds(), clock=FixedClock())
        if attempt == 0:
            await agent.run("first")
            before = await store.read("run_1")
            continue
        with pytest.raises(ConflictError) as caught:
            await agent.run("second")
    assert type(caught.value).__name__ == "RunIdTakenError"
    assert (caught.value.stream, caught.value.expected, caught.value.actual) == ("run_1", 0, len(before))
    assert await store.read("run_1") == before  # nothing of the second run was written


def _cyclic(ring: int) -> list[Event]:
    """Runs run_1 .. run_<ring>, each naming the next as its sub-agent and the last naming run_1."""
    clock = FixedClock()
    events: list[Event] = []
    for n in range(1, ring + 1):
        run_id = f"run_{n}"
        parent = f"run_{n - 1 if n > 1 else ring}" if ring > 1 else None
        start = RunStarted(run_id=run_id, seq=0, at=clock(), agent_id="a", parent_run_id=parent)
        child = ChildRunStarted(
            run_id=run_id, seq=1, at=clock(), call_id="call_1", child_run_id=f"run_{n % ring + 1}"
        )
        events += [start, child]
    return events


@pytest.mark.parametrize("ring", [1, 2, 3])
def test_readers_of_run_trees_refuse_a_cycle(ring: int) -> None:
    events = _cyclic(ring)
    for read in (timeline, plain_run, run_document, lambda e: render_html(e)):
        with pytest.raises(LogCorruptError, match="cycle") as caught:
            read(events)
        assert type(caught.value).__name__ == "RunCycleError"
        assert caught.value.cycle[0] == caught.value.cycle[-1]  # type: ignore[attr-defined]


def test_a_tree_with_a_shared_child_is_no_cycle() -> None:
    """Two links to one child (a diamond) are not a cycle: the tree reads."""
    clock = FixedClock()
    events: list[Event] = [
        RunStarted(run_id="lead", seq=0, at=clock(), agent_id="a"),
        ChildRunStarted(run_id="lead", seq=1, at=clock(), call_id="c1", child_run_id="kid"),
        ChildRunStarted(run_id="lead", seq=2, at=clock(), call_id="c2", child_run_id="kid"),
        RunStarted(run_id="kid", seq=0, at=clock(), agent_id="b", parent_run_id="lead"),
    ]
    assert "run kid" in timeline(events)


@pytest.mark.parametrize("command", ["show", "view"])
@pytest.mark.parametrize("ring", [1, 2])
def test_show_and_view_refuse_a_cycle_in_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    ring: int,
) -> None:
    monkeypatch.chdir(tmp_path)
    store = SqliteEventStore(tmp_path / "events.db")
    for run_id, log in _by_run(_cyclic(ring)).items():
        anyio.run(store.append, run_id, log, 0)
    store.close()
    assert main([command, "run_1", "--store", str(tmp_path / "events.db")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("agentledger: "), err
    assert err.count("\n") == 1, err
    assert "cycle" in err
    assert not list(tmp_path.glob("*.html"))


def _by_run(events: list[Event]) -> dict[str, list[Event]]:
    runs: dict[str, list[Event]] = {}
    for event in events:
        runs.setdefault(event.run_id, []).append(event)
    return runs

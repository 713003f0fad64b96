"""AgentSession: kept as JSON between runs (``to_dict`` / ``from_dict``, as ported code does), and
its state at the edges: values that would not read back, writes from outside the run."""

from __future__ import annotations

import contextvars
import datetime
import json
import threading

import pytest

from agentledger import (
    Agent,
    AgentSession,
    FunctionInvocationContext,
    MemoryEventStore,
    SessionStateError,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core.events import SessionUpdated
from agentledger.replay import RecordedRun, rerun
from agentledger.testing import FixedClock, SequentialIds

pytestmark = pytest.mark.anyio


@tool
def remember(topic: str, ctx: FunctionInvocationContext) -> str:
    """Keep a topic."""
    if ctx.session is not None:
        ctx.session.state.setdefault("topics", []).append(topic)
    return "kept"


def _agent(script: list[Call | str]) -> Agent:
    return ScriptedChatClient(script).as_agent(
        name="Memo", tools=[remember], ids=SequentialIds(), clock=FixedClock()
    )


async def test_a_session_round_trips_through_json_text_and_runs_on() -> None:
    agent = _agent([Call("remember", {"topic": "tides"}), "Kept.", "You asked about tides."])
    session = agent.create_session()
    first = await agent.run("Remember tides.", session=session)
    session.state["topics"].append("moon")  # an in-place edit between runs
    text = json.dumps(session.to_dict())
    restored = AgentSession.from_dict(json.loads(text))
    assert restored.session_id == session.session_id
    assert restored.state.snapshot() == {"topics": ["tides", "moon"]}
    assert restored.history == session.history
    response = await agent.run("What did I ask?", session=restored)
    assert response.text == "You asked about tides."
    # The edit made before saving is recorded by the next run, as it would have been unsaved.
    [caller] = [e for e in response.events if isinstance(e, SessionUpdated) and e.by == "caller"]
    assert caller.changes[0].value == ["tides", "moon"]
    recorded = RecordedRun(response.events, prior=first.events)
    assert await rerun(recorded, _agent([])) is not None
    assert restored.history[-1].text == "You asked about tides."


def test_the_reference_frameworks_shape_reads() -> None:
    """A dict written by the reference framework (no history) restores its id and state."""
    data = {"type": "session", "session_id": "s-1", "service_session_id": None, "state": {"k": 1}}
    session = AgentSession.from_dict(data)
    assert (session.session_id, session.state.snapshot(), session.history) == ("s-1", {"k": 1}, [])
    assert set(session.to_dict()) >= set(data)


@pytest.mark.parametrize(
    "data",
    [
        None,
        {"session_id": 7},
        {"type": "thread", "session_id": "s"},
        {"session_id": "s", "history": [{"role": 1}]},
        {"session_id": "s", "pending": [{"by": "caller", "changes": [{"key": "k", "op": "burn"}]}]},
    ],
)
def test_what_is_no_saved_session_is_refused(data: object) -> None:
    with pytest.raises(ValueError, match="not a saved session"):
        AgentSession.from_dict(data)


@pytest.mark.parametrize("value", [2**70, {1, 2}, (1, 2), object()])
def test_state_that_could_not_be_recorded_is_refused(value: object) -> None:
    """What assigning to ``session.state`` refuses, ``from_dict`` refuses too (a set is not made a list)."""
    with pytest.raises(SessionStateError):
        AgentSession.from_dict({"session_id": "s", "state": {"k": value}})


@pytest.mark.parametrize("value", [datetime.date(2024, 1, 2), {"a", "b"}, (1, 2)])
def test_values_that_would_read_back_differently_are_refused(value: object) -> None:
    """A value whose JSON form reads back as something else is refused, so live == rebuilt."""
    session = AgentSession("s")
    with pytest.raises(SessionStateError, match="would read back"):
        session.state["k"] = value
    assert "k" not in session.state


async def test_a_write_from_a_plain_thread_lands_in_the_run(clock: FixedClock, ids: SequentialIds) -> None:
    """A thread that did not inherit the run's context still records into the run it belongs to."""

    @tool
    def fetch(ctx: FunctionInvocationContext) -> str:
        assert ctx.session is not None
        session = ctx.session
        worker = threading.Thread(target=lambda: session.state.__setitem__("profile", "ann"))
        worker.start()
        worker.join()
        return "fetched"

    agent = Agent(client=ScriptedChatClient([Call("fetch"), "ok"]), tools=[fetch], clock=clock, ids=ids)
    session = agent.create_session()
    response = await agent.run("go", session=session)
    rebuilt = AgentSession.from_events(response.events, session.session_id)
    assert rebuilt.state.snapshot() == session.state.snapshot() == {"profile": "ann"}


async def test_a_late_write_is_kept_for_the_next_run(clock: FixedClock, ids: SequentialIds) -> None:
    """A write made in the run's context after the run ended is neither lost nor an error."""
    release = threading.Event()
    workers: list[threading.Thread] = []

    @tool
    def start_worker(ctx: FunctionInvocationContext) -> str:
        session, context = ctx.session, contextvars.copy_context()
        assert session is not None

        def late_write() -> None:
            release.wait()
            context.run(session.state.__setitem__, "late", 1)

        workers.append(threading.Thread(target=late_write))
        workers[0].start()
        return "started"

    client = ScriptedChatClient([Call("start_worker"), "one", "two"])
    agent = Agent(client=client, tools=[start_worker], clock=clock, ids=ids)
    session = agent.create_session()
    first = await agent.run("go", session=session)
    release.set()
    workers[0].join()
    assert session.pending_changes[0][1][0].key == "late"
    second = await agent.run("again", session=session)
    rebuilt = AgentSession.from_events([*first.events, *second.events], session.session_id)
    assert rebuilt.state.snapshot() == session.state.snapshot() == {"late": 1}


async def test_history_of_overlapping_runs_follows_completion(clock: FixedClock, ids: SequentialIds) -> None:
    """Two runs on one session that overlap: the rebuilt history is in completion order, like the live one."""
    import anyio

    release = anyio.Event()

    @tool
    async def wait_for_release() -> str:
        await release.wait()
        return "released"

    def answer(request: object) -> object:
        text = request.messages[-1].text  # type: ignore[attr-defined]
        if text == "slow":
            return Call("wait_for_release")
        return f"answer to {text or 'tool'}"

    agent = Agent(
        client=ScriptedChatClient([answer], repeat=True), tools=[wait_for_release], clock=clock, ids=ids
    )
    session = agent.create_session()
    logs: list[list[object]] = []

    async def run(text: str) -> None:
        response = await agent.run(text, session=session)
        logs.append(list(response.events))
        if text == "fast":
            release.set()

    async with anyio.create_task_group() as group:
        group.start_soon(run, "slow")
        await anyio.wait_all_tasks_blocked()
        group.start_soon(run, "fast")
    by_start = sorted(logs, key=lambda log: log[0].at)  # type: ignore[attr-defined]
    rebuilt = AgentSession.from_events([e for log in by_start for e in log], session.session_id)  # type: ignore[misc]
    assert [m.text for m in rebuilt.history] == [m.text for m in session.history]
    assert session.history[0].text == "fast"


@pytest.mark.anyio
async def test_concurrent_calls_writing_one_key_leave_the_logs_last_write() -> None:
    """Two concurrent calls write one key, the second call first in time: the log keeps the
    writes call by call in the model's order, and the live value is the log's last write, as a
    rebuild from the log has it (and as it would be had the calls finished the other way)."""
    import anyio

    from agentledger.core import SessionUpdated

    second_wrote = anyio.Event()

    @tool
    async def write(value: str, ctx: FunctionInvocationContext) -> str:
        assert ctx.session is not None
        if value == "first":
            await second_wrote.wait()
        ctx.session.state["k"] = value
        if value == "second":
            second_wrote.set()
        return value

    client = ScriptedChatClient(
        [[Call("write", {"value": "first"}), Call("write", {"value": "second"})], "ok"]
    )
    agent = client.as_agent(tools=[write], clock=FixedClock(), ids=SequentialIds())
    session = agent.create_session()
    response = await agent.run("go", session=session)
    writes = [e.changes[0].value for e in response.events if isinstance(e, SessionUpdated)]
    assert writes == ["first", "second"]
    assert session.state["k"] == "second"
    assert AgentSession.from_events(response.events, session.session_id).state.snapshot() == {"k": "second"}


async def test_a_write_in_place_after_a_rebuild_leaves_the_log_as_it_was() -> None:
    """A session rebuilt from a log holds values of its own: a tool appending to a list it
    holds changes the live state and the next write, never the earlier event in the store."""

    @tool
    def add(item: int, ctx: FunctionInvocationContext) -> str:
        """Add an item to the cart."""
        assert ctx.session is not None
        cart = ctx.session.state.get("cart")
        if cart is None:
            ctx.session.state["cart"] = [item]
        else:
            cart.append(item)
        return "added"

    store = MemoryEventStore()
    client = ScriptedChatClient([Call("add", {"item": 1}), "One.", Call("add", {"item": 2}), "Two."])
    agent = Agent(client=client, tools=[add], store=store)
    first = await agent.run("Add 1.", session=(session := agent.create_session()))
    rebuilt = AgentSession.from_events(await store.read(first.run_id), session.session_id)
    second = await agent.run("Add 2.", session=rebuilt)
    [(_, written)] = [
        (e.seq, c.value)
        for e in await store.read(first.run_id)
        if isinstance(e, SessionUpdated)
        for c in e.changes
    ]
    assert written == [1]
    assert [c.value for e in second.events if isinstance(e, SessionUpdated) for c in e.changes] == [[1, 2]]
    assert rebuilt.state["cart"] == [1, 2]


def test_from_dict_bounds_what_it_reads() -> None:
    """A saved session with a session id of megabytes, keys a saved session never has, or a
    state that contains itself is refused with a ValueError that names the problem."""
    from agentledger.errors import SessionStateError
    from agentledger.session import MAX_SESSION_ID

    with pytest.raises(ValueError, match="session_id is 10000000 characters long"):
        AgentSession.from_dict({"type": "session", "session_id": "x" * 10_000_000, "state": {}})
    with pytest.raises(ValueError, match="service_session_id is"):
        AgentSession.from_dict(
            {"type": "session", "session_id": "s", "service_session_id": "y" * (MAX_SESSION_ID + 1)}
        )
    assert (
        AgentSession.from_dict({"type": "session", "session_id": "x" * MAX_SESSION_ID}).session_id
        == "x" * MAX_SESSION_ID
    )
    with pytest.raises(ValueError, match=r"unknown keys \['bogus'\]"):
        AgentSession.from_dict({"type": "session", "session_id": "s", "bogus": 1})
    looped: dict[str, object] = {}
    looped["me"] = [looped]
    with pytest.raises(SessionStateError, match="contains itself"):
        AgentSession.from_dict({"type": "session", "session_id": "s", "state": {"loop": looped}})
    with pytest.raises(SessionStateError, match="contains itself"):
        AgentSession("s").state["loop"] = looped
    deep: list[object] = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(SessionStateError, match="nested deeper"):
        AgentSession("s").state["deep"] = deep


def test_a_permission_to_run_again_is_about_the_run_a_refusal_named() -> None:
    session = AgentSession("s")
    session.allow_rerun("c0")  # given without a refusal: about whichever run holds the batch
    session.held_by(["c1", "c2"], "run_a")
    session.allow_rerun("c1")
    assert (session.rerun_allowed, session.rerun_holders) == ({"c0", "c1"}, {"c1": "run_a"})
    kept = AgentSession.from_dict(json.loads(json.dumps(session.to_dict())))
    assert (kept.rerun_allowed, kept.rerun_holders) == ({"c0", "c1"}, {"c1": "run_a"})
    session.held_by(["c1"], "run_a")  # the same run again: the permission stands
    assert session.rerun_allowed == {"c0", "c1"}
    session.held_by(["c0", "c1"], "run_b")  # another run holds it now: the word about run_a goes
    assert (session.rerun_allowed, session.rerun_holders) == ({"c0"}, {})
    session.allow_rerun("c1")
    assert session.rerun_holders == {"c1": "run_b"}
    session.spend_rerun(["c0", "c1"])
    assert (session.rerun_allowed, session.rerun_holders) == (set(), {})

"""Runs on Temporal: the same log as a local run, replays with no divergence, each fault handled.

The tests start a Temporal dev server (``_temporal_env``) and run workers in this process on a
task queue of their own; the event store is in memory (the end-to-end test, with worker
processes and PostgreSQL, is ``test_temporal_e2e.py``). The activity tests at the end need no
server: they call the activities as Temporal would retry them.
"""

from __future__ import annotations

import contextlib
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest

from agentledger import AgentSession, Content, Message, RunError
from agentledger.core.events import (
    ChildRunStarted,
    Event,
    ModelFailed,
    RunFailed,
    SessionUpdated,
    StateChange,
    ToolCalled,
    ToolFailed,
)
from agentledger.demo import build_demo_agent
from agentledger.errors import ModelCallError
from agentledger.replay import compare, load, rerun
from agentledger.store import EventStore, MemoryEventStore
from agentledger.testing import capture_events, event_types
from tests._temporal_env import TemporalServer, require_module, temporal_server

require_module("temporalio", "agentledger[temporal]")

from tests import _temporal_agents as agents  # noqa: E402 (needs temporalio)

pytestmark = pytest.mark.anyio

PROMPT = "Check the weather in Lisbon, remember I like quiet rooms, and book 2 nights."


@pytest.fixture(scope="module")
def temporal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalServer]:
    with temporal_server(tmp_path_factory.mktemp("temporal")) as server:
        yield server


@pytest.fixture(autouse=True)
def _quiet_experimental() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the demo adds tools (experimental)
        yield


@contextlib.asynccontextmanager
async def _runner(server: TemporalServer, store: EventStore, **runner_options: Any) -> AsyncIterator[Any]:
    from agentledger.adapters.temporal import TemporalRunner, connect, create_worker

    client = await connect(server.address)
    queue = f"test-{uuid.uuid4().hex}"
    async with create_worker(client, agents.REGISTRY, store, task_queue=queue):
        yield TemporalRunner(client, store, task_queue=queue, **runner_options)


class _FixedIds:
    """Gives a local run the ids the Temporal run had, so the two logs can be compared."""

    def __init__(self, run_id: str, session_id: str) -> None:
        self.ids = {"run": run_id, "session": session_id}

    def __call__(self, prefix: str) -> str:
        return self.ids[prefix]


async def _rerun_stored(store: EventStore, run_id: str, name: str) -> None:
    recorded = await load(store, run_id)
    await rerun(recorded, agents.REGISTRY.build(name))


# -- the same log as a local run ------------------------------------------------------------------


async def test_demo_run_records_what_a_local_run_records(temporal: TemporalServer) -> None:
    """The demo run on Temporal logs the events a local run logs, and reruns with no divergence."""
    store = MemoryEventStore()
    session = AgentSession("session_1")
    fik = {"user_id": "traveller-7"}
    async with _runner(temporal, store) as runner:
        remote = await runner.run("demo", PROMPT, session=session, function_invocation_kwargs=fik)
    local_agent = build_demo_agent(store=False, ids=_FixedIds(remote.run_id, "session_1"))
    local_session = local_agent.create_session()
    local = await local_agent.run(PROMPT, session=local_session, function_invocation_kwargs=fik)
    compare(local.events, remote.events)
    assert remote.events == await store.read(remote.run_id)
    assert [e.seq for e in remote.events] == list(range(len(remote.events)))
    assert remote.text == local.text
    assert session.state.snapshot() == local_session.state.snapshot() == {"preferences": {"room": "quiet"}}
    assert session.history == local_session.history
    await _rerun_stored(store, remote.run_id, "demo")


async def test_failed_model_call_is_recorded_and_raised(temporal: TemporalServer) -> None:
    """A model that cannot be reached ends the run with ModelFailed, RunFailed and ModelCallError."""
    store = MemoryEventStore()
    async with _runner(temporal, store) as runner:
        with pytest.raises(ModelCallError, match="ConnectionError: model unreachable") as info:
            await runner.run("broken", "Anyone there?", run_id="run_broken")
    events = await store.read("run_broken")
    assert event_types(events)[-2:] == ["ModelFailed", "RunFailed"]
    assert info.value.seq == next(e.seq for e in events if type(e) is ModelFailed)
    local_agent = agents.REGISTRY.build("broken")
    local_agent.ids = _FixedIds("run_broken", "")
    with capture_events() as local, pytest.raises(ModelCallError):
        await local_agent.run("Anyone there?")
    compare(local, events)


async def test_sub_agent_run_has_its_own_linked_log(temporal: TemporalServer) -> None:
    """A sub-agent call runs the child on a worker: its own log, linked, sharing the session."""
    store = MemoryEventStore()
    session = AgentSession("session_lead")
    async with _runner(temporal, store) as runner:
        response = await runner.run("lead", "Research Lisbon.", session=session)
    assert response.text == "Research says: Stored the findings."
    started = next(e for e in response.events if type(e) is ChildRunStarted)
    child = await store.read(started.child_run_id)
    assert (child[0].parent_run_id, child[0].parent_call_id) == (response.run_id, "r1")  # type: ignore[union-attr]
    assert event_types(child)[-1] == "RunCompleted"
    assert session.state["findings"] == "sunny all week"
    await _rerun_stored(store, response.run_id, "lead")


async def test_session_carries_over_between_runs(temporal: TemporalServer) -> None:
    """A second run on a session sees its history and state; both rerun with no divergence."""
    store = MemoryEventStore()
    session = AgentSession("session_memo")
    session.state["before"] = "set between runs"
    async with _runner(temporal, store) as runner:
        first = await runner.run("memo", "first", session=session)
        second = await runner.run("memo", "second", session=session)
    assert first.text == "3 messages seen"
    assert second.text == "7 messages seen"
    assert session.state.snapshot() == {"before": "set between runs", "last": "second"}
    assert len(session.history) == 8
    caller = [e.changes for e in first.events if type(e) is SessionUpdated and e.by == "caller"]
    assert caller == [(StateChange("before", "set", "set between runs"),)]
    # The first run starts with the caller's write, which a rerun (local runs' too) does not
    # repeat yet; the second run's log reruns exactly.
    await _rerun_stored(store, second.run_id, "memo")


async def test_approval_pauses_and_resumes(temporal: TemporalServer) -> None:
    """A gated call pauses the run with a request; the next run with the answer pays once."""
    store = MemoryEventStore()
    session = AgentSession("session_pay")
    start = len(agents.EXECUTED)
    async with _runner(temporal, store) as runner:
        paused = await runner.run("cashier", "Pay 5.", session=session)
        assert paused.finish_reason == "awaiting_approval"
        [request] = paused.user_input_requests
        answer = Message("user", (request.to_approval_response(True),))
        paid = await runner.run("cashier", answer, session=session)
    assert paid.text == "Paid."
    assert [row[2] for row in agents.EXECUTED[start:]] == ["pay"]
    for run_id in (paused.run_id, paid.run_id):
        await _rerun_stored(store, run_id, "cashier")


async def test_agent_middleware_is_refused(temporal: TemporalServer) -> None:
    """An agent with agent middleware is refused at the start, with the reason, and logs nothing."""
    store = MemoryEventStore()
    async with _runner(temporal, store) as runner:
        with pytest.raises(RunError, match="agent middleware"):
            await runner.run("guarded", "hi", run_id="run_guarded")
    assert await store.streams() == []


async def test_cancelled_run_ends_its_log_with_run_failed(temporal: TemporalServer) -> None:
    """Cancelling a run's workflow records RunFailed (Cancelled), as a cancelled local run does."""
    store = MemoryEventStore()
    agents.GATE, agents.ARRIVED = gate, arrived = anyio.Event(), anyio.Event()
    try:
        async with _runner(temporal, store) as runner:
            handle = await runner.start("ledger", "cancel me", run_id="run_cancelled")
            await arrived.wait()
            await handle.cancel()
            with pytest.raises(RunError, match=r"(?i)cancel"):
                await runner.result(handle)
            gate.set()
    finally:
        agents.GATE = agents.ARRIVED = None
    events = await store.read("run_cancelled")
    assert type(events[-1]) is RunFailed
    assert events[-1].error_type == "Cancelled"


# -- staying within Temporal's limits -------------------------------------------------------------


async def test_oversized_tool_result_becomes_a_tool_error(temporal: TemporalServer) -> None:
    """A result over the payload budget reaches the model as an error; the run goes on."""
    from agentledger.adapters.temporal import Limits

    store = MemoryEventStore()
    async with _runner(temporal, store, limits=Limits(payload_bytes=4_000)) as runner:
        response = await runner.run("bulky", "Fetch it.")
    failed = next(e for e in response.events if type(e) is ToolFailed)
    assert failed.error_type == "PayloadTooLarge"
    assert response.text == "done"
    await _rerun_stored(store, response.run_id, "bulky")


async def test_long_run_continues_as_new_with_one_log(temporal: TemporalServer) -> None:
    """Past the history budget the workflow continues as new; the log is one run's log."""
    from agentledger.adapters.temporal import Limits

    store = MemoryEventStore()
    async with _runner(temporal, store, limits=Limits(history_events=1, payload_bytes=2_000)) as runner:
        handle = await runner.start("long", "Go.", run_id="run_long")
        response = await runner.result(handle)
        result = await handle.result()
    assert result.executions == 5
    assert response.text == "4 steps done"
    local_agent = agents.REGISTRY.build("long")
    local_agent.ids = _FixedIds("run_long", "")
    local = await local_agent.run("Go.")
    compare(local.events, response.events)
    await _rerun_stored(store, "run_long", "long")


async def test_workflow_history_replays_deterministically(temporal: TemporalServer) -> None:
    """Temporal's replayer re-runs a finished workflow's history against the code without error."""
    from temporalio.worker import Replayer

    from agentledger.adapters.temporal import DATA_CONVERTER, AgentRunWorkflow, workflow_runner

    store = MemoryEventStore()
    async with _runner(temporal, store) as runner:
        handle = await runner.start("ledger", "replay me", session=AgentSession("s"))
        await runner.result(handle)
        history = await handle.fetch_history()
    replayer = Replayer(
        workflows=[AgentRunWorkflow], data_converter=DATA_CONVERTER, workflow_runner=workflow_runner()
    )
    await replayer.replay_workflow(history)


# -- activities as Temporal retries them ----------------------------------------------------------


def _tool_request(run_id: str, call_id: str = "c1") -> Any:
    from agentledger.adapters.temporal.types import RunView, ToolRequest

    call = Content.from_function_call(call_id, "lookup", arguments={"key": "k"})
    return ToolRequest(view=RunView(agent="ledger", run_id=run_id), iteration=1, call=call, tools=("lookup",))


def _activities(**options: Any) -> Any:
    from agentledger.adapters.temporal import Activities

    return Activities(agents.REGISTRY, MemoryEventStore(), **options)


async def test_retried_tool_call_returns_the_recorded_outcome() -> None:
    """A tool-call activity run twice runs the tool once and returns the same outcome twice."""
    from temporalio.testing import ActivityEnvironment

    activities, environment = _activities(), ActivityEnvironment()
    request = _tool_request("run_retry")
    first = await environment.run(activities.invoke_tool, request)
    second = await environment.run(activities.invoke_tool, request)
    assert first == second
    assert event_types(list(first.events)) == ["ToolCalled", "ToolReturned"]
    assert [row for row in agents.EXECUTED if row[0] == "run_retry"] == [("run_retry", "c1", "lookup")]


@pytest.mark.parametrize("rerun_interrupted", [False, True])
async def test_call_whose_worker_died_is_not_run_again(rerun_interrupted: bool) -> None:
    """A claimed call without an outcome fails as ToolInterrupted, or runs again when allowed."""
    from temporalio.testing import ActivityEnvironment

    activities = _activities(rerun_interrupted=rerun_interrupted)
    run_id = f"run_died_{rerun_interrupted}"
    await activities.ledger.claim_call(f"{run_id}/1/c1")  # an attempt that died mid-call
    outcome = await ActivityEnvironment().run(activities.invoke_tool, _tool_request(run_id))
    executed = [row for row in agents.EXECUTED if row[0] == run_id]
    if rerun_interrupted:
        assert event_types(list(outcome.events)) == ["ToolCalled", "ToolReturned"]
        assert len(executed) == 1
    else:
        called, failed = outcome.events
        assert type(called) is ToolCalled
        assert type(failed) is ToolFailed
        assert failed.error_type == "ToolInterrupted"
        assert executed == []


async def test_retried_append_is_idempotent_and_conflicts_stay_final() -> None:
    """An append retried after it landed succeeds; one that meets other events fails for good."""
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from agentledger.adapters.temporal.types import AppendRequest

    activities, environment = _activities(), ActivityEnvironment()
    events: list[Event] = [RunFailed(run_id="run_a", seq=0, at=1, error_type="X", message="m")]
    request = AppendRequest(run_id="run_a", events=tuple(events), version=0)
    assert await environment.run(activities.append_events, request) == 1
    assert await environment.run(activities.append_events, request) == 1
    other = AppendRequest(
        run_id="run_a",
        events=(RunFailed(run_id="run_a", seq=0, at=2, error_type="Y", message="n"),),
        version=0,
    )
    with pytest.raises(ApplicationError) as info:
        await environment.run(activities.append_events, other)
    assert info.value.non_retryable
    assert info.value.type == "ConflictError"
    assert await activities.store.read("run_a") == events


def test_unknown_tool_names_the_fix() -> None:
    """A call to a tool the worker cannot find by name fails for good, naming extra_tools."""
    from temporalio.exceptions import ApplicationError

    activities = _activities()
    built = activities._agent("ledger")
    with pytest.raises(ApplicationError, match="extra_tools") as info:
        activities._tools(built, ("lookup",), "book_hotel")
    assert info.value.non_retryable
    assert info.value.type == "ToolUnavailable"

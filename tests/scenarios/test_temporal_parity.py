"""The same scenarios locally and on Temporal give equal logs (times and sub-agent run ids aside).

Both drivers carry a run out through the one run seam, so a run's log does not depend on where it
ran: each scenario runs on Temporal, then locally with the run ids the Temporal runs got, and the
two logs are compared with ``agentledger.replay.compare`` (which also says where they differ).
"""

from __future__ import annotations

import contextlib
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import anyio
import pytest

from agentledger import (
    AgentResponse,
    AgentSession,
    ApprovalError,
    Message,
    MiddlewareFailure,
    ModelCallError,
    RunError,
)
from agentledger.core.events import ModelCalled, RunFailed, RunStarted, ToolCalled
from agentledger.replay import compare
from agentledger.store import MemoryEventStore
from agentledger.testing import capture_events, event_types, events_of
from tests._temporal_env import TemporalServer, require_module, temporal_server

require_module("temporalio", "agentledger[temporal]")

from tests import _temporal_agents as agents  # noqa: E402 (needs temporalio)

pytestmark = pytest.mark.anyio

DEMO_PROMPT = "Check the weather in Lisbon, remember I like quiet rooms, and book 2 nights."
Turn = Callable[[AgentResponse | None], Any]
"""The input of one run, made from the response of the run before it (None for the first)."""


@pytest.fixture(scope="module")
def temporal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalServer]:
    with temporal_server(tmp_path_factory.mktemp("temporal")) as server:
        yield server


@pytest.fixture(autouse=True)
def _quiet_experimental() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        yield


class _Ids:
    """The run id a Temporal run got, for the local run it is compared with."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def __call__(self, prefix: str) -> str:
        return self.run_id if prefix == "run" else f"{prefix}_{uuid.uuid4().hex}"


@contextlib.asynccontextmanager
async def _runner(server: TemporalServer) -> AsyncIterator[Any]:
    from agentledger.adapters.temporal import TemporalRunner, connect, create_worker

    client = await connect(server.address)
    queue = f"parity-{uuid.uuid4().hex}"
    store = MemoryEventStore()
    async with create_worker(client, agents.REGISTRY, store, task_queue=queue):
        yield TemporalRunner(client, store, task_queue=queue)


async def _both(server: TemporalServer, name: str, turns: Sequence[Turn]) -> list[AgentResponse]:
    """Run ``turns`` on one session on Temporal and locally; every pair of logs must be equal."""
    remote_session, local_session = AgentSession("session_p"), AgentSession("session_p")
    local_agent = agents.REGISTRY.build(name)
    remote: AgentResponse | None = None
    local: AgentResponse | None = None
    responses = []
    async with _runner(server) as runner:
        for turn in turns:
            remote = await runner.run(name, turn(remote), session=remote_session)
            local_agent.ids = _Ids(remote.run_id)
            local = await local_agent.run(turn(local), session=local_session)
            compare(local.events, remote.events)
            assert local.text == remote.text
            responses.append(remote)
    assert remote_session.state.snapshot() == local_session.state.snapshot()
    assert remote_session.history == local_session.history
    assert remote_session.service_session_id == local_session.service_session_id
    return responses


def _text(text: str) -> Turn:
    return lambda previous: text


def _answer(approved: bool) -> Turn:
    def answer(previous: AgentResponse | None) -> Message:
        assert previous is not None
        return Message("user", tuple(r.to_approval_response(approved) for r in previous.user_input_requests))

    return answer


async def test_gating_holds_the_whole_batch_alike(temporal: TemporalServer) -> None:
    """Approval is asked only for the gated call with valid arguments, the whole batch waits, and
    a rejection resumes it (the bad call rejected, the free call run), alike on both drivers."""
    paused, resumed = await _both(temporal, "gate", [_text("Pay twice."), _answer(False)])
    assert paused.finish_reason == "awaiting_approval"
    assert [r.call_id for r in paused.user_input_requests] == ["g1"]
    assert "ApprovalRequested" in event_types(paused.events)
    assert not {"ToolCalled", "ArgumentsRejected"} & set(event_types(paused.events))
    assert {"BatchResumed", "ApprovalResolved", "ArgumentsRejected"} <= set(event_types(resumed.events))
    assert [e.name for e in events_of(resumed.events, ToolCalled)] == ["lookup"]  # no payment


async def test_approved_call_runs_alike(temporal: TemporalServer) -> None:
    """An approved call runs once on resume, with the same log on both drivers."""
    _, resumed = await _both(temporal, "gate", [_text("Pay twice."), _answer(True)])
    assert sorted(e.name for e in events_of(resumed.events, ToolCalled)) == ["lookup", "pay"]


async def test_iteration_limit_alike(temporal: TemporalServer) -> None:
    """The iteration limit's final call and its skipped calls are the same on both drivers."""
    [response] = await _both(temporal, "stubborn", [_text("Go on.")])
    assert response.finish_reason == "limit_reached"
    assert {"IterationLimitReached", "CallsSkipped"} <= set(event_types(response.events))


async def test_error_streak_alike(temporal: TemporalServer) -> None:
    """Erroring batches stop the loop at the same point on both drivers."""
    [response] = await _both(temporal, "failing", [_text("Try it.")])
    assert response.finish_reason == "limit_reached"
    assert event_types(response.events).count("ToolFailed") == 2


async def test_middleware_short_circuit_and_rewrite_alike(temporal: TemporalServer) -> None:
    """Function middleware answering a call and chat middleware changing requests log alike."""
    [response] = await _both(temporal, "cache", [_text("Look both up.")])
    assert response.text == "from the cache; value of fresh"
    assert {"MiddlewareShortCircuit", "ModelRequestRewritten"} <= set(event_types(response.events))


async def test_sub_agent_sharing_the_session_alike(temporal: TemporalServer) -> None:
    """A sub-agent writing the shared session logs the same in the caller on both drivers."""
    [response] = await _both(temporal, "lead", [_text("Research Lisbon.")])
    assert {"ChildRunStarted", "SessionUpdated"} <= set(event_types(response.events))


async def test_service_side_conversation_alike(temporal: TemporalServer) -> None:
    """Runs continuing a conversation the service keeps send, record and follow it alike."""
    first, second = await _both(temporal, "kept", [_text("lisbon"), _text("porto")])
    assert first.text == "noted: value of lisbon"
    called = [e for e in second.events if isinstance(e, ModelCalled)]
    assert [e.conversation_id for e in called] == ["resp_1_resp_1_new", "resp_1_resp_1_resp_1_new"]


async def test_progressive_tools_alike(temporal: TemporalServer) -> None:
    """A tool added at run time is offered and called the same on both drivers."""
    [response] = await _both(temporal, "demo", [_text(DEMO_PROMPT)])
    assert "ToolsAdded" in event_types(response.events)


# -- one approval, one execution, on both drivers ---------------------------------------------------


def _approve(response: AgentResponse) -> Message:
    return Message("user", tuple(r.to_approval_response(True) for r in response.user_input_requests))


def _wire_runs() -> int:
    return sum(1 for _, _, name in agents.EXECUTED if name == "wire")


async def test_a_failed_resume_runs_the_approved_call_once_alike(temporal: TemporalServer) -> None:
    """Approve, the tool runs, the model call after it fails; the same approval sent again is
    refused and the tool ran once, on Temporal as locally. Logs and histories are equal."""
    remote_session, local_session = AgentSession("session_f"), AgentSession("session_f")
    local_agent = agents.REGISTRY.build("wire_down")
    async with _runner(temporal) as runner:
        remote = await runner.run("wire_down", "Send 7.", session=remote_session)
        local_agent.ids = _Ids(remote.run_id)
        local = await local_agent.run("Send 7.", session=local_session)
        compare(local.events, remote.events)
        before = _wire_runs()
        with pytest.raises(ModelCallError) as remote_failure:
            await runner.run("wire_down", _approve(remote), session=remote_session)
        local_agent.ids = _Ids(remote_failure.value.run_id)
        with capture_events() as local_events, pytest.raises(ModelCallError):
            await local_agent.run(_approve(local), session=local_session)
        compare(local_events, await runner.store.read(remote_failure.value.run_id))
        assert _wire_runs() == before + 2  # once on each driver
        with pytest.raises(ApprovalError):
            await runner.run("wire_down", _approve(remote), session=remote_session)
        with pytest.raises(ApprovalError):
            await local_agent.run(_approve(local), session=local_session)
        assert _wire_runs() == before + 2
    assert remote_session.history == local_session.history
    assert remote_session.history[-1].role == "tool"  # the batch's result stays in the history


async def test_a_cancelled_resume_runs_the_approved_call_once_alike(temporal: TemporalServer) -> None:
    """Cancelled after the approved tool ran (in the model call after it), then resumed again
    with the same answers: refused, and the tool ran once, on Temporal as locally."""
    remote_session, local_session = AgentSession("session_c"), AgentSession("session_c")
    local_agent = agents.REGISTRY.build("wire")
    async with _runner(temporal) as runner:
        remote = await runner.run("wire", "Send 7.", session=remote_session)
        local_agent.ids = _Ids(remote.run_id)
        local = await local_agent.run("Send 7.", session=local_session)
        before = _wire_runs()
        agents.MODEL_GATE = anyio.Event()
        try:
            agents.MODEL_ARRIVED = arrived = anyio.Event()
            handle = await runner.start("wire", _approve(remote), session=remote_session)
            await arrived.wait()  # the tool ran; the model call after it waits
            await handle.cancel()
            with pytest.raises(RunError):
                await runner.result(handle, session=remote_session)
            agents.MODEL_ARRIVED = arrived = anyio.Event()
            local_agent.ids = _Ids(handle.id)
            async with anyio.create_task_group() as group:

                async def resume() -> None:
                    await local_agent.run(_approve(local), session=local_session)

                group.start_soon(resume)
                await arrived.wait()
                group.cancel_scope.cancel()
        finally:
            agents.MODEL_GATE = agents.MODEL_ARRIVED = None
        assert _wire_runs() == before + 2  # once on each driver
        with pytest.raises(ApprovalError):
            await runner.run("wire", _approve(remote), session=remote_session)
        with pytest.raises(ApprovalError):
            await local_agent.run(_approve(local), session=local_session)
        assert _wire_runs() == before + 2
    assert remote_session.history == local_session.history


async def test_two_concurrent_resumes_on_temporal_run_the_call_once(temporal: TemporalServer) -> None:
    """Two workflows resume one paused batch at once, each from its own copy of the session: the
    claim in the paused run's log lets one run the tool; the other fails with ApprovalError."""
    async with _runner(temporal) as runner:
        for round_ in range(10):
            session = AgentSession(f"session_two_{round_}")
            paused = await runner.run("wire", "Send 7.", session=session)
            twin = AgentSession.from_events(await runner.store.read(paused.run_id), session.session_id)
            before = _wire_runs()
            handles = [await runner.start("wire", _approve(paused), session=s) for s in (session, twin)]
            outcomes: list[str] = []

            async def wait(handle: Any, copy: AgentSession, outcomes: list[str] = outcomes) -> None:
                try:
                    await runner.result(handle, session=copy)
                    outcomes.append("ran")
                except ApprovalError:
                    outcomes.append("refused")

            async with anyio.create_task_group() as group:
                for handle, copy in zip(handles, (session, twin), strict=True):
                    group.start_soon(wait, handle, copy)
            assert sorted(outcomes) == ["ran", "refused"], round_
            assert _wire_runs() == before + 1


async def test_middleware_failure_fails_the_run_alike(temporal: TemporalServer) -> None:
    """Function middleware raising MiddlewareFailure: no retry, no answer to the model; both
    drivers raise it and log RunFailed naming it, with equal logs and untouched histories."""
    remote_session, local_session = AgentSession("session_m"), AgentSession("session_m")
    local_agent = agents.REGISTRY.build("nosy")
    async with _runner(temporal) as runner:
        with pytest.raises(MiddlewareFailure, match="not to be looked up"):
            await runner.run("nosy", "Look up the secret.", session=remote_session)
        [run_id] = await runner.store.streams()
        local_agent.ids = _Ids(run_id)
        with capture_events() as local_events, pytest.raises(MiddlewareFailure, match="not to be looked up"):
            await local_agent.run("Look up the secret.", session=local_session)
        remote_events = await runner.store.read(run_id)
        compare(local_events, remote_events)
    [failed] = events_of(remote_events, RunFailed)
    assert failed.error_type == "MiddlewareFailure"
    assert remote_session.history == local_session.history == []


async def test_run_instructions_are_appended_alike(temporal: TemporalServer) -> None:
    """A run's own instructions follow the agent's, recorded apart, on both drivers."""
    remote_session, local_session = AgentSession("session_i"), AgentSession("session_i")
    local_agent = agents.REGISTRY.build("brief")
    options = {"instructions": "Answer in French.", "temperature": None}
    async with _runner(temporal) as runner:
        remote = await runner.run("brief", "Remember tea.", session=remote_session, options=options)
        local_agent.ids = _Ids(remote.run_id)
        local = await local_agent.run("Remember tea.", session=local_session, options=options)
        compare(local.events, remote.events)
    [started] = events_of(remote.events, RunStarted)
    assert started.instructions == "Be brief.\nAnswer in French."
    assert started.run_instructions == "Answer in French."


async def test_a_resume_cut_off_inside_the_tool_is_not_run_again_on_temporal(
    temporal: TemporalServer,
) -> None:
    """Cancelled while the approved tool runs in its activity: the log says the call started,
    so resuming again reports its outcome as unknown instead of running it; allow_rerun runs it
    once more, and the permission is used up, as after a local resume."""
    from agentledger.core.events import BatchClaimed
    from agentledger.errors import CallOutcomeUnknownError

    session = AgentSession("session_t")
    async with _runner(temporal) as runner:
        paused = await runner.run("slow_wire", "Send 7.", session=session)
        agents.TOOL_GATE = anyio.Event()
        try:
            agents.TOOL_ARRIVED = arrived = anyio.Event()
            handle = await runner.start("slow_wire", _approve(paused), session=session)
            await arrived.wait()  # the tool started; its activity waits
            await handle.cancel()
            with pytest.raises(RunError):
                await runner.result(handle, session=session)
        finally:
            agents.TOOL_GATE = agents.TOOL_ARRIVED = None
        cut = await runner.store.read(handle.id)
        assert [e.call_id for e in events_of(cut, ToolCalled)] == ["w1"]
        assert isinstance(cut[-1], RunFailed)
        runs = sum(1 for _, _, name in agents.EXECUTED if name == "slow_wire")
        with pytest.raises(CallOutcomeUnknownError):
            await runner.run("slow_wire", _approve(paused), session=session)
        session.allow_rerun("w1")
        resumed = await runner.run("slow_wire", _approve(paused), session=session)
        assert resumed.text == "Sent."
        assert sum(1 for _, _, name in agents.EXECUTED if name == "slow_wire") == runs + 1
        assert session.rerun_allowed == set()
        claims = [e for e in await runner.store.read(paused.run_id) if type(e) is BatchClaimed]
        assert claims[-1].rerun == ("w1",)
        with pytest.raises(ApprovalError):
            await runner.run("slow_wire", _approve(paused), session=session)

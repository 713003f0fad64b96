"""``python -m agentledger.adapters.temporal worker``: a worker process from the command line."""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import os
import sys
from collections.abc import Sequence

import anyio

from .runner import TASK_QUEUE, connect, serve
from .worker import AgentRegistry

__all__ = ("main",)


def _registry(spec: str) -> AgentRegistry:
    module, _, attr = spec.partition(":")
    registry = getattr(importlib.import_module(module), attr or "registry")
    if not isinstance(registry, AgentRegistry):
        raise SystemExit(f"{spec} is a {type(registry).__name__}, not an AgentRegistry")
    return registry


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agentledger.adapters.temporal")
    commands = parser.add_subparsers(dest="command", required=True)
    worker = commands.add_parser("worker", help="serve agentledger runs until SIGINT/SIGTERM")
    worker.add_argument("--registry", required=True, help="module:attribute of an AgentRegistry")
    worker.add_argument("--postgres", required=True, help="PostgreSQL connection string of the event store")
    worker.add_argument("--schema", default="agentledger", help="PostgreSQL schema of the event store")
    worker.add_argument("--address", default="localhost:7233", help="Temporal frontend address")
    worker.add_argument("--namespace", default="default")
    worker.add_argument("--task-queue", default=TASK_QUEUE)
    worker.add_argument("--max-concurrent-activities", type=int, default=None)
    worker.add_argument(
        "--rerun-interrupted", action="store_true", help="run again tool calls whose worker died"
    )
    return parser


async def _serve(args: argparse.Namespace) -> None:
    from agentledger.adapters.stores.postgres import PostgresEventStore

    registry = _registry(args.registry)
    client = await connect(args.address, namespace=args.namespace)
    async with PostgresEventStore(args.postgres, schema=args.schema) as store:
        await store.migrate()
        await serve(
            client,
            registry,
            store,
            task_queue=args.task_queue,
            rerun_interrupted=args.rerun_interrupted,
            max_concurrent_activities=args.max_concurrent_activities,
            on_ready=lambda: print(f"worker ready on task queue {args.task_queue!r}", flush=True),
        )


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m agentledger.adapters.temporal worker ...``

    Once the worker has shut down and the store is closed, the process ends at once: the
    Temporal client's native runtime keeps threads of its own, and letting the interpreter tear
    itself down around them is what can crash a process that already finished its work. A crash
    before that prints where it happened (``faulthandler``).
    """
    faulthandler.enable()
    args = _parser().parse_args(argv)
    anyio.run(_serve, args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

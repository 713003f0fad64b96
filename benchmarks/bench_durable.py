"""Durable throughput: whole agent runs per second with many runs at once, per event store.

Theory of operation. One agent with a scripted client runs a 5-tool-call run (6 model calls, 5
sequential tool calls, 24 events, about 12 appends) many times, with 1, 10, 100 and 1,000 runs
in flight at once (that many tasks, each starting its next run when one ends). Each store is
used at its full durability: SQLite ``synchronous=FULL``, JSONL ``fsync=True``, PostgreSQL with
its server's settings (``synchronous_commit``, reported). The memory store, the agent's default,
is measured in the same invocation, and each durable figure is also given as a ratio of the
memory store's events per second at the same concurrency. Each of the runs in flight does at
least 20 runs in a timing (2,000 at 100 in flight), so that neither the start and the end of a
timing, below the full concurrency, nor a moment of a busy machine decides a round. The timings
go in rounds: each round times every store once, the memory store included, in an order that
rotates from round to round, and a store's ratio in a round divides its events/s by the memory
store's of the same round, so the two share whatever else the machine was doing then. Each case
starts from an empty store; a figure is the median over ``--repeat`` rounds, and the ratio
columns give the median of the rounds' ratios and the lowest and highest of them (a target "in
every round" is the lowest).

PostgreSQL is measured when a server answers at ``--postgres`` (default
``postgresql://postgres@127.0.0.1:5432/test``); each case uses a fresh schema, dropped afterwards.

Run ``python -m benchmarks.bench_durable`` (``--help`` for options).
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import anyio

from agentledger import Agent, BaseChatClient, ChatOptions, ChatResponse, Content, Message, tool
from agentledger.adapters.stores.jsonl import JsonlEventStore
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.store import EventStore

TOOL_CALLS = 5
EVENTS_PER_RUN = 4 * TOOL_CALLS + 4  # RunStarted, 6 model calls (2 each), 5 tool calls (2 each), RunCompleted
# Each of the runs in flight does at least this many runs in a timing. The first and the last
# run of each are not at the full concurrency (the durable stores' groups are smaller then), and a
# timing far shorter than a second is one bad moment of a busy machine away from a low round: with
# 400 runs at 100 in flight (4 runs each, about 0.1 s for the memory store) SQLite's rounds
# spread from 28% to 54% of the memory store in one invocation; with 20 each, 50% to 59%.
RUNS_PER_WORKER = 20
DSN = os.environ.get("AGENTLEDGER_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")

StoreFactory = Callable[[Path], EventStore | None]


class StepClient(BaseChatClient):
    """Calls the tool until the conversation holds ``TOOL_CALLS`` results, then answers.

    It reads the step from the messages it is given, so any number of runs can share it.
    """

    provider_name = "bench"

    def __init__(self) -> None:
        self.model = "bench-1"
        self.calls = 0

    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        options: ChatOptions | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ChatResponse:
        self.calls += 1
        done = sum(1 for message in messages if message.role == "tool")
        if done >= TOOL_CALLS:
            return ChatResponse(Message("assistant", (Content.from_text("done"),)), model=self.model)
        call = Content.from_function_call(f"call_{self.calls}", "ping", arguments=f'{{"n": {done}}}')
        return ChatResponse(Message("assistant", (call,)), model=self.model)


@tool(name="ping")
async def ping(n: int) -> str:
    """Answer a ping."""
    return "ok"


class Figure(NamedTuple):
    runs_per_s: float
    events_per_s: float


MEMORY = "memory (default)"


def stores(postgres: str | None) -> dict[str, StoreFactory]:
    """Every store to measure, by name; the memory store first."""
    factories: dict[str, StoreFactory] = {
        MEMORY: lambda d: None,
        "SQLite": lambda d: SqliteEventStore(d / "events.sqlite"),
        "JSONL directory": lambda d: JsonlEventStore(d / "runs"),
        "JSONL journal": lambda d: JsonlEventStore(d / "runs.jsonl"),
    }
    if postgres is not None:
        from agentledger.adapters.stores.postgres import PostgresEventStore

        factories["PostgreSQL"] = lambda d: PostgresEventStore(postgres, schema=d.name)
    return factories


def postgres_available(dsn: str) -> str | None:
    """The server's ``synchronous_commit``, or None when no server answers."""
    try:
        import psycopg
    except ImportError:
        return None
    try:
        with psycopg.connect(dsn, connect_timeout=3) as connection:
            row = connection.execute("SHOW synchronous_commit").fetchone()
    except psycopg.Error:
        return None
    return str(row[0]) if row else "?"


def drop_schema(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


async def measure(store: EventStore | None, concurrency: int, runs: int) -> Figure:
    """``runs`` runs with ``concurrency`` in flight; every run is checked."""
    agent = Agent(client=StepClient(), tools=[ping], store=True if store is None else store)
    await agent.run("warm up")  # opens files, connections, schemas: not timed
    left = runs
    failures: list[str] = []

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            response = await agent.run("Ping the service five times.")
            if response.text != "done" or len(response.events) != EVENTS_PER_RUN:
                failures.append(f"{response.text!r}, {len(response.events)} events")

    start = time.perf_counter()
    async with anyio.create_task_group() as group:
        for _ in range(concurrency):
            group.start_soon(worker)
    elapsed = time.perf_counter() - start
    if failures:
        raise SystemExit(f"a run did not go as scripted: {failures[0]}")
    aclose = getattr(store, "aclose", None)  # durable stores release files and connections
    if aclose is not None:
        await aclose()
    return Figure(runs / elapsed, runs * EVENTS_PER_RUN / elapsed)


def case(factory: StoreFactory, concurrency: int, runs: int, root: Path, dsn: str) -> Figure:
    directory = Path(tempfile.mkdtemp(dir=root, prefix=f"bench_{secrets.token_hex(3)}_"))
    store = factory(directory)
    try:
        return anyio.run(measure, store, concurrency, runs)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        if type(store).__name__ == "PostgresEventStore":
            drop_schema(dsn, directory.name)


def paired(
    names: Sequence[str],
    factories: Mapping[str, StoreFactory],
    level: int,
    runs: int,
    rounds: int,
    root: Path,
    dsn: str,
) -> list[tuple[str, Figure, list[float]]]:
    """Each store's median figure and its events/s as a share of the memory store's, round by
    round: a round times every store once, in an order rotated by one each round."""
    timed: dict[str, list[Figure]] = {name: [] for name in names}
    for index in range(rounds):
        for name in [*names[index % len(names) :], *names[: index % len(names)]]:
            timed[name].append(case(factories[name], level, runs, root, dsn))
    memory = timed[MEMORY]
    return [
        (
            name,
            Figure(
                statistics.median(f.runs_per_s for f in figures),
                statistics.median(f.events_per_s for f in figures),
            ),
            [f.events_per_s / m.events_per_s for f, m in zip(figures, memory, strict=True)],
        )
        for name, figures in timed.items()
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--concurrency", default="1,10,100,1000", help="runs in flight, comma-separated")
    parser.add_argument(
        "--runs", type=int, default=400, help=f"runs per case (at least {RUNS_PER_WORKER}x the concurrency)"
    )
    parser.add_argument("--repeat", type=int, default=5, help="rounds (each times every store once)")
    parser.add_argument("--only", default="", help="measure only the stores whose name contains this")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the stores (a temp dir)")
    parser.add_argument("--postgres", default=DSN, help="PostgreSQL DSN ('' to skip PostgreSQL)")
    args = parser.parse_args(argv)
    levels = [int(level) for level in args.concurrency.split(",")]
    synchronous = postgres_available(args.postgres) if args.postgres else None
    root = Path(tempfile.mkdtemp(dir=args.dir, prefix="agentledger_durable_"))
    factories = stores(args.postgres if synchronous is not None else None)
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, stores in {root}")
    print(f"PostgreSQL: {'synchronous_commit=' + synchronous if synchronous else 'not reachable, skipped'}")
    print(f"{TOOL_CALLS}-tool-call runs of {EVENTS_PER_RUN} events; {args.repeat} rounds, medians\n")
    print("| store | in flight | runs/s | events/s | of memory's events/s | lowest round | highest round |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    names = [n for n in factories if not args.only or args.only.lower() in n.lower() or n == MEMORY]
    try:
        for level in levels:
            runs = max(args.runs, RUNS_PER_WORKER * level)
            measured = paired(names, factories, level, runs, args.repeat, root, args.postgres)
            for name, figure, ratios in measured:
                rates = f"{figure.runs_per_s:,.0f} | {figure.events_per_s:,.0f}"
                spread = f"{statistics.median(ratios):.0%} | {min(ratios):.0%} | {max(ratios):.0%}"
                print(f"| {name} | {level:,} | {rates} | {spread} |", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()

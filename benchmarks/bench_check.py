"""How fast ``agentledger check`` replays a store of many recorded runs.

Theory of operation. The demo agent runs once; its 24 events are copied, each copy with a run
id and a session of its own, into ``--runs`` runs of a SQLite store. Then, in this process,
three ways of replaying all of them against the demo agent's code are timed, each the best of
``--repeat``: a plain loop (``load`` then ``rerun`` for each run id, newest first, in the tools
mode ``check`` runs by default, ``"test"``), ``check`` (``agentledger._cli_suite.check_runs``,
what the command runs: listing, looking for damaged streams, a factory call per run, verdicts,
findings and how each call was answered) with one job, and with ``--jobs`` jobs. Each figure
is runs per second; the check figures are also given as a share of the plain loop's rate,
which is the cost of what ``check`` adds around the same reruns.

Run ``python -m benchmarks.bench_check`` (``--help`` for options).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import anyio

from agentledger._cli_replay import resolve_agent
from agentledger._cli_suite import check_runs
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.core.events import Event
from agentledger.demo import build_demo_agent
from agentledger.listing import RunQuery
from agentledger.replay import load, rerun

from .bench_runs import batches, copy_run, demo_events

AGENT = "agentledger.demo:build_demo_agent"


def fill(path: Path, events: Sequence[Event], runs: int) -> list[str]:
    store = SqliteEventStore(path, synchronous="OFF")
    names = []
    for number in range(runs):
        run_id = f"run_{number:06d}"
        version = 0
        for batch in batches(copy_run(events, run_id, f"session_{number:06d}")):
            version = store.append_sync(run_id, batch, version)
        names.append(run_id)
    store.close()
    return names


async def plain_loop(path: Path, run_ids: Sequence[str]) -> None:
    store = SqliteEventStore(path, read_only=True)
    agent = build_demo_agent(store=False)
    for run_id in reversed(run_ids):
        await rerun(await load(store, run_id), agent, tools="test")
    store.close()


def check(path: Path, jobs: int) -> Callable[[], Awaitable[None]]:
    async def go() -> None:
        store = SqliteEventStore(path, read_only=True)
        verdicts = await check_runs(store, RunQuery(limit=None), resolve_agent(AGENT), jobs=jobs)
        failed = [v for v in verdicts if v.verdict != "passed"]
        assert not failed, failed[:1]
        store.close()

    return go


def best(run: Callable[[], Awaitable[None]], repeat: int) -> float:
    seconds = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        anyio.run(run)
        seconds = min(seconds, time.perf_counter() - start)
    return seconds


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=4)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", FutureWarning)  # the demo agent loads tools at run time
    events = demo_events()
    root = Path(tempfile.mkdtemp(prefix="agentledger-bench-"))
    try:
        path = root / "events.sqlite"
        run_ids = fill(path, events, args.runs)
        print(f"replaying {args.runs:,} recorded runs of {len(events)} events (best of {args.repeat})")
        loop = best(lambda: plain_loop(path, run_ids), args.repeat)
        print(f"  plain loop of load + rerun   {args.runs / loop:8.1f} runs/s")
        for jobs in (1, args.jobs):
            seconds = best(check(path, jobs), args.repeat)
            share = loop / seconds
            rate = args.runs / seconds
            print(f"  check --jobs {jobs:<2}              {rate:8.1f} runs/s  ({share:.0%} of the loop)")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()

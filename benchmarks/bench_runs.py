"""How long ``agentledger runs`` takes over a store of many recorded runs.

Theory of operation. The demo agent runs once; its 24 events are copied, with a new run id (and
one of ten session ids), into ``--runs`` runs of a SQLite store, a JSONL directory and a JSONL
journal, each run appended as the agent appends it (a batch per step). Then the command
``agentledger runs --store ...`` runs in a fresh process, as a user would run it, its output
going to a pipe; each figure is the best of ``--repeat`` wall-clock timings of the whole
process (interpreter start and imports included). ``--all`` also times listing every run
(``--limit 0``).

Run ``python -m benchmarks.bench_runs`` (``--help`` for options).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
import msgspec

from agentledger.adapters.stores.jsonl import JsonlEventStore
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.core.events import Event, RunStarted, SessionUpdated
from agentledger.demo import run_demo
from agentledger.errors import ExperimentalWarning
from agentledger.store import MemoryEventStore

STORES: dict[str, Callable[[Path], SqliteEventStore | JsonlEventStore]] = {
    "SQLite": lambda d: SqliteEventStore(d / "events.sqlite", synchronous="OFF"),
    "JSONL directory": lambda d: JsonlEventStore(d / "runs", fsync=False),
    "JSONL journal": lambda d: JsonlEventStore(d / "runs.jsonl", fsync=False),
}


def demo_events() -> list[Event]:
    """The 24 events of one demo run."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        response, _ = anyio.run(run_demo, MemoryEventStore())
    return list(response.events)


def copy_run(events: Sequence[Event], run_id: str, session_id: str) -> list[Event]:
    """``events`` as the log of another run, in another session."""
    copied: list[Event] = []
    for event in events:
        if isinstance(event, RunStarted | SessionUpdated):
            event = msgspec.structs.replace(event, session_id=session_id)
        copied.append(msgspec.structs.replace(event, run_id=run_id))
    return copied


def batches(events: Sequence[Event]) -> list[list[Event]]:
    """A run's events cut where the agent appends: before each model call."""
    out: list[list[Event]] = [[]]
    for event in events:
        if type(event).__name__ == "ModelCalled" and out[-1]:
            out.append([])
        out[-1].append(event)
    return out


def fill(store: SqliteEventStore | JsonlEventStore, events: Sequence[Event], runs: int) -> None:
    for number in range(runs):
        run_id = f"run_{number:06d}"
        version = 0
        for batch in batches(copy_run(events, run_id, f"session_{number % 10}")):
            version = store.append_sync(run_id, batch, version)
    store.close()


def time_command(args: Sequence[str], repeat: int) -> tuple[float, int]:
    """Best wall-clock seconds of ``agentledger ARGS`` in a fresh process, and its output lines."""
    best, lines = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-m", "agentledger.cli", *args], capture_output=True, check=True
        ).stdout
        best = min(best, time.perf_counter() - start)
        lines = out.count(b"\n")
    return best, lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3_001)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--all", action="store_true", help="also time listing every run (--limit 0)")
    parser.add_argument("--keep", metavar="DIR", help="build the stores in DIR and keep them")
    args = parser.parse_args(argv)
    events = demo_events()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="agentledger-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        print(f"agentledger runs over {args.runs:,} runs of {len(events)} events (best of {args.repeat})")
        for name, factory in STORES.items():
            folder = root / name.replace(" ", "_")
            folder.mkdir(exist_ok=True)
            store = factory(folder)
            if not store.path.exists():
                fill(store, events, args.runs)
            variants = [("runs", ["runs", "--store", str(store.path)])]
            if args.all:
                variants.append(("runs --limit 0", ["runs", "--limit", "0", "--store", str(store.path)]))
            for label, command in variants:
                seconds, lines = time_command(command, args.repeat)
                print(f"  {name:<16} {label:<15} {seconds:7.3f} s  ({lines:,} lines)")
    finally:
        if not args.keep:
            shutil.rmtree(root)


if __name__ == "__main__":
    main()

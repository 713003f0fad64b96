"""Event store throughput: appends per second, and state rebuilt from a stored log per second.

Theory of operation. The events are real: the demo agent (scripted model, tools, middleware,
session writes, a tool added at run time) runs once, and its 24 events are repeated, renumbered,
into one long stream. *Append* times ``await store.append`` through the async API, one event per
call and in batches, with each store's default durability (``fsync`` per append, SQLite
``synchronous=FULL``) and without it. *Rebuild* opens a fresh store on a stored log and times
``await store.read(stream)`` plus one fold of the tools, session and transcript projections: the
work needed to recover a run's state after a restart. It does so for one long stream, and for
many runs of 24 events (``streams()``, then each stream read and folded), where the cost per call
shows. The floor next to it is msgspec decoding the same JSON lines held in memory (one call per
line, and ``decode_lines`` as the stores use it), and decoding plus the fold. Each figure is the
best of ``--repeat`` timings.

Run ``python -m benchmarks.bench_stores`` (``--help`` for options).
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import anyio
import msgspec

from agentledger.adapters.stores.jsonl import JsonlEventStore
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.core.events import Event, decode_event, encode_event
from agentledger.core.projections import Views
from agentledger.demo import run_demo
from agentledger.errors import ExperimentalWarning
from agentledger.store import EventStore, MemoryEventStore, read_many

STREAM = "run_bench"
StoreFactory = Callable[[Path], EventStore]

DURABLE: dict[str, StoreFactory] = {
    "JSONL directory": lambda d: JsonlEventStore(d / "runs"),
    "JSONL journal": lambda d: JsonlEventStore(d / "runs.jsonl"),
    "SQLite": lambda d: SqliteEventStore(d / "events.sqlite"),
}
RELAXED: dict[str, StoreFactory] = {
    "JSONL directory, fsync=False": lambda d: JsonlEventStore(d / "runs", fsync=False),
    "JSONL journal, fsync=False": lambda d: JsonlEventStore(d / "runs.jsonl", fsync=False),
    "SQLite, synchronous=NORMAL": lambda d: SqliteEventStore(d / "events.sqlite", synchronous="NORMAL"),
}


def demo_events() -> list[Event]:
    """The demo run's events (24 of them, every common kind)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        response, _ = anyio.run(run_demo, False)
    return list(response.events)


def long_stream(events: Sequence[Event], count: int) -> list[Event]:
    """``count`` events: ``events`` repeated, renumbered as one stream."""
    return [msgspec.structs.replace(events[i % len(events)], run_id=STREAM, seq=i) for i in range(count)]


class Timing(NamedTuple):
    """Seconds on the wall clock, and CPU seconds of this process (all its threads)."""

    wall: float
    cpu: float


def timed(work: Callable[[], object]) -> Timing:
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return Timing(time.perf_counter() - wall, time.process_time() - cpu)


def best(repeat: int, run: Callable[[], Timing]) -> Timing:
    """The shortest of ``repeat`` timings (wall and CPU each), after a collection each."""
    timings = []
    for _ in range(repeat):
        gc.collect()
        timings.append(run())
    return Timing(min(t.wall for t in timings), min(t.cpu for t in timings))


def rate(count: int, timing: Timing) -> Timing:
    """Events per second, by wall clock and by CPU time."""
    return Timing(count / timing.wall, count / timing.cpu)


def close(store: EventStore) -> None:
    closer = getattr(store, "close", None)
    if closer is not None:
        closer()


def fold(events: Sequence[Event]) -> None:
    """Rebuild the tools, session and transcript views in one pass."""
    Views.from_events(events)


# -- appends ------------------------------------------------------------------------------------


async def _append(store: EventStore, events: Sequence[Event], size: int) -> None:
    for first in range(0, len(events), size):
        await store.append(STREAM, events[first : first + size], first)


def append_rate(factory: StoreFactory, events: Sequence[Event], size: int, repeat: int) -> Timing:
    """Events appended per second through ``append``, ``size`` events per call."""

    def once() -> Timing:
        directory = Path(tempfile.mkdtemp(prefix="bench-stores-"))
        store = factory(directory)
        try:
            return timed(lambda: anyio.run(_append, store, events, size))
        finally:
            close(store)
            shutil.rmtree(directory)

    return rate(len(events), best(repeat, once))


# -- rebuilds -----------------------------------------------------------------------------------


def write_log(factory: StoreFactory, directory: Path, events: Sequence[Event]) -> None:
    store = factory(directory)
    for first in range(0, len(events), 1000):
        anyio.run(store.append, STREAM, events[first : first + 1000], first)
    close(store)


async def timed_async(work: Callable[[], Awaitable[object]]) -> Timing:
    wall, cpu = time.perf_counter(), time.process_time()
    await work()
    return Timing(time.perf_counter() - wall, time.process_time() - cpu)


def best_in_loop(repeat: int, work: Callable[[], Awaitable[object]]) -> Timing:
    """``best`` for async work, timed inside one running event loop (its start-up is not a rebuild)."""

    async def runs() -> list[Timing]:
        timings = []
        for _ in range(repeat):
            gc.collect()
            timings.append(await timed_async(work))
        return timings

    timings = anyio.run(runs)
    return Timing(min(t.wall for t in timings), min(t.cpu for t in timings))


def rebuild_rate(
    factory: StoreFactory, directory: Path, count: int, repeat: int, *, folded: bool = True
) -> Timing:
    """Events per second: open a fresh store, read the stream (decoding it), fold it unless told not to."""

    async def rebuild() -> None:
        store = factory(directory)
        events = await store.read(STREAM)
        if folded:
            fold(events)
        close(store)
        assert len(events) == count

    return rate(count, best_in_loop(repeat, rebuild))


def write_runs(factory: StoreFactory, directory: Path, sample: Sequence[Event], runs: int) -> None:
    async def write(store: EventStore) -> None:
        for index in range(runs):
            stream = f"run_{index}"
            await store.append(stream, [msgspec.structs.replace(e, run_id=stream) for e in sample], 0)

    store = factory(directory)
    anyio.run(write, store)
    close(store)


def rebuild_runs_rate(
    factory: StoreFactory, directory: Path, count: int, repeat: int, *, folded: bool = True
) -> Timing:
    """Events per second: open a fresh store, list its streams, read them all (``read_many``), fold
    each unless told not to."""

    async def rebuild() -> None:
        store, total = factory(directory), 0
        for events in (await read_many(store, await store.streams())).values():
            if folded:
                fold(events)
            total += len(events)
        close(store)
        assert total == count

    return rate(count, best_in_loop(repeat, rebuild))


def floor_rates(lines: Sequence[bytes], repeat: int) -> dict[str, Timing]:
    """msgspec decoding alone (one call per line, and one call for all), and decoding plus the fold."""
    block = b"".join(line + b"\n" for line in lines)
    decoder: msgspec.json.Decoder[Event] = msgspec.json.Decoder(Event)
    runs: dict[str, Callable[[], object]] = {
        "floor: msgspec, one decode per line": lambda: [decode_event(line) for line in lines],
        "floor: msgspec, decode_lines": lambda: decoder.decode_lines(block),
        "floor: msgspec decode_lines + fold": lambda: fold(decoder.decode_lines(block)),
    }
    return {name: rate(len(lines), best(repeat, functools.partial(timed, run))) for name, run in runs.items()}


# -- report -------------------------------------------------------------------------------------


def report(title: str, rows: dict[str, Timing], *, cpu: bool) -> None:
    print(f"\n{title}\n")
    if not cpu:
        print("| | events/s |\n|---|---:|")
        for name, figures in rows.items():
            print(f"| {name} | {figures.wall:,.0f} |")
        return
    print("| | events/s (wall clock) | events/s (CPU time) |\n|---|---:|---:|")
    for name, figures in rows.items():
        print(f"| {name} | {figures.wall:,.0f} | {figures.cpu:,.0f} |")


def bench_appends(sample: Sequence[Event], count: int, repeat: int) -> None:
    appended = long_stream(sample, count)
    stores: dict[str, StoreFactory] = {"memory": lambda d: MemoryEventStore(), **DURABLE, **RELAXED}
    for size in (1, 100):
        rows = {name: append_rate(f, appended, size, repeat) for name, f in stores.items()}
        report(f"Append, {size} event(s) per call ({count:,} events)", rows, cpu=False)


def stores_in(reuse: Path | None, key: str) -> tuple[Path, bool]:
    """Where a rebuild's stores are, and whether they are still to be written: a fresh temporary
    directory, or ``reuse/key``, written by the first invocation given ``--reuse`` and read by
    every later one (so processes that alternate two versions of the code read the same files)."""
    if reuse is None:
        return Path(tempfile.mkdtemp(prefix="bench-stores-")), True
    directory = reuse / key
    if (directory / "written").exists():
        return directory, False
    shutil.rmtree(directory, ignore_errors=True)  # an invocation stopped while writing
    directory.mkdir(parents=True)
    return directory, True


def written(reuse: Path | None, directory: Path) -> None:
    """Mark ``directory``'s stores complete, when they are kept for later invocations."""
    if reuse is not None:
        (directory / "written").touch()


def cleared(reuse: Path | None, directory: Path) -> None:
    """Remove ``directory``'s stores unless they are kept."""
    if reuse is None:
        shutil.rmtree(directory)


def bench_rebuild_stream(sample: Sequence[Event], count: int, repeat: int, reuse: Path | None = None) -> None:
    stream = long_stream(sample, count)
    size = sum(len(encode_event(e)) for e in stream) // len(stream)
    rows = floor_rates([encode_event(e) for e in stream], repeat)
    directory, write = stores_in(reuse, f"stream-{count}")
    try:
        for name, factory in DURABLE.items():
            if write:
                write_log(factory, directory, stream)
            rows[f"{name}: read + decode"] = rebuild_rate(factory, directory, count, repeat, folded=False)
            rows[f"{name}: read + decode + fold"] = rebuild_rate(factory, directory, count, repeat)
        if write:
            written(reuse, directory)
    finally:
        cleared(reuse, directory)
    report(f"Rebuild one stream of {count:,} events ({size} bytes each on average)", rows, cpu=True)


def bench_rebuild_runs(sample: Sequence[Event], runs: int, repeat: int, reuse: Path | None = None) -> None:
    rows = {}
    for index, (name, factory) in enumerate(DURABLE.items()):
        directory, write = stores_in(reuse, f"runs-{runs}-{index}")
        try:
            if write:
                write_runs(factory, directory, sample, runs)
                written(reuse, directory)
            count = runs * len(sample)
            decoded = rebuild_runs_rate(factory, directory, count, repeat, folded=False)
            rows[f"{name}: read + decode"] = decoded
            rows[f"{name}: read + decode + fold"] = rebuild_runs_rate(factory, directory, count, repeat)
        finally:
            cleared(reuse, directory)
    report(f"Rebuild {runs:,} runs of {len(sample)} events: list, read (and fold) each", rows, cpu=True)


# -- PostgreSQL ---------------------------------------------------------------------------------


async def _postgres_rebuilds(
    dsn: str, sample: Sequence[Event], counts: Sequence[int], runs: int, repeat: int
) -> dict[str, Timing]:
    """The two rebuilds of ``bench_rebuild_stream`` and ``bench_rebuild_runs`` from PostgreSQL, in
    one event loop (the store's connection pool belongs to the loop that opened it), each in a
    schema of its own that is dropped afterwards. The server's own CPU time is not the process's:
    the CPU column counts the client side only."""
    import psycopg
    from psycopg import sql

    from agentledger.adapters.stores.postgres import PostgresEventStore

    schema = f"bench_stores_{os.getpid()}"
    rows: dict[str, Timing] = {}

    async def best_of(work: Callable[[], Awaitable[object]]) -> Timing:
        timings = []
        for _ in range(repeat):
            gc.collect()
            timings.append(await timed_async(work))
        return Timing(min(t.wall for t in timings), min(t.cpu for t in timings))

    async def stream_rebuild(count: int, folded: bool) -> None:
        store = PostgresEventStore(dsn, schema=schema, listen=False)
        events = await store.read(STREAM)
        if folded:
            fold(events)
        await store.aclose()
        assert len(events) == count

    async def runs_rebuild(folded: bool) -> None:
        store, total = PostgresEventStore(dsn, schema=schema, listen=False), 0
        for events in (await read_many(store, await store.streams())).values():
            if folded:
                fold(events)
            total += len(events)
        await store.aclose()
        assert total == runs * len(sample)

    async def drop() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            await connection.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            )

    try:
        for count in counts:
            store = PostgresEventStore(dsn, schema=schema, listen=False)
            stream = long_stream(sample, count)
            for first in range(0, count, 1000):
                await store.append(STREAM, stream[first : first + 1000], first)
            await store.aclose()
            rows[f"one stream of {count:,} events: read + decode"] = rate(
                count, await best_of(functools.partial(stream_rebuild, count, False))
            )
            rows[f"one stream of {count:,} events: read + decode + fold"] = rate(
                count, await best_of(functools.partial(stream_rebuild, count, True))
            )
            await drop()
        store = PostgresEventStore(dsn, schema=schema, listen=False)
        for index in range(runs):
            name = f"run_{index}"
            await store.append(name, [msgspec.structs.replace(e, run_id=name) for e in sample], 0)
        await store.aclose()
        total = runs * len(sample)
        rows[f"{runs:,} runs of {len(sample)}: read + decode"] = rate(
            total, await best_of(functools.partial(runs_rebuild, False))
        )
        rows[f"{runs:,} runs of {len(sample)}: read + decode + fold"] = rate(
            total, await best_of(functools.partial(runs_rebuild, True))
        )
    finally:
        await drop()
    return rows


def bench_rebuild_postgres(
    dsn: str, sample: Sequence[Event], counts: Sequence[int], runs: int, repeat: int
) -> None:
    rows = anyio.run(_postgres_rebuilds, dsn, sample, counts, runs, repeat)
    report("Rebuild from PostgreSQL (the CPU column is the client's only)", rows, cpu=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--events", type=int, nargs="+", default=[10_000, 100_000], help="events in each rebuilt stream"
    )
    parser.add_argument("--appends", type=int, default=2_000, help="events per append benchmark")
    parser.add_argument("--runs", type=int, default=1_000, help="runs of 24 events in the many-runs rebuild")
    parser.add_argument("--repeat", type=int, default=3, help="timings per figure (best is kept)")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the stores (a temp dir)")
    parser.add_argument(
        "--reuse",
        type=Path,
        default=None,
        metavar="DIR",
        help="keep the rebuilds' stores in DIR: written once, read by every later invocation",
    )
    parser.add_argument(
        "--only", choices=["appends", "stream", "runs"], action="append", help="run only these parts"
    )
    parser.add_argument(
        "--postgres",
        metavar="DSN",
        default=None,
        help="also rebuild from PostgreSQL at DSN (in a schema of its own, dropped afterwards)",
    )
    args = parser.parse_args(argv)
    parts = set(args.only or ["appends", "stream", "runs"])
    if args.dir is not None:
        tempfile.tempdir = str(args.dir)
    sample = demo_events()
    versions = f"SQLite {sqlite3.sqlite_version}, msgspec {msgspec.__version__}"
    print(f"Python {platform.python_version()}, {versions}, {platform.machine()}, {os.cpu_count()} CPUs")
    print(f"stores in {tempfile.gettempdir()}")
    if "appends" in parts:
        bench_appends(sample, args.appends, args.repeat)
    if "stream" in parts:
        for count in args.events:
            bench_rebuild_stream(sample, count, args.repeat, args.reuse)
    if "runs" in parts:
        bench_rebuild_runs(sample, args.runs, args.repeat, args.reuse)
    if args.postgres is not None:
        bench_rebuild_postgres(args.postgres, sample, args.events, args.runs, args.repeat)


if __name__ == "__main__":
    main(sys.argv[1:])

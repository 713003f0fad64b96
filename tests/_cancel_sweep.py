"""A cancellation sweep: many runs, each cancelled at a random point, then every log checked.

Each run of a small agent (three model calls, three tool calls, two of them in one batch) is
cancelled at a point drawn at random: just after its k-th event is stamped (the cancellation
lands at the next await: a model call, a tool, an append being committed), or just after the
store committed its k-th append and before the run hears of it. Runs go several at a time, so
appends share group commits. Then every stream is read back and classified by its last event:
``completed`` (``RunCompleted``), ``failed`` (``RunFailed``) or ``incomplete``; the store's
listing (``list_runs``) must say the same of each, every log must read back with contiguous
``seq`` from a ``RunStarted``, and a run that raised the cancellation must have recorded how it
ended.

The suite runs a small sweep (``tests/scenarios/test_cancel_sweep.py``); a longer one runs by hand:

    python -m tests._cancel_sweep --runs 1000            # SQLite, both JSONL layouts, PostgreSQL

and prints, per store, how many runs ended each way and how many logs were unfinished.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import random
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.lowlevel

from agentledger import Agent, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.core.events import Event, RunCompleted, RunFailed, RunStarted
from agentledger.listing import RunQuery
from agentledger.store import EventStore, list_runs
from agentledger.testing import SequentialIds

__all__ = ("STORES", "SweepReport", "open_store", "sweep")

STORES = ("sqlite", "jsonl-directory", "jsonl-journal", "postgres")
DSN = "postgresql://postgres@127.0.0.1:5432/test"


@tool
async def step(n: int) -> int:
    """One step of work."""
    await anyio.lowlevel.checkpoint()
    return n + 1


def _script() -> list[ScriptEntry]:
    return [Call("step", {"n": 1}), [Call("step", {"n": 2}), Call("step", {"n": 3})], "done"]


class _CuttingClock:
    """A clock that cancels its run's scope when read for the ``cut``-th time (one reading per event)."""

    def __init__(self, scope: anyio.CancelScope, cut: int) -> None:
        self.scope, self.cut, self.readings = scope, cut, 0

    def __call__(self) -> int:
        self.readings += 1
        if self.readings == self.cut:
            self.scope.cancel()
        return 1_700_000_000_000_000_000 + self.readings


class _CuttingStore:
    """The store, cancelling the run's scope once its ``cut``-th append has been committed."""

    def __init__(self, inner: EventStore, scope: anyio.CancelScope | None, cut: int) -> None:
        self.inner, self.scope, self.cut, self.appends = inner, scope, cut, 0
        self.stream: str | None = None  # the run's stream, once it appends

    async def append(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        self.stream = stream
        version = await self.inner.append(stream, events, expected_version)
        self.appends += 1
        if self.scope is not None and self.appends == self.cut:
            self.scope.cancel()
            await anyio.lowlevel.checkpoint()  # committed, and the caller hears only the cancellation
        return version

    async def read(self, stream: str, after: int = -1) -> list[Event]:
        return await self.inner.read(stream, after)

    async def streams(self) -> list[str]:
        return await self.inner.streams()


@dataclass
class SweepReport:
    """What a sweep found in one store."""

    store: str
    runs: int = 0
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    cancelled: int = 0
    """Runs whose ``agent.run`` raised the cancellation."""
    cancelled_unfinished: int = 0
    """Of those, runs whose log has no end event (``RunCompleted``/``RunFailed``)."""
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


async def sweep(store: EventStore, name: str, runs: int, *, seed: int = 0, at_once: int = 8) -> SweepReport:
    """``runs`` runs on ``store``, ``at_once`` at a time, each cancelled at a random point."""
    report = SweepReport(name, runs)
    rng = random.Random(seed)
    ids = SequentialIds()
    raised: dict[str, bool] = {}
    started = time.perf_counter()
    done = 0
    while done < runs:
        batch = min(at_once, runs - done)
        async with anyio.create_task_group() as group:
            for _ in range(batch):
                group.start_soon(_tracked, store, ids, rng.randrange(1 << 30), raised)
        done += batch
    report.seconds = time.perf_counter() - started
    listed = {summary.run_id: summary.outcome for summary in await list_runs(store, RunQuery(limit=None))}
    for stream in await store.streams():
        try:
            log = await store.read(stream)
        except Exception as exc:  # the sweep reports what a reader met; the test says it is none
            report.problems.append(f"{stream}: does not read back: {type(exc).__name__}: {exc}")
            continue
        if not log or type(log[0]) is not RunStarted or [e.seq for e in log] != list(range(len(log))):
            report.problems.append(f"{stream}: not a log from RunStarted with seq 0, 1, 2, ...")
            continue
        outcome = {RunCompleted: "completed", RunFailed: "failed"}.get(type(log[-1]), "incomplete")
        report.outcomes[outcome] += 1
        if listed.get(stream) != outcome:
            report.problems.append(f"{stream}: the listing says {listed.get(stream)!r}, the log {outcome!r}")
        if raised.get(stream):
            report.cancelled += 1
            report.cancelled_unfinished += outcome == "incomplete"
    if sum(report.outcomes.values()) != runs:
        report.problems.append(f"{runs} runs made {sum(report.outcomes.values())} readable logs")
    return report


async def _tracked(store: EventStore, ids: SequentialIds, seed: int, raised: dict[str, bool]) -> None:
    """One run, cancelled where ``seed`` says; notes under its id whether ``run`` raised."""
    rng = random.Random(seed)
    with anyio.CancelScope() as scope:
        in_append = rng.random() < 0.5
        clock = _CuttingClock(scope, 0 if in_append else rng.randrange(1, 16))  # 14 events a run
        wrapped = _CuttingStore(store, scope if in_append else None, rng.randrange(1, 8))  # ~6 appends
        agent = Agent(client=ScriptedChatClient(_script()), tools=[step], store=wrapped, clock=clock, ids=ids)
        try:
            await agent.run("go")
        except anyio.get_cancelled_exc_class():
            if wrapped.stream is not None:
                raised[wrapped.stream] = True
            raise
        if wrapped.stream is not None:
            raised[wrapped.stream] = False


@contextlib.asynccontextmanager
async def open_store(kind: str, where: Path) -> AsyncIterator[EventStore]:
    """A fresh durable store of ``kind`` (one of ``STORES``) under ``where``."""
    if kind == "sqlite":
        from agentledger.adapters.stores.sqlite import SqliteEventStore

        store: EventStore = SqliteEventStore(where / "events.db")
    elif kind.startswith("jsonl"):
        from agentledger.adapters.stores.jsonl import JsonlEventStore

        store = JsonlEventStore(where / ("runs" if kind == "jsonl-directory" else "runs.jsonl"))
    else:
        from agentledger.adapters.stores.postgres import PostgresEventStore

        from ._temporal_env import drop_schema, unique_schema

        schema = unique_schema("agentledger_sweep")
        store = PostgresEventStore(DSN, schema=schema)
    try:
        yield store
    finally:
        await store.aclose()  # type: ignore[attr-defined]
        if kind == "postgres":
            drop_schema(DSN, schema)


async def _main(kinds: Sequence[str], runs: int, seed: int) -> int:
    failed = 0
    for kind in kinds:
        with tempfile.TemporaryDirectory() as where:
            async with open_store(kind, Path(where)) as store:
                report = await sweep(store, kind, runs, seed=seed)
        outcomes = ", ".join(f"{n} {outcome}" for outcome, n in sorted(report.outcomes.items()))
        print(
            f"{kind}: {report.runs} runs in {report.seconds:.1f} s: {outcomes}; "
            f"{report.cancelled} raised the cancellation, {report.cancelled_unfinished} of them left "
            f"unfinished; {len(report.problems)} problems"
        )
        for problem in report.problems[:10]:
            print(f"  {problem}")
        failed += bool(report.problems)
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stores", nargs="*", default=list(STORES), choices=STORES)
    options = parser.parse_args()
    raise SystemExit(anyio.run(_main, options.stores, options.runs, options.seed))

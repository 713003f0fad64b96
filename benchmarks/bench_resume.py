"""What storing each call as started costs a resume: a resumed batch with and without it, per
store.

Theory of operation. A run that resumes an approved batch runs its calls one at a time and
appends each call's ``ToolCalled`` to the store before its tool runs (so a resume killed at any
point leaves a log that says how far it got); a run that resumes nothing stores its calls with
their outcomes, all of a batch in one append. Each case times the resume of a run paused on a
batch of ``CALLS`` approved calls (its claim on the paused run's log included), answered by a
scripted client:

- ``written ahead``: as a resume runs;
- ``with outcomes``: the same resume with ``LocalDriver.write_ahead`` switched off for the
  benchmark, so its calls run at once and are stored with their outcomes, as before.

The timings go in rounds; each round times both cases on each store in alternating order, and a
store's figure is the median over ``--repeat`` rounds of the time per resume, with the extra
time per call (``(written ahead - with outcomes) / CALLS``). The memory store does no IO: its figure is
the write-ahead's CPU alone. Durable stores run at full durability (SQLite ``synchronous=FULL``,
JSONL ``fsync=True``).

Run ``python -m benchmarks.bench_resume`` (``--help`` for options).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio

from agentledger import Agent, Content, MemoryEventStore, Message, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.stores.jsonl import JsonlEventStore
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.run import LocalDriver
from agentledger.store import EventStore

CALLS = 5


def _agent(store: EventStore) -> Agent:
    @tool(approval_mode="always_require")
    def book(item: int) -> str:
        """Book one item."""
        return f"booked {item}"

    calls = [Call("book", {"item": i}) for i in range(CALLS)]
    return Agent(client=ScriptedChatClient([calls, "Booked."], repeat=True), tools=[book], store=store)


async def _resume(store: EventStore, n: int, write_ahead: bool) -> float:
    agent = _agent(store)
    sessions = []
    for _ in range(n):
        session = agent.create_session()
        await agent.run("Book them.", session=session)
        sessions.append(session)
    switch = LocalDriver.write_ahead
    if not write_ahead:
        LocalDriver.write_ahead = lambda self: None  # type: ignore[method-assign]
    try:
        started = time.perf_counter()
        for session in sessions:
            answers = tuple(Content.from_approval_response(c, approved=True) for c in session.paused_runs)
            await agent.run(Message("user", answers), session=session)
        return (time.perf_counter() - started) / n
    finally:
        LocalDriver.write_ahead = switch  # type: ignore[method-assign]


STORES: dict[str, Callable[[Path], EventStore]] = {
    "memory": lambda _: MemoryEventStore(),
    "sqlite": lambda folder: SqliteEventStore(folder / "runs.db"),
    "jsonl": lambda folder: JsonlEventStore(folder / "runs"),
}


async def main(runs: int, repeat: int) -> None:
    figures: dict[tuple[str, str], list[float]] = {}
    for round_ in range(repeat):
        for name, make in STORES.items():
            cases = [("ahead", True), ("outcomes", False)]
            for case, ahead in cases if round_ % 2 == 0 else reversed(cases):
                folder = Path(tempfile.mkdtemp(prefix="bench-resume-"))
                store = make(folder)
                try:
                    figures.setdefault((name, case), []).append(await _resume(store, runs, ahead))
                finally:
                    close = getattr(store, "close", None)
                    if close is not None:
                        close()
                    shutil.rmtree(folder, ignore_errors=True)
    print(f"{CALLS} tool calls per run, {runs} runs per case, median of {repeat} rounds, pid {os.getpid()}")
    print("| store | resume, stored with outcomes | resume, written ahead | extra time per call |")
    print("|---|---|---|---|")
    for name in STORES:
        before = statistics.median(figures[(name, "outcomes")])
        written = statistics.median(figures[(name, "ahead")])
        extra = (written - before) / CALLS
        print(f"| {name} | {before * 1e3:.2f} ms | {written * 1e3:.2f} ms | {extra * 1e6:+.0f} µs |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=50, help="runs per case and round")
    parser.add_argument("--repeat", type=int, default=5, help="rounds")
    arguments = parser.parse_args()
    anyio.run(main, arguments.runs, arguments.repeat)

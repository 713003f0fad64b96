"""Cost per step of long runs: a run of N sequential tool steps, agentledger beside
agent-framework-core, in one process.

Theory of operation. A step is one model call that asks for one tool call, and the tool call.
For each N (default 100, 1,000 and 10,000) both frameworks run the same scripted scenario of N
steps and a final answer, with their loop limit raised above N. The figure is the run's time
divided by N, the median over ``--repeats`` runs (each on a freshly built agent, after a
``gc.collect()``, neither timed). Flat cost means the figure at N stays near the figure at the
smallest N: the "growth" column is that quotient. The peer's cost grows with the transcript, so
its largest runs take minutes; ``--peer-max`` caps the N it is timed at.

Run ``python -m benchmarks.bench_steps`` (``--help`` for options).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from ._ledger import LedgerRunner
from ._scenarios import ANSWER, TOOL_NAME, Runner, Scenario

LEDGER = "agentledger"
PEER = "agent-framework-core"


def steps_scenario(n: int) -> Scenario:
    """N sequential tool steps, then the answer."""
    steps = tuple(((TOOL_NAME, f'{{"n": {i}}}'),) for i in range(n))
    return Scenario(f"steps-{n}", f"{n} sequential tool steps", (*steps, ANSWER))


def _makers(include_peer: bool) -> dict[str, Callable[[Scenario], Runner]]:
    makers: dict[str, Callable[[Scenario], Runner]] = {
        LEDGER: lambda s: LedgerRunner(s, max_iterations=s.model_calls + 1)
    }
    if include_peer:
        try:
            from ._peer import PeerRunner
        except ImportError:
            print("agent-framework-core is not installed; measuring agentledger only")
        else:
            makers[PEER] = lambda s: PeerRunner(s, max_iterations=s.model_calls + 1)
    return makers


async def _per_step(make: Callable[[Scenario], Runner], scenario: Scenario, repeats: int) -> float:
    """Median seconds per step over ``repeats`` runs, each on a fresh agent."""
    samples = []
    for _ in range(repeats):
        runner = make(scenario)
        gc.collect()
        start = time.perf_counter()
        text = await runner.run()
        elapsed = time.perf_counter() - start
        done = (runner.counter.model_calls, runner.counter.tool_calls)
        if text != ANSWER or done != (scenario.model_calls, scenario.tool_calls):
            raise SystemExit(
                f"{runner.framework}: {done} calls, text {text!r}; expected {scenario.tool_calls}"
            )
        samples.append(elapsed / scenario.tool_calls)
    return statistics.median(samples)


async def measure(
    sizes: Sequence[int], repeats: int, include_peer: bool, peer_max: int
) -> list[dict[str, Any]]:
    makers = _makers(include_peer)
    rows = []
    for n in sizes:
        scenario = steps_scenario(n)
        row: dict[str, Any] = {"steps": n}
        for name, make in makers.items():
            if name == PEER and n > peer_max:
                continue
            await _per_step(make, steps_scenario(min(n, 10)), 1)  # warm the code paths
            row[name] = await _per_step(make, scenario, repeats if n <= 1_000 else 1)
        rows.append(row)
    return rows


def table(rows: Sequence[dict[str, Any]]) -> str:
    base = {name: rows[0].get(name) for name in (LEDGER, PEER)}
    lines = [
        "| steps | agentledger per step | growth | agent-framework-core per step | growth "
        "| peer / agentledger |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = [f"{row['steps']:,}"]
        for name in (LEDGER, PEER):
            value = row.get(name)
            first = base[name]
            cells.append(f"{value * 1e6:,.1f} us" if value else "not run")
            cells.append(f"{value / first:.2f}x" if value and first else "")
        ledger, peer = row.get(LEDGER), row.get(PEER)
        cells.append(f"{peer / ledger:.1f}x" if ledger and peer else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="100,1000,10000", help="comma-separated step counts")
    parser.add_argument("--repeats", type=int, default=5, help="runs per size up to 1,000 steps")
    parser.add_argument("--no-peer", action="store_true", help="measure agentledger only")
    parser.add_argument("--peer-max", type=int, default=10_000, help="largest N the peer is timed at")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    sizes = [int(part) for part in args.sizes.split(",") if part]
    rows = asyncio.run(measure(sizes, args.repeats, not args.no_peer, args.peer_max))
    print(json.dumps(rows) if args.json else table(rows))


if __name__ == "__main__":
    main()

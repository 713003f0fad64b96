"""Profile agentledger on one benchmark scenario with cProfile and print the top functions.

``python -m benchmarks.profile_overhead c --runs 200``. The agent is warmed up first and rebuilt
before profiling, so the profile covers steady-state runs on an empty event log. ``--no-gc``
keeps the cyclic garbage collector off while profiling: cProfile charges a collection to whichever
C function happened to allocate, which scatters GC time over unrelated names.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
from collections.abc import Sequence

from ._ledger import LedgerRunner
from ._scenarios import SCENARIOS


async def profile(key: str, runs: int, no_gc: bool) -> cProfile.Profile:
    runner = LedgerRunner(SCENARIOS[key])
    for _ in range(min(runs, 50)):
        await runner.run()
    runner.reset()
    gc.collect()
    if no_gc:
        gc.disable()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(runs):
        await runner.run()
    profiler.disable()
    gc.enable()
    return profiler


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_overhead", description=__doc__)
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--sort", default="tottime", help="a pstats sort key (default: tottime)")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--no-gc", action="store_true", help="disable the cyclic GC while profiling")
    args = parser.parse_args(argv)
    profiler = asyncio.run(profile(args.scenario, args.runs, args.no_gc))
    stats = pstats.Stats(profiler)
    stats.strip_dirs().sort_stats(args.sort).print_stats(args.top)


if __name__ == "__main__":
    main()

"""Instructions per ``agent.run()``, counted by callgrind: a figure a busy machine does not move.

Theory of operation. Wall-clock and CPU-time figures on a shared two-core machine move by 10-50%
between invocations; valgrind's callgrind counts the instructions a process executes, which for
the same program, inputs and environment is the same number every time, whatever else the
machine is doing. Each (framework, scenario) runs in a child process under callgrind twice: once
with ``--low`` measured runs and once with ``--high``, both after the same warm-up, so their
difference divided by ``high - low`` is the cost of one run with imports, warm-up and start-up
taken out. The total still varies by about 0.01% between identical processes (addresses
differ), so the spread between the two must be wide: 200 runs by default puts one run's figure
within about 0.5%. Instructions are not time (a cache miss costs more than an add), so this is the
yardstick for comparing two versions of the hot path, not a replacement for ``bench_overhead``.

``--rev REV`` also counts a git revision of this checkout (its ``runtime/`` and ``adapters/``
laid out as the ``agentledger`` package in a temporary folder), so a change is compared with its
base in one command: ``python -m benchmarks.bench_instructions --rev main~3``. ``--peer`` adds
agent-framework-core (``pip install -e '.[bench]'``) and the ratio against it; ``--floor`` adds
the event-sourced floor of ``bench_floor`` (the same work in the least code), so the hot path's
distance from it is a count too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._scenarios import SCENARIOS

ROOT = Path(__file__).resolve().parent.parent
_COLLECTED = re.compile(rb"Collected : (\d+)")
WARM_UP = 20


async def _child(framework: str, key: str, runs: int) -> None:
    """Warm up, then ``runs`` measured runs (the parent counts the whole process)."""
    if framework == "agent-framework-core":
        from ._peer import PeerRunner

        runner: Any = PeerRunner(SCENARIOS[key])
    elif framework == "floor":
        from .bench_floor import FloorRunner

        runner = FloorRunner(SCENARIOS[key])
    else:
        from ._ledger import LedgerRunner

        runner = LedgerRunner(SCENARIOS[key])
    for _ in range(WARM_UP):
        await runner.run()
    runner.reset()
    for _ in range(runs):
        await runner.run()


def count(framework: str, key: str, runs: int, package: Path | None) -> int:
    """Instructions of one child process doing ``runs`` measured runs."""
    # A fixed hash seed: the layout of every dict and set, and so the count, is the same each time.
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0")
    if package is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(package), str(ROOT), env.get("PYTHONPATH", "")])
    command = [
        "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
        sys.executable, "-m", "benchmarks.bench_instructions", "--child", framework, key, str(runs),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, check=False)
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        tail = done.stderr.decode(errors="replace").splitlines()[-15:]
        raise SystemExit(f"{framework}, scenario {key}: the counted child failed:\n" + "\n".join(tail))
    return int(found.group(1))


def per_run(framework: str, key: str, low: int, high: int, package: Path | None = None) -> float:
    return (count(framework, key, high, package) - count(framework, key, low, package)) / (high - low)


def checkout(rev: str, into: Path) -> Path:
    """The ``agentledger`` package of ``rev``, laid out under ``into`` (returned)."""
    archive = subprocess.run(
        ["git", "archive", rev, "runtime", "adapters"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    source = into / "source"
    source.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    package = into / "package"
    shutil.copytree(source / "runtime", package / "agentledger")
    shutil.copytree(source / "adapters", package / "agentledger" / "adapters")
    return package


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_instructions", description=__doc__)
    parser.add_argument("--scenarios", default="abc", help="scenario keys (default: abc)")
    parser.add_argument("--rev", action="append", default=[], help="also count this git revision")
    parser.add_argument("--peer", action="store_true", help="also count agent-framework-core")
    parser.add_argument("--floor", action="store_true", help="also count bench_floor's floor")
    parser.add_argument(
        "--revs-only", action="store_true", help="count only the --rev revisions, not this checkout"
    )
    parser.add_argument("--low", type=int, default=10, help="measured runs of the first child")
    parser.add_argument("--high", type=int, default=210, help="measured runs of the second child")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--child", nargs=3, metavar=("FRAMEWORK", "SCENARIO", "RUNS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is None and not 0 < args.low < args.high:
        parser.error("--low must be positive and below --high")
    if args.revs_only and not args.rev:
        parser.error("--revs-only needs at least one --rev")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child is not None:
        framework, key, runs = args.child
        asyncio.run(_child(framework, key, int(runs)))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        versions: list[tuple[str, str, Path | None]] = []
        if not args.revs_only:
            versions.append(("agentledger", "agentledger (this checkout)", None))
        for rev in args.rev:
            versions.append(("agentledger", f"agentledger @ {rev}", checkout(rev, Path(scratch) / rev)))
        if args.peer:
            versions.append(("agent-framework-core", "agent-framework-core", None))
        if args.floor:
            versions.append(("floor", "floor (bench_floor)", None))
        for framework, label, package in versions:
            results[label] = {
                key: per_run(framework, key, args.low, args.high, package) for key in args.scenarios
            }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    labels = list(results)
    width = max(len(label) + len(labels[0]) + 3 for label in labels)
    print(f"{'instructions per run':<{width}}  " + "  ".join(f"{k:>12}" for k in args.scenarios))
    for label in labels:
        cells = "  ".join(f"{results[label][k]:>12,.0f}" for k in args.scenarios)
        print(f"{label:<{width}}  {cells}")
    base = results[labels[0]]
    for label in labels[1:]:
        ratios = "  ".join(f"{results[label][k] / base[k]:>11.2f}x" for k in args.scenarios)
        print(f"{label + ' / ' + labels[0]:<{width}}  {ratios}")


if __name__ == "__main__":
    main()

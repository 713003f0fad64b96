"""Framework overhead per ``agent.run()``: agentledger against agent-framework-core, in one process.

Theory of operation. Both frameworks get a scripted chat client (no network) that plays the same
scenario, and the same async tool. A scenario is checked before it is timed: each run must make
the expected number of model calls and tool calls and end with the expected text. Timing is
interleaved: each round times one batch of runs per framework (the order alternates between
rounds), every batch starts from a freshly built agent (so agentledger's in-memory log starts
empty) after a ``gc.collect()``, and neither the build nor the collection is timed. The figure per
framework is the median over rounds of the mean time per run in a batch; the ratio is peer median
divided by agentledger median, and the paired ratio is the median of the per-round ratios (a round's
two batches run back to back, so a noisy moment on a shared machine hits both). Memory is measured
in a fresh subprocess per (framework, scenario): one agent runs the scenario many times, once under
``tracemalloc`` and once without it for RSS.

Run ``python -m benchmarks.bench_overhead`` (``--help`` for options). Without agent-framework-core
installed (``pip install -e '.[bench]'``) only agentledger is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from ._ledger import LedgerRunner
from ._scenarios import ANSWER, SCENARIOS, Runner, Scenario

RunnerFactory = Callable[[Scenario], Runner]
PEER = "agent-framework-core"
LEDGER = "agentledger"
INSTALL_HINT = "agent-framework-core is not installed; measuring agentledger only (pip install -e '.[bench]')"


def peer_factory(layers: str) -> RunnerFactory | None:
    """The agent-framework-core runner, or None when the package is not installed."""
    try:
        from ._peer import PeerRunner
    except ImportError:
        return None
    return functools.partial(PeerRunner, layers=layers)


def factories(include_peer: bool, layers: str = "standard") -> dict[str, RunnerFactory]:
    found: dict[str, RunnerFactory] = {LEDGER: LedgerRunner}
    peer = peer_factory(layers) if include_peer else None
    if peer is not None:
        found[PEER] = peer
    elif include_peer:
        print(INSTALL_HINT)
    return found


# -- checks and timing --------------------------------------------------------------------------


async def verify(runner: Runner, scenario: Scenario) -> None:
    """One run must do exactly the scenario's work."""
    before = (runner.counter.model_calls, runner.counter.tool_calls)
    text = await runner.run()
    done = (runner.counter.model_calls - before[0], runner.counter.tool_calls - before[1])
    expected = (scenario.model_calls, scenario.tool_calls)
    if done != expected or text != ANSWER:
        raise SystemExit(
            f"{runner.framework}, scenario {scenario.key}: (model calls, tool calls) = {done}, "
            f"text {text!r}; expected {expected}, {ANSWER!r}"
        )


async def timed_batch(runner: Runner, runs: int) -> float:
    """Microseconds per run over ``runs`` runs of a fresh agent."""
    runner.reset()
    gc.collect()
    start = time.perf_counter_ns()
    for _ in range(runs):
        await runner.run()
    return (time.perf_counter_ns() - start) / runs / 1e3


async def warm_up(runner: Runner, runs: int, target_ms: float) -> int:
    """Run ``runs`` times untimed; returns the batch size that takes about ``target_ms``."""
    start = time.perf_counter_ns()
    for _ in range(runs):
        await runner.run()
    per_run_us = (time.perf_counter_ns() - start) / max(runs, 1) / 1e3
    return max(3, round(target_ms * 1e3 / per_run_us))


async def time_scenario(
    scenario: Scenario, makers: dict[str, RunnerFactory], args: argparse.Namespace
) -> dict[str, Any]:
    runners = {name: make(scenario) for name, make in makers.items()}
    for runner in runners.values():
        await verify(runner, scenario)
    sizes = {name: await warm_up(r, args.warmup, args.batch_ms) for name, r in runners.items()}
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for round_ in range(args.rounds):
        order = list(runners) if round_ % 2 == 0 else list(reversed(runners))
        for name in order:
            samples[name].append(await timed_batch(runners[name], sizes[name]))
    return _summary(scenario, samples, sizes)


def _summary(scenario: Scenario, samples: dict[str, list[float]], sizes: dict[str, int]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "scenario": scenario.key,
        "title": scenario.title,
        "model_calls": scenario.model_calls,
        "tool_calls": scenario.tool_calls,
    }
    for name, values in samples.items():
        q1, _median, q3 = statistics.quantiles(values, n=4)
        result[name] = {"median_us": statistics.median(values), "q1_us": q1, "q3_us": q3}
        result[name] |= {"batch_runs": sizes[name], "rounds": len(values)}
    if PEER in samples:
        per_round = [p / a for p, a in zip(samples[PEER], samples[LEDGER], strict=True)]
        q1, median, q3 = statistics.quantiles(per_round, n=4)
        result["ratio"] = result[PEER]["median_us"] / result[LEDGER]["median_us"]
        result["paired_ratio"] = {"median": median, "q1": q1, "q3": q3}
        result["paired_ratio"] |= {"min": min(per_round), "max": max(per_round)}
    return result


# -- memory -------------------------------------------------------------------------------------


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return _max_rss_bytes()


def _max_rss_bytes() -> int:
    """Peak RSS of this process image (Linux VmHWM; ru_maxrss elsewhere, which exec inherits)."""
    try:
        with open("/proc/self/status") as status:
            line = next(line for line in status if line.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024
    except (OSError, StopIteration):
        scale = 1 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


async def _traced(runner: Runner, runs: int) -> dict[str, int]:
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    worst_run = 0
    for _ in range(runs):
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        await runner.run()
        worst_run = max(worst_run, tracemalloc.get_traced_memory()[1] - before)
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"peak": peak - base, "retained": current - base, "worst_run_peak": worst_run}


async def _resident(runner: Runner, runs: int) -> dict[str, int]:
    gc.collect()
    before = _rss_bytes()
    for _ in range(runs):
        await runner.run()
    gc.collect()
    return {"rss_before": before, "rss_growth": _rss_bytes() - before, "max_rss": _max_rss_bytes()}


async def memory_child(framework: str, key: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One agent, ``runs`` runs: tracemalloc figures or RSS figures (never both in one process)."""
    runs = args.memory_runs
    make = factories(framework == PEER, args.peer_layers)[framework]
    runner = make(SCENARIOS[key])
    await verify(runner, SCENARIOS[key])
    runner.reset()
    result: dict[str, Any] = await (
        _traced(runner, runs) if mode == "tracemalloc" else _resident(runner, runs)
    )
    if isinstance(runner, LedgerRunner):
        result["retained_events"] = await runner.retained_events()
    return result


def measure_memory(framework: str, key: str, args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for mode in ("tracemalloc", "rss"):
        argv = ["--memory-child", framework, key, mode, "--memory-runs", str(args.memory_runs)]
        argv += ["--peer-layers", args.peer_layers]
        command = [sys.executable, "-m", "benchmarks.bench_overhead", *argv]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"memory measurement {framework}/{key}/{mode} failed:\n{done.stderr}")
        result |= json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- environment and report ---------------------------------------------------------------------


def _package(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def environment() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    packages = ("agentledger", "agent-framework-core", "msgspec", "anyio", "pydantic")
    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpu": f"{cpu}, {os.cpu_count()} logical cores",
        **{name: _package(name) for name in packages},
        "ENABLE_INSTRUMENTATION": os.environ.get("ENABLE_INSTRUMENTATION", "unset"),
    }


def _us(value: float) -> str:
    return f"{value / 1e3:.2f} ms" if value >= 1e3 else f"{value:.0f} µs"


def _mib(value: int) -> str:
    return f"{value / 2**20:.2f} MiB"


def time_table(results: Sequence[dict[str, Any]], frameworks: Sequence[str]) -> str:
    head = ["scenario", "model calls", "tool calls", *(f"{f} (median)" for f in frameworks)]
    if PEER in frameworks:
        head += ["ratio of medians", "per-round ratio: median (middle half)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [f"({r['scenario']}) {r['title']}", str(r["model_calls"]), str(r["tool_calls"])]
        cells += [_us(r[f]["median_us"]) for f in frameworks]
        if "ratio" in r:
            paired = r["paired_ratio"]
            cells.append(f"**{r['ratio']:.1f}x**")
            cells.append(f"{paired['median']:.1f}x ({paired['q1']:.1f}x to {paired['q3']:.1f}x)")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def memory_table(memory: dict[str, dict[str, dict[str, Any]]], runs: int) -> str:
    head = [
        "scenario",
        "framework",
        f"tracemalloc peak, {runs} runs",
        "still allocated after",
        "largest single-run peak",
        "RSS growth",
        "peak RSS (with imports)",
        "events in the log",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, by_framework in memory.items():
        for framework, m in by_framework.items():
            cells = [
                key,
                framework,
                _mib(m["peak"]),
                _mib(m["retained"]),
                _mib(m["worst_run_peak"]),
                _mib(m["rss_growth"]),
                _mib(m["max_rss"]),
                str(m.get("retained_events", "-")),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- command line -------------------------------------------------------------------------------


def _scenario_keys(text: str) -> str:
    unknown = sorted(set(text) - set(SCENARIOS))
    if unknown or not text:
        raise argparse.ArgumentTypeError(f"choose from {''.join(SCENARIOS)}, not {text!r}")
    return "".join(dict.fromkeys(text))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_overhead", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--scenarios", type=_scenario_keys, default="abc", help="which of a, b, c to time (default: abc)"
    )
    parser.add_argument("--rounds", type=int, default=40, help="timed batches per framework (default: 40)")
    parser.add_argument("--warmup", type=int, default=200, help="untimed runs first (default: 200)")
    parser.add_argument("--batch-ms", type=float, default=50.0, help="target batch length (default: 50)")
    parser.add_argument(
        "--memory-runs", type=int, default=1000, help="runs for memory figures (default: 1000)"
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the memory measurements")
    parser.add_argument("--ledger-only", action="store_true", help="do not measure agent-framework-core")
    parser.add_argument(
        "--peer-layers",
        choices=("standard", "minimal"),
        default="standard",
        help="agent-framework-core client layers: standard (tool loop, chat middleware, telemetry; "
        "the default) or minimal (tool loop only)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write every figure to PATH as JSON")
    parser.add_argument(
        "--memory-child", nargs=3, metavar=("FRAMEWORK", "SCENARIO", "MODE"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.rounds < 2 or args.warmup < 1 or args.memory_runs < 1:
        parser.error("--rounds needs at least 2; --warmup and --memory-runs at least 1")
    return args


async def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    makers = factories(not args.ledger_only, args.peer_layers)
    report: dict[str, Any] = {"environment": environment(), "settings": vars(args) | {"memory_child": None}}
    report["timing"] = [await time_scenario(SCENARIOS[key], makers, args) for key in args.scenarios]
    print("\n" + time_table(report["timing"], list(makers)), flush=True)
    if not args.no_memory:
        report["memory"] = {
            key: {name: measure_memory(name, key, args) for name in makers} for key in args.scenarios
        }
        print("\n" + memory_table(report["memory"], args.memory_runs))
    return report


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.memory_child:
        framework, key, mode = args.memory_child
        print(json.dumps(asyncio.run(memory_child(framework, key, mode, args))))
        return
    for name, value in environment().items():
        print(f"{name:22} {value}")
    report = asyncio.run(benchmark(args))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)


if __name__ == "__main__":
    main()

"""Many runs at once against a slow model: wall time and memory per run, agentledger beside
agent-framework-core.

Theory of operation. ``--runs`` runs (default 10,000) start together, each on its own agent-free
request to one shared agent: three model calls (two tool steps, then the answer), every model
call answered after ``--latency`` seconds (default 0.5) by a scripted client that sleeps
instead of calling a server. With nothing but waiting in the model calls, the ideal wall time is
three latencies (1.5 s); what a framework adds above that is its own work for all the runs, done
on one event loop. Memory per run is the growth of the process's peak resident size over the
batch divided by the runs (a fresh subprocess per framework, so one does not inherit the other's
heap). The time spent in the cycle collector is reported too (its callbacks time each
collection), and ``--no-collector`` runs the batch with it off, to show what is the collector's.

``floor`` is ``bench_floor``'s event-sourced floor (the same work in the least code) playing the
same three model calls: msgspec events, each checked once, a transition table, one task per run,
no event log kept (as the agents here keep none). It shows what this many runs at once cost on
this machine with nothing but the work itself, the collector included.

Run ``python -m benchmarks.bench_concurrency`` (``--help`` for options).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ._scenarios import ANSWER, TOOL_NAME

LEDGER = "agentledger"
PEER = "agent-framework-core"
FLOOR = "floor"


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


async def _ledger_batch(runs: int, latency: float) -> None:
    from agentledger import Agent, BaseChatClient, ChatOptions, ChatResponse, Content, Message, tool

    class SlowClient(BaseChatClient):
        provider_name = "bench"

        async def get_response(
            self,
            messages: Sequence[Message],
            *,
            options: ChatOptions | None = None,
            function_invocation_kwargs: Mapping[str, Any] | None = None,
            client_kwargs: Mapping[str, Any] | None = None,
            **kwargs: Any,
        ) -> ChatResponse:
            await asyncio.sleep(latency)
            tools_done = sum(1 for m in messages if m.role == "tool")
            if tools_done >= 2:
                return ChatResponse(text=ANSWER)
            call = Content.from_function_call(f"c{tools_done}", TOOL_NAME, arguments='{"n": 1}')
            return ChatResponse(Message("assistant", (call,)))

    @tool(name=TOOL_NAME)
    async def ping(n: int) -> str:
        """Answer a ping."""
        return "ok"

    agent = Agent(client=SlowClient(), tools=[ping], store=False)
    results = await asyncio.gather(*(agent.run("go") for _ in range(runs)))
    assert all(r.text == ANSWER for r in results)


async def _peer_batch(runs: int, latency: float) -> None:
    import agent_framework as af
    from agent_framework import FunctionInvocationLayer

    class SlowClient(FunctionInvocationLayer, af.BaseChatClient):  # type: ignore[misc, unused-ignore]
        def _inner_get_response(self, *, messages: Sequence[Any], stream: bool, **kwargs: Any) -> Any:
            return self._respond(messages)

        async def _respond(self, messages: Sequence[Any]) -> Any:
            await asyncio.sleep(latency)
            tools_done = sum(1 for m in messages if m.role == "tool")
            if tools_done >= 2:
                contents = [af.Content.from_text(ANSWER)]
            else:
                contents = [af.Content.from_function_call(f"c{tools_done}", TOOL_NAME, arguments='{"n": 1}')]
            return af.ChatResponse(messages=[af.Message("assistant", contents)])

    async def ping(n: int) -> str:
        """Answer a ping."""
        return "ok"

    agent = af.Agent(client=SlowClient(), tools=[af.tool(ping, name=TOOL_NAME)])
    results = await asyncio.gather(*(agent.run("go") for _ in range(runs)))
    assert all(r.text == ANSWER for r in results)


async def _floor_batch(runs: int, latency: float) -> None:
    from . import bench_floor as floor
    from ._scenarios import SCENARIOS

    class SlowFloor(floor.FloorRunner):
        async def model(
            self, transcript: Sequence[floor.Message], tools: Sequence[floor.ToolSpec]
        ) -> floor.Response:
            await asyncio.sleep(latency)
            tools_done = sum(1 for m in transcript if m.role == "tool")
            if tools_done >= 2:
                answer = floor.Message("assistant", (floor.Content("text", text=ANSWER),))
                return floor.Response((answer,), "slow-1")
            call = floor.Content(
                "function_call", call_id=f"c{tools_done}", name=TOOL_NAME, arguments='{"n": 1}'
            )
            return floor.Response((floor.Message("assistant", (call,)),), "slow-1")

    class Versions(floor.MemoryStore):
        """Checks each append's expected version, keeps no events (the agents keep no log)."""

        def __init__(self) -> None:
            super().__init__()
            self.versions: dict[str, int] = {}

        def append(self, stream: str, events: Sequence[Any], expected_version: int) -> int:
            if self.versions.get(stream, 0) != expected_version:
                raise RuntimeError(f"{stream}: expected version {expected_version}")
            version = self.versions[stream] = expected_version + len(events)
            return version

    runner = SlowFloor(SCENARIOS["b"])  # the scenario only names the tool; the model is above
    runner.store = Versions()
    results = await asyncio.gather(*(runner.run() for _ in range(runs)))
    assert all(r == ANSWER for r in results)


_BATCHES = {LEDGER: _ledger_batch, PEER: _peer_batch, FLOOR: _floor_batch}


class _CollectorClock:
    """Wall time inside the cycle collector, and how many full collections (its callbacks)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
            return
        self.seconds += time.perf_counter() - self._start
        self.full += info["generation"] == 2


def child(framework: str, runs: int, latency: float, collector: bool = True) -> dict[str, Any]:
    batch = _BATCHES[framework]
    asyncio.run(batch(10, 0.001))  # warm the code paths
    gc.collect()
    clock = _CollectorClock()
    if not collector:
        gc.disable()
    gc.callbacks.append(clock)
    before = _peak_rss()
    start = time.perf_counter()
    try:
        asyncio.run(batch(runs, latency))
    finally:
        wall = time.perf_counter() - start
        gc.callbacks.remove(clock)
        if not collector:
            gc.enable()
    return {
        "framework": framework,
        "runs": runs,
        "wall_s": wall,
        "rss_per_run": (_peak_rss() - before) / runs,
        "collector_s": clock.seconds,
        "full_collections": clock.full,
    }


def measure(framework: str, runs: int, latency: float, collector: bool = True) -> dict[str, Any] | None:
    argv = [sys.executable, "-m", "benchmarks.bench_concurrency", "--child", framework]
    if not collector:
        argv.append("--no-collector")
    done = subprocess.run(
        [*argv, "--runs", str(runs), "--latency", str(latency)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        print(f"{framework}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else 'failed'}")
        return None
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per model call")
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--no-floor", action="store_true")
    parser.add_argument(
        "--no-collector", action="store_true", help="run each batch with the cycle collector off"
    )
    parser.add_argument("--child", choices=tuple(_BATCHES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    collector = not args.no_collector
    if args.child:
        print(json.dumps(child(args.child, args.runs, args.latency, collector)))
        return
    frameworks = [FLOOR, LEDGER, PEER]
    if args.no_peer:
        frameworks.remove(PEER)
    if args.no_floor:
        frameworks.remove(FLOOR)
    ideal = 3 * args.latency
    print(f"{args.runs:,} runs at once, 3 model calls each, {args.latency} s per call (ideal {ideal:.1f} s)")
    if not collector:
        print("(the cycle collector off)")
    columns = ("framework", "wall time", "above ideal", "in the collector", "full collections", "RSS per run")
    print(f"| {' | '.join(columns)} |")
    print("|---|---|---|---|---|---|")
    for framework in frameworks:
        row = measure(framework, args.runs, args.latency, collector)
        if row is not None:
            over = row["wall_s"] - ideal
            kib = row["rss_per_run"] / 1024
            print(
                f"| {framework} | {row['wall_s']:.2f} s | {over:.2f} s | {row['collector_s']:.2f} s | "
                f"{row['full_collections']} | {kib:.1f} KiB |"
            )


if __name__ == "__main__":
    main()

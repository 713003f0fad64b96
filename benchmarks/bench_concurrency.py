"""Many runs at once against a slow model: wall time and memory per run, agentledger beside
agent-framework-core.

Theory of operation. ``--runs`` runs (default 10,000) start together, each on its own agent-free
request to one shared agent: three model calls (two tool steps, then the answer), every model
call answered after ``--latency`` seconds (default 0.5) by a scripted client that sleeps
instead of calling a server. With nothing but waiting in the model calls, the ideal wall time is
three latencies (1.5 s); what a framework adds above that is its own work for all the runs, done
on one event loop. Memory per run is the growth of the process's peak resident size over the
batch divided by the runs (a fresh subprocess per framework, so one does not inherit the other's
heap).

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


def child(framework: str, runs: int, latency: float) -> dict[str, Any]:
    batch = _ledger_batch if framework == LEDGER else _peer_batch
    asyncio.run(batch(10, 0.001))  # warm the code paths
    gc.collect()
    before = _peak_rss()
    start = time.perf_counter()
    asyncio.run(batch(runs, latency))
    wall = time.perf_counter() - start
    return {
        "framework": framework,
        "runs": runs,
        "wall_s": wall,
        "rss_per_run": (_peak_rss() - before) / runs,
    }


def measure(framework: str, runs: int, latency: float) -> dict[str, Any] | None:
    argv = [sys.executable, "-m", "benchmarks.bench_concurrency", "--child", framework]
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
    parser.add_argument("--child", choices=(LEDGER, PEER), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.runs, args.latency)))
        return
    frameworks = [LEDGER] if args.no_peer else [LEDGER, PEER]
    ideal = 3 * args.latency
    print(f"{args.runs:,} runs at once, 3 model calls each, {args.latency} s per call (ideal {ideal:.1f} s)")
    print("| framework | wall time | above ideal | peak RSS growth per run |")
    print("|---|---|---|---|")
    for framework in frameworks:
        row = measure(framework, args.runs, args.latency)
        if row is not None:
            over = row["wall_s"] - ideal
            kib = row["rss_per_run"] / 1024
            print(f"| {framework} | {row['wall_s']:.2f} s | {over:.2f} s | {kib:.1f} KiB |")


if __name__ == "__main__":
    main()

"""What a run keeps while it waits on its model: objects the cycle collector tracks, per run.

Theory of operation. ``--runs`` runs of scenario (a)'s agent (one tool offered, a text answer)
start together on one event loop, each parked inside a model call on one ``asyncio.Event``; the
collector runs, and ``gc.get_objects()`` is counted by type before the runs start and while they
wait. The difference divided by the runs is what one waiting run makes the collector walk on
every full collection: with thousands of runs in flight (``bench_concurrency``), that walk is
most of the time a run spends above its work. The count includes what any client's waiting call
keeps (the asyncio task and its context, the client's coroutine, the future it waits on), so it
compares versions of agentledger, not agentledger with another framework. Unlike a timing it is
the same on every run of the same code and Python.

Run ``python -m benchmarks.bench_parked`` (``--runs``, ``--types`` for the count by type).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
from collections.abc import Mapping, Sequence
from typing import Any

from agentledger import Agent, BaseChatClient, ChatOptions, ChatResponse, Content, Message, tool

from ._scenarios import ANSWER, PROMPT, TOOL_NAME

__all__ = ("main", "parked_objects")


class _WaitingClient(BaseChatClient):
    """Answers every call with the scenario's text once ``release`` is set."""

    provider_name = "bench"

    def __init__(self, release: asyncio.Event) -> None:
        self.release = release
        self.model = "bench-1"
        self.waiting = 0
        self.expected = 0
        self.all_waiting = asyncio.Event()  # set once ``expected`` calls wait

    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        options: ChatOptions | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ChatResponse:
        self.waiting += 1
        if self.waiting == self.expected:
            self.all_waiting.set()
        await self.release.wait()
        return ChatResponse(Message("assistant", (Content.from_text(ANSWER),)), model=self.model)


def _tracked() -> collections.Counter[str]:
    gc.collect()
    return collections.Counter(type(o).__qualname__ for o in gc.get_objects())


async def parked_objects(runs: int) -> collections.Counter[str]:
    """Tracked objects by type that ``runs`` runs waiting on their model hold, in all."""
    release = asyncio.Event()

    async def ping(n: int) -> str:
        """Answer a ping."""
        return "ok"

    client = _WaitingClient(release)
    # The agent's default store, as in the other benchmarks: each run's stream (one list) is
    # counted with the run.
    tools = [tool(name=TOOL_NAME)(ping)]
    agent = Agent(client=client, name="bench", instructions="Answer briefly.", tools=tools)
    release.set()
    await agent.run(PROMPT)  # warm: the agent's kept spec, caches, first-use imports
    release.clear()
    before = _tracked()
    client.waiting, client.expected = 0, runs
    tasks = [asyncio.ensure_future(agent.run(PROMPT)) for _ in range(runs)]
    await client.all_waiting.wait()  # every run is inside its model call
    during = _tracked()
    release.set()
    responses = await asyncio.gather(*tasks)
    assert all(r.text == ANSWER for r in responses)
    return during - before


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_parked", description=__doc__)
    parser.add_argument("--runs", type=int, default=1_000)
    parser.add_argument("--types", action="store_true", help="also print the count by type")
    args = parser.parse_args(argv)
    held = asyncio.run(parked_objects(args.runs))
    print(f"tracked objects per waiting run of (a): {sum(held.values()) / args.runs:.2f}")
    if args.types:
        for name, count in held.most_common():
            if count * 2 >= args.runs:  # at least one every other run
                print(f"  {count / args.runs:5.2f}  {name}")


if __name__ == "__main__":
    main()

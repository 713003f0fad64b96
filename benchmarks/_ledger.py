"""agentledger side of the benchmark: a minimal scripted client, an async tool, a default Agent.

The Agent keeps its defaults, so every run is recorded in its ``MemoryEventStore``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from agentledger import Agent, BaseChatClient, ChatOptions, ChatResponse, Content, Message, __version__, tool

from ._scenarios import PROMPT, TOOL_NAME, Counter, Scenario, Step

__all__ = ("LedgerRunner", "__version__")

_call_ids = itertools.count(1)


class BenchChatClient(BaseChatClient):
    """Plays the scenario's steps in a loop, one per model call."""

    provider_name = "bench"

    def __init__(self, steps: Sequence[Step], counter: Counter) -> None:
        self.steps = tuple(steps)
        self.counter = counter
        self.model = "bench-1"
        self._position = 0

    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        options: ChatOptions | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ChatResponse:
        step = self.steps[self._position]
        self._position = (self._position + 1) % len(self.steps)
        self.counter.model_calls += 1
        if isinstance(step, str):
            contents: tuple[Content, ...] = (Content.from_text(step),)
        else:
            contents = tuple(
                Content.from_function_call(f"call_{next(_call_ids)}", name, arguments=arguments)
                for name, arguments in step
            )
        return ChatResponse(Message("assistant", contents), model=self.model)


class LedgerRunner:
    """agentledger with its default event log, for one scenario."""

    framework = "agentledger"

    def __init__(self, scenario: Scenario, max_iterations: int = 40) -> None:
        self.scenario = scenario
        self.max_iterations = max_iterations
        self.counter = Counter()
        self.agent = self._build()

    def _build(self) -> Agent:
        counter = self.counter

        async def ping(n: int) -> str:
            """Answer a ping."""
            counter.tool_calls += 1
            return "ok"

        client = BenchChatClient(self.scenario.steps, counter)
        tools = [tool(name=TOOL_NAME)(ping)]
        return Agent(
            client=client,
            name="bench",
            instructions="Answer briefly.",
            tools=tools,
            max_iterations=self.max_iterations,
        )

    def reset(self) -> None:
        self.agent = self._build()

    async def run(self) -> str:
        response = await self.agent.run(PROMPT)
        return response.text

    async def retained_events(self) -> int:
        """Events the agent's store holds (the log grows with every run)."""
        store = self.agent.store
        if store is None:
            return 0
        return sum([len(await store.read(stream)) for stream in await store.streams()])

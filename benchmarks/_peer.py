"""agent-framework-core side of the benchmark: a minimal scripted client, an async tool, an Agent.

The client subclasses ``BaseChatClient`` and implements ``_inner_get_response``. The "standard"
composition adds the function-invocation, chat-middleware and telemetry layers in the order the
framework's own public clients use; "minimal" keeps only the function-invocation layer, without
which an Agent cannot call tools. OpenTelemetry instrumentation keeps its default (enabled); with no
tracer provider configured its spans go to the API's no-op tracer. Setting the environment variable
``ENABLE_INSTRUMENTATION=false`` turns it off.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Mapping, Sequence
from importlib.metadata import version
from typing import Any, ClassVar

import agent_framework as af
from agent_framework import ChatMiddlewareLayer as _ChatMiddleware
from agent_framework import FunctionInvocationLayer as _ToolLoop
from agent_framework.observability import ChatTelemetryLayer as _Telemetry

from ._scenarios import PROMPT, TOOL_NAME, Counter, Scenario, Step

__all__ = ("LAYERS", "PeerRunner", "peer_version")

_call_ids = itertools.count(1)


def peer_version() -> str:
    return version("agent-framework-core")


class _ScriptedClient(af.BaseChatClient):  # type: ignore[misc, unused-ignore]
    """Plays the scenario's steps in a loop, one per model call (non-streaming only)."""

    OTEL_PROVIDER_NAME: ClassVar[str] = "bench"

    def __init__(self, *, steps: Sequence[Step], counter: Counter, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.steps = tuple(steps)
        self.counter = counter
        self._position = 0

    def _inner_get_response(
        self, *, messages: Sequence[Any], stream: bool, options: Mapping[str, Any], **kwargs: Any
    ) -> Awaitable[Any]:
        if stream:
            raise NotImplementedError("the benchmark client does not stream")
        step = self.steps[self._position]
        self._position = (self._position + 1) % len(self.steps)
        self.counter.model_calls += 1
        return self._respond(step)

    async def _respond(self, step: Step) -> Any:
        if isinstance(step, str):
            contents = [af.Content.from_text(step)]
        else:
            contents = [
                af.Content.from_function_call(f"call_{next(_call_ids)}", name, arguments=arguments)
                for name, arguments in step
            ]
        return af.ChatResponse(messages=[af.Message("assistant", contents)], model="bench-1")


class BenchChatClient(_ToolLoop, _ChatMiddleware, _Telemetry, _ScriptedClient):  # type: ignore[misc, unused-ignore]
    """The scripted client with the standard layers (tool loop, chat middleware, telemetry)."""

    OTEL_PROVIDER_NAME: ClassVar[str] = "bench"


class MinimalBenchChatClient(_ToolLoop, _ScriptedClient):  # type: ignore[misc, unused-ignore]
    """The scripted client with the tool loop only."""

    OTEL_PROVIDER_NAME: ClassVar[str] = "bench"


LAYERS: dict[str, type[_ScriptedClient]] = {"standard": BenchChatClient, "minimal": MinimalBenchChatClient}


class PeerRunner:
    """agent-framework-core with its defaults, for one scenario."""

    framework = "agent-framework-core"

    def __init__(
        self, scenario: Scenario, layers: str = "standard", max_iterations: int | None = None
    ) -> None:
        self.scenario = scenario
        self.max_iterations = max_iterations
        self.client_class = LAYERS[layers]
        self.counter = Counter()
        self.agent = self._build()

    def _build(self) -> Any:
        counter = self.counter

        async def ping(n: int) -> str:
            """Answer a ping."""
            counter.tool_calls += 1
            return "ok"

        client: Any = self.client_class(steps=self.scenario.steps, counter=counter)
        if self.max_iterations is not None:  # the tool loop layer's own setting
            client.function_invocation_configuration["max_iterations"] = self.max_iterations
        tools = [af.tool(ping, name=TOOL_NAME)]
        return af.Agent(client=client, name="bench", instructions="Answer briefly.", tools=tools)

    def reset(self) -> None:
        self.agent = self._build()

    async def run(self) -> str:
        response = await self.agent.run(PROMPT)
        return str(response.text)

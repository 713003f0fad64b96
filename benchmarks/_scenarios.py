"""The benchmark scenarios, written once and played by both frameworks' scripted clients.

A scenario is the script of one run: one step per model call. A step is either the final text
answer or a batch of function calls (tool name, raw JSON arguments) the model asks for in one
response. Both clients build a fresh response object from the step on every call, with call ids
unique within the process, so the two frameworks receive exactly the same model output.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

__all__ = ("ANSWER", "PROMPT", "SCENARIOS", "TOOL_NAME", "CallSpec", "Counter", "Runner", "Scenario", "Step")

TOOL_NAME = "ping"
ANSWER = "done"
PROMPT = "Ping the service and report."

CallSpec = tuple[str, str]
Step = str | tuple[CallSpec, ...]


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One benchmark case: what the scripted model says at each call of a run."""

    key: str
    title: str
    steps: tuple[Step, ...]

    @property
    def model_calls(self) -> int:
        return len(self.steps)

    @property
    def tool_calls(self) -> int:
        return sum(len(step) for step in self.steps if not isinstance(step, str))


def _call(n: int) -> CallSpec:
    return (TOOL_NAME, f'{{"n": {n}}}')


SCENARIOS: dict[str, Scenario] = {
    "a": Scenario("a", "text answer, no tool", (ANSWER,)),
    "b": Scenario("b", "10 sequential tool iterations", (*((_call(i),) for i in range(10)), ANSWER)),
    "c": Scenario("c", "50 parallel tool calls, 1 iteration", (tuple(_call(i) for i in range(50)), ANSWER)),
}


class Counter:
    """Model calls and tool calls seen by one runner (checked against the scenario)."""

    __slots__ = ("model_calls", "tool_calls")

    def __init__(self) -> None:
        self.model_calls = 0
        self.tool_calls = 0


class Runner(Protocol):
    """One framework set up for one scenario."""

    framework: str
    counter: Counter

    def reset(self) -> None:
        """A fresh agent and client (done outside the timed region)."""

    async def run(self) -> str:
        """One ``agent.run()``; returns the run's final text."""

"""Agent factories that the CLI tests load with `agentledger replay --agent`."""

from __future__ import annotations

from typing import Annotated

from agentledger import Agent, tool
from agentledger.demo import build_demo_agent


def changed_demo() -> Agent:
    """The demo agent whose weather tool now answers differently."""

    @tool(name="get_weather")
    def colder(city: Annotated[str, "City name."]) -> str:
        """Today's weather for a city."""
        return "rain, 9°C"

    agent = build_demo_agent(store=False)
    agent.tools = [colder if t.name == "get_weather" else t for t in agent.tools]
    return agent

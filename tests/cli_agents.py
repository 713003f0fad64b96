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


WIRED: list[int] = []
"""Every amount the bank agent's ``wire`` tool sent, in this process (the decision tests count)."""


def bank_agent() -> Agent:
    """An agent whose ``wire`` tool needs approval; it answers ``Sent.`` after any batch."""
    from agentledger.adapters.chat.scripted import ScriptedChatClient

    @tool(approval_mode="always_require")
    def wire(amount: int) -> str:
        """Send money (a human must approve)."""
        WIRED.append(amount)
        return f"sent {amount}"

    return Agent(client=ScriptedChatClient(["Sent."], repeat=True), tools=[wire], name="bank")

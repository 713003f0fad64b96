"""Runs of a scripted agent with a memory store, for the tests of ``run/lifecycle.py`` and
``run/agent_layers.py``: the agent, one ``AgentRun`` of it, and the log it stored."""

from __future__ import annotations

from typing import Any

from agentledger import Agent, AgentSession, MemoryEventStore, tool
from agentledger.adapters.chat.scripted import ScriptedChatClient, ScriptEntry
from agentledger.core import Event
from agentledger.run import AgentRun

__all__ = ("agent_run", "lookup", "scripted_agent", "stored_log", "wire")


@tool
def lookup(city: str) -> str:
    return f"sunny in {city}"


@tool(approval_mode="always_require")
def wire(amount: int) -> str:
    return f"sent {amount}"


def scripted_agent(script: list[ScriptEntry], middleware: list[Any] | None = None, **agent: Any) -> Agent:
    return Agent(
        client=ScriptedChatClient(script),
        tools=[lookup, wire],
        middleware=middleware,
        store=MemoryEventStore(),
        **agent,
    )


def agent_run(
    agent: Agent, session: AgentSession | None = None, run_id: str = "run-1", **arguments: Any
) -> AgentRun:
    return AgentRun(agent.run_spec(**arguments), session, run_id=run_id)


async def stored_log(agent: Agent, run_id: str = "run-1") -> list[Event]:
    assert agent.store is not None
    return list(await agent.store.read(run_id))

"""The tool registry: runs of the same tools share one mapping until one of them changes it."""

from __future__ import annotations

from typing import Any

import pytest

from agentledger import Agent, FunctionInvocationContext, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core import EventBase, ToolsAdded, ToolsRemoved
from agentledger.errors import ToolDefinitionError
from agentledger.run import ToolRegistry
from agentledger.tools import FunctionTool


@tool
def alpha() -> str:
    """First."""
    return "a"


@tool
def beta() -> str:
    """Second."""
    return "b"


@tool
def gamma() -> str:
    """Third."""
    return "c"


class _Kept:
    """A recorder that keeps what it is given (the registry records before it changes)."""

    run_id = "r"

    def __init__(self) -> None:
        self.records: list[tuple[type[EventBase], dict[str, Any]]] = []

    def record(self, cls: type[EventBase], **fields: Any) -> Any:
        self.records.append((cls, fields))
        return None


TOOLS: tuple[FunctionTool, ...] = (alpha, beta)


def _pair() -> tuple[ToolRegistry, ToolRegistry]:
    return ToolRegistry(TOOLS, _Kept()), ToolRegistry(TOOLS, _Kept())


def test_registries_of_one_tuple_share_a_mapping() -> None:
    first, second = _pair()
    assert first.by_name is second.by_name
    assert list(first.by_name) == ["alpha", "beta"]


def test_adding_copies_first() -> None:
    first, second = _pair()
    first.add(gamma, by_call_id="c1")
    assert list(first.by_name) == ["alpha", "beta", "gamma"]
    assert list(second.by_name) == ["alpha", "beta"]
    third = ToolRegistry((alpha, beta), _Kept())  # a new tuple: a mapping of its own
    assert "gamma" not in third.by_name


def test_removing_copies_first() -> None:
    first, second = _pair()
    first.remove("alpha", by_call_id="c1")
    assert list(first.by_name) == ["beta"]
    assert list(second.by_name) == ["alpha", "beta"]


def test_settling_and_providing_copy_first() -> None:
    first, second = _pair()
    first.settle(ToolsRemoved(run_id="r", seq=3, at=0, by_call_id="c1", names=("beta",)))
    assert list(first.by_name) == ["alpha"]
    second.provide([gamma])
    assert list(second.by_name) == ["alpha", "beta", "gamma"]
    third = ToolRegistry(TOOLS, _Kept())  # the same tuple again
    assert list(third.by_name) == ["alpha", "beta"]
    third.settle(ToolsAdded(run_id="r", seq=3, at=0, by_call_id="c1", tools=(beta.spec,)))
    assert list(third.by_name) == ["alpha", "beta"]


def test_two_tools_of_one_name_are_refused_every_time() -> None:
    @tool(name="alpha")
    def other() -> str:
        """Another alpha."""
        return "x"

    tools = (alpha, other)
    for _ in range(2):  # the refused tuple is not remembered as if it passed
        with pytest.raises(ToolDefinitionError, match="two different tools are named 'alpha'"):
            ToolRegistry(tools, _Kept())


@pytest.mark.anyio
@pytest.mark.filterwarnings("ignore::FutureWarning")  # progressive tools are experimental
async def test_a_run_adding_tools_leaves_the_next_run_its_own() -> None:
    seen: list[list[str]] = []

    @tool
    def load(ctx: FunctionInvocationContext) -> str:
        """Load gamma."""
        ctx.add_tools(gamma)
        return "loaded"

    @tool
    def look(ctx: FunctionInvocationContext) -> str:
        """Say which tools the run has."""
        assert ctx.tools is not None
        seen.append([t.name for t in ctx.tools])
        return "looked"

    client = ScriptedChatClient([Call("load"), Call("look"), "done", Call("look"), "done"])
    agent = Agent(client=client, tools=[load, look])
    await agent.run("first")
    await agent.run("second")
    assert seen == [["load", "look", "gamma"], ["load", "look"]]

"""Tool availability: the seed's patterns and its table of semantics and caveats."""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import Annotated

import pytest
from pydantic import Field

from agentledger import (
    Agent,
    ExperimentalWarning,
    FunctionInvocationContext,
    ToolMode,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.core import RunStarted, ToolChoiceReset, ToolsAdded, ToolsRemoved
from agentledger.testing import FixedClock, SequentialIds, event_types

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _quiet_experimental() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        yield


# -- the seed's loader pattern -----------------------------------------------------------------


@tool(approval_mode="never_require")
def factorial(n: Annotated[int, Field(description="A non-negative integer.")]) -> str:
    """Compute the factorial of n."""
    if n < 0:
        return "Error: n must be a non-negative integer."
    result = 1
    for value in range(2, n + 1):
        result *= value
    return f"{n}! = {result}"


@tool(approval_mode="never_require")
def fibonacci(n: Annotated[int, Field(description="The 0-based index in the Fibonacci sequence.")]) -> str:
    """Compute the n-th Fibonacci number."""
    if n < 0:
        return "Error: n must be a non-negative integer."
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return f"fib({n}) = {a}"


@tool(approval_mode="never_require")
def load_math_tools(ctx: FunctionInvocationContext) -> str:
    """Load additional math tools (factorial, fibonacci) so they can be used."""
    ctx.add_tools([factorial, fibonacci])
    return "Loaded math tools: factorial, fibonacci. You can now call them."


async def test_loader_pattern(clock: FixedClock, ids: SequentialIds) -> None:
    """The model starts with the loader only and sees the math tools from the next call on."""
    client = ScriptedChatClient([Call("load_math_tools"), Call("factorial", {"n": 5}), "5! = 120"])
    agent = Agent(
        client=client,
        name="MathAgent",
        instructions=(
            "You are a math assistant. "
            "If you need math capabilities that are not yet available, call load_math_tools first."
        ),
        tools=[load_math_tools],
        clock=clock,
        ids=ids,
    )
    response = await agent.run("What is 5 factorial?")
    assert str(response) == "5! = 120"
    assert [r.tools for r in client.requests] == [
        ("load_math_tools",),
        ("load_math_tools", "factorial", "fibonacci"),
        ("load_math_tools", "factorial", "fibonacci"),
    ]
    assert "ctx" not in load_math_tools.parameters["properties"]
    n_schema = client.requests[1].tool_specs[1].parameters["properties"]["n"]
    assert n_schema == {"type": "integer", "description": "A non-negative integer."}
    added = [e for e in response.events if isinstance(e, ToolsAdded)]
    assert [[t.name for t in e.tools] for e in added] == [["factorial", "fibonacci"]]
    assert added[0].by_call_id == "call_1"
    assert client.requests[2].messages[-1].contents[0].result == "5! = 120"


# -- gating ---------------------------------------------------------------------------------------

_last_fetched_id: str | None = None


@tool(approval_mode="never_require")
def get_record(record_id: str, ctx: FunctionInvocationContext) -> str:
    """Fetch a record. Unlocks update_record for the same record."""
    global _last_fetched_id
    _last_fetched_id = record_id
    ctx.add_tools(update_record)
    return f"Record {record_id}: title='Example record', status='open'"


@tool(approval_mode="never_require")
def update_record(record_id: str, status: str) -> str:
    """Update the status of a record."""
    return f"Updated record {record_id} to status '{status}'."


def _record_script() -> list[ScriptEntry]:
    return [
        Call("get_record", {"record_id": "REC-42"}),
        Call("update_record", {"record_id": "REC-42", "status": "in-progress"}),
        "Done.",
    ]


async def test_gating_pattern_rearms_every_run(clock: FixedClock, ids: SequentialIds) -> None:
    """update_record is hidden until get_record runs, and hidden again at the next run."""
    client = ScriptedChatClient([*_record_script(), *_record_script()])
    configured = [get_record]
    agent = Agent(
        client=client,
        name="RecordAgent",
        instructions="You help manage records. Fetch a record before updating it.",
        tools=configured,
        clock=clock,
        ids=ids,
    )
    await agent.run("Update record REC-42 to status 'in-progress'.")
    second = await agent.run("And again.")
    offered = [r.tools for r in client.requests]
    assert offered[0] == offered[3] == ("get_record",)
    assert offered[1] == offered[4] == ("get_record", "update_record")
    assert configured == [get_record]
    assert second.events[0].tools[0].name == "get_record"  # type: ignore[union-attr]
    assert [t.name for t in agent.tools] == ["get_record"]


async def enforce_read_before_write(
    context: FunctionInvocationContext,
    call_next: Callable[[], Awaitable[None]],
) -> None:
    """Reject update_record calls that target a different record than the one fetched."""
    if context.function.name == "update_record":
        requested_id = context.arguments.get("record_id") if hasattr(context.arguments, "get") else None
        if requested_id != _last_fetched_id:
            context.result = (
                f"Error: you must fetch record '{requested_id}' before updating it. "
                f"Last fetched record was '{_last_fetched_id}'."
            )
            return
    await call_next()


async def test_middleware_gating_rejects_without_running(clock: FixedClock, ids: SequentialIds) -> None:
    """A rejected update never runs; the model gets the corrective feedback as the result."""
    ran: list[str] = []

    @tool(name="update_record")
    def tracked_update(record_id: str, status: str) -> str:
        ran.append(record_id)
        return f"Updated record {record_id} to status '{status}'."

    client = ScriptedChatClient(
        [
            Call("get_record", {"record_id": "REC-1"}),
            Call("update_record", {"record_id": "REC-2", "status": "closed"}),
            Call("update_record", {"record_id": "REC-1", "status": "closed"}),
            "ok",
        ]
    )
    agent = Agent(
        client=client,
        name="RecordAgent",
        instructions="Fetch a record before updating it.",
        tools=[get_record, tracked_update],
        middleware=[enforce_read_before_write],
        clock=clock,
        ids=ids,
    )
    response = await agent.run("close REC-2")
    assert ran == ["REC-1"]
    feedback = client.requests[2].messages[-1].contents[0].result
    assert feedback == (
        "Error: you must fetch record 'REC-2' before updating it. Last fetched record was 'REC-1'."
    )
    assert event_types(response.events).count("MiddlewareShortCircuit") == 1


# -- tool_choice ------------------------------------------------------------------------------


async def test_required_tool_choice_applies_to_first_call_only(clock: FixedClock, ids: SequentialIds) -> None:
    """A required tool_choice reaches the first model call, is reset after it, and re-applies per run."""
    client = ScriptedChatClient([*_record_script(), "plain answer"])
    agent = Agent(client=client, tools=[get_record], clock=clock, ids=ids)
    choice: ToolMode = {"mode": "required", "required_function_name": "get_record"}
    response = await agent.run(
        "Update record REC-42 to status 'in-progress'.", options={"tool_choice": choice}
    )
    assert [r.tool_choice for r in client.requests] == [choice, None, None]
    resets = [e for e in response.events if isinstance(e, ToolChoiceReset)]
    assert [(e.iteration, e.previous) for e in resets] == [(1, choice)]
    await agent.run("again", options={"tool_choice": choice})
    assert client.requests[3].tool_choice == choice


@pytest.mark.parametrize("choice", ["auto", "none", "required"])
async def test_string_tool_choices(choice: str, clock: FixedClock, ids: SequentialIds) -> None:
    """The shorthand strings reach the model; only "required" is reset after the first call."""
    client = ScriptedChatClient([Call("update_record", {"record_id": "a", "status": "b"}), "ok"])
    agent = Agent(client=client, tools=[update_record], clock=clock, ids=ids)
    await agent.run("x", options={"tool_choice": choice})
    assert client.requests[0].tool_choice == choice
    assert client.requests[1].tool_choice == (None if choice == "required" else choice)


# -- the table of semantics and caveats ---------------------------------------------------------


async def test_next_iteration_effect(clock: FixedClock, ids: SequentialIds) -> None:
    """Tools added by a call are offered at the next model call, not at the one that asked for it."""
    client = ScriptedChatClient([Call("load_math_tools"), "ok"])
    agent = Agent(client=client, tools=[load_math_tools], clock=clock, ids=ids)
    await agent.run("x")
    assert client.requests[0].tools == ("load_math_tools",)
    assert client.requests[1].tools == ("load_math_tools", "factorial", "fibonacci")


@pytest.mark.parametrize("sequential", [True, False])
async def test_batch_in_flight_finishes(sequential: bool, clock: FixedClock, ids: SequentialIds) -> None:
    """A tool removed by an earlier call of the same batch still runs in that batch."""
    ran: list[str] = []

    @tool
    def remover(ctx: FunctionInvocationContext) -> str:
        ctx.remove_tools("victim")
        ran.append("remover")
        return "removed"

    @tool
    async def victim() -> str:
        ran.append("victim")
        return "still ran"

    client = ScriptedChatClient([[Call("remover"), Call("victim")], "ok"])
    agent = Agent(client=client, tools=[remover, victim], clock=clock, ids=ids, sequential_tools=sequential)
    response = await agent.run("x")
    assert sorted(ran) == ["remover", "victim"]
    assert client.requests[1].tools == ("remover",)
    results = [c.result for c in client.requests[1].messages[-1].contents]
    assert results == ["removed", "still ran"]
    removed = [e for e in response.events if isinstance(e, ToolsRemoved)]
    assert [e.names for e in removed] == [("victim",)]


async def test_duplicate_names(clock: FixedClock, ids: SequentialIds) -> None:
    """Same tool or same function again: no-op; a different tool under a taken name: ValueError."""
    outcomes: list[str] = []

    def plain() -> str:
        return "p"

    other_factorial = tool(name="factorial")(lambda n: n)

    @tool
    def adder(ctx: FunctionInvocationContext) -> str:
        ctx.add_tools(factorial)
        ctx.add_tools(factorial)
        ctx.add_tools(plain)
        ctx.add_tools(plain)
        try:
            ctx.add_tools([fibonacci, other_factorial])
        except ValueError as exc:
            outcomes.append(str(exc))
        return "ok"

    client = ScriptedChatClient([Call("adder"), "done"])
    agent = Agent(client=client, tools=[adder], clock=clock, ids=ids)
    response = await agent.run("x")
    assert client.requests[1].tools == ("adder", "factorial", "plain")
    assert len(outcomes) == 1
    assert "factorial" in outcomes[0]
    assert event_types(response.events).count("ToolsAdded") == 2


async def test_outside_the_loop_raises() -> None:
    """add_tools/remove_tools outside a run loop raise RuntimeError, FunctionTool.invoke included."""
    with pytest.raises(RuntimeError, match="inside an agent run"):
        await load_math_tools.invoke()

    @tool
    def remover(ctx: FunctionInvocationContext) -> str:
        ctx.remove_tools("x")
        return "no"

    with pytest.raises(RuntimeError):
        await remover.invoke()


def test_experimental_warning_once_per_process() -> None:
    """The first add_tools/remove_tools of a process warns (PROGRESSIVE_TOOLS), later ones do not."""
    code = """
import asyncio, warnings
from agentledger import Agent, FunctionInvocationContext, ExperimentalWarning, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
@tool
def extra() -> str:
    return "x"
@tool
def toggle(ctx: FunctionInvocationContext) -> str:
    ctx.add_tools(extra); ctx.remove_tools(extra); ctx.add_tools(extra)
    return "ok"
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    client = ScriptedChatClient([Call("toggle"), Call("toggle"), "done"])
    asyncio.run(Agent(client=client, tools=[toggle]).run("x"))
found = [w for w in caught if issubclass(w.category, ExperimentalWarning)]
assert issubclass(ExperimentalWarning, FutureWarning)
print(len(found), "PROGRESSIVE_TOOLS" in str(found[0].message))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "True"]
    assert ExperimentalWarning.__mro__[1] is FutureWarning


def test_experimental_warning_turned_into_an_error_is_not_yet_shown() -> None:
    """Under ``simplefilter("error")`` every add_tools raises until the warning is really shown
    once (as in the reference framework), not only the first."""
    code = """
import asyncio, warnings
from agentledger import Agent, ExperimentalWarning, FunctionInvocationContext, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core.events import ToolFailed
@tool
def extra() -> str:
    return "x"
@tool
def load(ctx: FunctionInvocationContext) -> str:
    ctx.add_tools(extra)
    return "ok"
def run() -> list:
    agent = Agent(client=ScriptedChatClient([Call("load"), "done"]), tools=[load])
    return asyncio.run(agent.run("x")).events
raised = 0
for _ in range(3):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ExperimentalWarning)
        raised += sum(isinstance(e, ToolFailed) and e.error_type == "ExperimentalWarning" for e in run())
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    run()
    run()
print(raised, sum(issubclass(w.category, ExperimentalWarning) for w in caught))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["3", "1"]


async def test_callers_container_is_never_changed(clock: FixedClock, ids: SequentialIds) -> None:
    """Adding and removing during a run leaves the caller's list and the agent's tools untouched."""
    mine = [load_math_tools]
    client = ScriptedChatClient([Call("load_math_tools"), "ok", "second"])
    agent = Agent(client=client, tools=mine, clock=clock, ids=ids)
    await agent.run("x")
    await agent.run("y")
    assert mine == [load_math_tools]
    assert client.requests[2].tools == ("load_math_tools",)


async def test_direct_mutation_of_ctx_tools_is_recorded(clock: FixedClock, ids: SequentialIds) -> None:
    """append/remove on ctx.tools record ToolsAdded/ToolsRemoved; item assignment is refused."""
    refused: list[str] = []

    @tool
    def mutate(ctx: FunctionInvocationContext) -> str:
        assert ctx.tools is not None
        ctx.tools.append(factorial)
        ctx.tools.remove(ctx.tools[0])
        try:
            ctx.tools[0] = fibonacci
        except TypeError as exc:
            refused.append(str(exc))
        return ",".join(t.name for t in ctx.tools)

    client = ScriptedChatClient([Call("mutate"), "ok"])
    response = await Agent(client=client, tools=[mutate], clock=clock, ids=ids).run("x")
    assert client.requests[1].tools == ("factorial",)
    assert event_types(response.events).count("ToolsAdded") == 1
    assert event_types(response.events).count("ToolsRemoved") == 1
    assert refused
    assert "add_tools" in refused[0]


async def test_unknown_names_are_ignored_on_removal(clock: FixedClock, ids: SequentialIds) -> None:
    """Removing names that are not offered changes nothing and records nothing."""

    @tool
    def remover(ctx: FunctionInvocationContext) -> str:
        ctx.remove_tools(["nope", "also-not"])
        return "ok"

    client = ScriptedChatClient([Call("remover"), "ok"])
    response = await Agent(client=client, tools=[remover], clock=clock, ids=ids).run("x")
    assert "ToolsRemoved" not in event_types(response.events)
    assert client.requests[1].tools == ("remover",)


@pytest.mark.anyio
async def test_concurrent_calls_changing_the_tools_leave_the_logs_tools() -> None:
    """Two concurrent calls: the first removes a tool the second adds, but runs after it in
    time. The log keeps the changes in the model's order of the calls (removed, then added),
    and the live tools follow the log: the next model call is offered the tool and can call it."""
    import anyio

    from agentledger import tool

    added = anyio.Event()
    ran: list[str] = []

    @tool
    def extra() -> str:
        """Only there once unlocked."""
        ran.append("extra")
        return "extra ran"

    @tool
    async def lock(ctx: FunctionInvocationContext) -> str:
        """Remove extra (after unlock has added it, in time)."""
        await added.wait()
        ctx.remove_tools("extra")
        return "locked"

    @tool
    async def unlock(ctx: FunctionInvocationContext) -> str:
        """Add extra."""
        ctx.add_tools(extra)
        added.set()
        return "unlocked"

    client = ScriptedChatClient([[Call("lock"), Call("unlock")], Call("extra"), "done"])
    agent = client.as_agent(tools=[lock, unlock], clock=FixedClock(), ids=SequentialIds())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        response = await agent.run("go")
    changes = [type(e).__name__ for e in response.events if isinstance(e, ToolsAdded | ToolsRemoved)]
    assert changes == ["ToolsRemoved", "ToolsAdded"]
    assert "extra" in client.requests[1].tools
    assert ran == ["extra"]
    assert response.text == "done"


async def test_each_run_offers_the_agents_tools_as_they_are_when_it_starts() -> None:
    """Runs share what they offer while the agent's tools stay the same; a tool added to,
    replaced in or removed from ``agent.tools`` between runs is offered (or not) from the next."""
    client = ScriptedChatClient(["a", "b", "c", "d"])
    agent = Agent(client=client, tools=[factorial], ids=SequentialIds(), clock=FixedClock())

    async def offered() -> tuple[str, ...]:
        started = (await agent.run("go")).events[0]
        assert isinstance(started, RunStarted)
        return tuple(spec.name for spec in started.tools)

    assert await offered() == ("factorial",)
    agent.tools.append(fibonacci)  # in place: the same list
    assert await offered() == ("factorial", "fibonacci")
    agent.tools[0] = fibonacci
    agent.tools.pop()
    assert await offered() == ("fibonacci",)
    agent.tools.clear()
    assert await offered() == ()

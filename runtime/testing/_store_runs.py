"""Realistic agent runs for the store contract: together they record every event type.

They share one store, clock, id source and session, so what the store gives back can be compared
with what the runs produced, and a session rebuilt from it with the live one.
"""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agentledger import (
    Agent,
    AgentContext,
    AgentSession,
    ChatContext,
    Content,
    ContextProvider,
    ExperimentalWarning,
    FunctionInvocationContext,
    Message,
    MiddlewareTermination,
    SessionContext,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptedRequest
from agentledger.core.events import ALWAYS_REQUIRE, Event
from agentledger.errors import ModelCallError
from agentledger.store import EventStore

from . import FixedClock, SequentialIds

__all__ = ("by_stream", "record_runs")

CallNext = Callable[[], Awaitable[None]]


# -- realistic runs ---------------------------------------------------------------------------


@tool
def lookup(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


@tool
def remember(key: str, value: str, ctx: FunctionInvocationContext) -> str:
    """Keep a traveller's preference in session state."""
    assert ctx.session is not None
    ctx.session.state[key] = value
    return "remembered"


@tool
def book(nights: int) -> dict[str, object]:
    """Book a room."""
    return {"confirmation": f"HTL-{nights}", "nights": nights}


@tool
def unlock(ctx: FunctionInvocationContext) -> str:
    """Offer the booking tool."""
    ctx.add_tools(book)
    return "book is available"


@tool
def lock(ctx: FunctionInvocationContext) -> str:
    """Stop offering the booking tool."""
    ctx.remove_tools("book")
    return "book is gone"


@tool
def broken() -> str:
    """A tool whose backend is down."""
    raise RuntimeError("backend down")


@tool
def stop() -> str:
    """Guarded by middleware that ends the run."""
    return "never seen"


@tool(approval_mode=ALWAYS_REQUIRE)
def pay(amount: int) -> str:
    """Pay (a person approves first)."""
    return f"paid {amount}"


async def guard(context: FunctionInvocationContext, call_next: CallNext) -> None:
    """Answer empty bookings in the tool's place; end the run on ``stop``."""
    if context.function.name == "book" and context.arguments.get("nights", 0) < 1:
        context.result = "Error: book at least one night."
        return
    if context.function.name == "stop":
        raise MiddlewareTermination("stopped by policy")
    await call_next()


async def brief(context: AgentContext, call_next: CallNext) -> None:
    """Add an instruction to every run's input."""
    context.messages = [*context.messages, Message("user", (Content.from_text("Answer briefly."),))]
    await call_next()


async def cool(context: ChatContext, call_next: CallNext) -> None:
    """Send every model call with temperature 0."""
    context.options = {**context.options, "temperature": 0.0}
    await call_next()


class Notes(ContextProvider):
    """Recalls a note before each run and counts the runs it saw in its own state."""

    def __init__(self) -> None:
        super().__init__("notes")

    async def before_run(
        self, *, agent: Any, session: AgentSession, context: SessionContext, state: dict[str, Any]
    ) -> None:
        context.extend_messages(self, [Message("user", (Content.from_text("Note: stop means stop."),))])
        context.extend_instructions(self.source_id, "Follow the notes.")

    async def after_run(
        self, *, agent: Any, session: AgentSession, context: SessionContext, state: dict[str, Any]
    ) -> None:
        state["runs"] = state.get("runs", 0) + 1


def _unreachable(request: ScriptedRequest) -> str:
    raise ConnectionError("model unreachable")


class _Scenarios:
    """Runs that share one store, clock, id source and session; together they record every event type."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.clock, self.ids = FixedClock(), SequentialIds()
        self.session = AgentSession(self.ids("session"))

    def agent(
        self, *script: Any, max_iterations: int = 40, tools: Any = None, providers: Any = None
    ) -> Agent:
        return Agent(
            client=ScriptedChatClient(list(script)),
            tools=tools or [lookup, remember, unlock, lock, broken, stop, pay],
            middleware=[guard, brief],
            store=self.store,
            clock=self.clock,
            ids=self.ids,
            max_iterations=max_iterations,
            context_providers=providers,
        )

    async def plan(self) -> None:
        """Parallel calls, session writes, tools added and removed, a short-circuit, three errors."""
        planner = self.agent(
            [Call("lookup", {"city": "Lisbon"}), Call("remember", {"key": "room", "value": "quiet"})],
            Call("unlock"),
            Call("book", {"nights": 0}),
            Call("book", {"nights": 2}),
            Call("lock"),
            Call("ghost"),
            Call("lookup", "{not json"),
            Call("broken"),
            "Booked 2 nights in Lisbon.",
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            await planner.run("Plan Lisbon.", session=self.session, options={"tool_choice": "required"})

    async def approve(self) -> None:
        """A batch that waits for one call's approval, resumed whole by the next run."""
        batch = [Call("pay", {"amount": 5}, call_id="call_pay"), Call("lookup", {"city": "Lima"}, "c_lima")]
        cashier = self.agent(batch, "Paid 5.")
        paused = await cashier.run("Pay 5.", session=self.session)
        answer = paused.user_input_requests[0].to_approval_response(True)
        await cashier.run(Message("user", (answer,)), session=self.session)

    async def terminate(self) -> None:
        """Middleware that ends the run; a context provider's note and state."""
        agent = self.agent(Call("stop", call_id="call_stop"), "unused", providers=[Notes()])
        await agent.run("Stop.", session=self.session)

    async def overrun(self) -> None:
        """An iteration limit whose final answer still asks for a call; chat middleware at work."""
        oslo = Call("lookup", {"city": "Oslo"}, "call_oslo")
        rome = Call("lookup", {"city": "Rome"}, "call_rome")
        agent = self.agent(oslo, rome, max_iterations=1)
        await agent.run("Keep looking.", session=self.session, middleware=[cool])

    async def delegate(self) -> None:
        """A sub-agent run started by a tool call."""
        research = self.agent("Lisbon is sunny all week.").as_tool(name="research")
        call = Call("research", {"task": "weather"}, call_id="call_research")
        await self.agent(call, "Sunny.", tools=[research]).run("Research Lisbon.", session=self.session)

    async def fail(self) -> None:
        """A model call that raises."""
        with pytest.raises(ModelCallError):
            await self.agent(_unreachable).run("Anyone there?", session=self.session)


async def record_runs(store: EventStore) -> AgentSession:
    """Run every scenario into ``store``; returns the session they share."""
    runs = _Scenarios(store)
    for scenario in (runs.plan, runs.approve, runs.terminate, runs.overrun, runs.delegate, runs.fail):
        await scenario()
    return runs.session


def by_stream(events: list[Event]) -> dict[str, list[Event]]:
    streams: dict[str, list[Event]] = {}
    for event in events:
        streams.setdefault(event.run_id, []).append(event)
    return streams

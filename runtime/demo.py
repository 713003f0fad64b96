"""The demo run behind ``agentledger demo``: a scripted trip-planning agent.

It needs no API key and no server: the model is a ``ScriptedChatClient``. The run calls two tools
in parallel, stores a preference in session state, unlocks a booking tool at run time, has one
call rejected by function middleware with corrective feedback, and answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from ._sources import Clock, IdSource
from .agent import Agent, AgentResponse
from .context import FunctionInvocationContext
from .session import AgentSession
from .store import EventStore
from .testing import FixedClock, SequentialIds
from .tools import tool

__all__ = ("build_demo_agent", "run_demo")


@tool
def get_weather(city: Annotated[str, "City name."]) -> str:
    """Today's weather for a city."""
    return {"lisbon": "sunny, 24°C", "oslo": "snow, -3°C"}.get(city.lower(), "cloudy, 15°C")


@tool
def remember_preference(
    key: Annotated[str, "What the preference is about."],
    value: Annotated[str, "The preference."],
    ctx: FunctionInvocationContext,
) -> str:
    """Remember a traveller's preference for later turns."""
    if ctx.session is None:
        return "No session available."
    ctx.session.state.setdefault("preferences", {})[key] = value
    return f"Remembered {key} = {value}."


@tool
def book_hotel(city: str, nights: int, ctx: FunctionInvocationContext) -> dict[str, object]:
    """Book a hotel (unlocked by load_booking_tools)."""
    source = ctx.kwargs.get("request_source", "unknown")
    return {"confirmation": f"HTL-{city[:3].upper()}-{nights}", "nights": nights, "via": source}


@tool
def load_booking_tools(ctx: FunctionInvocationContext) -> str:
    """Make the booking tools available."""
    ctx.add_tools(book_hotel)
    return "Booking tools loaded: book_hotel."


async def require_positive_nights(
    context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]
) -> None:
    """Reject bookings of zero nights without running the tool."""
    context.kwargs.setdefault("request_source", "demo-middleware")
    if context.function.name == "book_hotel" and context.arguments.get("nights", 0) < 1:
        context.result = "Error: a booking needs at least one night."
        return
    await call_next()


def build_demo_agent(
    store: EventStore | bool | None = True, ids: IdSource | None = None, clock: Clock | None = None
) -> Agent:
    """The demo agent on its scripted model (a fixed clock and sequential ids unless given)."""
    from agentledger.adapters.chat.scripted import Call, ScriptedChatClient

    client = ScriptedChatClient(
        [
            [
                Call("get_weather", {"city": "Lisbon"}),
                Call("remember_preference", {"key": "room", "value": "quiet"}),
            ],
            Call("load_booking_tools"),
            Call("book_hotel", {"city": "Lisbon", "nights": 0}),
            Call("book_hotel", {"city": "Lisbon", "nights": 2}),
            "Lisbon is sunny at 24°C. I booked a quiet room for 2 nights: HTL-LIS-2.",
        ]
    )
    return client.as_agent(
        name="TripPlanner",
        instructions="Plan trips. Load booking tools before booking.",
        tools=[get_weather, remember_preference, load_booking_tools],
        middleware=[require_positive_nights],
        store=store,
        clock=clock or FixedClock(),
        ids=ids or SequentialIds(),
    )


async def run_demo(
    store: EventStore | bool | None = True, ids: IdSource | None = None, *, clock: Clock | None = None
) -> tuple[AgentResponse, AgentSession]:
    """Run the demo once (``agentledger demo`` gives it the wall clock); returns the response and
    the session it used."""
    agent = build_demo_agent(store, ids, clock)
    session = agent.create_session()
    response = await agent.run(
        "Check the weather in Lisbon, remember I like quiet rooms, and book 2 nights.",
        session=session,
        function_invocation_kwargs={"user_id": "traveller-7"},
    )
    return response, session

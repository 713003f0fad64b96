"""A shop agent for the regression-suite tests: recorded five times, then checked as it changes."""

from __future__ import annotations

from typing import Annotated, Any

from agentledger import Agent, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient

from .replay_tree_agents import NoModel

ITEMS = ("tea", "coffee", "bread", "milk", "jam")
PRICES = {"tea": 3, "coffee": 4, "bread": 2, "milk": 1, "jam": 5}


def shop(prices: dict[str, int] | None = None, *, recording_item: str | None = None) -> Agent:
    """The shop; with ``recording_item`` its model asks for that item's price and answers."""
    table = dict(PRICES if prices is None else prices)

    @tool
    def price(item: Annotated[str, "What to price."]) -> str:
        """The price of an item, in euros."""
        return f"{item}: {table[item]} EUR"

    client = (
        ScriptedChatClient(
            [Call("price", {"item": recording_item}), f"That is the price of {recording_item}."]
        )
        if recording_item is not None
        else NoModel()
    )
    return Agent(client=client, name="shop", instructions="Answer with prices.", tools=[price])


def same() -> Agent:
    return shop()


def dearer_tea() -> Agent:
    return shop({**PRICES, "tea": 30})


def other_agent() -> Agent:
    agent = shop()
    agent.name = "bakery"
    return agent


def till(recording: bool = False) -> Agent:
    """A till whose refund waits for a human's approval."""

    @tool(approval_mode="always_require")
    def refund(amount: Annotated[int, "Euros to give back."]) -> str:
        """Give money back."""
        return f"refunded {amount} EUR"

    client = ScriptedChatClient([Call("refund", {"amount": 5}), "Refunded."]) if recording else NoModel()
    return Agent(client=client, name="till", tools=[refund])


def new_instructions() -> Agent:
    """The shop with other instructions: drift, and nothing else."""
    agent = shop()
    agent.instructions = "Answer with prices, in euros."
    return agent


def _till(body: str, *, replay: Any = "run", recording: bool = False) -> Agent:
    @tool(approval_mode="always_require", replay=replay)
    def refund(amount: Annotated[int, "Euros to give back."]) -> str:
        """Give money back."""
        if body == "never":
            raise AssertionError("a replay ran a tool marked never to run in one")
        return body.format(amount=amount)

    client = ScriptedChatClient([Call("refund", {"amount": 5}), "Refunded."]) if recording else NoModel()
    return Agent(client=client, name="till", tools=[refund])


def till_changed() -> Agent:
    """The till whose gated refund now says something else."""
    return _till("gave back {amount} EUR")


def till_from_the_log() -> Agent:
    """The till whose refund, changed, is marked never to run in a replay: the log answers it."""
    return _till("never", replay="recorded")


def till_with_a_double() -> Agent:
    """The till whose refund never runs in a replay: a test double answers in its place."""
    return _till("never", replay=lambda amount: f"refunded {amount} EUR")

"""A shop agent for the regression-suite tests: recorded five times, then checked as it changes."""

from __future__ import annotations

from typing import Annotated

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

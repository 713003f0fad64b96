"""An order agent whose tools take and return pydantic models (loaded by the CLI tests)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agentledger import Agent, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.store import EventStore


class Shipping(BaseModel):
    city: str
    express: bool = False


class Line(BaseModel):
    item: str
    quantity: int = Field(ge=1, description="How many.")


class Order(BaseModel):
    lines: list[Line]
    shipping: Shipping


class Receipt(BaseModel):
    order_id: str
    total: float
    shipping: Shipping


@tool
def place_order(order: Order, note: str = "") -> Receipt:
    """Place an order.

    Args:
        order: What to send, and where.
        note: A note for the packer.
    """
    assert isinstance(order.shipping, Shipping)  # the tool gets model instances
    total = sum(line.quantity for line in order.lines) * 4.75
    return Receipt(order_id="o-1", total=total, shipping=order.shipping)


@tool(schema=Order, name="quote")
def quote(lines: list[Line], shipping: Shipping) -> str:
    """Quote an order."""
    return f"{len(lines)} lines to {shipping.city}"


ORDER = {"lines": [{"item": "lamp", "quantity": 2}], "shipping": {"city": "Lisbon"}}


def order_agent(store: EventStore | bool | None = False) -> Agent:
    """Quote, then place the order, then confirm."""
    script: list[ScriptEntry] = [
        Call("quote", ORDER, call_id="q1"),
        Call("place_order", {"order": ORDER}, call_id="p1"),
        "Ordered: o-1.",
    ]
    return Agent(client=ScriptedChatClient(script), name="Orders", tools=[place_order, quote], store=store)

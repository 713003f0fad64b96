"""Structured output: what an answer's ``value`` is for each answer the model gives."""

from __future__ import annotations

import pytest

from agentledger.adapters.chat.scripted import ScriptedChatClient

pytestmark = pytest.mark.anyio


async def test_an_empty_structured_answer_is_no_value() -> None:
    """As in the reference framework: an empty answer's ``value`` is None, not an error."""
    import msgspec

    class City(msgspec.Struct):
        name: str

    agent = ScriptedChatClient([""]).as_agent(name="Cities")
    response = await agent.run("Which city?", options={"response_format": City})
    assert response.text == ""
    assert response.value is None

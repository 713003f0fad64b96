"""The event catalogue's encoding: every event round-trips through JSON, and the decoder is typed."""

from __future__ import annotations

import json

import msgspec
import pytest

from agentledger import Agent
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core import decode_event, encode_event
from agentledger.testing import FixedClock, SequentialIds


@pytest.mark.anyio
async def test_events_round_trip_through_json(clock: FixedClock, ids: SequentialIds) -> None:
    """Every recorded event encodes to JSON and decodes back equal, tagged by its type."""
    client = ScriptedChatClient([Call("echo", {"text": "a"}), "done"])

    def echo(text: str) -> dict[str, str]:
        return {"echo": text}

    response = await Agent(client=client, tools=[echo], clock=clock, ids=ids).run("go")
    for event in response.events:
        data = encode_event(event)
        assert json.loads(data)["type"] == type(event).__name__
        assert decode_event(data) == event


def test_decoding_rejects_a_wrong_field_type() -> None:
    """A log line with a field of the wrong type is refused by the typed decoder."""
    bad = b'{"type":"ModelCalled","run_id":"r","seq":"one","at":0,"iteration":1}'
    with pytest.raises(msgspec.ValidationError, match="seq"):
        decode_event(bad)

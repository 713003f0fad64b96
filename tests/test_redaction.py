"""Redaction: what of function_invocation_kwargs reaches the log."""

from __future__ import annotations

import datetime

import pytest

from agentledger import Agent, redact_all, redact_keys
from agentledger.adapters.chat.scripted import ScriptedChatClient
from agentledger.core import RunStarted, encode_event
from agentledger.redaction import REDACTED, default_redactor


@pytest.mark.parametrize(
    "key", ["api_key", "apiKey", "X-Auth-Token", "sessionToken", "password", "client_secret", "privateKey"]
)
def test_secret_words_are_redacted(key: str) -> None:
    """Keys with a secret-looking word lose their value."""
    assert default_redactor({key: "s3cr3t"}) == {key: REDACTED}


@pytest.mark.parametrize("key", ["passenger_count", "author", "compass", "user_id", "tenant"])
def test_ordinary_keys_are_kept(key: str) -> None:
    """Words, not substrings: ordinary keys keep their JSON values."""
    assert default_redactor({key: 3}) == {key: 3}


def test_nested_values_and_non_json() -> None:
    """Nested mappings are scrubbed by key; values that are not JSON become their type name."""
    kwargs = {"db": {"password": "x", "host": "h"}, "when": datetime.date(2026, 1, 1), "ids": [1, 2]}
    assert default_redactor(kwargs) == {
        "db": {"password": REDACTED, "host": "h"},
        "when": "<date>",
        "ids": [1, 2],
    }


def test_custom_patterns_and_redact_all() -> None:
    """redact_keys adds patterns; redact_all keeps keys only."""
    assert redact_keys(r"^tenant$")({"tenant": "c", "user": "u"}) == {"tenant": REDACTED, "user": "u"}
    assert redact_all({"a": 1, "b": 2}) == {"a": REDACTED, "b": REDACTED}


@pytest.mark.anyio
async def test_secrets_never_reach_the_log() -> None:
    """Redacted kwargs and client_kwargs values appear nowhere in the encoded events."""
    agent = Agent(client=ScriptedChatClient(["ok"]))
    response = await agent.run(
        "hi",
        function_invocation_kwargs={"api_key": "sk-fik-123", "user_id": "u-1"},
        client_kwargs={"headers": {"Authorization": "Bearer sk-client-456"}},
    )
    blob = b"".join(encode_event(e) for e in response.events)
    assert b"sk-fik-123" not in blob
    assert b"sk-client-456" not in blob
    started = response.events[0]
    assert isinstance(started, RunStarted)
    assert started.function_invocation_kwargs == {"api_key": REDACTED, "user_id": "u-1"}
    assert started.client_kwargs_keys == ("headers",)

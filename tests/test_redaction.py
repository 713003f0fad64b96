"""Redaction: what of function_invocation_kwargs reaches the log."""

from __future__ import annotations

import datetime

import pytest

from agentledger import Agent, redact_all, redact_keys
from agentledger.adapters.chat.scripted import ScriptedChatClient
from agentledger.core import RunStarted, encode_event
from agentledger.redaction import REDACTED, default_redactor, scrub_text


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


@pytest.mark.parametrize(
    "secret",
    [
        "sk-proj-abcdefghijklmnopqrstuvwx12",
        "sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "sk-abcdefghijklmnopqrstuvwxyz0123",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
        "ghp_" + "a1B2" * 9,
        "AKIAIOSFODNN7EXAMPLE",
        "xoxb-123456789012-abcdefghij",
    ],
)
def test_credentials_are_hidden_by_their_shape(secret: str) -> None:
    """A bare key in an error message or a kwargs string value goes, whatever the key's name."""
    from agentledger.redaction import scrub_shapes

    text = f"request failed (credential {secret}); retry later"
    assert secret not in scrub_text(text)
    assert scrub_text(text) == "request failed (credential [redacted]); retry later"
    assert scrub_shapes(secret) == "[redacted]"
    assert default_redactor({"note": f"use {secret}"}) == {"note": "use [redacted]"}


def test_azure_keys_go_by_their_labels_and_lookalikes_stay() -> None:
    """Azure keys have no shape of their own: the account key of a connection string and a SAS
    signature go by their labels; words that merely contain ``sk-`` or ids of 32 hex digits stay."""
    connection = "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=abc123+/==;EndpointSuffix=core"
    assert scrub_text(connection) == connection.replace("abc123+/==", "[redacted]")
    assert "abcDEF" not in scrub_text("https://x.blob.core.windows.net/c?sv=1&sig=abcDEF%2B")
    plain = "a risk-assessment-of-the-whole-budget, trace 4bf92f3577b34da6a3ce929d0e0e4736"
    assert scrub_text(plain) == plain


def test_more_credential_names_are_secret() -> None:
    """Names for one-time codes, connection strings and joined token names are secret keys."""
    kwargs = {
        "passcode": "1",
        "otp": 2,
        "apitoken": "x",
        "connection_string": "y",
        "conn_str": "z",
        "author": "a",
    }
    assert default_redactor(kwargs) == {**dict.fromkeys(kwargs, "[redacted]"), "author": "a"}

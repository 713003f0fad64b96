"""Redaction: what of function_invocation_kwargs reaches the log."""

from __future__ import annotations

import datetime
import re

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


@pytest.mark.parametrize("key", ["max_tokens", "maxTokens", "tokens_used", "total_token_count", "n_tokens"])
def test_counts_of_model_tokens_are_kept(key: str) -> None:
    """``token`` beside a word that makes it a count is a number of model tokens, not a credential."""
    assert default_redactor({key: 256}) == {key: 256}


@pytest.mark.parametrize(
    "key", ["token", "tokens", "api_tokens", "auth_token", "access_token", "token_secret"]
)
def test_tokens_without_a_count_word_stay_secret(key: str) -> None:
    assert default_redactor({key: "t0k3n"}) == {key: REDACTED}


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


# -- artefacts ------------------------------------------------------------------------------------


def test_redact_value_scrubs_shapes_and_secret_keys_at_any_depth() -> None:
    """Strings lose credentials of a known shape; secret-named keys lose their value whole; other
    keys, numbers and the shape of the value stay."""
    from agentledger.redaction import redact_value

    key = "sk-proj-" + "Q" * 24
    value = {
        "note": f"used {key} today",
        "api_key": {"nested": "whole"},
        "passenger_count": 3,
        "rows": [{"client_secret": "cs-1", "region": "eu"}, "Bearer abcdef123456"],
        "empty_token": None,
    }
    assert redact_value(value) == {
        "note": "used [redacted] today",
        "api_key": REDACTED,
        "passenger_count": 3,
        "rows": [{"client_secret": REDACTED, "region": "eu"}, "Bearer [redacted]"],
        "empty_token": None,
    }
    assert redact_value(redact_value(value)) == redact_value(value)
    assert redact_value({"tenant": "t", "user": "u"}, extra=[r"^tenant$"]) == {
        "tenant": REDACTED,
        "user": "u",
    }


def test_redact_value_stops_at_the_depth_bound() -> None:
    from agentledger.redaction import redact_value

    deep: object = "sk-ant-" + "x" * 30
    for _ in range(100):
        deep = [deep]
    walked = redact_value(deep)
    for _ in range(64):
        assert isinstance(walked, list)
        walked = walked[0]
    assert walked == "<list nested too deep>"


def test_redact_event_keeps_library_keys_and_hides_program_secrets() -> None:
    """Session values under secret keys and secret-named result keys go; ``max_tokens`` in the
    options and the usage counts stay: they are the library's keys, not secrets."""
    from agentledger.core import ModelResponded, SessionUpdated, ToolReturned
    from agentledger.core.events import StateChange
    from agentledger.core.messages import Content, Message, Usage
    from agentledger.redaction import redact_event

    session = SessionUpdated(
        run_id="r", seq=3, at=1, session_id="s", by="c1",
        changes=(StateChange("api_key", "set", "3f9a" * 8), StateChange("region", "set", "eu")),
    )  # fmt: skip
    shown = redact_event(session)
    assert isinstance(shown, SessionUpdated)
    assert [(c.key, c.value) for c in shown.changes] == [("api_key", REDACTED), ("region", "eu")]
    returned = ToolReturned(run_id="r", seq=4, at=2, call_id="c1", name="t", result={"token": "t0k", "n": 1})
    assert redact_event(returned) == ToolReturned(
        run_id="r", seq=4, at=2, call_id="c1", name="t", result={"token": REDACTED, "n": 1}
    )
    responded = ModelResponded(
        run_id="r",
        seq=5,
        at=3,
        iteration=1,
        message=Message("assistant", (Content("text", text="hi"),)),
        usage=Usage(input_tokens=7),
    )
    assert redact_event(responded) == responded
    started = RunStarted(
        run_id="r", seq=0, at=0, agent_id="a", options={"max_tokens": 9, "note": "sk-" + "a" * 24}
    )
    shown_started = redact_event(started)
    assert isinstance(shown_started, RunStarted)
    assert shown_started.options == {"max_tokens": 9, "note": REDACTED}


def test_marked_keys_and_values_reach_every_artefact_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """``mark_secret_keys``, ``mark_secret_values`` and ``AGENTLEDGER_SECRET_KEYS`` add to the
    rules ``redact_value`` and ``redact_event`` apply."""
    from agentledger import redaction
    from agentledger.redaction import SECRET_KEYS_ENV, mark_secret_keys, mark_secret_values, redact_value

    monkeypatch.setattr(redaction, "_marked_keys", [])
    monkeypatch.setattr(redaction, "_marked_values", [])
    value = {"tenant": "acme", "badge": "B-1", "note": "internal-7", "user": "ada"}
    assert redact_value(value) == value
    mark_secret_keys(r"^tenant$")
    mark_secret_values(lambda text: text.startswith("internal-"))
    monkeypatch.setenv(SECRET_KEYS_ENV, "badge, ")
    assert redact_value(value) == {"tenant": REDACTED, "badge": REDACTED, "note": REDACTED, "user": "ada"}
    with pytest.raises(re.error):
        mark_secret_keys("(unclosed")


def test_holds_redactions_tells_a_redacted_log() -> None:
    from agentledger.redaction import holds_redactions

    plain = RunStarted(run_id="r", seq=0, at=0, agent_id="a", function_invocation_kwargs={"user": "u"})
    marked = RunStarted(run_id="r", seq=0, at=0, agent_id="a", function_invocation_kwargs={"key": REDACTED})
    assert not holds_redactions([plain])
    assert holds_redactions([plain, marked])

"""Secrets in the other forms they take on the wire, in errors and in answers.

A secret the client is given travels percent-encoded in a URL's query, JSON-escaped in a body,
base64-encoded as ``user:password`` in a basic ``Authorization`` header. A server may quote any
of these back, in an error or in a 200 answer. None of them reaches the raised error, the log or
what is made from the log; nor do the values of secret-named ``function_invocation_kwargs`` that
a tool's error text quotes, or a ``password=...`` in it.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest

from agentledger import Agent, FunctionInvocationContext, ModelCallError, tool
from agentledger.adapters.chat.openai import OpenAIChatClient
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.export.otlp import write_otlp_json_file
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.cli import main
from agentledger.core import ToolFailed
from agentledger.testing import FixedClock, SequentialIds

QUERY_KEY = "ab/cd+ef=="  # what percent-encoding changes: / + =
BASIC_PASSWORD = "pa55/w:rd+x"
API_KEY = "sk-planted/key+0001"
DEFAULT_HEADER = "planted default/header"
RUN_HEADER = "planted-run-header+0003"
BODY_SECRET = "planted body \"secret\" 0004"


def forms(secret: str) -> list[str]:
    return [secret, quote(secret, safe=""), json.dumps(secret)[1:-1]]


def everything_sent(request: httpx.Request) -> str:
    """What a server quoting the request back would say: the URL as sent, every header, the
    basic credentials decoded, and the body."""
    basic = request.headers.get("x-basic", "")
    decoded = base64.b64decode(basic.split(" ", 1)[1]).decode() if basic else ""
    sent = {"url": str(request.url), "headers": dict(request.headers), "basic": decoded}
    return json.dumps({**sent, "body": request.content.decode()})


def refusing(request: httpx.Request) -> httpx.Response:
    return httpx.Response(400, json={"error": {"message": f"bad request: {everything_sent(request)}"}})


def answering(request: httpx.Request) -> httpx.Response:
    message = {"role": "assistant", "content": f"you sent {everything_sent(request)}"}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return httpx.Response(200, json={"id": "r1", "model": "m", "choices": [choice]})


def client(handler: Any) -> OpenAIChatClient:
    return OpenAIChatClient(
        "m",
        api_key=API_KEY,
        base_url="https://models.example/v1",
        default_headers={"X-Tenant": DEFAULT_HEADER},
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
        max_retries=0,
    )


BASIC = "Basic " + base64.b64encode(f"ada:{BASIC_PASSWORD}".encode()).decode()
CLIENT_KWARGS = {
    "headers": {"X-Run": RUN_HEADER, "X-Basic": BASIC},
    "extra_query": {"api-key": QUERY_KEY},
    "extra_body": {"user_secret": BODY_SECRET},
}
SECRETS = [API_KEY, DEFAULT_HEADER, RUN_HEADER, QUERY_KEY, BASIC_PASSWORD, BODY_SECRET]


def artefacts(path: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    store = SqliteEventStore(path, read_only=True)
    for run in store.streams_sync():
        found[f"log {run}"] = repr(store.read_sync(run))
        write_otlp_json_file(store.read_sync(run), tmp_path / "spans.json", include_content=True)
        found[f"otlp {run}"] = (tmp_path / "spans.json").read_text()
        for command in (["show", run], ["export", run]):
            assert main([*command, "--store", str(path)]) == 0
            found[f"{command[0]} {run}"] = capsys.readouterr().out
    store.close()
    return found


def leaks(texts: dict[str, str], secrets: list[str]) -> list[tuple[str, str]]:
    return [(secret, where) for secret in secrets for where, text in texts.items() for form in forms(secret)
            if form in text]  # fmt: skip


def test_an_error_quoting_the_request_shows_no_secret_in_any_encoding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = SqliteEventStore(tmp_path / "events.db")
    agent = Agent(client=client(refusing), store=store, clock=FixedClock(), ids=SequentialIds())
    with pytest.raises(ModelCallError) as raised:
        anyio.run(lambda: agent.run("hi", client_kwargs=CLIENT_KWARGS))
    store.close()
    texts = artefacts(tmp_path / "events.db", capsys, tmp_path)
    texts["raised"] = f"{raised.value} {raised.value.__cause__}"
    assert "bad request" in texts["raised"]
    assert "ModelFailed" in texts["log run_1"]
    assert leaks(texts, SECRETS) == []


def test_an_answer_quoting_the_request_carries_no_secret_into_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = SqliteEventStore(tmp_path / "events.db")
    agent = Agent(client=client(answering), store=store, clock=FixedClock(), ids=SequentialIds())
    response = anyio.run(lambda: agent.run("hi", client_kwargs=CLIENT_KWARGS))
    store.close()
    assert response.text.startswith("you sent ")
    assert "models.example" in response.text  # the rest of the answer is kept
    texts = artefacts(tmp_path / "events.db", capsys, tmp_path)
    texts["response"] = response.text
    assert leaks(texts, SECRETS) == []


KWARGS = {"api_key": "planted-kwarg-key-01", "db_password": "planted/kwarg+pw", "session_token": 12345678,
          "nested": {"secret": "planted-nested-03"}, "user": "ada"}  # fmt: skip


@tool
def connect(ctx: FunctionInvocationContext) -> str:
    """Connect."""
    raise ConnectionError(f"connect({ctx.kwargs}) failed; retried with password=hunter2x and token: tk-9999")


def test_a_tool_error_quoting_its_kwargs_shows_none_of_the_hidden_values() -> None:
    agent = Agent(client=ScriptedChatClient([Call("connect"), "done"]), tools=[connect], clock=FixedClock(),
                  ids=SequentialIds())  # fmt: skip
    response = anyio.run(lambda: agent.run("go", function_invocation_kwargs=KWARGS))
    [failed] = [e for e in response.events if isinstance(e, ToolFailed)]
    message = failed.message
    assert "'user': 'ada'" in message  # what the policy keeps stays
    hidden = ["planted-kwarg-key-01", "planted/kwarg+pw", "12345678", "planted-nested-03"]
    hidden += ["hunter2x", "tk-9999"]
    assert [secret for secret in hidden if any(form in message for form in forms(secret))] == []

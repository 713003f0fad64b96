"""What the library does on its own is logged with the standard library, under ``agentledger``:
retries, a torn record cut off, deprecated calls, unknown options. Never a secret."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from agentledger import Agent, tool
from agentledger.adapters.chat.openai import RateLimitError
from agentledger.adapters.chat.scripted import ScriptedChatClient
from agentledger.adapters.stores.jsonl import JsonlEventStore, TornTailWarning
from agentledger.core.events import RunStarted, encode_event
from tests.clients.test_openai_responses import USER, Server, Sleeps, client
from tests.export.test_otlp import Receiver, demo_log, send

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def records(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == name and r.levelno == logging.WARNING]


async def test_a_retried_model_request_is_logged_without_secrets(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agentledger")
    busy = httpx.Response(429, headers={"Retry-After": "2"}, json={"error": {"message": "slow down"}})
    llm = client(Server(busy, busy, busy), Sleeps())
    with pytest.raises(RateLimitError):
        await llm.get_response(USER, client_kwargs={"extra_query": {"api-key": "SECRET-Q"}})
    lines = records(caplog, "agentledger.clients")
    assert lines == [
        "POST http://llm.test/v1/responses answered 429; retry 1 of 2 in 2.0 s",
        "POST http://llm.test/v1/responses answered 429; retry 2 of 2 in 2.0 s",
    ]
    assert "SECRET" not in caplog.text


async def test_a_retried_export_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agentledger")
    receiver = Receiver(httpx.Response(503, headers={"Retry-After": "1"}), httpx.Response(200))
    await send(receiver, await demo_log())
    assert records(caplog, "agentledger.export") == [
        "OTLP export to http://collector:4318/v1/traces answered 503; attempt 2 of 5, next in 1.0 s"
    ]


async def test_a_torn_record_cut_off_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agentledger")
    path = tmp_path / "runs.jsonl"
    whole = encode_event(RunStarted(run_id="r1", seq=0, at=1, agent_id="a"))
    path.write_bytes(whole + b"\n" + whole[: len(whole) // 2])
    store = JsonlEventStore(path)
    with pytest.warns(TornTailWarning):
        await store.append("r2", [RunStarted(run_id="r2", seq=0, at=2, agent_id="a")], 0)
    [line] = records(caplog, "agentledger.stores")
    assert "torn by an interrupted write" in line
    assert "runs.jsonl: line 2" in line


def test_deprecated_calls_and_unknown_options_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agentledger")
    with pytest.warns(DeprecationWarning, match="kwargs"):

        @tool
        def legacy(city: str, **kwargs: object) -> str:
            return city

    agent = Agent(client=ScriptedChatClient(["ok"]))
    with pytest.warns(UserWarning, match="reasoning_effort"):
        agent.run_spec(options={"reasoning_effort": "low"})
    assert "declares **kwargs" in records(caplog, "agentledger.deprecations")[0]
    assert "'reasoning_effort'" in records(caplog, "agentledger.options")[0]


def test_nothing_is_printed_unless_the_application_asks() -> None:
    root = logging.getLogger("agentledger")
    assert any(isinstance(h, logging.NullHandler) for h in root.handlers)


async def test_httpx_request_lines_hold_no_credential(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """httpx logs every request's URL at INFO on its own logger; a chat client installs
    ``HttpxCredentialFilter`` there, so a base URL's ``user:password@`` and a query's ``api-key=``
    and ``sig=`` are scrubbed from the line, which still names the method, host and status."""
    from agentledger.adapters.chat.openai import OpenAIChatClient
    from agentledger.logs import HttpxCredentialFilter, guard_httpx_log

    def answer(request: httpx.Request) -> httpx.Response:
        message = {"role": "assistant", "content": "ok"}
        return httpx.Response(
            200, json={"id": "r", "model": "m", "choices": [{"index": 0, "message": message}]}
        )

    monkeypatch.setattr(logging.getLogger("httpx"), "filters", [])  # as before any client was made
    http = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    chat = OpenAIChatClient(
        "m", api_key="k", base_url="https://ada:planted-password@models.example/v1", http_client=http
    )

    def installed() -> int:
        return sum(isinstance(f, HttpxCredentialFilter) for f in logging.getLogger("httpx").filters)

    assert installed() == 1  # the client installed it
    guard_httpx_log()
    assert installed() == 1  # once, however often
    with caplog.at_level(logging.INFO, logger="httpx"):
        query = {"api-key": "planted-azure-key", "sig": "planted-sas-signature"}
        await Agent(client=chat).run("hi", client_kwargs={"extra_query": query})
    lines = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert len(lines) == 1
    assert lines[0].startswith("HTTP Request: POST https://ada:[redacted]@models.example/v1/")
    assert '"HTTP/1.1 200 OK"' in lines[0]
    assert not [
        s for s in ("planted-password", "planted-azure-key", "planted-sas-signature") if s in lines[0]
    ]

"""No planted secret reaches any artefact of a run.

A run is given credentials every way a program passes them: the client's API key and
``default_headers``, per-run ``client_kwargs`` (headers, ``extra_query``), secret-named
``function_invocation_kwargs`` and a connection string with a password in an innocent-looking
value, and a tool that fails with a DSN in its message. The model server refuses the call and
echoes everything it received (URL, headers) in its error body. Then every artefact is searched
for every secret: the stored log, ``show``, ``state``, ``view``, ``export``, OTLP JSON and
protobuf, structlog lines and the OpenTelemetry bridge's spans.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import structlog
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentledger import Agent, ModelCallError, default_redactor, tool
from agentledger.adapters.chat.openai import OpenAIChatClient
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.export.otel import OtelBridge
from agentledger.adapters.export.otlp import encode_protobuf, spans_from_events, write_otlp_json_file
from agentledger.adapters.export.structlog import StructlogSink
from agentledger.adapters.stores.jsonl import JsonlEventStore
from agentledger.cli import main
from agentledger.redaction import REDACTED, scrub_text
from agentledger.testing import FixedClock, SequentialIds

SECRETS = {
    "api_key": "sk-planted-api-key-0001",
    "default_header": "planted-default-header-0002",
    "authorization": "planted-bearer-0003",
    "x_api_key": "planted-x-api-key-0004",
    "extra_query": "planted-query-0005",
    "openai_key": "planted-openai-key-0006",
    "access_key": "planted-access-key-0007",
    "bearer": "planted-bearer-kwarg-0008",
    "dsn": "planted-dsn-password-0009",
    "key": "planted-key-0010",
    "sk": "planted-sk-0011",
    "creds": "planted-creds-0012",
    "jwt": "planted-jwt-0013",
    "ssh_key": "planted-ssh-key-0014",
    "note_url": "planted-url-password-0015",
    "tool_error": "planted-tool-error-0016",
}


def echo_everything(request: httpx.Request) -> httpx.Response:
    """A server that refuses the call and quotes back all it was sent."""
    echoed = {"url": str(request.url), "headers": dict(request.headers)}
    return httpx.Response(400, json={"error": {"message": f"bad request: {json.dumps(echoed)}"}})


def kwargs() -> dict[str, Any]:
    return {
        "openai_key": SECRETS["openai_key"],
        "access_key": SECRETS["access_key"],
        "bearer": SECRETS["bearer"],
        "dsn": f"postgresql://app:{SECRETS['dsn']}@db.internal/app",
        "key": SECRETS["key"],
        "sk": SECRETS["sk"],
        "creds": SECRETS["creds"],
        "jwt": SECRETS["jwt"],
        "ssh_key": SECRETS["ssh_key"],
        "note": f"cache at redis://:{SECRETS['note_url']}@cache.internal:6379",
        "user": "ada",
    }


@tool
def connect() -> str:
    """Connect to the database."""
    raise ConnectionError(f"cannot reach postgresql://app:{SECRETS['tool_error']}@db.internal/app")


async def record_runs(store: JsonlEventStore, sinks: list[Any]) -> None:
    http = httpx.AsyncClient(transport=httpx.MockTransport(echo_everything))
    client = OpenAIChatClient(
        "m",
        api_key=SECRETS["api_key"],
        base_url="https://models.example/v1",
        default_headers={"X-Tenant-Token": SECRETS["default_header"]},
        http_client=http,
        max_retries=0,
    )
    ids = SequentialIds()
    failing = Agent(client=client, name="Remote", store=store, clock=FixedClock(), ids=ids, event_sinks=sinks)
    client_kwargs = {
        "headers": {"Authorization": f"Bearer {SECRETS['authorization']}", "X-Api-Key": SECRETS["x_api_key"]},
        "extra_query": {"api-key": SECRETS["extra_query"]},
    }
    scripted = ScriptedChatClient([Call("connect", call_id="c1"), "done"])
    tooled = Agent(
        client=scripted,
        name="Tooled",
        tools=[connect],
        store=store,
        clock=FixedClock(),
        ids=ids,
        event_sinks=sinks,
    )
    with pytest.raises(ModelCallError):
        await failing.run("hi", client_kwargs=client_kwargs, function_invocation_kwargs=kwargs())
    await tooled.run("connect", function_invocation_kwargs=kwargs())


def test_no_planted_secret_reaches_any_artefact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    lines = io.StringIO()
    logger = structlog.wrap_logger(
        structlog.PrintLogger(lines), processors=[structlog.processors.JSONRenderer(default=repr)]
    )
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    store_path = tmp_path / "runs"
    store = JsonlEventStore(store_path)
    sinks = [StructlogSink(logger, include_content=True), OtelBridge(provider, include_content=True)]
    anyio.run(record_runs, store, sinks)

    artefacts: dict[str, str] = {}
    for log in sorted(store_path.iterdir()):
        artefacts[f"log {log.name}"] = log.read_text()
    artefacts["structlog"] = lines.getvalue()
    spans = exporter.get_finished_spans()
    artefacts["bridge"] = repr([(s.name, dict(s.attributes or {}), s.status, s.events) for s in spans])
    streams = store.streams_sync()
    assert len(streams) == 2
    for run in streams:
        events = store.read_sync(run)
        for command in (["show", run], ["state", run], ["export", run], ["view", run, "-o", f"{run}.html"]):
            assert main([*command, "--store", str(store_path)]) == 0
            artefacts[f"{command[0]} {run} output"] = capsys.readouterr().out
        artefacts[f"view {run}"] = (tmp_path / f"{run}.html").read_text()
        write_otlp_json_file(events, tmp_path / f"{run}.otlp.json", include_content=True)
        artefacts[f"otlp json {run}"] = (tmp_path / f"{run}.otlp.json").read_text()
        artefacts[f"otlp protobuf {run}"] = repr(
            encode_protobuf(spans_from_events(events, include_content=True))
        )
    assert "ModelFailed" in artefacts["log run_1.jsonl"]
    assert "ToolFailed" in artefacts["log run_2.jsonl"]
    assert "ada" in artefacts["log run_1.jsonl"]  # the innocent value is kept
    leaks = [
        (name, where)
        for name, secret in SECRETS.items()
        for where, text in artefacts.items()
        if secret in text
    ]
    assert leaks == []
    assert len(artefacts) == 19  # 3 files of the store, structlog, the bridge, 7 per run


def test_the_default_redactor_knows_the_usual_credential_names() -> None:
    redacted = default_redactor(kwargs())
    assert redacted["user"] == "ada"
    for name in ("openai_key", "access_key", "bearer", "key", "sk", "creds", "jwt", "ssh_key", "dsn"):
        assert redacted[name] == REDACTED, name
    assert redacted["note"] == f"cache at redis://:{REDACTED}@cache.internal:6379"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://app:pw@db/app", f"postgresql://app:{REDACTED}@db/app"),
        ("amqp://:pw@mq", f"amqp://:{REDACTED}@mq"),
        ("GET https://h/v1?api-key=k&x=1 failed", f"GET https://h/v1?{REDACTED} failed"),
        ("Authorization: Bearer abc.def-ghi", f"Authorization: Bearer {REDACTED}"),
        ("see https://example.com/docs", "see https://example.com/docs"),
        ("no secrets here", "no secrets here"),
    ],
)
def test_scrub_text_hides_credentials_in_messages(text: str, shown: str) -> None:
    assert scrub_text(text) == shown

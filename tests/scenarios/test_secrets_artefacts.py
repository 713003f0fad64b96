"""Secrets by their shape and by their key, in every artefact made from a log.

Runs record credentials the ways a program's own code puts them there: a tool raising an error
that quotes an API key, a bearer token, an Azure account key; a tool returning a JWT, a SAS URL and
keys of every known shape, in a string and under ``api_key``; a tool storing ``api_key``,
``password`` and ``client_secret`` in the session; credential-named ``function_invocation_kwargs``
kept by an agent whose redaction policy keeps every kwarg. Then every artefact is produced
(``show``, ``state``, ``diff --json``, ``export`` and ``export --cassette``, the viewer's page,
OTLP JSON and protobuf, structlog lines, the OpenTelemetry bridge's spans, ``agentledger
serve``'s pages) and searched for every secret, while the values that are no secret must still
be there. The log itself keeps what the runs recorded, and a cassette with redacted values
replays clean.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient

from agentledger import Agent, FunctionInvocationContext, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.adapters.export.otel import OtelBridge
from agentledger.adapters.export.otlp import encode_protobuf, spans_from_events, write_otlp_json_file
from agentledger.adapters.export.structlog import StructlogSink
from agentledger.adapters.serve import create_app
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.cli import main
from agentledger.core.events import Event
from agentledger.replay import replay
from agentledger.replay.cassette import read_cassette
from agentledger.testing import FixedClock, SequentialIds

KWARG_NAMES = (
    "api_key",
    "openai_api_key",
    "password",
    "client_secret",
    "access_token",
    "refresh_token",
    "db_password",
    "private_key",
)


def secrets_of(variant: str) -> dict[str, str]:
    """Every secret one run records, by where it is planted (``variant`` makes each run's own)."""
    pad = variant * 4
    found = {
        "openai": f"sk-{pad}OpenAiKey0123456789abcd",
        "openai_project": f"sk-proj-{pad}ProjectKey0123456789XY",
        "anthropic": f"sk-ant-api03-{pad}AnthropicKey0123456789ab",
        "azure_account_key": f"{pad}AzureAccountKey0123456789abcdef0123456789==",
        "sas_signature": f"{pad}SasSignature0123456789abcdefXYZ",
        "bearer": f"{pad}BearerToken0123456789.abcdef",
        "jwt": f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ{pad}IiwibmFtZSI6IkFkYSJ9.{pad}JwtSignature0123",
        "result_api_key": f"{pad}9f8e7d6c5b4a39281706f5e4d3c2b1a0",  # an Azure key: 32 hex digits
        "session_api_key": f"{pad}0a1b2c3d4e5f60718293a4b5c6d7e8f9",
        "session_password": f"{pad}-correct-horse-battery",
        "session_client_secret": f"{pad}-client-secret-value",
        "answer": f"sk-{pad}AnswerKey0123456789abcdefgh",
    }
    found.update({f"kwarg_{name}": f"{pad}-kwarg-{name}-value" for name in KWARG_NAMES})
    return found


KEPT = ("kept-region-eu-west", "kept-weather-sunny", "kept-user-ada", "kept-order-4711")
"""Values that are no secret: every artefact that shows content still shows them."""


def tools_for(secrets: dict[str, str]) -> list[Any]:
    @tool
    def fetch_weather(ctx: FunctionInvocationContext) -> dict[str, Any]:
        """Fetch the weather, and keep the service's credentials in the session."""
        assert ctx.session is not None
        ctx.session.state["api_key"] = secrets["session_api_key"]
        ctx.session.state["password"] = secrets["session_password"]
        ctx.session.state["client_secret"] = secrets["session_client_secret"]
        ctx.session.state["region"] = KEPT[0]
        sas = f"https://acct.blob.core.windows.net/c/b.json?sv=2022-11-02&sig={secrets['sas_signature']}"
        return {
            "weather": KEPT[1],
            "api_key": secrets["result_api_key"],
            "note": f"served with {secrets['openai']} and token {secrets['jwt']}; cached at {sas}",
        }

    @tool
    def call_upstream(order: str) -> str:
        """Call the upstream service about an order."""
        raise RuntimeError(
            f"upstream refused order {order} for key {secrets['openai_project']} "
            f"(Authorization: Bearer {secrets['bearer']}, "
            f"AccountKey={secrets['azure_account_key']};EndpointSuffix=core.windows.net, "
            f"fallback {secrets['anthropic']})"
        )

    return [fetch_weather, call_upstream]


async def record(path: Path, variants: tuple[str, ...], sinks: list[Any]) -> list[str]:
    store = SqliteEventStore(path)
    ids = SequentialIds()
    runs = []
    for variant in variants:
        secrets = secrets_of(variant)
        script: list[ScriptEntry] = [
            Call("fetch_weather", {}, call_id="c1"),
            Call("call_upstream", {"order": f"{KEPT[3]}-{variant}"}, call_id="c2"),  # runs differ here
            f"Done: {KEPT[1]}, with {secrets['answer']}.",
        ]
        agent = Agent(
            client=ScriptedChatClient(script),
            name="Weather",
            tools=tools_for(secrets),
            store=store,
            clock=FixedClock(),
            ids=ids,
            event_sinks=sinks,
            redact=dict,  # the log keeps every kwarg: artefacts must still hide the secret ones
        )
        kwargs = {name: secrets[f"kwarg_{name}"] for name in KWARG_NAMES}
        session = agent.create_session()
        response = await agent.run(
            "weather?", session=session, function_invocation_kwargs={**kwargs, "user": KEPT[2]}
        )
        runs.append(response.run_id)
    await store.aclose()
    return runs


def read_all(path: Path, run_id: str) -> list[Event]:
    async def go() -> list[Event]:
        store = SqliteEventStore(path, read_only=True)
        try:
            return await store.read(run_id)
        finally:
            await store.aclose()

    return anyio.run(go)


def served_pages(path: Path, runs: list[str]) -> Iterator[tuple[str, str]]:
    store = SqliteEventStore(path, read_only=True)
    app = create_app(store, token="t" * 43)
    try:
        with TestClient(app, base_url="http://127.0.0.1") as client:
            for page in ("/", "/api/runs", "/approvals", *(f"/runs/{run}" for run in runs)):
                answer = client.get(page)
                assert answer.status_code == 200, page
                yield f"serve {page}", answer.text
            answer = client.get("/diff", params={"a": runs[0], "b": runs[1]})
            assert answer.status_code == 200
            yield "serve /diff", answer.text
    finally:  # the app serves a store it was given: closing it is the caller's part
        anyio.run(store.aclose)


def test_no_secret_of_any_shape_reaches_any_artefact(
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
    sinks = [StructlogSink(logger, include_content=True), OtelBridge(provider, include_content=True)]
    path = tmp_path / "runs.db"
    runs = anyio.run(record, path, ("a", "b"), sinks)
    store = ["--store", str(path)]

    artefacts: dict[str, str] = {"structlog": lines.getvalue()}
    spans = exporter.get_finished_spans()
    artefacts["bridge"] = repr([(s.name, dict(s.attributes or {}), s.events) for s in spans])
    commands: list[tuple[str, list[str], Path | None]] = [
        ("runs", ["runs"], None),
        ("runs --json", ["runs", "--json"], None),
        ("diff --json", ["diff", runs[0], runs[1], "--json"], None),
        ("diff", ["diff", runs[0], runs[1]], None),
    ]
    for run in runs:
        commands += [
            (f"show {run}", ["show", run], None),
            (f"show --json {run}", ["show", run, "--json"], None),
            (f"state {run}", ["state", run], None),
            (f"state --at 5 {run}", ["state", run, "--at", "5"], None),
            (f"export {run}", ["export", run], None),
            (
                f"cassette {run}",
                ["export", run, "--cassette", f"{run}.cassette.jsonl"],
                tmp_path / f"{run}.cassette.jsonl",
            ),
            (f"view {run}", ["view", run, "-o", f"{run}.html"], tmp_path / f"{run}.html"),
            (
                f"otlp file {run}",
                ["export", run, "--otlp-file", f"{run}.otlp", "--include-content"],
                tmp_path / f"{run}.otlp",
            ),
        ]
    for name, command, written in commands:
        status = main([*command, *store])
        assert status == (1 if command[0] == "diff" else 0), name  # the runs differ: diff says 1
        artefacts[name] = capsys.readouterr().out
        if written is not None:
            artefacts[f"{name} file"] = written.read_text()
    for run in runs:
        events = read_all(path, run)
        write_otlp_json_file(events, tmp_path / f"{run}.json", include_content=True)
        artefacts[f"otlp json {run}"] = (tmp_path / f"{run}.json").read_text()
        artefacts[f"otlp protobuf {run}"] = repr(
            encode_protobuf(spans_from_events(events, include_content=True))
        )
    artefacts.update(served_pages(path, runs))

    planted = {f"{variant}:{where}": s for variant in "ab" for where, s in secrets_of(variant).items()}
    leaks = sorted(
        {where for where, secret in planted.items() for text in artefacts.values() if secret in text}
    )
    assert leaks == []
    assert len(planted) == 40
    assert len(artefacts) == 38  # 2 sinks, 2 lists, 2 diffs, 11 a run by the CLI, 2 OTLP a run, 6 pages

    # What is no secret is still shown, so nothing above passes by showing nothing (show and
    # state leave kwargs out, spans session values).
    region, weather, user, order = KEPT
    expected = {
        "structlog": KEPT,
        "bridge": (weather, user, order),
        f"show {runs[0]}": (region, weather, order),
        f"state {runs[0]}": (region, weather, order),
        f"view {runs[0]} file": KEPT,
        f"cassette {runs[0]} file": KEPT,
        f"otlp json {runs[0]}": KEPT,
        f"serve /runs/{runs[0]}": KEPT,
        "diff --json": (order,),
    }
    for name, values in expected.items():
        assert [kept for kept in KEPT if kept in artefacts[name]] == list(values), name
    assert "[redacted]" in artefacts[f"state {runs[0]}"]
    assert '"session_id"' in artefacts["diff --json"] or "[redacted]" in artefacts["diff --json"]
    for text in artefacts.values():  # the markers stand where the secrets were, not in ids or counts
        assert "[redacted]_" not in text

    # The log keeps what the runs recorded: a replay of the log is exact.
    log = "".join(repr(e) for e in read_all(path, runs[0]))
    assert secrets_of("a")["session_api_key"] in log
    assert secrets_of("a")["kwarg_client_secret"] in log


def test_a_cassette_with_redacted_values_replays_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cassette holds ``[redacted]`` where the run had secrets; a replay with the tools run
    live compares both sides as redacted and finds nothing, and a change outside the secrets is
    still found."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "runs.db"
    [run] = anyio.run(record, path, ("a",), [])
    assert main(["export", run, "--cassette", "run.jsonl", "--store", str(path)]) == 0
    capsys.readouterr()
    cassette = (tmp_path / "run.jsonl").read_text()
    assert "[redacted]" in cassette
    assert secrets_of("a")["session_api_key"] not in cassette

    def agent(secrets: dict[str, str]) -> Agent:
        script: list[ScriptEntry] = [
            Call("fetch_weather", {}, call_id="c1"),
            Call("call_upstream", {"order": KEPT[3]}, call_id="c2"),
            "x",
        ]
        return Agent(client=ScriptedChatClient(script), name="Weather", tools=tools_for(secrets), redact=dict)

    async def go(secrets: dict[str, str]) -> list[str]:
        report = await replay(read_cassette(tmp_path / "run.jsonl"), agent(secrets), tools="live")
        return [f"{f.kind} {f.event_type}.{f.field}" for f in report.findings]

    assert anyio.run(go, secrets_of("a")) == []
    assert anyio.run(go, secrets_of("z")) == []  # other secrets of the same shapes: still the same run
    changed = {**secrets_of("a"), "openai": "no key at all"}  # text around the secrets changes
    assert anyio.run(go, changed) == [
        "divergence ToolReturned.result.note",
        "divergence RunCompleted.messages[1].contents[0].result",
    ]

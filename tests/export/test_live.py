"""Live export: the structlog sink, the OpenTelemetry bridge, replays left out, secrets kept out."""

from __future__ import annotations

import importlib.metadata
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import structlog
from structlog.testing import capture_logs

from agentledger import Agent, FunctionInvocationContext, MemoryEventStore, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.export.otlp import (
    Span,
    encode_json,
    encode_protobuf,
    spans_from_events,
    write_otlp_json_file,
)
from agentledger.adapters.export.structlog import StructlogSink, event_fields
from agentledger.core.events import Event, ToolReturned, encode_event
from agentledger.demo import build_demo_agent, run_demo
from agentledger.replay import fork, load, rerun
from agentledger.run import watching
from agentledger.testing import FixedClock, SequentialIds, capture_events, event_types

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::agentledger.ExperimentalWarning")]

CLIENT_SECRET = "sk-client-4f1d9c2b"
TOOL_SECRET = "tok-tool-77aa31e0"
CONTENT_FIELDS = {"arguments", "result", "tool_result", "messages", "instructions", "message", "text"}


def require(package: str) -> None:
    """Skip without the distribution ``package``; under CI=true its absence fails the test instead."""
    try:
        importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{package} is not installed, and CI must run this test")
        pytest.skip(f"{package} is not installed (pip install {package})")


@pytest.fixture
def memory() -> Iterator[tuple[Any, InMemorySpanExporter]]:
    """A tracer provider whose finished spans land in an in-memory exporter."""
    require("opentelemetry-sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def bridge_for(tracer_provider: Any, **options: Any) -> Any:
    from agentledger.adapters.export.otel import OtelBridge

    return OtelBridge(tracer_provider, **options)


def shape(spans: list[Span]) -> list[tuple[Any, ...]]:
    """Everything of exported spans but their ids, with parents by name."""
    names = {s.span_id: s.name for s in spans}
    return sorted(
        (s.name, names.get(s.parent_span_id or ""), s.start_time_unix_nano, s.end_time_unix_nano,
         s.status_code, json.dumps(s.attributes, sort_keys=True),
         tuple((e.name, e.time_unix_nano, json.dumps(e.attributes, sort_keys=True)) for e in s.events))
        for s in spans
    )  # fmt: skip


def otel_shape(spans: tuple[ReadableSpan, ...]) -> list[tuple[Any, ...]]:
    """The same view of spans an OpenTelemetry SDK finished."""
    names = {s.context.span_id: s.name for s in spans if s.context is not None}
    return sorted(
        (s.name, names.get(s.parent.span_id) if s.parent else None, s.start_time, s.end_time,
         s.status.status_code.value, json.dumps(dict(s.attributes or {}), sort_keys=True),
         tuple((e.name, e.timestamp, json.dumps(dict(e.attributes or {}), sort_keys=True)) for e in s.events))
        for s in spans
    )  # fmt: skip


@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


def nested_agent(clock: FixedClock, ids: SequentialIds) -> Agent:
    """A Lead agent whose ``research`` tool runs a Researcher sub-agent."""
    child = ScriptedChatClient([Call("lookup", {"topic": "tides"}), "Tides follow the moon."]).as_agent(
        name="Researcher", tools=[lookup], clock=clock, ids=ids
    )
    return ScriptedChatClient([Call("research", {"task": "tides"}), "Done."]).as_agent(
        name="Lead", tools=[child.as_tool(name="research")], clock=clock, ids=ids
    )


# -- structlog -----------------------------------------------------------------------------------


async def test_structlog_sink_logs_each_event_with_run_and_seq_bound() -> None:
    """One line per event: the type is the event name, run_id and seq are bound, no content."""
    sink = StructlogSink()
    with watching(sink), capture_logs() as lines, capture_events() as events:
        await run_demo(MemoryEventStore())
    assert [line["event"] for line in lines] == event_types(events)
    assert [(line["run_id"], line["seq"]) for line in lines] == [(e.run_id, e.seq) for e in events]
    assert {line["log_level"] for line in lines} == {"info"}
    assert not [key for line in lines for key in line if key in CONTENT_FIELDS]
    started, called = lines[0], lines[1]
    assert started["function_invocation_kwargs_keys"] == ["user_id"]
    assert "function_invocation_kwargs" not in started
    assert started["tools"] == ["get_weather", "remember_preference", "load_booking_tools"]
    assert called["at"] == events[1].at
    [session] = [line for line in lines if line["event"] == "SessionUpdated"][1:]
    assert session["changes"] == [{"key": "preferences", "op": "set"}]


async def test_structlog_content_is_opt_in() -> None:
    """With include_content=True the lines carry arguments, results and messages."""
    with capture_logs() as lines, StructlogSink(include_content=True).attached():
        response, _ = await run_demo(MemoryEventStore())
    by_event = {line["event"]: line for line in lines}
    assert by_event["ToolCalled"]["arguments"]
    assert by_event["RunCompleted"]["text"] == response.text
    assert by_event["RunStarted"]["function_invocation_kwargs"] == {"user_id": "traveller-7"}


async def test_structlog_levels_follow_outcomes(clock: FixedClock, ids: SequentialIds) -> None:
    """Failed tool calls log at warning, a failed run at error, the rest at info."""

    @tool
    def explode() -> str:
        raise RuntimeError("boom")

    def broken(request: object) -> str:
        raise ConnectionError("down")

    agent = ScriptedChatClient([Call("explode"), broken]).as_agent(tools=[explode], clock=clock, ids=ids)
    logger = structlog.get_logger("custom")
    with capture_logs() as lines, StructlogSink(logger).attached(), pytest.raises(Exception, match="down"):
        await agent.run("go")
    levels = {line["event"]: line["log_level"] for line in lines}
    assert (levels["ToolFailed"], levels["ModelFailed"], levels["RunFailed"]) == (
        "warning",
        "warning",
        "error",
    )
    assert levels["ToolCalled"] == "info"


def test_event_fields_drop_content_but_keep_errors() -> None:
    """Without content a result is dropped; a failure's message stays; with content a value under
    a secret-named key is redacted, as in every artefact."""
    returned = ToolReturned(run_id="r", seq=3, at=9, call_id="c", name="t", result={"secret-ish": 1, "n": 2})
    assert event_fields(returned) == {"at": 9, "call_id": "c", "name": "t"}  # defaults are left out
    assert event_fields(returned, include_content=True)["result"] == {"secret-ish": "[redacted]", "n": 2}


# -- the OpenTelemetry bridge --------------------------------------------------------------------


async def test_bridge_emits_the_spans_of_the_export(memory: tuple[Any, InMemorySpanExporter]) -> None:
    """Live spans equal the spans exported from the stored log, names, times, attributes and events."""
    provider, exporter = memory
    store = MemoryEventStore()
    with bridge_for(provider, provider_name="scripted", include_content=True).attached():
        response, _ = await run_demo(store)
    exported = spans_from_events(
        await store.read(response.run_id), provider_name="scripted", include_content=True
    )
    assert otel_shape(exporter.get_finished_spans()) == shape(exported)


async def test_bridge_nests_runs(
    memory: tuple[Any, InMemorySpanExporter], clock: FixedClock, ids: SequentialIds
) -> None:
    """A root run nests under the current span; a sub-agent under the tool call that started it."""
    provider, exporter = memory
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("request"), bridge_for(provider).attached(), capture_events() as events:
        await nested_agent(clock, ids).run("Look into tides.")
    finished = exporter.get_finished_spans()
    names = {s.context.span_id: s.name for s in finished}
    parents = {s.name: names.get(s.parent.span_id) if s.parent else None for s in finished}
    assert parents["invoke_agent Lead"] == "request"
    assert parents["invoke_agent Researcher"] == "execute_tool research"
    assert parents["execute_tool lookup"] == "invoke_agent Researcher"
    assert len({s.context.trace_id for s in finished}) == 1
    assert [s for s in otel_shape(finished) if s[0] != "request"] == [
        (*s[:1], "request" if s[1] is None else s[1], *s[2:]) for s in shape(spans_from_events(events))
    ]


async def test_bridge_records_errors(memory: tuple[Any, InMemorySpanExporter], clock: FixedClock) -> None:
    """A failed tool call is an ERROR span with error.type; the exception's own message is
    content (the tool wrote it), so the status says only the type."""
    provider, exporter = memory

    @tool
    def explode() -> str:
        raise RuntimeError("boom")

    agent = ScriptedChatClient([Call("explode"), "sorry"]).as_agent(tools=[explode], clock=clock)
    with bridge_for(provider).attached():
        await agent.run("go")
    [failed] = [s for s in exporter.get_finished_spans() if s.name == "execute_tool explode"]
    assert (failed.status.status_code.name, failed.status.description) == ("ERROR", "RuntimeError")
    assert (failed.attributes or {})["error.type"] == "RuntimeError"


# -- replays are not exported twice --------------------------------------------------------------


async def test_replays_are_not_exported_live(memory: tuple[Any, InMemorySpanExporter]) -> None:
    """Neither a sink that saw the run nor a fresh one exports its rerun or a fork of it."""
    provider, exporter = memory
    store = MemoryEventStore()
    sink, bridge = StructlogSink(), bridge_for(provider)
    with capture_logs() as lines, sink.attached(), bridge.attached():
        response, _ = await run_demo(store)
        seen = (len(lines), len(exporter.get_finished_spans()))
        recorded = await load(store, response.run_id)
        await rerun(recorded, build_demo_agent(store=False))
        assert (len(lines), len(exporter.get_finished_spans())) == seen
    fresh_sink, fresh_bridge = StructlogSink(), bridge_for(provider)
    with capture_logs() as fresh_lines, fresh_sink.attached(), fresh_bridge.attached():
        await rerun(recorded, build_demo_agent(store=False))
        forked = await fork(
            recorded, build_demo_agent(store=False), at=20, client=ScriptedChatClient(["Other."])
        )
    assert forked.text == "Other."
    assert (fresh_lines, len(exporter.get_finished_spans())) == ([], seen[1])


# -- secrets -------------------------------------------------------------------------------------


@tool
def fetch_account(ctx: FunctionInvocationContext) -> str:
    """Uses a credential from function_invocation_kwargs without returning it."""
    return "account ok" if ctx.kwargs.get("api_token") == TOOL_SECRET else "no token"


async def secret_run(clock: FixedClock, ids: SequentialIds) -> tuple[list[Event], str]:
    """A run (with a sub-agent) given secrets in client_kwargs and function_invocation_kwargs."""
    child = ScriptedChatClient([Call("fetch_account"), "Checked."]).as_agent(
        name="Checker", tools=[fetch_account], clock=clock, ids=ids
    )
    agent = ScriptedChatClient(
        [[Call("fetch_account"), Call("check", {"task": "again"})], "All good."]
    ).as_agent(name="Keeper", tools=[fetch_account, child.as_tool(name="check")], clock=clock, ids=ids)
    with capture_events() as events:
        response = await agent.run(
            "Check my account.",
            client_kwargs={"api_key": CLIENT_SECRET},
            function_invocation_kwargs={"api_token": TOOL_SECRET, "user": "u-1"},
        )
    assert [e.result for e in events if isinstance(e, ToolReturned)][:1] == ["account ok"]
    return events, response.run_id


def assert_no_secret(blob: bytes | str) -> None:
    text = blob.decode() if isinstance(blob, bytes) else blob
    assert CLIENT_SECRET not in text
    assert TOOL_SECRET not in text


async def test_secrets_appear_in_no_export(tmp_path: Path, clock: FixedClock, ids: SequentialIds) -> None:
    """Secrets in client_kwargs or redacted kwargs reach no JSON export, file or structlog line."""
    with capture_logs() as lines, StructlogSink(include_content=True).attached():
        events, _ = await secret_run(clock, ids)
    assert_no_secret(b"".join(encode_event(event) for event in events))  # the log itself
    spans = spans_from_events(events, include_content=True)
    body = encode_json(spans)
    assert_no_secret(body)
    assert b"[redacted]" in body  # redacted values and key names only
    assert b"api_key" in body
    path = tmp_path / "traces.jsonl"
    write_otlp_json_file(events, path, include_content=True)
    assert_no_secret(path.read_bytes())
    assert_no_secret(repr(lines))
    assert [
        line["function_invocation_kwargs"]["api_token"] for line in lines if line["event"] == "RunStarted"
    ] == [
        "[redacted]",
        "[redacted]",
    ]


async def test_secrets_appear_in_no_protobuf_export(clock: FixedClock, ids: SequentialIds) -> None:
    """The protobuf export of a run given secrets holds none of them."""
    require("opentelemetry-proto")
    events, _ = await secret_run(clock, ids)
    assert_no_secret(encode_protobuf(spans_from_events(events, include_content=True)).decode("latin-1"))


async def test_secrets_appear_in_no_bridged_span(
    memory: tuple[Any, InMemorySpanExporter], clock: FixedClock, ids: SequentialIds
) -> None:
    """The spans the live bridge emits for a run given secrets hold none of them."""
    provider, exporter = memory
    with bridge_for(provider, include_content=True).attached():
        await secret_run(clock, ids)
    assert_no_secret(
        repr([(s.name, dict(s.attributes or {}), s.events) for s in exporter.get_finished_spans()])
    )
    assert_no_secret("".join(s.to_json() for s in exporter.get_finished_spans()))

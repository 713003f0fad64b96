"""Exports of logs that hold what OTLP does not: integers past 64 bits, times out of range, runs
cut short by a cancellation in the middle of a tool call, a live sink that fails on the way."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentledger import Agent, Message, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.export.otel import OtelBridge
from agentledger.adapters.export.otlp import encode_json, encode_protobuf, spans_from_events
from agentledger.core.events import (
    Event,
    ModelCalled,
    ModelResponded,
    RunCompleted,
    RunStarted,
    ToolCalled,
)
from agentledger.core.messages import Usage
from agentledger.store import MemoryEventStore
from agentledger.testing import FixedClock, SequentialIds, event_types

HUGE = 2**64 + 5


def huge_log() -> list[Event]:
    return [
        RunStarted(run_id="r", seq=0, at=1, agent_id="a", options={"seed": HUGE}),
        ModelCalled(run_id="r", seq=1, at=2, iteration=1),
        ModelResponded(
            run_id="r",
            seq=2,
            at=3,
            iteration=1,
            message=Message("assistant", ["hi"]),
            usage=Usage(HUGE, -HUGE, 1),
        ),
        ToolCalled(run_id="r", seq=3, at=-5, call_id="c", name="n", arguments={"n": HUGE}),
        RunCompleted(run_id="r", seq=4, at=2**65, usage=Usage(HUGE, 0, 0)),
    ]


@pytest.mark.parametrize("content", [False, True])
def test_integers_past_64_bits_export_as_text(content: bool) -> None:
    spans = spans_from_events(huge_log(), include_content=content)
    assert encode_protobuf(spans)
    document = json.loads(encode_json(spans))
    values = [
        attribute["value"]
        for resource in document["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
        for attribute in span["attributes"]
    ]
    assert {"stringValue": str(HUGE)} in values
    assert all(-(2**63) <= int(v["intValue"]) < 2**63 for v in values if "intValue" in v)


async def cancelled_mid_tool(sinks: list[Any]) -> list[Event]:
    started = anyio.Event()

    @tool
    async def wait() -> str:
        """Wait forever."""
        started.set()
        await anyio.sleep_forever()
        return "never"

    store = MemoryEventStore()
    client = ScriptedChatClient([[Call("wait", call_id="a"), Call("wait", call_id="b")], "done"])
    agent = Agent(
        client=client, tools=[wait], store=store, clock=FixedClock(), ids=SequentialIds(), event_sinks=sinks
    )

    async def run() -> None:
        with contextlib.suppress(RuntimeError):  # what a failing sink raises instead of the cancellation
            await agent.run("go")

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await started.wait()
        group.cancel_scope.cancel()
    return await store.read("run_1")


@pytest.mark.anyio
async def test_a_run_cancelled_mid_tool_exports_and_bridges_whole() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    events = await cancelled_mid_tool([OtelBridge(provider, include_content=True)])
    assert event_types(events) == ["RunStarted", "ModelCalled", "ModelResponded", "ToolCalled", "ToolCalled",
                                   "RunFailed"]  # fmt: skip
    finished = exporter.get_finished_spans()
    assert sorted(s.name for s in finished) == ["chat scripted-1", "execute_tool wait", "execute_tool wait",
                                                "invoke_agent agent"]  # fmt: skip
    for content in (False, True):
        spans = spans_from_events(events, include_content=content)
        assert encode_protobuf(spans)
        assert len(spans) == 4


@pytest.mark.anyio
async def test_a_sink_failing_at_the_cancellation_still_leaves_the_whole_log_stored() -> None:
    def fails_on_the_end(event: Event) -> None:
        if type(event).__name__ == "RunFailed":
            raise RuntimeError("dictionary changed size during iteration")

    events = await cancelled_mid_tool([fails_on_the_end])
    assert event_types(events)[-3:] == ["ToolCalled", "ToolCalled", "RunFailed"]


DEEP = 5_000


async def deep_arguments_run(store: Any, sinks: list[Any]) -> list[Event]:
    """A run whose model sends tool-call argument text nested 5,000 deep, and then an answer
    nested as deep: recorded as they came (``ArgumentsRejected``, a text answer)."""

    @tool
    def lookup(x: int) -> int:
        """Look it up."""
        return x

    from agentledger import ChatResponse, Content

    nested = "[" * DEEP + "]" * DEEP
    call = Content.from_function_call("c1", "lookup", arguments='{"x":' + nested + "}")
    client = ScriptedChatClient([ChatResponse(messages=[Message("assistant", (call,))]), nested])
    agent = Agent(client=client, tools=[lookup], store=store, clock=FixedClock(), ids=SequentialIds(),
                  event_sinks=sinks)  # fmt: skip
    response = await agent.run("go")
    assert response.text == nested
    events: list[Event] = await store.read("run_1")
    return events


@pytest.mark.anyio
async def test_arguments_nested_past_the_depth_limit_export_and_bridge_with_content() -> None:
    """Every reader of the content honours the depth limit the gate enforces (no RecursionError)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    events = await deep_arguments_run(MemoryEventStore(), [OtelBridge(provider, include_content=True)])
    assert "ArgumentsRejected" in event_types(events)
    assert len(exporter.get_finished_spans()) == 4  # the bridge ended every span it opened
    for content in (False, True):
        spans = spans_from_events(events, include_content=content)
        assert encode_protobuf(spans)
        document = json.loads(encode_json(spans))
        assert document["resourceSpans"]
    text = json.dumps(document)
    assert "[[[[" in text  # the argument text is exported as the text it was


def test_export_include_content_of_deep_arguments_is_written(tmp_path: Any, capsys: Any) -> None:
    from agentledger.adapters.stores.sqlite import SqliteEventStore
    from agentledger.cli import main

    store = SqliteEventStore(tmp_path / "events.db")
    anyio.run(deep_arguments_run, store, [])
    store.close()
    target = tmp_path / "spans.json"
    db = str(tmp_path / "events.db")
    args = ["export", "run_1", "--include-content", "--otlp-file", str(target), "--store", db]
    assert main(args) == 0, capsys.readouterr().err
    assert json.loads(target.read_text())["resourceSpans"]


def test_a_deep_answer_is_a_structured_output_error() -> None:
    from agentledger import StructuredOutputError
    from agentledger.structured import parse_value

    with pytest.raises(StructuredOutputError):
        parse_value({"type": "array"}, "[" * DEEP + "]" * DEEP)  # a JSON schema: decoded untyped

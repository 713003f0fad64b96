"""OTLP export from logs: the span tree, GenAI attributes, ids, encodings, the file format, retries."""

from __future__ import annotations

import importlib.metadata
import json
import os
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agentledger import Agent, FunctionInvocationContext, MemoryEventStore, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.export.otlp import (
    INSTALL_HINT,
    ExportError,
    Span,
    encode_json,
    encode_protobuf,
    export_otlp,
    spans_from_events,
    traces_url,
    write_otlp_json_file,
)
from agentledger.core.events import Event, RunStarted
from agentledger.demo import build_demo_agent, run_demo
from agentledger.replay import load, rerun
from agentledger.testing import FixedClock, SequentialIds, capture_events

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::agentledger.ExperimentalWarning")]

AGENT = "invoke_agent TripPlanner"
DEMO_TREE = [
    (AGENT, None),
    ("chat scripted-1", AGENT),
    ("execute_tool get_weather", AGENT),
    ("execute_tool remember_preference", AGENT),
    ("chat scripted-1", AGENT),
    ("execute_tool load_booking_tools", AGENT),
    ("chat scripted-1", AGENT),
    ("execute_tool book_hotel", AGENT),
    ("chat scripted-1", AGENT),
    ("execute_tool book_hotel", AGENT),
    ("chat scripted-1", AGENT),
]
CONTENT_KEYS = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "input.value",
    "output.value",
)


def require(package: str) -> None:
    """Skip without the distribution ``package``; under CI=true its absence fails the test instead."""
    try:
        importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{package} is not installed, and CI must run this test")
        pytest.skip(f"{package} is not installed (pip install {package})")


async def demo_log(ids: Callable[..., str] | None = None) -> list[Event]:
    """The demo run as its store holds it."""
    store = MemoryEventStore()
    response, _ = await run_demo(store, ids)
    return await store.read(response.run_id)


@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


@tool
def explode(ctx: FunctionInvocationContext) -> str:
    """Always fails."""
    raise RuntimeError("boom")


async def nested_log(clock: FixedClock, ids: SequentialIds) -> tuple[list[Event], str]:
    """A Lead run whose tool call runs a Researcher sub-agent; every event of both runs."""
    child = ScriptedChatClient([Call("lookup", {"topic": "tides"}), "Tides follow the moon."]).as_agent(
        name="Researcher", tools=[lookup], clock=clock, ids=ids
    )
    parent = ScriptedChatClient([Call("research", {"task": "tides"}), "Done."]).as_agent(
        name="Lead", tools=[child.as_tool(name="research")], clock=clock, ids=ids
    )
    with capture_events() as events:
        response = await parent.run("Look into tides.")
    return events, response.run_id


def by_name(spans: Sequence[Span], name: str) -> list[Span]:
    return [span for span in spans if span.name == name]


def tree(spans: Sequence[Span]) -> list[tuple[str, str | None]]:
    names = {span.span_id: span.name for span in spans}
    return [(span.name, names.get(span.parent_span_id or "")) for span in spans]


# -- the span tree -------------------------------------------------------------------------------


async def test_demo_decodes_from_protobuf_into_the_span_tree() -> None:
    """The protobuf export of the demo run decodes with opentelemetry-proto into the expected tree."""
    require("opentelemetry-proto")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest.FromString(encode_protobuf(spans_from_events(await demo_log())))
    [resource_spans] = request.resource_spans
    resource = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
    assert resource == {"service.name": "agentledger"}
    [scope] = resource_spans.scope_spans
    assert scope.scope.name == "agentledger"
    names = {span.span_id: span.name for span in scope.spans}
    assert [(s.name, names.get(s.parent_span_id)) for s in scope.spans] == DEMO_TREE
    assert len({span.trace_id for span in scope.spans}) == 1
    kinds = {span.name.split()[0]: span.kind for span in scope.spans}
    assert kinds == {"invoke_agent": 1, "chat": 3, "execute_tool": 1}
    [agent] = [s for s in scope.spans if s.name == AGENT]
    attributes = {kv.key: kv.value for kv in agent.attributes}
    assert attributes["gen_ai.conversation.id"].string_value == "session_1"
    assert attributes["gen_ai.usage.output_tokens"].int_value == 22  # 1 + 1 + 1 + 1 + 18


async def test_genai_and_openinference_attributes() -> None:
    """Each span carries the GenAI attributes of its operation and the OpenInference span kind."""
    spans = spans_from_events(await demo_log(), provider_name="scripted")
    agent = by_name(spans, AGENT)[0].attributes
    assert agent["gen_ai.operation.name"] == "invoke_agent"
    assert (agent["gen_ai.agent.name"], agent["gen_ai.agent.id"]) == ("TripPlanner", "TripPlanner")
    assert (agent["gen_ai.provider.name"], agent["gen_ai.system"]) == ("scripted", "scripted")
    assert (agent["openinference.span.kind"], agent["session.id"]) == ("AGENT", "session_1")
    assert agent["agentledger.function_invocation_kwargs.keys"] == ("user_id",)
    chat = by_name(spans, "chat scripted-1")[0].attributes
    assert chat["gen_ai.operation.name"] == "chat"
    assert (chat["gen_ai.response.model"], chat["gen_ai.response.id"]) == ("scripted-1", "resp_1")
    assert chat["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert (chat["gen_ai.usage.input_tokens"], chat["gen_ai.usage.output_tokens"]) == (20, 1)
    assert (chat["openinference.span.kind"], chat["llm.model_name"]) == ("LLM", "scripted-1")
    weather = by_name(spans, "execute_tool get_weather")[0].attributes
    assert weather["gen_ai.operation.name"] == "execute_tool"
    assert (weather["gen_ai.tool.name"], weather["gen_ai.tool.call.id"]) == ("get_weather", "call_1")
    assert weather["gen_ai.tool.description"] == "Today's weather for a city."
    assert (weather["openinference.span.kind"], weather["tool.name"]) == ("TOOL", "get_weather")


async def test_span_times_come_from_the_events() -> None:
    """Each span starts and ends at the ``at`` of the events that open and close it."""
    events = await demo_log()
    spans = spans_from_events(events)
    agent = by_name(spans, AGENT)[0]
    assert (agent.start_time_unix_nano, agent.end_time_unix_nano) == (events[0].at, events[-1].at)
    weather = by_name(spans, "execute_tool get_weather")[0]
    called, returned = (e for e in events if getattr(e, "call_id", None) == "call_1")
    assert (weather.start_time_unix_nano, weather.end_time_unix_nano) == (called.at, returned.at)


async def test_facts_become_span_events_in_the_agentledger_namespace() -> None:
    """Session writes, tools added and short-circuits are span events on the call they belong to."""
    spans = spans_from_events(await demo_log())
    remember = by_name(spans, "execute_tool remember_preference")[0]
    assert [e.name for e in remember.events] == ["agentledger.session_updated"] * 2
    assert remember.events[1].attributes["agentledger.session.keys"] == ("preferences",)
    loader = by_name(spans, "execute_tool load_booking_tools")[0]
    [added] = loader.events
    assert (added.name, added.attributes["agentledger.tools"]) == ("agentledger.tools_added", ("book_hotel",))
    rejected, booked = by_name(spans, "execute_tool book_hotel")
    [short] = rejected.events
    assert short.name == "agentledger.middleware_short_circuit"
    assert short.attributes["agentledger.middleware"] == "require_positive_nights"
    assert rejected.attributes["agentledger.tool.executed"] is False
    assert rejected.start_time_unix_nano == rejected.end_time_unix_nano
    assert booked.attributes["agentledger.tool.executed"] is True


async def test_tool_choice_reset_is_a_span_event_on_the_run(clock: FixedClock, ids: SequentialIds) -> None:
    """A required tool_choice reset after the first call is recorded on the invoke_agent span."""
    agent = ScriptedChatClient([Call("lookup", {"topic": "x"}), "ok"]).as_agent(
        name="Picky", tools=[lookup], clock=clock, ids=ids, default_options={"tool_choice": "required"}
    )
    response = await agent.run("go")
    [span] = by_name(spans_from_events(response.events), "invoke_agent Picky")
    [reset] = span.events
    assert reset.name == "agentledger.tool_choice_reset"
    assert reset.attributes["agentledger.previous"] == "required"


async def test_sub_agent_runs_nest_under_their_tool_call(clock: FixedClock, ids: SequentialIds) -> None:
    """A sub-agent run is a child of the execute_tool span that started it, in the root's trace."""
    events, root = await nested_log(clock, ids)
    spans = spans_from_events(events)
    assert tree(spans) == [
        ("invoke_agent Lead", None),
        ("chat scripted-1", "invoke_agent Lead"),
        ("execute_tool research", "invoke_agent Lead"),
        ("chat scripted-1", "invoke_agent Lead"),
        ("invoke_agent Researcher", "execute_tool research"),
        ("chat scripted-1", "invoke_agent Researcher"),
        ("execute_tool lookup", "invoke_agent Researcher"),
        ("chat scripted-1", "invoke_agent Researcher"),
    ]
    assert len({span.trace_id for span in spans}) == 1
    [research] = by_name(spans, "execute_tool research")
    assert [e.name for e in research.events] == ["agentledger.child_run_started"]
    child_only = spans_from_events([e for e in events if e.run_id != root])
    assert child_only == [s for s in spans if s.attributes["agentledger.run_id"] != root]


# -- ids -----------------------------------------------------------------------------------------


async def test_same_log_same_ids() -> None:
    """Exporting a log again, shuffled or with duplicates, yields the same spans and ids."""
    events = await demo_log()
    first = spans_from_events(events)
    shuffled = [*events, *events[:5]]
    random.Random(7).shuffle(shuffled)
    assert spans_from_events(shuffled) == first
    again = spans_from_events(await demo_log())  # another run with the same ids; its tools may interleave
    assert {(s.name, s.span_id, s.parent_span_id) for s in again} == {
        (s.name, s.span_id, s.parent_span_id) for s in first
    }
    assert len({span.span_id for span in first}) == len(first)
    assert all(len(span.span_id) == 16 and len(span.trace_id) == 32 for span in first)


async def test_other_runs_get_other_ids() -> None:
    """Two runs with different run ids share no span id and no trace id."""
    first = spans_from_events(await demo_log())
    store = MemoryEventStore()
    agent = build_demo_agent(store, ids=lambda prefix: f"{prefix}_other")
    response = await agent.run("Plan a trip.", session=agent.create_session())
    second = spans_from_events(await store.read(response.run_id))
    assert not {s.span_id for s in first} & {s.span_id for s in second}
    assert first[0].trace_id != second[0].trace_id


async def test_a_rerun_exports_nothing_new() -> None:
    """Exporting is a function of the stored log: after a rerun the store exports the same spans."""
    store = MemoryEventStore()
    response, _ = await run_demo(store)
    before = spans_from_events(await store.read(response.run_id))
    agent = build_demo_agent(store=False)
    agent.client = ScriptedChatClient([])
    await rerun(await load(store, response.run_id), agent)
    assert await store.streams() == [response.run_id]
    assert spans_from_events(await store.read(response.run_id)) == before


# -- outcomes ------------------------------------------------------------------------------------


async def test_failures_set_error_status(clock: FixedClock, ids: SequentialIds) -> None:
    """Failed, rejected and unknown tool calls are ERROR spans with error.type."""
    calls = [Call("explode"), Call("lookup", {"wrong": 1}), Call("nowhere")]
    agent = ScriptedChatClient([calls, "gave up"]).as_agent(
        name="Clumsy", tools=[explode, lookup], clock=clock, ids=ids
    )
    events = (await agent.run("try")).events
    spans = spans_from_events(events)
    failed = {s.name: s for s in spans if s.status_code == 2}
    assert set(failed) == {"execute_tool explode", "execute_tool lookup", "execute_tool nowhere"}
    assert failed["execute_tool explode"].attributes["error.type"] == "RuntimeError"
    # the tool's own exception text may hold data: it is content, sent only when asked for
    assert failed["execute_tool explode"].status_message == "RuntimeError"
    with_content = {s.name: s for s in spans_from_events(events, include_content=True)}
    assert with_content["execute_tool explode"].status_message == "boom"
    assert failed["execute_tool lookup"].attributes["error.type"] == "ArgumentsRejected"
    assert failed["execute_tool nowhere"].attributes["error.type"] == "ToolNotFound"
    assert failed["execute_tool nowhere"].attributes["agentledger.tool.executed"] is False


async def test_failed_model_call_fails_chat_and_run(clock: FixedClock, ids: SequentialIds) -> None:
    """A model call that raises makes both the chat span and the run span ERROR."""

    def broken(request: object) -> str:
        raise ConnectionError("model unreachable")

    agent = ScriptedChatClient([broken]).as_agent(name="Offline", clock=clock, ids=ids)
    with capture_events() as events, pytest.raises(Exception, match="model unreachable"):
        await agent.run("hi")
    chat, run = (s for s in sorted(spans_from_events(events), key=lambda s: s.name))
    assert (chat.name, chat.status_code, chat.attributes["error.type"]) == ("chat", 2, "ConnectionError")
    assert (run.status_code, run.attributes["error.type"]) == (2, "ModelCallError")


async def test_a_log_cut_short_closes_open_spans() -> None:
    """Spans still open where a log ends close at its last event, marked incomplete."""
    events = await demo_log()
    cut = events[: next(i for i, e in enumerate(events) if getattr(e, "call_id", None) == "call_1") + 1]
    spans = spans_from_events(cut)
    assert [s.name for s in spans if s.attributes.get("agentledger.incomplete")] == [
        AGENT,
        "execute_tool get_weather",
    ]
    assert all(
        s.end_time_unix_nano == cut[-1].at for s in spans if s.attributes.get("agentledger.incomplete")
    )
    assert spans_from_events(events[1:]) == []


async def test_a_run_cancelled_mid_call_closes_the_call_span(clock: FixedClock, ids: SequentialIds) -> None:
    """A run cancelled while a tool runs exports: its call's span closes incomplete, the run's span ERROR."""

    @tool
    async def stop_the_run() -> str:
        scope.cancel()
        await anyio.sleep_forever()
        return "unreachable"

    store = MemoryEventStore()
    client = ScriptedChatClient([Call("stop_the_run"), "never"])
    agent = Agent(client=client, tools=[stop_the_run], clock=clock, ids=ids, store=store)
    with anyio.CancelScope() as scope:
        await agent.run("go")
    spans = {s.name.split()[0]: s for s in spans_from_events(await store.read("run_1"))}
    assert spans["execute_tool"].attributes["agentledger.incomplete"] is True
    run = spans["invoke_agent"]
    assert spans["execute_tool"].end_time_unix_nano == run.end_time_unix_nano
    assert (run.status_code, run.attributes["error.type"]) == (2, "Cancelled")


async def test_content_is_opt_in() -> None:
    """Messages, arguments and results appear only with include_content=True."""
    events = await demo_log()
    plain = [key for span in spans_from_events(events) for key in span.attributes]
    assert not [key for key in plain if key in CONTENT_KEYS or key.startswith("llm.input_messages")]
    rich = {s.name: s.attributes for s in spans_from_events(events, include_content=True)}
    assert rich[AGENT]["input.value"].startswith("Check the weather in Lisbon")  # type: ignore[union-attr]
    assert json.loads(str(rich[AGENT]["gen_ai.system_instructions"]))[0]["type"] == "text"
    assert rich["execute_tool get_weather"]["gen_ai.tool.call.arguments"] == '{"city":"Lisbon"}'
    assert rich["execute_tool get_weather"]["gen_ai.tool.call.result"] == "sunny, 24°C"
    messages = json.loads(str(rich["chat scripted-1"]["gen_ai.output.messages"]))
    assert messages[0]["role"] == "assistant"
    assert messages[0]["finish_reason"] == "stop"
    assert rich["chat scripted-1"]["llm.input_messages.0.message.role"] == "user"


# -- encodings and the file format ----------------------------------------------------------------


async def test_json_encoding_is_otlp_http_json(clock: FixedClock, ids: SequentialIds) -> None:
    """OTLP/HTTP JSON: hex ids, integer kind and status, 64-bit integers as strings."""
    agent = ScriptedChatClient([Call("explode"), "ok"]).as_agent(
        name="J", tools=[explode], clock=clock, ids=ids, default_options={"temperature": 0.5}
    )
    spans = spans_from_events((await agent.run("go")).events)
    body = json.loads(encode_json(spans, resource={"openinference.project.name": "p"}))
    [resource_spans] = body["resourceSpans"]
    assert resource_spans["resource"]["attributes"][1] == {
        "key": "openinference.project.name",
        "value": {"stringValue": "p"},
    }
    encoded = resource_spans["scopeSpans"][0]["spans"]
    for span, original in zip(encoded, spans, strict=True):
        assert span["traceId"] == original.trace_id
        assert span["spanId"] == original.span_id
        assert isinstance(span["kind"], int)
        assert isinstance(span["status"]["code"], int)
        assert span["startTimeUnixNano"] == str(original.start_time_unix_nano)
    agent_span, chat, tool_span = encoded[0], encoded[1], encoded[2]
    assert "parentSpanId" not in agent_span
    assert chat["parentSpanId"] == agent_span["spanId"]
    values = {a["key"]: a["value"] for a in chat["attributes"]}
    assert values["gen_ai.request.temperature"] == {"doubleValue": 0.5}
    assert values["gen_ai.usage.input_tokens"] == {
        "intValue": str(spans[1].attributes["gen_ai.usage.input_tokens"])
    }
    assert values["agentledger.tools.offered"] == {"arrayValue": {"values": [{"stringValue": "explode"}]}}
    assert tool_span["status"] == {"code": 2, "message": "RuntimeError"}
    tool_values = {a["key"]: a["value"] for a in tool_span["attributes"]}
    assert tool_values["agentledger.tool.executed"] == {"boolValue": True}


async def test_json_file_holds_one_request_per_trace(
    tmp_path: Path, clock: FixedClock, ids: SequentialIds
) -> None:
    """The Collector's file format: one ExportTraceServiceRequest JSON object per line, per trace."""
    events, _ = await nested_log(clock, ids)
    demo = await demo_log(lambda prefix: f"{prefix}_demo")
    path = tmp_path / "traces.jsonl"
    assert write_otlp_json_file([*events, *demo], path) == 8 + 11
    lines = path.read_bytes().splitlines()
    assert len(lines) == 2
    counts = [len(json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"]) for line in lines]
    assert counts == [8, 11]
    write_otlp_json_file(demo, path)
    assert path.read_bytes() == lines[1] + b"\n"
    write_otlp_json_file(demo, path, append=True)
    assert path.read_bytes().splitlines() == [lines[1], lines[1]]


def test_protobuf_without_the_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without opentelemetry-proto, encode_protobuf raises ImportError with the install hint."""
    monkeypatch.setitem(sys.modules, "opentelemetry.proto.collector.trace.v1", None)
    with pytest.raises(ImportError, match="agentledger\\[otlp\\]") as caught:
        encode_protobuf([])
    assert str(caught.value) == INSTALL_HINT


# -- over HTTP -----------------------------------------------------------------------------------


class Receiver:
    """An OTLP/HTTP receiver on httpx.MockTransport that answers from a script of responses."""

    def __init__(self, *responses: httpx.Response) -> None:
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []
        self.slept: list[float] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.responses.pop(0) if len(self.responses) > 1 else self.responses[0]

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self))

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


async def send(receiver: Receiver, events: list[Event], **options: Any) -> Any:
    async with receiver.client() as client:
        return await export_otlp(
            events, "http://collector:4318", client=client, sleep=receiver.sleep, **options
        )


async def test_export_posts_protobuf_to_v1_traces() -> None:
    """The default export is one protobuf POST to .../v1/traces with the caller's headers."""
    events = await demo_log()
    receiver = Receiver(httpx.Response(200))
    result = await send(receiver, events, headers={"Authorization": "Bearer t"})
    [request] = receiver.requests
    assert str(request.url) == "http://collector:4318/v1/traces"
    assert request.headers["content-type"] == "application/x-protobuf"
    assert request.headers["authorization"] == "Bearer t"
    assert (result.spans, result.attempts, result.status_code) == (11, 1, 200)
    assert request.content == encode_protobuf(spans_from_events(events))


async def test_export_json_reads_partial_success() -> None:
    """With encoding="json" the body is OTLP JSON and a partial success is reported."""
    receiver = Receiver(httpx.Response(200, json={"partialSuccess": {"rejectedSpans": "2"}}))
    result = await send(receiver, await demo_log(), encoding="json")
    assert receiver.requests[0].headers["content-type"] == "application/json"
    assert json.loads(receiver.requests[0].content)["resourceSpans"]
    assert result.rejected_spans == 2


async def test_retries_honour_retry_after() -> None:
    """503 and 429 are retried after Retry-After (seconds or an HTTP date), capped by max_delay."""
    receiver = Receiver(
        httpx.Response(503, headers={"Retry-After": "3"}),
        httpx.Response(
            429,
            headers={"Retry-After": "Wed, 21 Oct 2015 07:28:07 GMT", "Date": "Wed, 21 Oct 2015 07:28:00 GMT"},
        ),
        httpx.Response(429, headers={"Retry-After": "3600"}),
        httpx.Response(200),
    )
    result = await send(receiver, await demo_log(), max_delay=60)
    assert receiver.slept == [3.0, 7.0, 60.0]
    assert result.attempts == 4


async def test_retries_back_off_and_stop() -> None:
    """Without Retry-After the wait doubles; after max_attempts the last answer is an ExportError."""
    receiver = Receiver(httpx.Response(502))
    with pytest.raises(ExportError) as caught:
        await send(receiver, await demo_log(), max_attempts=4, backoff=0.5)
    assert receiver.slept == [0.5, 1.0, 2.0]
    assert (caught.value.status_code, caught.value.attempts) == (502, 4)


@pytest.mark.parametrize("status", [400, 401, 404, 413, 500])
async def test_other_statuses_are_not_retried(status: int) -> None:
    """Statuses outside 429/502/503/504 fail at once."""
    receiver = Receiver(httpx.Response(status))
    with pytest.raises(ExportError) as caught:
        await send(receiver, await demo_log())
    assert (caught.value.status_code, caught.value.attempts, receiver.slept) == (status, 1, [])


async def test_unreachable_receiver_is_an_export_error() -> None:
    """A transport error becomes ExportError without a retry."""

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as client:
        with pytest.raises(ExportError, match="cannot reach") as caught:
            await export_otlp(await demo_log(), "http://collector:4318/v1/traces", client=client)
    assert caught.value.status_code is None


def test_traces_url() -> None:
    """A base URL gets /v1/traces; a traces URL is kept as it is."""
    assert traces_url("http://127.0.0.1:6006") == "http://127.0.0.1:6006/v1/traces"
    assert traces_url("https://otel.example/otlp/") == "https://otel.example/otlp/v1/traces"
    assert traces_url("http://h:4318/v1/traces") == "http://h:4318/v1/traces"


def test_runs_without_a_start_are_skipped() -> None:
    """Events of a run whose RunStarted is not in the log produce no span."""
    started = RunStarted(run_id="r", seq=0, at=1, agent_id="a")
    assert spans_from_events([]) == []
    assert [s.name for s in spans_from_events([started])] == ["invoke_agent a"]


async def test_runs_without_a_session_have_no_conversation_id(clock: FixedClock, ids: SequentialIds) -> None:
    """An agent without a session has no conversation id on its spans."""
    agent = Agent(client=ScriptedChatClient(["hi"]), name="Solo", clock=clock, ids=ids)
    spans = spans_from_events((await agent.run("hello")).events)
    assert all("gen_ai.conversation.id" not in s.attributes for s in spans)


def test_cached_and_reasoning_tokens_become_genai_usage_attributes() -> None:
    """Reported cache reads, cache writes and reasoning tokens are exported under their GenAI
    (and OpenInference) names; counts a provider did not report are left out, not zeros."""
    from agentledger import Usage
    from agentledger.adapters.export._otlp_attrs import usage_attributes

    full = usage_attributes(
        Usage(100, 40, 140, cache_read_tokens=64, cache_write_tokens=8, reasoning_tokens=30)
    )
    assert full["gen_ai.usage.cache_read.input_tokens"] == 64
    assert full["gen_ai.usage.cache_creation.input_tokens"] == 8
    assert full["gen_ai.usage.reasoning.output_tokens"] == 30
    assert full["llm.token_count.prompt_details.cache_read"] == 64
    plain = usage_attributes(Usage(100, 40, 140))
    assert not [name for name in plain if "cache" in name or "reasoning" in name]

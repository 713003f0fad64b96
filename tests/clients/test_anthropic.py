"""AnthropicClient against recorded Messages API exchanges behind ``httpx.MockTransport``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

import httpx
import msgspec
import pytest

from agentledger import Agent, Content, Message, ModelCallError, tool
from agentledger.adapters.chat.anthropic import (
    AnthropicClient,
    AuthenticationError,
    BadRequestError,
    MalformedResponseError,
    OpenAIConfigurationError,
    ResponseFailedError,
    ResponseTooLargeError,
    ServerError,
    TruncatedStreamError,
)
from agentledger.adapters.chat.scripted import ScriptedChatClient
from agentledger.clients import ChatOptions, merge_updates
from agentledger.core.events import ModelResponded, RunStarted, ToolSpec, encode_event
from agentledger.replay import load, rerun
from agentledger.store import MemoryEventStore
from agentledger.testing import FixedClock, SequentialIds, capture_events

KEY = "sk-ant-test-0123456789abcdef"
BASE = "http://claude.test"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL", "ANTHROPIC_CHAT_MODEL_ID"):
        monkeypatch.delenv(name, raising=False)


class Server:
    """A scripted server: answers in order and keeps every request it received."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answers.pop(0)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]


class Sleeps(list[float]):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def client(server: Server, sleep: Sleeps | None = None, **kwargs: Any) -> AnthropicClient:
    http = httpx.AsyncClient(transport=httpx.MockTransport(server))
    args: dict[str, Any] = {"model": "claude-test", "api_key": KEY, "base_url": BASE, **kwargs}
    return AnthropicClient(http_client=http, sleep=Sleeps() if sleep is None else sleep, **args)


def message(
    *blocks: dict[str, Any], stop: str = "end_turn", usage: dict[str, int] | None = None
) -> httpx.Response:
    body = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-2025",
        "content": list(blocks),
        "stop_reason": stop,
        "usage": usage or {"input_tokens": 11, "output_tokens": 3},
    }
    # written as json.dumps spaces it, as the stream's pieces below join
    return httpx.Response(
        200, headers={"content-type": "application/json"}, content=json.dumps(body).encode()
    )


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def use(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def sse(*events: dict[str, Any]) -> httpx.Response:
    body = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)


def stream_of(
    *blocks: dict[str, Any], stop: str = "end_turn", usage: dict[str, int] | None = None, end: bool = True
) -> httpx.Response:
    """The event stream the API sends for the message ``blocks`` make (text and tool input in pieces)."""
    usage = usage or {"input_tokens": 11, "output_tokens": 3}
    head = {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test-2025"}
    start_usage = {**usage, "output_tokens": 1}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {**head, "content": [], "usage": start_usage}}
    ]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            events.append({"type": "content_block_start", "index": index, "content_block": text("")})
            for i in range(0, len(block["text"]), 4):
                delta = {"type": "text_delta", "text": block["text"][i : i + 4]}
                events.append({"type": "content_block_delta", "index": index, "delta": delta})
        else:
            events.append(
                {"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}}
            )
            raw = json.dumps(block["input"])
            for i in range(0, len(raw), 5):
                delta = {"type": "input_json_delta", "partial_json": raw[i : i + 5]}
                events.append({"type": "content_block_delta", "index": index, "delta": delta})
        events.append({"type": "content_block_stop", "index": index})
    final = {"output_tokens": usage["output_tokens"]}
    events.append({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": final})
    if end:
        events.append({"type": "message_stop"})
    return sse(*events)


def error(
    status: int, kind: str = "invalid_request_error", msg: str = "nope", **headers: str
) -> httpx.Response:
    return httpx.Response(
        status, json={"type": "error", "error": {"type": kind, "message": msg}}, headers=headers
    )


@tool
def lookup(city: str) -> str:
    """Look up the weather of a city."""
    return f"{city}: sunny"


def agent_on(llm: Any, **kwargs: Any) -> Agent:
    return Agent(
        llm,
        name="Weather",
        instructions="Answer briefly.",
        tools=[lookup],
        clock=FixedClock(),
        ids=SequentialIds(),
        **kwargs,
    )


LOOKUP = ToolSpec(
    name="lookup",
    description="Weather.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
USER = [Message("user", (Content.from_text("Weather in Lima?"),))]


# -- configuration ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_environment_configures_key_url_and_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL and ANTHROPIC_MODEL configure a client built bare."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", BASE + "/")
    monkeypatch.setenv("ANTHROPIC_MODEL", "claude-env")
    server = Server(message(text("Hi.")))
    llm = AnthropicClient(http_client=httpx.AsyncClient(transport=httpx.MockTransport(server)))
    await llm.get_response(USER)
    request = server.requests[0]
    assert str(request.url) == "http://claude.test/v1/messages"
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    assert server.bodies[0]["model"] == "claude-env"
    assert KEY not in repr(llm)


def test_hosted_api_needs_a_key_and_a_model_has_a_default() -> None:
    with pytest.raises(OpenAIConfigurationError, match="ANTHROPIC_API_KEY"):
        AnthropicClient()
    assert AnthropicClient(api_key=KEY).model == "claude-sonnet-4-5"
    assert AnthropicClient(base_url=BASE).model  # a local server needs no key


# -- requests ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_messages_map_to_system_and_alternating_turns() -> None:
    """Instructions and system messages become ``system``; results become tool_result blocks of
    one user turn, before any text that follows them; max_tokens has a default."""
    history = [
        Message("system", (Content.from_text("Be terse."),)),
        Message("user", (Content.from_text("Weather in Lima and Oslo?"),)),
        Message(
            "assistant",
            (
                Content.from_text("Checking."),
                Content.from_function_call("t1", "lookup", arguments='{"city": "Lima"}'),
                Content.from_function_call("t2", "lookup", arguments="not json"),
            ),
        ),
        Message("tool", (Content.from_function_result("t1", result="sunny"),)),
        Message("tool", (Content.from_function_result("t2", exception="boom"),)),
        Message("user", (Content.from_text("And tomorrow?"),)),
    ]
    server = Server(message(text("Fine.")))
    await client(server).get_response(history, options={"instructions": "Answer briefly."})
    body = server.bodies[0]
    assert body["system"] == "Answer briefly.\n\nBe terse."
    assert body["max_tokens"] == 4096
    assert [t["role"] for t in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"city": "Lima"}},
        {"type": "tool_use", "id": "t2", "name": "lookup", "input": {}},
    ]
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "sunny"},
        {"type": "tool_result", "tool_use_id": "t2", "content": "Error: boom", "is_error": True},
        {"type": "text", "text": "And tomorrow?"},
    ]


@pytest.mark.anyio
async def test_options_map_to_body_fields() -> None:
    server = Server(message(text("Fine.")))
    options: ChatOptions = {
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 100,
        "stop": "END",
        "user": "u-1",
        "seed": 7,
        "model": "claude-other",
    }
    await client(server).get_response(USER, options=options)
    body = server.bodies[0]
    assert {
        k: body[k] for k in ("temperature", "top_p", "max_tokens", "stop_sequences", "metadata", "model")
    } == {
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 100,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "u-1"},
        "model": "claude-other",
    }
    assert "seed" not in body
    assert "tools" not in body


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("options", "tools", "choice"),
    [
        ({"tool_choice": "auto"}, ["lookup", "other"], {"type": "auto"}),
        ({"tool_choice": "required"}, ["lookup", "other"], {"type": "any"}),
        ({"tool_choice": "none"}, ["lookup", "other"], {"type": "none"}),
        (
            {"tool_choice": {"mode": "required", "required_function_name": "lookup"}},
            ["lookup", "other"],
            {"type": "tool", "name": "lookup"},
        ),
        ({"tool_choice": {"mode": "auto", "allowed_tools": ["other"]}}, ["other"], {"type": "auto"}),
        (
            {"allow_multiple_tool_calls": False},
            ["lookup", "other"],
            {"type": "auto", "disable_parallel_tool_use": True},
        ),
        ({}, ["lookup", "other"], None),
    ],
)
async def test_tools_and_tool_choice(options: dict[str, Any], tools: list[str], choice: Any) -> None:
    other = ToolSpec(name="other", description="", parameters={})
    server = Server(message(text("Fine.")))
    given = cast(ChatOptions, {"tools": [LOOKUP, other], **options})
    await client(server).get_response(USER, options=given)
    body = server.bodies[0]
    assert [t["name"] for t in body["tools"]] == tools
    assert body.get("tool_choice") == choice
    if "lookup" in tools:
        assert body["tools"][0] == {
            "name": "lookup",
            "description": "Weather.",
            "input_schema": LOOKUP.parameters,
        }
    if "other" in tools:
        assert body["tools"][-1]["input_schema"] == {"type": "object", "properties": {}}


@pytest.mark.anyio
async def test_required_tool_choice_applies_to_the_first_call_only() -> None:
    server = Server(message(use("t1", "lookup", {"city": "Lima"}), stop="tool_use"), message(text("Sunny.")))
    choice = {"mode": "required", "required_function_name": "lookup"}
    await agent_on(client(server)).run("Weather?", options={"tool_choice": choice})
    assert server.bodies[0]["tool_choice"] == {"type": "tool", "name": "lookup"}
    assert "tool_choice" not in server.bodies[1]


# -- answers ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_parallel_calls_usage_with_cache_tokens_and_stop_reason() -> None:
    usage = {
        "input_tokens": 5,
        "output_tokens": 7,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 20,
    }
    server = Server(
        message(
            text("Checking."),
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            use("t1", "lookup", {"city": "Lima"}),
            use("t2", "lookup", {"city": "Oslo"}),
            stop="tool_use",
            usage=usage,
        )
    )
    answer = await client(server).get_response(USER, options={"tools": [LOOKUP]})
    contents = answer.messages[0].contents
    assert [c.type for c in contents] == ["text", "function_call", "function_call"]
    assert [(c.call_id, c.arguments) for c in contents[1:]] == [
        ("t1", '{"city": "Lima"}'),
        ("t2", '{"city": "Oslo"}'),
    ]
    assert answer.finish_reason == "tool_calls"
    assert (answer.model, answer.response_id) == ("claude-test-2025", "msg_01")
    assert answer.usage is not None
    assert (answer.usage.input_tokens, answer.usage.output_tokens, answer.usage.total_tokens) == (125, 7, 132)
    assert (answer.usage.cache_read_tokens, answer.usage.cache_write_tokens) == (100, 20)


@pytest.mark.anyio
async def test_usage_without_cache_counts_leaves_them_unreported() -> None:
    answer = await client(Server(message(text("Hi.")))).get_response(USER)
    assert answer.usage is not None
    assert (answer.usage.cache_read_tokens, answer.usage.cache_write_tokens) == (None, None)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("stop", "ours"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        ("pause_turn", "pause_turn"),
    ],
)
async def test_stop_reasons_map_to_finish_reasons(stop: str, ours: str) -> None:
    answer = await client(Server(message(text("x"), stop=stop))).get_response(USER)
    streamed = [u async for u in client(Server(stream_of(text("x"), stop=stop))).get_streaming_response(USER)]
    assert answer.finish_reason == merge_updates(streamed).finish_reason == ours


@pytest.mark.anyio
async def test_stream_yields_text_deltas_and_assembled_calls_and_final_usage() -> None:
    usage = {"input_tokens": 5, "output_tokens": 9, "cache_read_input_tokens": 40}
    server = Server(
        stream_of(
            text("Looking it up."),
            use("t1", "lookup", {"city": "Lima"}),
            use("t2", "lookup", {"city": "Oslo"}),
            stop="tool_use",
            usage=usage,
        )
    )
    updates = [u async for u in client(server).get_streaming_response(USER, options={"tools": [LOOKUP]})]
    assert [u.text for u in updates if u.text] == ["Look", "ing ", "it u", "p."]
    calls = [c for u in updates for c in u.contents if c.type == "function_call"]
    assert [(c.call_id, c.arguments) for c in calls] == [
        ("t1", '{"city": "Lima"}'),
        ("t2", '{"city": "Oslo"}'),
    ]
    merged = merge_updates(updates)
    assert merged.usage is not None
    assert (merged.usage.input_tokens, merged.usage.output_tokens, merged.usage.cache_read_tokens) == (
        45,
        9,
        40,
    )
    assert merged.finish_reason == "tool_calls"
    assert server.bodies[0]["stream"] is True


@pytest.mark.anyio
async def test_structured_output_goes_through_a_forced_tool() -> None:
    """response_format adds a tool the model must call; its input is the answer's text."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    wanted = {"type": "json_schema", "json_schema": {"name": "Weather", "schema": schema}}
    options: ChatOptions = {"response_format": wanted}
    answer_use = use("tw", "Weather", {"city": "Lima"})
    server = Server(message(answer_use, stop="tool_use"), stream_of(answer_use, stop="tool_use"))
    llm = client(server)
    whole = await llm.get_response(USER, options=options)
    streamed = merge_updates([u async for u in llm.get_streaming_response(USER, options=options)])
    body = server.bodies[0]
    assert body["tools"] == [
        {"name": "Weather", "description": "Give the answer in this shape.", "input_schema": schema}
    ]
    assert body["tool_choice"] == {"type": "tool", "name": "Weather"}
    assert json.loads(whole.text) == json.loads(streamed.text) == {"city": "Lima"}
    assert whole.finish_reason == streamed.finish_reason == "stop"
    assert not whole.messages[0].function_calls


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_529_and_429_are_retried_after_retry_after() -> None:
    sleeps = Sleeps()
    server = Server(
        error(529, "overloaded_error", "Overloaded", **{"retry-after": "3"}),
        error(429, "rate_limit_error", "slow down", **{"retry-after": "1"}),
        message(text("Hi.")),
    )
    answer = await client(server, sleeps).get_response(USER)
    assert answer.text == "Hi."
    assert sleeps == [3.0, 1.0]


@pytest.mark.anyio
async def test_errors_are_typed_with_the_server_explanation() -> None:
    with pytest.raises(ServerError, match="Overloaded") as caught:
        await client(Server(*[error(529, "overloaded_error", "Overloaded")] * 3)).get_response(USER)
    assert (caught.value.status_code, caught.value.code) == (529, "overloaded_error")
    refused = error(401, "authentication_error", "invalid x-api-key", **{"request-id": "req_011"})
    with pytest.raises(AuthenticationError, match="invalid x-api-key") as refusal:
        await client(Server(refused)).get_response(USER)
    assert refusal.value.request_id == "req_011"  # Anthropic's header, without the x-
    with pytest.raises(BadRequestError):
        await client(Server(error(400))).get_response(USER)


@pytest.mark.anyio
async def test_stream_error_event_truncation_and_malformed_answer() -> None:
    overloaded = sse({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    with pytest.raises(ResponseFailedError, match="Overloaded"):
        _ = [u async for u in client(Server(overloaded)).get_streaming_response(USER)]
    cut = sse({"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 1}}})
    with pytest.raises(TruncatedStreamError):
        _ = [u async for u in client(Server(cut)).get_streaming_response(USER)]
    # a stream that stops after message_delta without message_stop is complete
    done = [u async for u in client(Server(stream_of(text("ok"), end=False))).get_streaming_response(USER)]
    assert merge_updates(done).finish_reason == "stop"
    with pytest.raises(MalformedResponseError):
        await client(Server(httpx.Response(200, content=b"{not json"))).get_response(USER)


@pytest.mark.anyio
async def test_max_response_bytes_applies() -> None:
    with pytest.raises(ResponseTooLargeError):
        await client(Server(message(text("x" * 5000))), max_response_bytes=1000).get_response(USER)


@pytest.mark.anyio
async def test_api_key_never_appears_in_any_event_or_error() -> None:
    echo = error(401, "authentication_error", f"invalid x-api-key {KEY}")
    server = Server(
        message(use("t1", "lookup", {"city": "Lima"}), stop="tool_use"), message(text("Sunny.")), echo
    )
    llm = client(server)
    with capture_events() as events:
        await agent_on(llm).run("Weather?")
        with pytest.raises(ModelCallError) as caught:
            await agent_on(llm).run("Again?")
    assert not any(KEY.encode() in encode_event(e) for e in events)
    assert KEY not in str(caught.value.__cause__)


# -- runs, logs and replay --------------------------------------------------------------------


def _comparable(events: Sequence[Any]) -> list[Any]:
    return [msgspec.to_builtins(e) for e in events]


def exchange(answer: Any) -> Server:
    """The scripted exchange: text and a call, its result sent back, then the answer."""
    usage = {"input_tokens": 20, "output_tokens": 6, "cache_read_input_tokens": 8}
    call = use("toolu_1", "lookup", {"city": "Lima"})
    return Server(
        answer(text("Checking."), call, stop="tool_use", usage=usage), answer(text("Lima is sunny."))
    )


@pytest.mark.anyio
async def test_whole_and_streamed_runs_of_one_exchange_give_equal_logs() -> None:
    """One scripted exchange read whole and streamed: equal logs, event for event."""
    whole_server, streamed_server = exchange(message), exchange(stream_of)
    response = await agent_on(client(whole_server)).run("Weather in Lima?")
    with capture_events() as captured:
        updates = [u async for u in agent_on(client(streamed_server)).run_stream("Weather in Lima?")]
    assert [u.text for u in updates if u.text][:3] == ["Chec", "king", "."]
    assert _comparable(response.events) == _comparable(captured)
    assert whole_server.bodies[1]["messages"] == streamed_server.bodies[1]["messages"]
    started = response.events[0]
    assert isinstance(started, RunStarted)
    assert started.provider_name == "anthropic"
    responded = [e for e in response.events if isinstance(e, ModelResponded)]
    assert [e.model for e in responded] == ["claude-test-2025"] * 2
    assert responded[0].usage is not None
    assert responded[0].usage.cache_read_tokens == 8


@pytest.mark.anyio
async def test_a_recorded_run_replays_without_the_client() -> None:
    store = MemoryEventStore()
    server = Server(message(use("t1", "lookup", {"city": "Lima"}), stop="tool_use"), message(text("Sunny.")))
    response = await agent_on(client(server), store=store).run("Weather?")
    recorded = await load(store, response.run_id)
    silent = ScriptedChatClient([])
    replayed = await rerun(recorded, agent_on(silent))
    assert replayed is not None
    assert replayed.text == "Sunny."
    assert silent.requests == []

"""OpenAIResponsesClient against a scripted Responses API server behind httpx.MockTransport."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx
import pytest

from agentledger import Agent, Content, Message, ModelCallError, tool
from agentledger.adapters.chat.openai import (
    AuthenticationError,
    MalformedResponseError,
    OpenAIConfigurationError,
    OpenAIResponsesClient,
    RateLimitError,
    ResponseFailedError,
    TruncatedStreamError,
)
from agentledger.clients import ChatResponseUpdate
from agentledger.core.events import ModelFailed, ModelResponded, ToolSpec, encode_event
from agentledger.testing import FixedClock, SequentialIds, capture_events

KEY = "sk-responses-fedcba9876543210"
BASE = "http://llm.test/v1"

Answer = httpx.Response | Callable[[httpx.Request], httpx.Response]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_RESPONSES_MODEL_ID"):
        monkeypatch.delenv(name, raising=False)


class Server:
    """A scripted server: answers in order and keeps every request it received."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        return answer(request) if callable(answer) else answer

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]


class Sleeps(list[float]):
    """An injectable sleep that records the delays instead of waiting."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def client(server: Server, sleep: Sleeps | None = None) -> OpenAIResponsesClient:
    http = httpx.AsyncClient(transport=httpx.MockTransport(server))
    return OpenAIResponsesClient(
        "gpt-test", api_key=KEY, base_url=BASE, http_client=http, sleep=Sleeps() if sleep is None else sleep
    )


def message_item(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def call_item(call_id: str, arguments: str, name: str = "lookup") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def response_body(*output: dict[str, Any], status: str = "completed", **extra: Any) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "model": "gpt-test-2024",
        "status": status,
        "output": list(output),
        "usage": {"input_tokens": 20, "output_tokens": 5, "total_tokens": 25},
        **extra,
    }


def answer(*output: dict[str, Any], **extra: Any) -> httpx.Response:
    return httpx.Response(200, json=response_body(*output, **extra))


def sse(*events: dict[str, Any]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def streamed(data: bytes, *, piece: int = 0) -> httpx.Response:
    async def body() -> AsyncIterator[bytes]:
        size = piece or len(data)
        for start in range(0, len(data), size):
            yield data[start : start + size]

    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())


def created() -> dict[str, Any]:
    return {
        "type": "response.created",
        "response": {"id": "resp_7", "model": "gpt-test-2024", "status": "in_progress"},
    }


def completed(*output: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.completed", "response": {**response_body(*output), "id": "resp_7"}}


def text_events(*words: str) -> list[dict[str, Any]]:
    deltas = [
        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "delta": w}
        for w in words
    ]
    return [created(), *deltas, completed(message_item("".join(words)))]


def call_events() -> list[dict[str, Any]]:
    """Text, then two calls whose arguments arrive in deltas."""
    events: list[dict[str, Any]] = [created()]
    events.append({"type": "response.output_text.delta", "output_index": 0, "delta": "Checking"})
    for index, (call_id, city) in enumerate([("call_a", "Lima"), ("call_b", "Oslo")], start=1):
        item = {**call_item(call_id, ""), "status": "in_progress"}
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        for part in ('{"city": ', f'"{city}"}}'):
            delta = {"item_id": item["id"], "output_index": index, "delta": part}
            events.append({"type": "response.function_call_arguments.delta", **delta})
        done = call_item(call_id, f'{{"city": "{city}"}}')
        events.append({"type": "response.output_item.done", "output_index": index, "item": done})
    events.append(completed(call_item("call_a", "{}"), call_item("call_b", "{}")))
    return events


async def collect(updates: AsyncIterator[ChatResponseUpdate]) -> list[ChatResponseUpdate]:
    return [update async for update in updates]


USER = [Message("user", (Content.from_text("Weather in Lima?"),))]


@tool
def lookup(city: str) -> str:
    """Look up the weather of a city."""
    return f"{city}: sunny"


def agent_on(llm: OpenAIResponsesClient) -> Agent:
    return llm.as_agent(
        name="Weather",
        instructions="Answer briefly.",
        tools=[lookup],
        clock=FixedClock(),
        ids=SequentialIds(),
    )


def contents(updates: Sequence[ChatResponseUpdate]) -> list[Content]:
    return [c for u in updates for c in u.contents]


# -- configuration and requests ---------------------------------------------------------------


@pytest.mark.anyio
async def test_environment_configures_the_responses_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """OPENAI_RESPONSES_MODEL_ID, OPENAI_BASE_URL and OPENAI_API_KEY configure a client built bare."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env.test/v1")
    monkeypatch.setenv("OPENAI_RESPONSES_MODEL_ID", "resp-model")
    server = Server(answer(message_item("hi")))
    llm = OpenAIResponsesClient(http_client=httpx.AsyncClient(transport=httpx.MockTransport(server)))
    await llm.get_response(USER)
    assert str(server.requests[0].url) == "http://env.test/v1/responses"
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert server.bodies[0]["model"] == "resp-model"


def test_responses_client_names_its_own_model_variable() -> None:
    """Without a model the error names OPENAI_RESPONSES_MODEL_ID."""
    with pytest.raises(OpenAIConfigurationError, match="OPENAI_RESPONSES_MODEL_ID"):
        OpenAIResponsesClient(api_key=KEY)


@pytest.mark.anyio
async def test_messages_become_input_items_and_instructions_a_field() -> None:
    """Instructions go to ``instructions``; every item is typed: ``message`` items with typed parts
    (``output_text`` for the assistant's words), function_call(_output) items for calls and results.

    The assistant item in the untyped ``{"role", "content": str}`` shorthand is what servers that
    translate items to chat messages (llama.cpp) reject with 400.
    """
    server = Server(answer(message_item("ok")))
    history = [
        Message("system", (Content.from_text("Context."),)),
        Message("user", (Content.from_text("Weather?"),)),
        Message(
            "assistant",
            (
                Content.from_text("Checking."),
                Content.from_function_call("c1", "lookup", arguments='{"city":"Lima"}'),
            ),
        ),
        Message("tool", (Content.from_function_result("c1", result="sunny"),)),
        Message("user", (Content.from_text("and"), Content.from_text("Oslo?"))),
    ]
    await client(server).get_response(history, options={"instructions": "Be brief.", "max_tokens": 30})
    body = server.bodies[0]
    assert body["instructions"] == "Be brief."
    assert body["max_output_tokens"] == 30
    assert body["input"] == [
        {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "Context."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"city":"Lima"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "and"}, {"type": "input_text", "text": "Oslo?"}],
        },
    ]
    assert "stream" not in body


@pytest.mark.anyio
async def test_tools_are_non_strict_function_tools() -> None:
    """ToolSpecs become flat function tools with ``strict: false`` (our schemas are not strict-mode)."""
    server = Server(answer(message_item("ok")))
    spec = ToolSpec(name="lookup", description="Weather.", parameters={"type": "object", "properties": {}})
    await client(server).get_response(USER, options={"tools": [spec], "allow_multiple_tool_calls": False})
    body = server.bodies[0]
    assert body["tools"] == [
        {
            "type": "function",
            "name": "lookup",
            "parameters": {"type": "object", "properties": {}},
            "strict": False,
            "description": "Weather.",
        }
    ]
    assert body["parallel_tool_calls"] is False


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ({"mode": "required"}, "required"),
        ({"mode": "required", "required_function_name": "lookup"}, {"type": "function", "name": "lookup"}),
        (
            {"mode": "auto", "allowed_tools": ["lookup"]},
            {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "lookup"}]},
        ),
    ],
)
async def test_tool_choice_mapping(choice: Any, wire: Any) -> None:
    """Every tool_choice form maps to its Responses API value."""
    server = Server(answer(message_item("ok")))
    options: dict[str, Any] = {"tools": [ToolSpec(name="lookup")], "tool_choice": choice}
    await client(server).get_response(USER, options=options)  # type: ignore[arg-type]
    assert server.bodies[0]["tool_choice"] == wire


# -- whole responses --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_response_text_and_calls_with_metadata() -> None:
    """Output text and function calls come through with model, id, usage and a tool_calls finish."""
    server = Server(
        answer(message_item("Checking."), call_item("c1", '{"city": "Lima"}'), {"type": "reasoning"})
    )
    response = await client(server).get_response(USER)
    assert response.messages[0].contents == (
        Content.from_text("Checking."),
        Content.from_function_call("c1", "lookup", arguments='{"city": "Lima"}'),
    )
    assert (response.model, response.response_id, response.finish_reason) == (
        "gpt-test-2024",
        "resp_1",
        "tool_calls",
    )
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (
        20,
        5,
        25,
    )


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({}, "stop"),
        ({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}, "length"),
        ({"status": "incomplete", "incomplete_details": {"reason": "content_filter"}}, "content_filter"),
    ],
)
async def test_finish_reason_follows_the_status(extra: dict[str, Any], reason: str) -> None:
    """completed is ``stop``; an incomplete response reports why (``length`` for the token limit)."""
    response = await client(Server(answer(message_item("x"), **extra))).get_response(USER)
    assert response.finish_reason == reason


@pytest.mark.anyio
async def test_failed_response_and_malformed_body() -> None:
    """A failed status raises ResponseFailedError; a body of the wrong shape MalformedResponseError."""
    failed = answer(status="failed", error={"code": "server_error", "message": "The model crashed"})
    with pytest.raises(ResponseFailedError, match="The model crashed"):
        await client(Server(failed)).get_response(USER)
    with pytest.raises(MalformedResponseError):
        await client(Server(httpx.Response(200, json={"output": "text"}))).get_response(USER)


@pytest.mark.anyio
@pytest.mark.parametrize("body", [{}, {"output": []}, {"usage": None}])
async def test_a_body_that_is_no_response_is_malformed_not_an_empty_answer(body: dict[str, Any]) -> None:
    """A proxy's empty object is not the model answering nothing."""
    with pytest.raises(MalformedResponseError, match="no id, status or output"):
        await client(Server(httpx.Response(200, json=body))).get_response(USER)
    nothing = httpx.Response(200, json={"status": "completed", "output": []})
    empty = await client(Server(nothing)).get_response(USER)  # an answer that says nothing is one
    assert (empty.text, empty.finish_reason) == ("", "stop")


@pytest.mark.anyio
async def test_status_errors_and_retries_are_shared_with_chat() -> None:
    """401 raises AuthenticationError; 429 is retried after Retry-After, then raised."""
    with pytest.raises(AuthenticationError):
        await client(Server(httpx.Response(401, json={"error": {"message": "bad key"}}))).get_response(USER)
    sleeps = Sleeps()
    busy = httpx.Response(429, headers={"Retry-After": "3"}, json={"error": {"message": "slow down"}})
    with pytest.raises(RateLimitError):
        await client(Server(busy, busy, busy), sleeps).get_response(USER)
    assert sleeps == [3.0, 3.0]


# -- streaming --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_stream_yields_text_deltas_then_usage() -> None:
    """Text deltas come one by one; the completed event gives usage, id and finish reason."""
    server = Server(streamed(sse(*text_events("Sun", "ny."))))
    updates = await collect(client(server).get_streaming_response(USER))
    assert [u.text for u in updates] == ["Sun", "ny.", ""]
    last = updates[-1]
    assert (last.response_id, last.model, last.finish_reason) == ("resp_7", "gpt-test-2024", "stop")
    assert last.usage is not None
    assert last.usage.total_tokens == 25
    assert server.bodies[0]["stream"] is True


@pytest.mark.anyio
@pytest.mark.parametrize("piece", [0, 1, 13])
async def test_stream_assembles_calls_from_argument_deltas(piece: int) -> None:
    """Function calls are built from their deltas and yielded whole, fed whole or byte by byte."""
    updates = await collect(
        client(Server(streamed(sse(*call_events()), piece=piece))).get_streaming_response(USER)
    )
    assert contents(updates) == [
        Content.from_text("Checking"),
        Content.from_function_call("call_a", "lookup", arguments='{"city": "Lima"}'),
        Content.from_function_call("call_b", "lookup", arguments='{"city": "Oslo"}'),
    ]
    assert updates[-1].finish_reason == "tool_calls"


@pytest.mark.anyio
async def test_stream_built_from_deltas_without_item_done() -> None:
    """Calls never closed by output_item.done are still yielded when the response completes."""
    events = [e for e in call_events() if e["type"] != "response.output_item.done"]
    found = contents(await collect(client(Server(streamed(sse(*events)))).get_streaming_response(USER)))
    assert [(c.call_id, c.arguments) for c in found if c.type == "function_call"] == [
        ("call_a", '{"city": "Lima"}'),
        ("call_b", '{"city": "Oslo"}'),
    ]


@pytest.mark.anyio
async def test_stream_of_only_a_completed_event_uses_its_output() -> None:
    """A server that sends just response.completed still gives its text and calls."""
    data = sse(completed(message_item("Hi."), call_item("c9", '{"city": "Rome"}')))
    updates = await collect(client(Server(streamed(data))).get_streaming_response(USER))
    assert [c.type for c in contents(updates)] == ["text", "function_call"]
    assert updates[-1].finish_reason == "tool_calls"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "data",
    [sse(*text_events("a", "b")[:-1]), sse(*text_events("a", "b"))[:-30]],
    ids=["no-completed-event", "mid-event"],
)
async def test_truncated_stream_raises(data: bytes) -> None:
    """A stream ending before response.completed, or inside an event, is TruncatedStreamError."""
    with pytest.raises(TruncatedStreamError):
        await collect(client(Server(streamed(data))).get_streaming_response(USER))


@pytest.mark.anyio
async def test_failure_events_raise_response_failed() -> None:
    """``response.failed`` and ``error`` events raise ResponseFailedError with the server's message."""
    failed = {
        "type": "response.failed",
        "response": response_body(status="failed", error={"message": "crashed"}),
    }
    with pytest.raises(ResponseFailedError, match="crashed"):
        await collect(client(Server(streamed(sse(created(), failed)))).get_streaming_response(USER))
    error = {"type": "error", "code": "rate_limit_exceeded", "message": "slow down"}
    with pytest.raises(ResponseFailedError, match="slow down"):
        await collect(client(Server(streamed(sse(created(), error)))).get_streaming_response(USER))


# -- agent runs -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_agent_run_with_tool_calls() -> None:
    """A full run: the call, its output sent back as function_call_output, the answer recorded."""
    server = Server(answer(call_item("c1", '{"city": "Lima"}')), answer(message_item("Lima is sunny.")))
    response = await agent_on(client(server)).run("Weather in Lima?")
    assert response.text == "Lima is sunny."
    second = server.bodies[1]
    assert second["instructions"] == "Answer briefly."
    assert second["input"][1:] == [
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"city": "Lima"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "Lima: sunny"},
    ]
    responded = [e for e in response.events if isinstance(e, ModelResponded)]
    assert [(e.response_id, e.finish_reason) for e in responded] == [
        ("resp_1", "tool_calls"),
        ("resp_1", "stop"),
    ]


@pytest.mark.anyio
async def test_agent_run_stream_with_tool_calls() -> None:
    """run_stream yields the streamed text, the assembled calls, their results and the final answer."""
    server = Server(streamed(sse(*call_events()), piece=9), streamed(sse(*text_events("Both ", "sunny."))))
    updates = [u async for u in agent_on(client(server)).run_stream("Weather in Lima and Oslo?")]
    results = sorted(c.result for u in updates if u.role == "tool" for c in u.contents)
    assert results == ["Lima: sunny", "Oslo: sunny"]
    assert [u.text for u in updates if u.text][-2:] == ["Both ", "sunny."]
    outputs = [i for i in server.bodies[1]["input"] if i.get("type") == "function_call_output"]
    assert [o["call_id"] for o in outputs] == ["call_a", "call_b"]


@pytest.mark.anyio
async def test_api_key_never_appears_in_any_event() -> None:
    """A run and a failed run (the server echoing the key) record no trace of the key."""

    def echo(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": {"message": f"bad key {request.headers['authorization']}"}})

    server = Server(answer(call_item("c1", '{"city": "Lima"}')), answer(message_item("Sunny.")), echo)
    llm = client(server)
    with capture_events() as events:
        await agent_on(llm).run("Weather?")
        with pytest.raises(ModelCallError):
            await agent_on(llm).run("Weather again?")
    assert [e.error_type for e in events if isinstance(e, ModelFailed)] == ["AuthenticationError"]
    assert not any(KEY.encode() in encode_event(e) for e in events)


# -- usage as the provider reports it -----------------------------------------------------------

# The usage block of a Responses API answer from a reasoning model that hit the prompt cache.
_DETAILED_USAGE = {
    "input_tokens": 3120,
    "input_tokens_details": {"cached_tokens": 3072},
    "output_tokens": 410,
    "output_tokens_details": {"reasoning_tokens": 384},
    "total_tokens": 3530,
}


@pytest.mark.anyio
async def test_cached_and_reasoning_tokens_are_recorded_as_reported(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """``input_tokens_details.cached_tokens`` and ``output_tokens_details.reasoning_tokens`` reach
    ``ModelResponded.usage``; the plain usage of the other answers records None for them."""
    detailed = answer(message_item("Sunny."), usage=_DETAILED_USAGE)
    server = Server(detailed, answer(message_item("Again.")))
    agent = Agent(client=client(server), clock=clock, ids=ids)
    with capture_events() as events:
        await agent.run("weather?")
        await agent.run("again?")
    first, second = [e for e in events if isinstance(e, ModelResponded)]
    assert first.usage is not None
    assert (first.usage.input_tokens, first.usage.cache_read_tokens, first.usage.reasoning_tokens) == (
        3120,
        3072,
        384,
    )
    assert first.usage.cache_write_tokens is None
    assert second.usage is not None
    assert (second.usage.cache_read_tokens, second.usage.reasoning_tokens) == (None, None)
    assert b"reasoning_tokens" not in encode_event(second)


@pytest.mark.anyio
async def test_streamed_usage_keeps_cached_and_reasoning_tokens() -> None:
    """The completed event's usage, details included, ends the stream."""
    done = completed(message_item("Sunny."))
    done["response"]["usage"] = _DETAILED_USAGE
    server = Server(streamed(sse(created(), done)))
    updates = await collect(client(server).get_streaming_response(USER))
    usage = updates[-1].usage
    assert usage is not None
    assert (usage.total_tokens, usage.cache_read_tokens, usage.reasoning_tokens) == (3530, 3072, 384)

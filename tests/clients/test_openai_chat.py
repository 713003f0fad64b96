"""OpenAIChatClient against a scripted Chat Completions server behind httpx.MockTransport."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import anyio
import httpx
import pytest

from agentledger import (
    Agent,
    AgentLedgerError,
    Content,
    FunctionInvocationContext,
    Message,
    ModelCallError,
    tool,
)
from agentledger.adapters.chat import openai
from agentledger.adapters.chat.openai import (
    APIConnectionError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    MalformedResponseError,
    OpenAIChatClient,
    OpenAIConfigurationError,
    RateLimitError,
    ResponseFailedError,
    ServerError,
    TruncatedStreamError,
)
from agentledger.clients import ChatOptions, ChatResponseUpdate
from agentledger.core.events import ModelFailed, ModelResponded, ToolSpec, encode_event
from agentledger.testing import FixedClock, SequentialIds, capture_events, event_types

KEY = "sk-test-0123456789abcdef"
BASE = "http://llm.test/v1"

Answer = httpx.Response | Callable[[httpx.Request], httpx.Response]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_CHAT_MODEL_ID"):
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


def client(server: Server, sleep: Sleeps | None = None, **kwargs: Any) -> OpenAIChatClient:
    http = httpx.AsyncClient(transport=httpx.MockTransport(server))
    args: dict[str, Any] = {"model": "gpt-test", "api_key": KEY, "base_url": BASE, **kwargs}
    return OpenAIChatClient(http_client=http, sleep=Sleeps() if sleep is None else sleep, **args)


def completion(
    content: str | None = "Hello.",
    *,
    calls: Sequence[tuple[str, str, str]] = (),
    finish: str = "stop",
    usage: tuple[int, int] = (11, 3),
) -> httpx.Response:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls
        ]
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-test-2024",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }
    return httpx.Response(200, json=body)


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "chatcmpl-9",
        "object": "chat.completion.chunk",
        "model": "gpt-test-2024",
        "choices": choices,
        **extra,
    }


def sse(*events: dict[str, Any] | str) -> bytes:
    lines = [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events]
    return "".join(lines).encode()


def streamed(data: bytes, *, piece: int = 0, fail: Exception | None = None) -> httpx.Response:
    """An event-stream answer, sent in pieces of ``piece`` bytes (0: whole), maybe breaking after."""

    async def body() -> AsyncIterator[bytes]:
        size = piece or len(data)
        for start in range(0, len(data), size):
            yield data[start : start + size]
        if fail is not None:
            raise fail

    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())


def text_stream(*words: str) -> bytes:
    return sse(
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": w}) for w in words),
        chunk({}, "stop"),
        chunk(usage={"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}),
        "[DONE]",
    )


def call_stream() -> bytes:
    """Text, then two parallel calls whose argument fragments interleave."""
    first = {"index": 0, "id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": ""}}
    second = {"index": 1, "id": "call_b", "type": "function", "function": {"name": "lookup", "arguments": ""}}
    return sse(
        chunk({"role": "assistant", "content": "Checking"}),
        chunk({"tool_calls": [first]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
        chunk({"tool_calls": [second]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"city": "Oslo"}'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Lima"}'}}]}),
        chunk({}, "tool_calls"),
        chunk(usage={"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}),
        "[DONE]",
    )


async def collect(updates: AsyncIterator[ChatResponseUpdate]) -> list[ChatResponseUpdate]:
    return [update async for update in updates]


USER = [Message("user", (Content.from_text("What is the weather in Lima?"),))]


@tool
def lookup(city: str) -> str:
    """Look up the weather of a city."""
    return f"{city}: sunny"


def agent_on(llm: OpenAIChatClient, **kwargs: Any) -> Agent:
    return llm.as_agent(
        name="Weather",
        instructions="Answer briefly.",
        tools=[lookup],
        clock=FixedClock(),
        ids=SequentialIds(),
        **kwargs,
    )


# -- configuration ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_environment_configures_key_url_and_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """OPENAI_API_KEY, OPENAI_BASE_URL and OPENAI_CHAT_MODEL_ID configure a client built bare."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env.test/v1/")
    monkeypatch.setenv("OPENAI_CHAT_MODEL_ID", "env-model")
    server = Server(completion())
    llm = OpenAIChatClient(http_client=httpx.AsyncClient(transport=httpx.MockTransport(server)))
    await llm.get_response(USER)
    request = server.requests[0]
    assert str(request.url) == "http://env.test/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert server.bodies[0]["model"] == "env-model"


def test_openai_model_is_the_fallback_and_arguments_win(monkeypatch: pytest.MonkeyPatch) -> None:
    """OPENAI_MODEL applies when the chat variable is unset; an explicit model beats both."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_MODEL", "generic")
    assert OpenAIChatClient().model == "generic"
    monkeypatch.setenv("OPENAI_CHAT_MODEL_ID", "chat-specific")
    assert OpenAIChatClient().model == "chat-specific"
    assert OpenAIChatClient("explicit").model == "explicit"


def test_missing_model_or_hosted_key_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """No model anywhere, or no key for the hosted API, fails at construction with the variable's name."""
    with pytest.raises(OpenAIConfigurationError, match="OPENAI_CHAT_MODEL_ID"):
        OpenAIChatClient(api_key=KEY)
    with pytest.raises(OpenAIConfigurationError, match="OPENAI_API_KEY"):
        OpenAIChatClient("gpt-test")


@pytest.mark.anyio
async def test_local_server_needs_no_key() -> None:
    """With a custom base URL and no key, requests go out without an Authorization header."""
    server = Server(completion())
    llm = OpenAIChatClient(
        "local", base_url=BASE, http_client=httpx.AsyncClient(transport=httpx.MockTransport(server))
    )
    await llm.get_response(USER)
    assert "authorization" not in server.requests[0].headers


@pytest.mark.anyio
async def test_timeout_defaults_to_the_given_pool_or_is_set() -> None:
    """Without ``timeout`` a given pool's own applies; with one, every request uses it."""
    server = Server(completion(), completion())
    pool = httpx.AsyncClient(transport=httpx.MockTransport(server), timeout=7.0)
    await OpenAIChatClient("m", base_url=BASE, http_client=pool).get_response(USER)
    await OpenAIChatClient("m", base_url=BASE, http_client=pool, timeout=3.0).get_response(USER)
    assert [r.extensions["timeout"]["read"] for r in server.requests] == [7.0, 3.0]


def test_own_pool_is_opened_once_per_event_loop() -> None:
    """The client's own connection pool is reused within a loop and replaced in a new one."""
    llm = OpenAIChatClient("m", base_url=BASE)

    async def pools() -> tuple[httpx.AsyncClient, httpx.AsyncClient]:
        return llm._client(), llm._client()

    first, again = anyio.run(pools)
    other, _ = anyio.run(pools)
    assert first is again
    assert other is not first


def test_repr_does_not_show_the_key() -> None:
    """The client's repr names the model and URL, never the key."""
    assert KEY not in repr(client(Server()))
    assert "gpt-test" in repr(client(Server()))


def test_public_names_are_pinned() -> None:
    """The module exports exactly the clients, the error tree and the default URL."""
    assert set(openai.__all__) == {
        "DEFAULT_BASE_URL",
        "DEFAULT_DEADLINE",
        "DEFAULT_MAX_RESPONSE_BYTES",
        "APIConnectionError",
        "APIStatusError",
        "APITimeoutError",
        "AuthenticationError",
        "BadRequestError",
        "DeadlineExceededError",
        "MalformedResponseError",
        "OpenAIChatClient",
        "OpenAIConfigurationError",
        "OpenAIError",
        "OpenAIResponsesClient",
        "RateLimitError",
        "ResponseFailedError",
        "ResponseTooLargeError",
        "ServerError",
        "TokenProviderError",
        "TruncatedStreamError",
    }
    assert all(hasattr(openai, name) for name in openai.__all__)


@pytest.mark.parametrize(
    ("error", "parents"),
    [
        (AuthenticationError, (openai.APIStatusError,)),
        (RateLimitError, (openai.APIStatusError,)),
        (ServerError, (openai.APIStatusError,)),
        (BadRequestError, (openai.APIStatusError,)),
        (APITimeoutError, (APIConnectionError,)),
        (openai.DeadlineExceededError, (APITimeoutError,)),
        (openai.TokenProviderError, (AuthenticationError,)),
        (TruncatedStreamError, (MalformedResponseError,)),
        (OpenAIConfigurationError, (ValueError,)),
        (ResponseFailedError, ()),
    ],
)
def test_error_tree(error: type[Exception], parents: tuple[type[Exception], ...]) -> None:
    """Every error is an OpenAIError, hence an AgentLedgerError, under its documented parent."""
    assert issubclass(error, openai.OpenAIError)
    assert issubclass(error, AgentLedgerError)
    assert all(issubclass(error, parent) for parent in parents)


# -- requests ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_messages_map_to_wire_roles() -> None:
    """Instructions become the system message; calls keep raw arguments; results become tool messages."""
    server = Server(completion())
    history = [
        Message("user", (Content.from_text("Weather in Lima and Oslo?"),), author_name="ana"),
        Message(
            "assistant",
            (
                Content.from_text("Checking."),
                Content.from_function_call("c1", "lookup", arguments='{"city":"Lima"}'),
                Content.from_function_call("c2", "lookup", arguments=""),
            ),
        ),
        Message(
            "tool",
            (
                Content.from_function_result("c1", result="sunny"),
                Content.from_function_result("c2", result={"t": 3}),
            ),
        ),
    ]
    await client(server).get_response(history, options={"instructions": "Be brief."})
    assert server.bodies[0]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Lima and Oslo?", "name": "ana"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"city":"Lima"}'},
                },
                {"id": "c2", "type": "function", "function": {"name": "lookup", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": '{"t":3}'},
    ]


@pytest.mark.anyio
async def test_assistant_message_with_only_calls_has_null_content() -> None:
    """An assistant turn of calls alone sends ``content: null``; several texts become parts."""
    server = Server(completion())
    history = [
        Message("user", (Content.from_text("one"), Content.from_text("two"))),
        Message("assistant", (Content.from_function_call("c1", "lookup", arguments="{}"),)),
    ]
    await client(server).get_response(history)
    messages = server.bodies[0]["messages"]
    assert messages[0]["content"] == [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    assert messages[1]["content"] is None


@pytest.mark.anyio
async def test_tools_are_function_schemas() -> None:
    """Each ToolSpec becomes a function tool; an empty schema becomes an object without properties."""
    server = Server(completion())
    specs = [
        ToolSpec(
            name="lookup", description="Weather.", parameters={"type": "object", "properties": {"city": {}}}
        ),
        ToolSpec(name="ping"),
    ]
    await client(server).get_response(USER, options={"tools": specs, "allow_multiple_tool_calls": True})
    body = server.bodies[0]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "parameters": {"type": "object", "properties": {"city": {}}},
                "description": "Weather.",
            },
        },
        {
            "type": "function",
            "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}},
        },
    ]
    assert body["parallel_tool_calls"] is True
    assert "tool_choice" not in body


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", "auto"),
        ("required", "required"),
        ("none", "none"),
        ({"mode": "auto"}, "auto"),
        ({"mode": "required"}, "required"),
        (
            {"mode": "required", "required_function_name": "lookup"},
            {"type": "function", "function": {"name": "lookup"}},
        ),
        (
            {"mode": "required", "allowed_tools": ["lookup"]},
            {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "required",
                    "tools": [{"type": "function", "function": {"name": "lookup"}}],
                },
            },
        ),
    ],
)
async def test_tool_choice_mapping(choice: Any, wire: Any) -> None:
    """Every tool_choice form maps to its Chat Completions value."""
    server = Server(completion())
    await client(server).get_response(
        USER, options={"tools": [ToolSpec(name="lookup")], "tool_choice": choice}
    )
    assert server.bodies[0]["tool_choice"] == wire


@pytest.mark.anyio
async def test_no_tools_means_no_tool_fields() -> None:
    """Without tools offered, neither tools nor tool_choice is sent (servers reject a lone choice)."""
    server = Server(completion())
    await client(server).get_response(USER, options={"tools": [], "tool_choice": "required"})
    assert "tools" not in server.bodies[0]
    assert "tool_choice" not in server.bodies[0]


@pytest.mark.anyio
async def test_options_map_to_body_fields() -> None:
    """Sampling options are sent under their wire names; options the API lacks are not sent."""
    server = Server(completion())
    options: ChatOptions = {
        "model": "other-model",
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 50,
        "seed": 7,
        "stop": ["END"],
        "user": "u-1",
        "metadata": {"k": "v"},
        "additional_properties": {"trace": "x"},
    }
    await client(server).get_response(USER, options=options)
    body = server.bodies[0]
    assert {k: body[k] for k in ("model", "temperature", "top_p", "max_tokens", "seed", "stop", "user")} == {
        "model": "other-model",
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 50,
        "seed": 7,
        "stop": ["END"],
        "user": "u-1",
    }
    assert "metadata" not in body
    assert "additional_properties" not in body
    assert "stream" not in body


@pytest.mark.anyio
async def test_client_kwargs_convention() -> None:
    """headers, extra_body and extra_query reach the request; other keys are never sent."""
    server = Server(completion())
    kwargs = {
        "headers": {"X-Tenant": "contoso"},
        "extra_body": {"reasoning_effort": "low", "temperature": 1.0},
        "extra_query": {"api-version": "2024-10-21"},
        "timeout": 5.0,
        "middleware_setting": "stays-local",
    }
    await client(server).get_response(USER, options={"temperature": 0.0}, client_kwargs=kwargs)
    request, body = server.requests[0], server.bodies[0]
    assert request.headers["x-tenant"] == "contoso"
    assert request.url.params["api-version"] == "2024-10-21"
    assert body["reasoning_effort"] == "low"
    assert body["temperature"] == 1.0
    assert request.extensions["timeout"]["read"] == 5.0
    assert "stays-local" not in request.content.decode()
    assert "middleware_setting" not in str(request.headers)


@pytest.mark.anyio
async def test_client_kwargs_headers_may_replace_authorization() -> None:
    """A per-run Authorization header in client_kwargs replaces the configured key."""
    server = Server(completion())
    await client(server).get_response(USER, client_kwargs={"headers": {"authorization": "Bearer per-run"}})
    assert server.requests[0].headers.get_list("authorization") == ["Bearer per-run"]


# -- responses --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_text_response_carries_model_id_finish_reason_and_usage() -> None:
    """The answer's text, model, response id, finish reason and usage all come through."""
    response = await client(Server(completion("Sunny."))).get_response(USER)
    assert response.text == "Sunny."
    assert (response.model, response.response_id, response.finish_reason) == (
        "gpt-test-2024",
        "chatcmpl-1",
        "stop",
    )
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (
        11,
        3,
        14,
    )


@pytest.mark.anyio
async def test_parallel_tool_calls_keep_raw_arguments() -> None:
    """Several calls in one answer become function_call contents with their argument text as sent."""
    answer = completion(
        None, calls=[("c1", "lookup", '{"city": "Lima"}'), ("c2", "lookup", '{"city":"Oslo"}')]
    )
    response = await client(Server(answer)).get_response(USER)
    calls = response.messages[0].function_calls
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        ("c1", "lookup", '{"city": "Lima"}'),
        ("c2", "lookup", '{"city":"Oslo"}'),
    ]


@pytest.mark.anyio
async def test_refusal_is_read_as_text() -> None:
    """A refusal takes the place of the text, so the run ends with it."""
    body = {"choices": [{"message": {"content": None, "refusal": "I can't."}, "finish_reason": "stop"}]}
    response = await client(Server(httpx.Response(200, json=body))).get_response(USER)
    assert response.text == "I can't."
    assert response.model == "gpt-test"


# -- errors -----------------------------------------------------------------------------------


def error(status: int, message: str = "nope", headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, json={"error": {"message": message, "code": f"e{status}"}}, headers=headers)


@pytest.mark.anyio
async def test_401_is_an_authentication_error_without_retry() -> None:
    """A 401 raises AuthenticationError at once, with status, code and the server's message."""
    server = Server(error(401, "Incorrect API key provided"))
    with pytest.raises(AuthenticationError, match="Incorrect API key provided") as caught:
        await client(server).get_response(USER)
    assert (caught.value.status_code, caught.value.code) == (401, "e401")
    assert len(server.requests) == 1


@pytest.mark.anyio
async def test_429_is_retried_after_the_retry_after_delay() -> None:
    """A 429 with Retry-After waits that long (through the injected sleep) and tries again."""
    sleeps = Sleeps()
    server = Server(
        error(429, headers={"Retry-After": "2"}), error(429, headers={"retry-after-ms": "250"}), completion()
    )
    response = await client(server, sleeps).get_response(USER)
    assert response.text == "Hello."
    assert sleeps == [2.0, 0.25]
    assert len(server.requests) == 3


@pytest.mark.anyio
async def test_retry_after_as_an_http_date_in_the_past_waits_the_backoff() -> None:
    """An HTTP-date Retry-After already passed names no wait: the client's own backoff is waited,
    not none (a server would otherwise be asked again at once)."""
    sleeps = Sleeps()
    server = Server(error(429, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}), completion())
    await client(server, sleeps).get_response(USER)
    assert sleeps == [0.5]


@pytest.mark.anyio
async def test_429_retries_are_bounded() -> None:
    """After max_retries, the 429 is raised as RateLimitError carrying retry_after."""
    sleeps = Sleeps()
    server = Server(*(error(429, headers={"Retry-After": "1"}) for _ in range(3)))
    with pytest.raises(RateLimitError) as caught:
        await client(server, sleeps, max_retries=2).get_response(USER)
    assert caught.value.retry_after == 1.0
    assert sleeps == [1.0, 1.0]
    assert len(server.requests) == 3


@pytest.mark.anyio
async def test_a_retry_after_too_long_is_not_waited_for() -> None:
    """A Retry-After beyond max_retry_delay raises at once instead of sleeping."""
    sleeps = Sleeps()
    server = Server(error(429, headers={"Retry-After": "3600"}))
    with pytest.raises(RateLimitError):
        await client(server, sleeps, max_retry_delay=30).get_response(USER)
    assert sleeps == []


@pytest.mark.anyio
async def test_5xx_is_retried_with_backoff_then_raised_as_server_error() -> None:
    """5xx answers are retried with growing waits, then raised as ServerError."""
    sleeps = Sleeps()
    server = Server(error(500), error(502), error(503))
    with pytest.raises(ServerError, match="503"):
        await client(server, sleeps).get_response(USER)
    assert sleeps == [0.5, 1.0]


@pytest.mark.anyio
async def test_other_4xx_is_a_bad_request_without_retry() -> None:
    """400 and 404 raise BadRequestError at once; a non-JSON error body is quoted as text."""
    server = Server(error(400, "Unknown parameter"), httpx.Response(404, text="no such model"))
    with pytest.raises(BadRequestError, match="Unknown parameter"):
        await client(server).get_response(USER)
    with pytest.raises(BadRequestError, match="no such model"):
        await client(server).get_response(USER)


@pytest.mark.anyio
async def test_timeout_and_connection_failure_are_typed() -> None:
    """A timeout raises APITimeoutError; a refused connection raises APIConnectionError."""

    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    sleeps = Sleeps()
    with pytest.raises(APITimeoutError):  # not retried: the server may still be working on it
        await client(Server(timeout), sleeps).get_response(USER)
    assert sleeps == []
    server = Server(refused, refused, refused)
    with pytest.raises(APIConnectionError, match="connection refused"):
        await client(server, sleeps).get_response(USER)
    assert (len(server.requests), sleeps) == (3, [0.5, 1.0])  # the two retries, then the error


@pytest.mark.anyio
@pytest.mark.parametrize(
    "failure",
    [
        httpx.RemoteProtocolError("Server disconnected without sending a response."),
        httpx.ConnectError("connection refused"),
        httpx.ReadError("connection reset by peer"),
    ],
    ids=["closed", "refused", "reset"],
)
async def test_a_connection_lost_before_any_answer_is_retried(
    failure: httpx.TransportError, caplog: pytest.LogCaptureFixture
) -> None:
    """A pooled connection the server had closed, a refused or a reset connection: the call is
    sent again (as the vendor SDKs do), and the answer of the retry is the call's."""

    def lost(request: httpx.Request) -> httpx.Response:
        failure.request = request
        raise failure

    sleeps = Sleeps()
    server = Server(lost, completion("hello"))
    response = await client(server, sleeps).get_response(USER)
    assert response.text == "hello"
    assert (len(server.requests), sleeps) == (2, [0.5])
    said = [r.getMessage() for r in caplog.records if r.name.startswith("agentledger")]
    url = "http://llm.test/v1/chat/completions"
    assert said == [f"POST {url} failed ({type(failure).__name__}); retry 1 of 2 in 0.5 s"]
    with pytest.raises(APIConnectionError):  # max_retries=0: the first failure is the error
        await client(Server(lost), Sleeps(), max_retries=0).get_response(USER)


@pytest.mark.anyio
async def test_a_request_httpx_cannot_make_is_not_retried() -> None:
    def unsupported(request: httpx.Request) -> httpx.Response:
        raise httpx.UnsupportedProtocol("no such scheme", request=request)

    sleeps = Sleeps()
    with pytest.raises(APIConnectionError, match="no such scheme"):
        await client(Server(unsupported), sleeps).get_response(USER)
    assert sleeps == []


@pytest.mark.anyio
@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(200, text="<html>gateway</html>"),
        httpx.Response(200, json={"choices": "none"}),
        httpx.Response(200, json={"choices": []}),
    ],
)
async def test_malformed_answers_raise_malformed_response_error(answer: httpx.Response) -> None:
    """Invalid JSON, a wrong shape or no choices raise MalformedResponseError."""
    with pytest.raises(MalformedResponseError):
        await client(Server(answer)).get_response(USER)


@pytest.mark.anyio
async def test_error_inside_a_200_answer_is_a_response_failure() -> None:
    """An ``error`` member in a 200 body raises ResponseFailedError with its message."""
    answer = httpx.Response(200, json={"error": {"message": "model overloaded"}})
    with pytest.raises(ResponseFailedError, match="model overloaded"):
        await client(Server(answer)).get_response(USER)


# -- streaming --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_stream_yields_text_deltas_then_usage_and_finish_reason() -> None:
    """Each text delta is its own update; the last update has usage and finish reason."""
    server = Server(streamed(text_stream("Sun", "ny", ".")))
    updates = await collect(client(server).get_streaming_response(USER))
    assert [u.text for u in updates] == ["Sun", "ny", ".", ""]
    assert all((u.response_id, u.model) == ("chatcmpl-9", "gpt-test-2024") for u in updates)
    last = updates[-1]
    assert last.finish_reason == "stop"
    assert last.usage is not None
    assert last.usage.total_tokens == 7
    assert server.bodies[0]["stream"] is True
    assert server.bodies[0]["stream_options"] == {"include_usage": True}
    assert server.requests[0].headers["accept"] == "text/event-stream"


@pytest.mark.anyio
@pytest.mark.parametrize("piece", [0, 1, 7])
async def test_stream_assembles_parallel_calls_from_argument_deltas(piece: int) -> None:
    """Argument fragments of interleaved calls are joined and each call is yielded whole."""
    updates = await collect(client(Server(streamed(call_stream(), piece=piece))).get_streaming_response(USER))
    contents = [c for u in updates for c in u.contents]
    assert contents == [
        Content.from_text("Checking"),
        Content.from_function_call("call_a", "lookup", arguments='{"city": "Lima"}'),
        Content.from_function_call("call_b", "lookup", arguments='{"city": "Oslo"}'),
    ]
    assert updates[-1].finish_reason == "tool_calls"


@pytest.mark.anyio
async def test_stream_fragments_without_index_follow_their_ids() -> None:
    """Servers that omit ``index`` start a new call with each new call id."""
    data = sse(
        chunk({"tool_calls": [{"id": "x1", "function": {"name": "lookup", "arguments": '{"city":'}}]}),
        chunk({"tool_calls": [{"function": {"arguments": '"A"}'}}]}),
        chunk({"tool_calls": [{"id": "x2", "function": {"name": "lookup", "arguments": '{"city":"B"}'}}]}),
        chunk({}, "tool_calls"),
        "[DONE]",
    )
    updates = await collect(client(Server(streamed(data))).get_streaming_response(USER))
    calls = [c for u in updates for c in u.contents]
    assert [(c.call_id, c.arguments) for c in calls] == [("x1", '{"city":"A"}'), ("x2", '{"city":"B"}')]


@pytest.mark.anyio
async def test_keepalive_comments_and_empty_events_are_skipped() -> None:
    """Comment lines and events with empty data, which servers send to keep a stream open, are ignored."""
    data = b": keepalive\n\ndata:\n\n" + text_stream("ok")
    updates = await collect(client(Server(streamed(data))).get_streaming_response(USER))
    assert "".join(u.text for u in updates) == "ok"


@pytest.mark.anyio
async def test_server_ignoring_stream_true_still_streams_its_whole_answer() -> None:
    """A JSON answer to a stream request is read whole and yielded as updates."""
    answer = completion("All at once.", calls=[("c1", "lookup", "{}")], finish="tool_calls")
    updates = await collect(client(Server(answer)).get_streaming_response(USER))
    assert [c.type for u in updates for c in u.contents] == ["text", "function_call"]
    assert (updates[-1].finish_reason, updates[-1].response_id) == ("tool_calls", "chatcmpl-1")


@pytest.mark.anyio
async def test_trailing_data_after_done_is_ignored() -> None:
    """Anything after ``[DONE]``, even half an event, changes nothing."""
    data = text_stream("ok") + b'data: {"choices": [{"delta": {"content": "late"}}]}\n\ndata: {broken'
    updates = await collect(client(Server(streamed(data))).get_streaming_response(USER))
    assert "".join(u.text for u in updates) == "ok"


@pytest.mark.anyio
async def test_stream_without_done_is_complete_once_finished() -> None:
    """A server that closes after the finish reason without ``[DONE]`` still gives a whole answer."""
    data = sse(chunk({"content": "ok"}), chunk({}, "stop"))
    updates = await collect(client(Server(streamed(data))).get_streaming_response(USER))
    assert [u.finish_reason for u in updates][-1] == "stop"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "answer",
    [
        streamed(call_stream()[:200]),
        streamed(sse(chunk({"content": "half an answer"}))),
        streamed(sse(chunk({"content": "cut"})), fail=httpx.RemoteProtocolError("peer closed connection")),
    ],
    ids=["mid-event", "between-events", "connection-lost"],
)
async def test_truncated_streams_raise(answer: httpx.Response) -> None:
    """A stream cut in an event, before the finish, or by a lost connection is TruncatedStreamError."""
    with pytest.raises(TruncatedStreamError):
        await collect(client(Server(answer)).get_streaming_response(USER))


@pytest.mark.anyio
async def test_stream_stalling_past_the_timeout_is_a_timeout() -> None:
    """A read timeout in the middle of a stream raises APITimeoutError."""
    answer = streamed(sse(chunk({"content": "a"})), fail=httpx.ReadTimeout("stalled"))
    with pytest.raises(APITimeoutError):
        await collect(client(Server(answer)).get_streaming_response(USER))


@pytest.mark.anyio
async def test_stream_error_event_and_malformed_chunk() -> None:
    """An error chunk raises ResponseFailedError; a chunk that is not JSON raises MalformedResponseError."""
    failing = streamed(sse(chunk({"content": "a"}), {"error": {"message": "overloaded"}}))
    with pytest.raises(ResponseFailedError, match="overloaded"):
        await collect(client(Server(failing)).get_streaming_response(USER))
    with pytest.raises(MalformedResponseError):
        await collect(client(Server(streamed(b"data: {not json\n\n"))).get_streaming_response(USER))


@pytest.mark.anyio
async def test_stream_is_retried_when_refused_before_it_starts() -> None:
    """A 429 before any event is retried like any other request."""
    sleeps = Sleeps()
    server = Server(error(429, headers={"Retry-After": "1"}), streamed(text_stream("ok")))
    updates = await collect(client(server, sleeps).get_streaming_response(USER))
    assert "".join(u.text for u in updates) == "ok"
    assert sleeps == [1.0]


# -- agent runs -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_agent_run_with_tool_calls() -> None:
    """A full run: two parallel calls, their results sent back, the answer recorded with its metadata."""
    answers = completion(
        None,
        calls=[("c1", "lookup", '{"city": "Lima"}'), ("c2", "lookup", '{"city": "Oslo"}')],
        finish="tool_calls",
    )
    server = Server(answers, completion("Lima and Oslo are sunny."))
    response = await agent_on(client(server)).run("Weather in Lima and Oslo?")
    assert response.text == "Lima and Oslo are sunny."
    second = server.bodies[1]["messages"]
    assert second[0] == {"role": "system", "content": "Answer briefly."}
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "tool"]
    assert [m["content"] for m in second[3:]] == ["Lima: sunny", "Oslo: sunny"]
    assert server.bodies[0]["tools"][0]["function"]["name"] == "lookup"
    responded = [e for e in response.events if isinstance(e, ModelResponded)]
    assert [(e.model, e.response_id, e.finish_reason) for e in responded] == [
        ("gpt-test-2024", "chatcmpl-1", "tool_calls"),
        ("gpt-test-2024", "chatcmpl-1", "stop"),
    ]
    assert response.usage.total_tokens == 28


@pytest.mark.anyio
async def test_agent_run_stream_with_tool_calls() -> None:
    """run_stream yields text deltas, the assembled calls and their results, then the final text."""
    server = Server(streamed(call_stream(), piece=5), streamed(text_stream("Both ", "sunny.")))
    agent = agent_on(client(server))
    updates = [u async for u in agent.run_stream("Weather in Lima and Oslo?")]
    kinds = [(u.role, c.type) for u in updates for c in u.contents]
    assert kinds[:3] == [
        ("assistant", "text"),
        ("assistant", "function_call"),
        ("assistant", "function_call"),
    ]
    assert sorted(c.result for u in updates if u.role == "tool" for c in u.contents) == [
        "Lima: sunny",
        "Oslo: sunny",
    ]
    last_tool = max(i for i, u in enumerate(updates) if u.role == "tool")
    assert [u.text for u in updates[last_tool + 1 :] if u.text] == ["Both ", "sunny."]
    assert [m["role"] for m in server.bodies[1]["messages"]][-2:] == ["tool", "tool"]


@pytest.mark.anyio
async def test_required_tool_choice_applies_to_the_first_call_only() -> None:
    """A named required choice goes out on the first request and is gone from the second."""
    server = Server(completion(None, calls=[("c1", "lookup", '{"city": "Lima"}')]), completion("Sunny."))
    choice = {"mode": "required", "required_function_name": "lookup"}
    await agent_on(client(server)).run("Weather?", options={"tool_choice": choice})
    assert server.bodies[0]["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert "tool_choice" not in server.bodies[1]


@pytest.mark.anyio
async def test_client_kwargs_reach_every_model_call_of_a_run() -> None:
    """client_kwargs headers go out on each request; only their keys are recorded."""
    server = Server(completion(None, calls=[("c1", "lookup", '{"city": "Lima"}')]), completion("Sunny."))
    response = await agent_on(client(server)).run(
        "Weather?", client_kwargs={"headers": {"X-Trace": "trace-secret"}}
    )
    assert [r.headers["x-trace"] for r in server.requests] == ["trace-secret", "trace-secret"]
    assert not any(b"trace-secret" in encode_event(e) for e in response.events)


@pytest.mark.anyio
async def test_model_failure_is_recorded_as_model_failed() -> None:
    """A 401 during a run is recorded as ModelFailed(AuthenticationError) and raised as ModelCallError."""
    with capture_events() as events, pytest.raises(ModelCallError) as caught:
        await agent_on(client(Server(error(401)))).run("Weather?")
    failed = [e for e in events if isinstance(e, ModelFailed)]
    assert [e.error_type for e in failed] == ["AuthenticationError"]
    assert isinstance(caught.value.__cause__, AuthenticationError)
    assert event_types(events)[-1] == "RunFailed"


@pytest.mark.anyio
async def test_api_key_never_appears_in_any_event() -> None:
    """Neither a run through the client nor a failed one (the server echoing the key) records the key."""

    def echo_key(request: httpx.Request) -> httpx.Response:
        return error(401, f"Incorrect API key provided: {request.headers['authorization']}")

    server = Server(
        completion(None, calls=[("c1", "lookup", '{"city": "Lima"}')]), completion("Sunny."), echo_key
    )
    llm = client(server)
    with capture_events() as events:
        await agent_on(llm).run("Weather?")
        with pytest.raises(ModelCallError) as caught:
            await agent_on(llm).run("Weather again?")
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in server.requests)
    assert "ModelFailed" in event_types(events)
    assert not any(KEY.encode() in encode_event(e) for e in events)
    assert KEY not in str(caught.value)
    assert KEY not in str(caught.value.__cause__)
    assert "***" in str(caught.value.__cause__)


@pytest.mark.anyio
async def test_tools_see_their_context_through_the_openai_client() -> None:
    """function_invocation_kwargs reach the tool while the model sees only the declared parameter."""

    @tool
    def send_email(address: str, ctx: FunctionInvocationContext) -> str:
        """Send an email."""
        return f"Queued email for {address} from {ctx.kwargs['user_id']}"

    call = completion(None, calls=[("c1", "send_email", '{"address": "finance@example.com"}')])
    server = Server(call, completion("Sent."))
    agent = client(server).as_agent(name="Notifier", instructions="Send email updates.", tools=[send_email])
    await agent.run("Email finance", function_invocation_kwargs={"user_id": "user-123"})
    assert list(server.bodies[0]["tools"][0]["function"]["parameters"]["properties"]) == ["address"]
    assert server.bodies[1]["messages"][-1]["content"] == "Queued email for finance@example.com from user-123"


def test_results_follow_their_calls_even_when_answered_later() -> None:
    """A result recorded after later user text is sent right after the call it answers."""
    from agentledger.adapters.chat._openai_chat import chat_messages

    call = Content.from_function_call("call_1", "wire", arguments="{}")
    messages = [
        Message("user", ["go"]),
        Message("assistant", [call]),
        Message("user", ["and be quick"]),
        Message("tool", [Content.from_function_result("call_1", result="sent")]),
    ]
    wire = chat_messages(messages)
    assert [m["role"] for m in wire] == ["user", "assistant", "tool", "user"]
    assert wire[2]["tool_call_id"] == "call_1"


# -- usage as the provider reports it -----------------------------------------------------------

# The usage block of a Chat Completions answer from a reasoning model that hit the prompt cache,
# as the API returns it (the details objects carry counts this library does not keep, too).
_DETAILED_USAGE = {
    "prompt_tokens": 2006,
    "completion_tokens": 300,
    "total_tokens": 2306,
    "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
    "completion_tokens_details": {
        "reasoning_tokens": 256,
        "audio_tokens": 0,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    },
}


def _detailed(response: httpx.Response) -> httpx.Response:
    body = json.loads(response.content)
    body["usage"] = _DETAILED_USAGE
    return httpx.Response(200, json=body)


@pytest.mark.anyio
async def test_cached_and_reasoning_tokens_are_recorded_as_reported(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """Cached input and reasoning tokens reach ``ModelResponded.usage``; an answer without the
    details records None for them, not zeros, and its logged event does not mention them."""
    server = Server(_detailed(completion("Sunny.")), completion("Again."))
    agent = Agent(client=client(server), clock=clock, ids=ids)
    with capture_events() as events:
        await agent.run("weather?")
        await agent.run("weather again?")
    first, second = [e for e in events if isinstance(e, ModelResponded)]
    assert first.usage is not None
    assert (first.usage.input_tokens, first.usage.output_tokens, first.usage.total_tokens) == (
        2006,
        300,
        2306,
    )
    assert (first.usage.cache_read_tokens, first.usage.cache_write_tokens, first.usage.reasoning_tokens) == (
        1920,
        None,
        256,
    )
    assert b'"cache_read_tokens":1920' in encode_event(first)
    assert second.usage is not None
    assert (second.usage.cache_read_tokens, second.usage.reasoning_tokens) == (None, None)
    assert b"cache_read_tokens" not in encode_event(second)
    assert b"reasoning_tokens" not in encode_event(second)


@pytest.mark.anyio
async def test_streamed_usage_keeps_cached_reasoning_and_cache_writes() -> None:
    """The last chunk's usage, details included, is the streamed answer's usage; a server that
    reports prompt-cache writes has them recorded too."""
    usage = {**_DETAILED_USAGE, "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 1800}}
    data = sse(chunk({"role": "assistant", "content": "Hi"}), chunk({}, "stop"), chunk(usage=usage), "[DONE]")
    updates = await collect(client(Server(streamed(data))).get_streaming_response(USER))
    last = updates[-1].usage
    assert last is not None
    assert (last.input_tokens, last.cache_read_tokens, last.cache_write_tokens, last.reasoning_tokens) == (
        2006,
        0,
        1800,
        256,
    )


@pytest.mark.anyio
async def test_a_negative_cached_count_is_a_malformed_answer() -> None:
    """A details count no server could mean is refused like any other malformed usage."""
    body = json.loads(completion("x").content)
    body["usage"]["prompt_tokens_details"] = {"cached_tokens": -1}
    with pytest.raises(MalformedResponseError):
        await client(Server(httpx.Response(200, json=body))).get_response(USER)

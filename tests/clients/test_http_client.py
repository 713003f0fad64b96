"""Untrusted sizes and times: what a server may make an HTTP chat client read, and wait for.

Sizes: a client reads at most ``max_response_bytes`` of an answer, decompressed. A 200 KB gzip
body that inflates to 200 MB would be held whole in memory by a plain read; the clients read
answers as streams and stop at the limit (32 MiB by default, a setting), with
``ResponseTooLargeError``, whether the answer is whole JSON, a stream of events, or an error
status's body.

Times: a model call runs within the client's ``deadline``, whatever the server does: one that
drips an answer a byte at a time (each read within ``timeout``), streams keep-alive comments for
ever, or asks for waits. These run against a real server on 127.0.0.1 (``tests._loopback``), as a
mock transport answers at once; each test gives its call a short deadline and fails, rather than
hangs, if the call outlives a generous bound.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest

from agentledger import ModelCallError
from agentledger.adapters.chat._http_client import HTTPChatClient
from agentledger.adapters.chat._openai_http import retry_after
from agentledger.adapters.chat.anthropic import AnthropicClient
from agentledger.adapters.chat.openai import (
    DEFAULT_DEADLINE,
    DEFAULT_MAX_RESPONSE_BYTES,
    BadRequestError,
    DeadlineExceededError,
    MalformedResponseError,
    OpenAIChatClient,
    OpenAIConfigurationError,
    OpenAIResponsesClient,
    RateLimitError,
    ResponseTooLargeError,
    ServerError,
)
from agentledger.core.events import ModelFailed, RunFailed
from agentledger.core.messages import Message
from agentledger.testing import capture_events
from tests._loopback import Request, answer, drip, json_answer, replying, serve

pytestmark = pytest.mark.anyio

INFLATED = 200 * 1024 * 1024


def bomb(content_type: str, *, status: int = 200) -> httpx.MockTransport:
    """A server answering with a gzip body of about 200 KB that inflates to 200 MB."""
    body = gzip.compress(b" " * INFLATED, compresslevel=9)
    assert len(body) < 300_000

    def handler(request: httpx.Request) -> httpx.Response:
        headers = {"content-encoding": "gzip", "content-type": content_type}
        return httpx.Response(status, headers=headers, content=body)

    return httpx.MockTransport(handler)


Kind = type[OpenAIChatClient] | type[OpenAIResponsesClient]


def client(transport: httpx.MockTransport, kind: Kind = OpenAIChatClient, **options: Any) -> Any:
    http = httpx.AsyncClient(transport=transport)
    return kind("m", api_key="k", base_url="https://x.example/v1", http_client=http, max_retries=0, **options)


@pytest.mark.parametrize("kind", [OpenAIChatClient, OpenAIResponsesClient])
async def test_a_gzip_bomb_answer_stops_at_the_limit(kind: Kind) -> None:
    model = client(bomb("application/json"), kind)
    assert model.max_response_bytes == DEFAULT_MAX_RESPONSE_BYTES
    with pytest.raises(ResponseTooLargeError, match="passed 33,554,432 bytes") as raised:
        await model.get_response([Message("user", "hi")])
    assert raised.value.limit == DEFAULT_MAX_RESPONSE_BYTES


async def test_a_gzip_bomb_stream_stops_at_the_limit() -> None:
    model = client(bomb("text/event-stream"), max_response_bytes=1024 * 1024)
    with pytest.raises(ResponseTooLargeError, match="passed 1,048,576 bytes"):
        async for _ in model.get_streaming_response([Message("user", "hi")]):
            pass


async def test_a_gzip_bomb_error_body_is_read_only_as_far_as_a_message_needs() -> None:
    from agentledger.adapters.chat.openai import BadRequestError

    model = client(bomb("application/json", status=400))
    with pytest.raises(BadRequestError, match="could not be read"):
        await model.get_response([Message("user", "hi")])


async def test_an_answer_within_the_limit_is_read_and_the_limit_is_a_setting() -> None:
    message = {"role": "assistant", "content": "x" * 5000}
    answer = {"id": "r", "model": "m", "choices": [{"index": 0, "finish_reason": "stop", "message": message}]}
    data = json.dumps(answer).encode()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-encoding": "gzip"}, content=gzip.compress(data))

    whole = await client(httpx.MockTransport(handler)).get_response([Message("user", "hi")])
    assert whole.text == "x" * 5000
    small = client(httpx.MockTransport(handler), max_response_bytes=len(data) - 1)
    with pytest.raises(ResponseTooLargeError):
        await small.get_response([Message("user", "hi")])
    unlimited = client(httpx.MockTransport(handler), max_response_bytes=None)
    assert (await unlimited.get_response([Message("user", "hi")])).text == "x" * 5000
    with pytest.raises(OpenAIConfigurationError):
        client(httpx.MockTransport(handler), max_response_bytes=0)


# -- the deadline of a call -------------------------------------------------------------------

BOUND = 10.0
"""How long a test lets a call run whose deadline is well under a second: a generous margin."""
KEY = "sk-test-0123456789abcdef"
HttpKind = Callable[..., HTTPChatClient]


def openai_chat(url: str, **options: Any) -> HTTPChatClient:
    return OpenAIChatClient("m", api_key=KEY, base_url=url + "/v1", **options)


def openai_responses(url: str, **options: Any) -> HTTPChatClient:
    return OpenAIResponsesClient("m", api_key=KEY, base_url=url + "/v1", **options)


def anthropic(url: str, **options: Any) -> HTTPChatClient:
    return AnthropicClient("m", api_key=KEY, base_url=url, **options)


KINDS = pytest.mark.parametrize("kind", [openai_chat, openai_responses, anthropic], ids=lambda k: k.__name__)


async def dripping_json(request: Request, stream: anyio.abc.ByteStream) -> None:
    """A 200 whose JSON body comes one byte every 50 ms, for ever: each read is quick."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000000\r\n\r\n{"
    await drip(stream, head)


async def dripping_events(request: Request, stream: anyio.abc.ByteStream) -> None:
    """A 200 event stream of keep-alive comments, one every 50 ms, for ever."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    await drip(stream, head, b": still thinking\n\n")


async def call(model: HTTPChatClient, *, stream: bool) -> None:
    messages = [Message("user", "hi")]
    if stream:
        async for _ in model.get_streaming_response(messages):
            pass
    else:
        await model.get_response(messages)


@KINDS
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.anyio
async def test_a_server_dripping_its_answer_is_cut_off_at_the_deadline(kind: HttpKind, stream: bool) -> None:
    """Each byte comes well within ``timeout``, so only the call's deadline can end it: it does,
    with ``DeadlineExceededError`` naming the deadline and what the call was doing."""
    async with serve(dripping_events if stream else dripping_json) as server:
        model = kind(server.url, timeout=30, deadline=0.5)
        with anyio.fail_after(BOUND), pytest.raises(DeadlineExceededError) as raised:
            await call(model, stream=stream)
    assert raised.value.deadline == 0.5
    reading = "the stream" if stream else "the answer"
    assert f"passed its deadline of 0.5 s while reading {reading}" in str(raised.value)
    assert KEY not in str(raised.value)


@pytest.mark.anyio
async def test_a_server_that_never_answers_is_cut_off_at_the_deadline() -> None:
    """A server that reads the request and says nothing, with no read timeout at all."""

    async def silent(request: Request, stream: anyio.abc.ByteStream) -> None:
        await anyio.sleep_forever()

    async with serve(silent) as server:
        model = openai_chat(server.url, http_client=httpx.AsyncClient(timeout=None), deadline=0.5)
        with anyio.fail_after(BOUND), pytest.raises(DeadlineExceededError, match="waiting for its answer"):
            await call(model, stream=False)
        await model.aclose()


@pytest.mark.anyio
async def test_a_retry_whose_wait_would_pass_the_deadline_is_not_made() -> None:
    """503 every time, with the real sleep: the first retry waits its 0.5 s backoff, the second
    (1 s) would end past a 1.4 s deadline whatever the server's speed, so the 503 is raised then,
    saying why (the first retry has 0.9 s to spare)."""
    async with serve(replying(json_answer(503, {"error": "busy"}))) as server:
        model = openai_chat(server.url, max_retries=5, deadline=1.4)
        with anyio.fail_after(BOUND), pytest.raises(ServerError) as raised:
            await call(model, stream=False)
        await model.aclose()
    assert len(server.requests) == 2
    assert "not retried: the wait of 1 s would end past the call's deadline of 1.4 s" in str(raised.value)


@pytest.mark.anyio
async def test_a_run_records_the_deadline_as_a_failed_model_call() -> None:
    """In a run the deadline is a client error like the others: ``ModelFailed`` and ``RunFailed``
    are recorded and ``ModelCallError`` is raised with the client's error as its cause."""
    async with serve(dripping_json) as server:
        agent: Any = openai_chat(server.url, deadline=0.5).as_agent(name="Slow")
        with capture_events() as events, anyio.fail_after(BOUND), pytest.raises(ModelCallError) as raised:
            await agent.run("hi")
    assert isinstance(raised.value.__cause__, DeadlineExceededError)
    assert "deadline of 0.5 s" in str(raised.value)
    (failed,) = [e for e in events if isinstance(e, ModelFailed)]
    assert failed.error_type == "DeadlineExceededError"
    assert "passed its deadline of 0.5 s" in failed.message
    assert [e.error_type for e in events if isinstance(e, RunFailed)] == ["ModelCallError"]


@pytest.mark.anyio
async def test_a_stream_within_the_deadline_and_one_left_early_end_cleanly() -> None:
    """A stream read to its end within the deadline answers; one the caller leaves after its first
    update closes the connection, and a later call on the same client still works."""
    done = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}
    body = f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n".encode()
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(body)
    async with serve(replying(head + body)) as server:
        model = openai_chat(server.url, deadline=5)
        with anyio.fail_after(BOUND):
            texts = [u.text async for u in model.get_streaming_response([Message("user", "hi")])]
            updates = model.get_streaming_response([Message("user", "hi")])
            async for _ in updates:
                break
            await updates.aclose()  # type: ignore[attr-defined]
            again = [u.text async for u in model.get_streaming_response([Message("user", "hi")])]
        await model.aclose()
    assert "hi" in texts
    assert "hi" in again


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "5", True])
def test_a_deadline_must_be_a_finite_positive_number(bad: Any) -> None:
    with pytest.raises(OpenAIConfigurationError, match="deadline must be"):
        openai_chat("http://x.test", deadline=bad)
    assert openai_chat("http://x.test").deadline == DEFAULT_DEADLINE == 600.0
    assert openai_chat("http://x.test", deadline=None).deadline is None
    with pytest.raises(OpenAIConfigurationError, match="max_retry_delay must be"):
        openai_chat("http://x.test", max_retry_delay=float("inf"))


# -- what a server asks to wait ---------------------------------------------------------------


class Sleeps(list[float]):
    """A sleep that records the waits instead of making them."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def asking(headers: dict[str, str]) -> bytes:
    return json_answer(429, {"error": {"message": "slow down"}}, headers)


@pytest.mark.parametrize(
    "headers",
    [
        {"retry-after": "-5"},
        {"retry-after": "0"},
        {"retry-after": "soon"},
        {"retry-after": "nan"},
        {"retry-after": "-inf"},
        {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"},
        {"retry-after-ms": "-5000"},
        {"retry-after-ms": "nan", "retry-after": "-1"},
    ],
    ids=lambda h: ",".join(f"{k}={v}" for k, v in h.items()),
)
@pytest.mark.anyio
async def test_a_wait_that_names_no_positive_time_is_the_clients_own_backoff(headers: dict[str, str]) -> None:
    """A 429 asking for a negative, zero, NaN or unreadable wait (or a date gone by) is retried
    after the client's backoff (0.5 s, then 1 s), not at once."""
    sleeps = Sleeps()
    async with serve(replying(asking(headers))) as server:
        model = openai_chat(server.url, max_retries=2, sleep=sleeps)
        with anyio.fail_after(BOUND), pytest.raises(RateLimitError) as raised:
            await call(model, stream=False)
        await model.aclose()
    assert len(server.requests) == 3
    assert sleeps == [0.5, 1.0]
    assert raised.value.retry_after is None


@pytest.mark.parametrize(
    ("headers", "asked"),
    [
        ({"retry-after": "3600"}, "3600"),
        ({"retry-after": "1e308"}, "1e+308"),
        ({"retry-after": "inf"}, "inf"),
        ({"retry-after": "1" + "0" * 400}, "inf"),
        ({"retry-after-ms": "1e308"}, "1e+305"),
        ({"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"}, None),
    ],
    ids=["hour", "1e308", "inf", "400-digits", "ms-1e308", "year-9999"],
)
@pytest.mark.anyio
async def test_a_wait_past_the_cap_is_refused_at_once_saying_both(
    headers: dict[str, str], asked: str | None
) -> None:
    """A wait longer than ``max_retry_delay``, however large, is not made: the 429 is raised after
    one request, its message naming the wait asked for and the cap."""
    sleeps = Sleeps()
    async with serve(replying(asking(headers))) as server:
        model = openai_chat(server.url, max_retries=2, max_retry_delay=30, sleep=sleeps)
        with anyio.fail_after(BOUND), pytest.raises(RateLimitError) as raised:
            await call(model, stream=False)
        await model.aclose()
    assert (len(server.requests), sleeps) == (1, [])
    message = str(raised.value)
    assert "the server asked for a wait of " in message
    assert "longer than max_retry_delay (30 s)" in message
    if asked is not None:
        assert f"a wait of {asked} s" in message


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("2", 2.0), (" 1.5 ", 1.5), ("-5", None), ("0", None), ("nan", None), ("x", None), ("", None)],
)
def test_retry_after_reads_seconds_and_refuses_what_names_no_wait(value: str, seconds: float | None) -> None:
    assert retry_after(httpx.Headers({"retry-after": value})) == seconds
    assert retry_after(httpx.Headers({"retry-after-ms": value, "retry-after": "7"})) == (
        7.0 if seconds is None else seconds / 1000
    )
    assert retry_after(httpx.Headers({"retry-after": "Mon, 01 Jan 99999 00:00:00 GMT"})) is None


# -- bodies that do not decode ----------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["application/json", "text/event-stream"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.anyio
async def test_a_body_that_does_not_decompress_is_a_malformed_answer(content_type: str, stream: bool) -> None:
    """``Content-Encoding: gzip`` on bytes that are not gzip (over a real socket: a mock
    transport decodes when the answer is built): a typed error, not httpx's own; an error
    status's body that does not decompress is only a message that could not be read."""
    headers = {"content-encoding": "gzip", "content-type": content_type}
    async with serve(replying(answer(200, b"not gzip at all", headers))) as server:
        model = openai_chat(server.url, max_retries=0, deadline=5)
        with anyio.fail_after(BOUND), pytest.raises(MalformedResponseError, match="does not decode as"):
            await call(model, stream=stream)
        await model.aclose()
    async with serve(replying(answer(400, b"not gzip either", headers))) as server:
        model = openai_chat(server.url, max_retries=0, deadline=5)
        with anyio.fail_after(BOUND), pytest.raises(BadRequestError, match="could not be read"):
            await call(model, stream=stream)
        await model.aclose()

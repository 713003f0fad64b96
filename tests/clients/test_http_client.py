"""Untrusted sizes: a client reads at most ``max_response_bytes`` of an answer, decompressed.

A 200 KB gzip body that inflates to 200 MB would be held whole in memory by a plain read; the
clients read answers as streams and stop at the limit (32 MiB by default, a setting), with
``ResponseTooLargeError``, whether the answer is whole JSON, a stream of events, or an error
status's body.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import httpx
import pytest

from agentledger.adapters.chat.openai import (
    DEFAULT_MAX_RESPONSE_BYTES,
    OpenAIChatClient,
    OpenAIConfigurationError,
    OpenAIResponsesClient,
    ResponseTooLargeError,
)
from agentledger.core.messages import Message

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

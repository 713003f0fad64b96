"""A bad model server: the OpenAI clients over real HTTP against answers no server should give.

Each case is a server on 127.0.0.1 (``tests._loopback``) answering every request one way: a body
that is not the wire format (HTML, JSON of the wrong shape, nesting 100,000 deep, random bytes,
a gzip body that is not gzip), a broken HTTP exchange (a status line that is not one, a bad chunk,
a header of 100 KB, the connection closed at once or midway, random bytes instead of HTTP), a body
or an event stream dripped a byte at a time for ever, headers and then silence, no answer at all,
an error body dripped for ever, a 429 asking for a negative wait on every attempt. Each runs
through an agent, with both clients (Chat Completions and Responses), whole and streamed.

The promise: every case ends within the call's deadline (0.3 s here; the test allows 10 s) with
the run either answered or failed the way a failing client fails a run: ``ModelCallError``
whose cause is one of the clients' typed errors, ``ModelFailed`` and ``RunFailed`` in the log.
No case may hang, and none may surface a foreign exception (httpx's, a ``ValueError``...).
"""

from __future__ import annotations

import gzip
import random
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import pytest

from agentledger import Agent, AgentResponse, ModelCallError
from agentledger.adapters.chat.openai import OpenAIChatClient, OpenAIError, OpenAIResponsesClient
from agentledger.core.events import ModelFailed, RunFailed
from agentledger.testing import FixedClock, SequentialIds, capture_events
from tests._loopback import Handler, Request, answer, drip, replying, serve

DEADLINE = 0.3
BOUND = 10.0
"""How long a case may take in all: a generous margin over its deadline."""

_NOISE = random.Random(7).randbytes(4096)


def _closing(data: bytes) -> Handler:
    """A handler that sends ``data`` and closes the connection."""

    async def handler(request: Request, stream: anyio.abc.ByteStream) -> None:
        await stream.send(data)
        await stream.aclose()

    return handler


def _then_silence(data: bytes) -> Handler:
    """A handler that sends ``data`` and then nothing, for ever."""

    async def handler(request: Request, stream: anyio.abc.ByteStream) -> None:
        if data:
            await stream.send(data)
        await anyio.sleep_forever()

    return handler


def _dripping(head: bytes, byte: bytes = b" ") -> Handler:
    async def handler(request: Request, stream: anyio.abc.ByteStream) -> None:
        await drip(stream, head, byte, every=0.02)

    return handler


def _events(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n" + body


_TEXT_EVENT = b'data: {"choices": [{"index": 0, "delta": {"content": "par"}}]}\n\n'

CASES: dict[str, Handler] = {
    "html": replying(answer(200, b"<html>bad gateway</html>", {"content-type": "text/html"})),
    "wrong-shape": replying(answer(200, b'{"choices": "none", "output": 7, "usage": "lots"}')),
    "null": replying(answer(200, b"null")),
    "nested-100000": replying(answer(200, b"[" * 100_000)),
    "random-bytes": replying(answer(200, _NOISE)),
    "not-gzip": replying(answer(200, _NOISE, {"content-encoding": "gzip"})),
    "gzip-of-garbage": replying(answer(200, gzip.compress(_NOISE), {"content-encoding": "gzip"})),
    "truncated-body": _closing(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n{\"choices\": ["),
    "dripped-body": _dripping(b"HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n{"),
    "headers-then-silence": _then_silence(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n"),
    "no-answer": _then_silence(b""),
    "closed-at-once": _closing(b""),
    "not-http": _closing(_NOISE),
    "bad-status-line": _closing(b"HTTP/1.1 two hundred\r\n\r\n"),
    "bad-chunk": _closing(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"),
    "huge-header": _closing(b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * 100_000 + b"\r\n\r\n{}"),
    "redirect": replying(answer(302, b"", {"location": "/elsewhere"})),
    "dripped-error-body": _dripping(b"HTTP/1.1 500 Oops\r\ncontent-length: 1000000\r\n\r\n{"),
    "429-negative-wait": replying(answer(429, b'{"error": "slow down"}', {"retry-after": "-5"})),
    "503-wait-1e308": replying(answer(503, b"{}", {"retry-after": "1e308"})),
    "events-not-json": _closing(_events(b"data: {not json\n\ndata: [DONE]\n\n")),
    "events-random-bytes": _closing(_events(_NOISE)),
    "events-cut-off": _closing(_events(_TEXT_EVENT)),
    "events-dripped-comments": _dripping(_events(b""), b": keep-alive\n\n"),
    "events-endless-line": _dripping(_events(b"data: "), b"a"),
    "events-then-silence": _then_silence(_events(_TEXT_EVENT)),
}

Kind = Callable[..., Any]
KINDS: dict[str, Kind] = {"chat": OpenAIChatClient, "responses": OpenAIResponsesClient}


async def _run(agent: Agent, streamed: bool) -> AgentResponse:
    if not streamed:
        return await agent.run("Hello?")
    stream = agent.run_stream("Hello?")
    async for _ in stream:
        pass
    return await stream.get_final_response()


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.anyio
async def test_a_bad_model_server_ends_the_call_within_its_deadline(
    case: str, kind: str, streamed: bool
) -> None:
    async with serve(CASES[case]) as server:
        url, key = server.url + "/v1", "sk-test-0123456789abcdef"
        client = KINDS[kind]("m", api_key=key, base_url=url, timeout=5, deadline=DEADLINE)
        agent = Agent(client=client, name="Hostile", clock=FixedClock(), ids=SequentialIds())
        outcome: AgentResponse | BaseException
        with capture_events() as events, anyio.fail_after(BOUND):
            try:
                outcome = await _run(agent, streamed)
            except ModelCallError as exc:
                outcome = exc
        await client.aclose()
    if isinstance(outcome, AgentResponse):
        return  # a garbage answer the wire format reads as an (empty) answer is an answer
    assert isinstance(outcome.__cause__, OpenAIError), repr(outcome.__cause__)
    failed = [e for e in events if isinstance(e, ModelFailed)]
    assert [e.error_type for e in failed] == [type(outcome.__cause__).__name__]
    assert isinstance(events[-1], RunFailed)

"""A small HTTP/1.1 server on 127.0.0.1 for the tests that need real sockets.

``httpx.MockTransport`` answers at once and whole, so it cannot show what a client does with a
server that answers slowly, byte by byte, or never. ``serve`` starts a listener on a free port in
the test's own event loop; each request it receives is read (headers and a ``Content-Length``
body) and handed, with the connection, to the next handler of the script (the last one answers
every request after it). A handler writes whatever bytes it wants, as slowly as it wants:
``answer`` builds a whole response, ``drip`` sends bytes one at a time forever.

A client that gives up closes its connection; the handler writing to it then ends quietly. The
server stops, its handlers cancelled, when the ``async with`` block ends.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

__all__ = ("Handler", "Loopback", "Request", "answer", "drip", "json_answer", "replying", "serve")

_GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, ConnectionError, OSError)


@dataclass(frozen=True)
class Request:
    """One request as the server read it."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Handler = Callable[[Request, anyio.abc.ByteStream], Awaitable[None]]


@dataclass
class Loopback:
    """The running server: its base URL and what it received."""

    url: str
    requests: list[Request] = field(default_factory=list)
    arrived: anyio.Event = field(default_factory=anyio.Event)
    """Set when the first request has been read."""


def answer(status: int, body: bytes = b"", headers: Mapping[str, str] | None = None) -> bytes:
    """A whole HTTP/1.1 response; the connection is kept open for the next request."""
    lines = [f"HTTP/1.1 {status} Status {status}"]
    given = {name.lower(): value for name, value in (headers or {}).items()}
    given.setdefault("content-type", "application/json")
    given.setdefault("content-length", str(len(body)))
    lines += [f"{name}: {value}" for name, value in given.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def json_answer(status: int, value: Any, headers: Mapping[str, str] | None = None) -> bytes:
    return answer(status, json.dumps(value).encode(), headers)


async def drip(stream: anyio.abc.ByteStream, head: bytes, byte: bytes = b" ", every: float = 0.05) -> None:
    """Send ``head``, then ``byte`` every ``every`` seconds, for ever (until the client leaves)."""
    await stream.send(head)
    while True:
        await anyio.sleep(every)
        await stream.send(byte)


async def _read_request(stream: anyio.abc.ByteStream, buffer: bytearray) -> Request | None:
    while b"\r\n\r\n" not in buffer:
        try:
            buffer += await stream.receive()
        except _GONE:
            return None
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    start, *lines = head.decode("latin-1").split("\r\n")
    method, path, _ = start.split(" ", 2)
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = bytearray(rest)
    while len(body) < length:
        try:
            body += await stream.receive()
        except _GONE:
            return None
    buffer[:] = body[length:]
    return Request(method, path, headers, bytes(body[:length]))


@asynccontextmanager
async def serve(*script: Handler) -> AsyncIterator[Loopback]:
    """Run a server answering with ``script`` (see the module docstring) for the block's length."""
    assert script, "a server needs at least one handler"
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    server = Loopback(f"http://127.0.0.1:{port}")

    async def connection(stream: anyio.abc.ByteStream) -> None:
        buffer = bytearray()
        async with stream:
            while True:
                request = await _read_request(stream, buffer)
                if request is None:
                    return
                handler = script[min(len(server.requests), len(script) - 1)]
                server.requests.append(request)
                server.arrived.set()
                try:
                    await handler(request, stream)
                except _GONE:
                    return

    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, connection)
        try:
            yield server
        finally:
            group.cancel_scope.cancel()


def replying(response: bytes) -> Handler:
    """A handler that sends ``response`` whole."""

    async def handler(request: Request, stream: anyio.abc.ByteStream) -> None:
        await stream.send(response)

    return handler

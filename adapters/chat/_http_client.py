"""The HTTP side every JSON-over-HTTP chat client shares: retries, errors, streaming, masking.

``HTTPChatClient`` is the base of the OpenAI-compatible clients and of the Anthropic client. A
subclass says what its wire format is (``_body``, ``_parse``, ``_stream``), where a call goes
(``_url``) and how it authenticates (``_auth_headers``); everything else is here once:

- one POST per call, retried on 408, 429 and 5xx (529 included) up to ``max_retries`` times,
  waiting what ``Retry-After`` (or ``retry-after-ms``) says, else 0.5 s, 1 s, 2 s... capped at
  8 s (a header that names no positive wait counts as absent); a wait longer than
  ``max_retry_delay`` is not made and the error is raised at once, saying so; a connection that
  fails before any answer (refused, reset, a pooled connection the server had closed) is retried
  the same way, a timeout is not;
- the whole call runs within ``deadline`` seconds (``DEFAULT_DEADLINE``, 10 minutes): the
  credential, connecting, every retry and its wait, reading the whole answer or stream; past it,
  ``DeadlineExceededError``, and a retry whose wait would end past it is not made;
- error statuses and transport failures become the typed errors of ``_openai_errors``;
- answers are read within ``max_response_bytes``; streams go through the SSE parser;
- the credentials are kept out of ``repr``, of every error message and of the answers recorded.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import math
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Protocol, Self

import anyio
import httpx
import msgspec

from agentledger.clients import BaseChatClient, ChatOptions, ChatResponse, ChatResponseUpdate
from agentledger.core.messages import Content, Message
from agentledger.logs import guard_httpx_log, logger

from ._openai_errors import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    DeadlineExceededError,
    OpenAIConfigurationError,
    OpenAIError,
    TruncatedStreamError,
)
from ._openai_http import (
    DEFAULT_MAX_RESPONSE_BYTES,
    body_chunks,
    body_secrets,
    masked_contents,
    read_all,
    request_secrets,
    send_request,
    status_error_of,
)
from ._sse import ServerSentEvent, SSEDecoder

__all__ = ("DEFAULT_DEADLINE", "DEFAULT_TIMEOUT", "HTTPChatClient", "Sleep", "WireStream")

_log = logger("clients")
DEFAULT_TIMEOUT = 60.0
DEFAULT_DEADLINE = 600.0
"""How long one model call may take in all, by default: 10 minutes. Long enough for the slowest
answers a hosted model gives whole (a long reasoning answer; Anthropic's own SDK refuses to wait
longer than this for a call that is not streamed), short enough that a server answering one byte
at a time, or a token provider that never returns, cannot hold a run for ever."""
_MASK = "***"

Sleep = Callable[[float], Awaitable[None]]


class WireStream(Protocol):
    """A reader for one streamed answer: server-sent events in, updates out."""

    done: bool

    def feed(self, event: ServerSentEvent) -> list[ChatResponseUpdate]: ...

    def close(self) -> list[ChatResponseUpdate]: ...


class HTTPChatClient(BaseChatClient):
    """The HTTP side the wire formats share: configuration, retries, errors, streaming."""

    path: ClassVar[str]

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        default_headers: Mapping[str, str] | None = None,
        timeout: float | httpx.Timeout | None = None,
        max_retries: int = 2,
        max_retry_delay: float = 60.0,
        http_client: httpx.AsyncClient | None = None,
        sleep: Sleep | None = None,
        max_response_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES,
        deadline: float | None = DEFAULT_DEADLINE,
    ) -> None:
        self.model: str = model
        self.base_url = base_url.rstrip("/")
        self.default_headers = dict(default_headers or {})
        self.timeout = timeout
        self.max_retries = max_retries
        if not _is_seconds(max_retry_delay, zero=True):
            raise OpenAIConfigurationError(
                f"max_retry_delay must be a finite number of seconds, 0 or more, not {max_retry_delay!r}"
            )
        self.max_retry_delay = max_retry_delay
        if deadline is not None and not _is_seconds(deadline, zero=False):
            raise OpenAIConfigurationError(
                f"deadline must be a finite number of seconds above 0, or None, not {deadline!r}"
            )
        self.deadline = deadline
        if max_response_bytes is not None and (type(max_response_bytes) is not int or max_response_bytes < 1):
            raise OpenAIConfigurationError(
                f"max_response_bytes must be a positive int or None, not {max_response_bytes!r}"
            )
        self.max_response_bytes = max_response_bytes
        self._sleep: Sleep = anyio.sleep if sleep is None else sleep
        self._http = http_client
        self._owns_http = http_client is None
        self._http_loop: object = None
        self._closer: AsyncGenerator[None, None] | None = None
        guard_httpx_log()  # httpx logs each request's URL whole: its credentials go

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool the client opened (not one passed as ``http_client``).

        Without it, the pool is closed when its event loop shuts down (``asyncio.run`` returning),
        so a script that never closes the client leaves no socket open."""
        closer, self._closer = self._closer, None
        if self._owns_http and self._http is not None:
            http, self._http = self._http, None
            await http.aclose()
        if closer is not None:
            await closer.aclose()

    # -- the wire formats fill these in --------------------------------------------------------

    @abc.abstractmethod
    def _body(self, messages: Sequence[Message], options: ChatOptions, *, stream: bool) -> dict[str, Any]:
        """The request body for one call."""

    @abc.abstractmethod
    def _parse(self, payload: bytes, model: str, options: ChatOptions) -> ChatResponse:
        """A whole answer."""

    @abc.abstractmethod
    def _stream(self, model: str, options: ChatOptions) -> WireStream:
        """A reader for one streamed answer."""

    async def _auth_headers(self) -> dict[str, str]:
        """The headers that authenticate one request (fetched anew for each, so tokens refresh)."""
        return {}

    def _credential(self) -> str | None:
        """A secret to mask in any error message (the key the client holds)."""
        return None

    def _url(self, options: ChatOptions) -> str:
        """Where a call goes."""
        return self.base_url + self.path

    def _query(self) -> dict[str, str]:
        """Query parameters every request carries (``extra_query`` is merged over them)."""
        return {}

    def _continuation(
        self, options: ChatOptions, response_id: str | None, reported: str | None
    ) -> str | None:
        """The service-side conversation an answer continues in (``ChatResponse.conversation_id``)."""
        return None

    # -- the BaseChatClient interface ----------------------------------------------------------

    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        options: ChatOptions | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ChatResponse:
        """One model call; ``client_kwargs`` as the client's module docstring describes."""
        options = options or {}
        deadline = _Deadline(self.deadline, self._shown_url(options))
        with self._masked(), deadline.bounds():
            body = self._body(messages, options, stream=False)
            extras = client_kwargs or {}
            response = await self._send(body, options, extras, deadline, stream=False)
            deadline.doing = "reading the answer"
            try:  # read as a stream, so a body that inflates past the limit stops there
                content = await read_all(response, self.max_response_bytes)
            finally:
                await response.aclose()
            answer = self._parse(content, options.get("model") or self.model, options)
            answer.conversation_id = self._continuation(options, answer.response_id, answer.conversation_id)
            secrets = _secrets(response.request, extras)
            answer.messages = [
                msgspec.structs.replace(message, contents=masked_contents(message.contents, secrets))
                for message in answer.messages
            ]
            return answer

    async def get_streaming_response(
        self,
        messages: Sequence[Message],
        *,
        options: ChatOptions | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatResponseUpdate]:
        """One model call, streamed: text deltas as they arrive, function calls whole.

        The deadline runs from the first update asked for to the stream's end, the time the
        caller spends between updates included; it is kept around each read rather than across
        the ``yield``, so no cancel scope is left open in the caller's code."""
        options = options or {}
        deadline = _Deadline(self.deadline, self._shown_url(options))
        with self._masked():
            body = self._body(messages, options, stream=True)
            extras = client_kwargs or {}
            with deadline.bounds():
                response = await self._send(body, options, extras, deadline, stream=True)
            deadline.doing = "reading the stream"
            secrets = _secrets(response.request, extras)
            updates = self._read_stream(response, options.get("model") or self.model, options)
            try:
                while True:
                    with deadline.bounds():
                        try:
                            update = await anext(updates)
                        except StopAsyncIteration:
                            break
                    if update.contents:
                        contents = masked_contents(update.contents, secrets)
                        if contents is not update.contents:
                            update = msgspec.structs.replace(update, contents=contents)
                    if update.finish_reason is not None or update.usage is not None:
                        kept = self._continuation(options, update.response_id, update.conversation_id)
                        if kept != update.conversation_id:
                            update = msgspec.structs.replace(update, conversation_id=kept)
                    yield update
            finally:
                await updates.aclose()
                await response.aclose()

    async def _read_stream(
        self, response: httpx.Response, model: str, options: ChatOptions
    ) -> AsyncGenerator[ChatResponseUpdate, None]:
        if response.headers.get("content-type", "").startswith("application/json"):
            whole = self._parse(await read_all(response, self.max_response_bytes), model, options)
            for update in _as_updates(whole):
                yield update
            return
        decoder, stream = SSEDecoder(), self._stream(model, options)
        async for chunk in body_chunks(response, self.max_response_bytes):
            for event in decoder.feed(chunk):
                for update in stream.feed(event):
                    yield update
        if not stream.done:
            if decoder.pending:
                raise TruncatedStreamError("the stream ended in the middle of an event")
            for update in stream.close():
                yield update

    # -- HTTP ----------------------------------------------------------------------------------

    async def _send(
        self,
        body: dict[str, Any],
        options: ChatOptions,
        extras: Mapping[str, Any],
        deadline: _Deadline,
        *,
        stream: bool,
    ) -> httpx.Response:
        """POST ``body``, retrying what may succeed later; a non-2xx answer becomes an error."""
        http = self._client()
        attempt = 0
        while True:
            deadline.doing = "getting the credential"
            auth = await self._auth_headers()
            deadline.doing = "sending the request and waiting for its answer"
            request = self._request(http, body, options, extras, auth, stream=stream)
            failure: OpenAIError
            try:
                response = await send_request(http, request, True)  # read by us, within the size limit
            except APIConnectionError as lost:  # no answer at all: the connection failed
                failure, delay = lost, self._reconnect_delay(lost, attempt)
                what = f"failed ({type(lost.__cause__).__name__})"
            else:
                if response.is_success:
                    return response
                deadline.doing = "reading the error"
                error = await status_error_of(request, response)
                failure, delay = error, self._retry_delay(error, attempt)
                what = f"answered {response.status_code}"
            if delay is None:
                raise failure
            left = deadline.left()
            if delay > left:
                raise _noted(
                    failure,
                    f"not retried: the wait of {_shown(delay)} s would end past the call's deadline "
                    f"of {_shown(deadline.seconds)} s ({max(left, 0.0):.1f} s left)",
                )
            _log.warning(
                "%s %s %s; retry %d of %d in %.1f s",
                request.method,
                request.url.copy_with(query=None),
                what,
                attempt + 1,
                self.max_retries,
                delay,
            )
            deadline.doing = f"waiting {_shown(delay)} s before retry {attempt + 1}"
            await self._sleep(delay)
            attempt += 1

    def _request(
        self,
        http: httpx.AsyncClient,
        body: dict[str, Any],
        options: ChatOptions,
        extras: Mapping[str, Any],
        auth: Mapping[str, str],
        *,
        stream: bool,
    ) -> httpx.Request:
        headers = httpx.Headers({"Content-Type": "application/json"})
        headers.update(self.default_headers)
        headers["Accept"] = "text/event-stream" if stream else "application/json"
        headers.update(auth)
        headers.update(extras.get("headers") or {})
        params = {**self._query(), **(extras.get("extra_query") or {})}
        return http.build_request(
            "POST",
            self._url(options),
            content=msgspec.json.encode({**body, **(extras.get("extra_body") or {})}),
            headers=headers,
            params=params or None,
            timeout=extras.get("timeout", httpx.USE_CLIENT_DEFAULT if self.timeout is None else self.timeout),
        )

    def _reconnect_delay(self, failure: APIConnectionError, attempt: int) -> float | None:
        """How long to wait before sending again after the connection failed without an answer
        (None: raise). A timeout is not retried: the server may still be working on the call."""
        if attempt >= self.max_retries or isinstance(failure, APITimeoutError):
            return None
        if not isinstance(failure.__cause__, httpx.NetworkError | httpx.RemoteProtocolError):
            return None  # a request httpx could not make (a bad URL, a proxy refusing): raise at once
        return _backoff(attempt)

    def _retry_delay(self, error: APIStatusError, attempt: int) -> float | None:
        """How long to wait before sending again after an error status (None: raise). A wait the
        server asks for past ``max_retry_delay`` is refused by raising the error, saying so."""
        status = error.status_code
        if attempt >= self.max_retries or not (status in (408, 429) or status >= 500):
            return None
        asked = error.retry_after
        if asked is None:
            return _backoff(attempt)
        if asked > self.max_retry_delay:
            raise _noted(
                error,
                f"not retried: the server asked for a wait of {_shown(asked)} s, longer than "
                f"max_retry_delay ({_shown(self.max_retry_delay)} s)",
            )
        return asked

    def _shown_url(self, options: ChatOptions) -> str:
        """Where a call goes, as a message may show it (no query, no user information)."""
        try:
            url = httpx.URL(self._url(options))
        except (httpx.InvalidURL, TypeError, ValueError):
            return "the server"
        return f"POST {url.copy_with(query=None, fragment=None, username=None, password=None)}"

    def _client(self) -> httpx.AsyncClient:
        """The connection pool: the one given, or one of ours per event loop."""
        if not self._owns_http:
            assert self._http is not None
            return self._http
        loop = _running_loop()
        if self._http is None or self._http_loop is not loop:
            timeout = DEFAULT_TIMEOUT if self.timeout is None else self.timeout
            self._http, self._http_loop = httpx.AsyncClient(timeout=timeout), loop
            self._closer = _closed_with_the_loop(self._http)
        return self._http

    @contextlib.contextmanager
    def _masked(self) -> Iterator[None]:
        """Mask the credential in any error that would carry it (a server may echo it back)."""
        try:
            yield
        except OpenAIError as exc:
            key = self._credential()
            if key and key in str(exc):
                exc.args = (str(exc).replace(key, _MASK), *exc.args[1:])
            raise


# -- helpers ----------------------------------------------------------------------------------


class _Deadline:
    """The deadline of one model call: when it ends, and what the call was doing meanwhile."""

    __slots__ = ("doing", "ends", "seconds", "where")

    def __init__(self, seconds: float | None, where: str) -> None:
        self.seconds = seconds
        self.where = where
        self.ends = math.inf if seconds is None else anyio.current_time() + seconds
        self.doing = "starting"

    def left(self) -> float:
        """Seconds until the deadline (infinite without one)."""
        return self.ends - anyio.current_time()

    @contextlib.contextmanager
    def bounds(self) -> Iterator[None]:
        """Run the block until the deadline at most; past it, ``DeadlineExceededError``."""
        if self.seconds is None:
            yield
            return
        with anyio.move_on_after(self.left()) as scope:
            yield
        if scope.cancelled_caught:
            raise DeadlineExceededError(
                f"{self.where}: the model call passed its deadline of {_shown(self.seconds)} s while "
                f"{self.doing} (the deadline counts the credential, connecting, every retry and its "
                "wait, and the whole answer; raise the client's deadline= if calls this long are "
                "expected)",
                deadline=self.seconds,
            )


def _noted(error: OpenAIError, note: str) -> OpenAIError:
    """``error`` with ``note`` added to its message."""
    error.args = (f"{error}; {note}", *error.args[1:])
    return error


def _shown(seconds: float | None) -> str:
    """Seconds as a message shows them: 0.5, 30, 3600, 1e+308, inf."""
    return "none" if seconds is None else f"{seconds:g}"


def _is_seconds(value: object, *, zero: bool) -> bool:
    """Whether ``value`` is a finite number of seconds above 0 (or 0 too, with ``zero``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and (value >= 0 if zero else value > 0)


def _secrets(request: httpx.Request, extras: Mapping[str, Any]) -> set[str]:
    """What the client was given for this call that an answer quoting the request must not carry
    into the log: the request's headers, query and credentials, and ``extra_body``'s values."""
    return request_secrets(request) | body_secrets(extras.get("extra_body"))


def _as_updates(response: ChatResponse) -> list[ChatResponseUpdate]:
    """A whole answer as stream updates, for a server that ignored ``stream: true``."""

    def update(contents: tuple[Content, ...] = (), **final: Any) -> ChatResponseUpdate:
        return ChatResponseUpdate(
            contents=contents, response_id=response.response_id, model=response.model, **final
        )

    updates = [update((content,)) for message in response.messages for content in message.contents]
    updates.append(update(usage=response.usage, finish_reason=response.finish_reason))
    return updates


def _closed_with_the_loop(http: httpx.AsyncClient) -> AsyncGenerator[None, None]:
    """An async generator, started and parked, whose ``finally`` closes ``http``.

    The event loop keeps track of the async generators started on it and closes them when it
    shuts down (``loop.shutdown_asyncgens``, which ``asyncio.run`` calls), or when one is dropped
    while the loop runs: either way the pool is closed on its own loop. The caller holds the
    generator for as long as the pool lives.
    """

    async def closer() -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            await http.aclose()

    generator = closer()
    with contextlib.suppress(StopIteration):  # runs to the ``yield`` without awaiting anything
        generator.asend(None).send(None)
    return generator


def _running_loop() -> object:
    """The running asyncio loop (a pool's connections belong to it); None on other backends."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _backoff(attempt: int) -> float:
    """The wait before retry ``attempt + 1`` when the server names none: 0.5 s, 1 s, 2 s... 8 s."""
    return min(0.5 * 2.0**attempt, 8.0)

"""The HTTP boundary of the OpenAI-compatible clients: httpx errors and statuses become ours.

Every foreign error is translated here, at the line where it happens, with ``raise ... from exc``:
transport failures, timeouts, connections lost in the middle of a stream, and error statuses
(with the server's explanation, its error code and the wait it asks for).

A message never carries what the request carried: the URL is shown without its query string
(where ``extra_query`` puts keys such as ``api-key``), and every value of the request's headers
(``Authorization``, ``X-Api-Key``, ``default_headers``, per-run ``headers``) and query is cut out
of whatever the server or the transport said, since a server may echo them back.
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec

from agentledger.core.messages import Content
from agentledger.redaction import mask_values, scrub_text

from ._openai_errors import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    MalformedResponseError,
    ResponseTooLargeError,
    TruncatedStreamError,
    status_error,
)

__all__ = (
    "ANSWER_SHORTEST",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "MAX_ERROR_BYTES",
    "body_chunks",
    "body_secrets",
    "masked_contents",
    "read_all",
    "request_secrets",
    "retry_after",
    "send_request",
    "shown_url",
    "status_error_of",
    "without_secrets",
)

# Headers whose values say nothing secret; every other header's value is cut out of messages.
_PLAIN_HEADERS = frozenset(
    {"accept", "accept-encoding", "connection", "content-length", "content-type", "host", "user-agent"}
)
_SCHEMES = ("bearer ", "basic ", "token ")
_MASK = "***"  # what the clients put where a secret was


def shown_url(request: httpx.Request) -> str:
    """The request's URL as a message may show it: no query string, no user information."""
    url = request.url
    return str(url.copy_with(query=None, fragment=None, username=None, password=None))


def request_secrets(request: httpx.Request) -> set[str]:
    """What of ``request`` no message or answer may show: every header value but the plain ones
    (with the token of a ``Bearer``/``Basic`` value, and the ``user:password`` a basic one
    encodes), every query value (decoded and as sent), and the URL's password."""
    secrets: set[str] = set()
    for name, value in request.headers.items():
        if name.lower() in _PLAIN_HEADERS:
            continue
        secrets.add(value)
        if value.lower().startswith(_SCHEMES):
            token = value.split(" ", 1)[1].strip()
            secrets.add(token)
            if value.lower().startswith("basic "):
                with contextlib.suppress(ValueError):
                    secrets.add(base64.b64decode(token, validate=True).decode("utf-8"))
    secrets.update(value for _, value in request.url.params.multi_items())
    for pair in request.url.query.split(b"&"):
        secrets.add(pair.partition(b"=")[2].decode("ascii", "replace"))
    if request.url.password:
        secrets.update({request.url.password, f"{request.url.username}:{request.url.password}"})
    secrets.discard("")
    return secrets


def body_secrets(extra_body: Any, depth: int = 0) -> set[str]:
    """The text values of ``extra_body`` (a run's ``client_kwargs``, never recorded)."""
    if isinstance(extra_body, str):
        return {extra_body}
    if depth > 32:
        return set()
    if isinstance(extra_body, dict):
        return {s for v in extra_body.values() for s in body_secrets(v, depth + 1)}
    if isinstance(extra_body, list | tuple):
        return {s for v in extra_body for s in body_secrets(v, depth + 1)}
    return set()


def without_secrets(text: str, request: httpx.Request) -> str:
    """``text`` with every header and query value of ``request`` (and credentials) cut out, in
    each form it takes on the wire (as sent, percent-encoded, JSON-escaped, base64)."""
    return scrub_text(mask_values(text, request_secrets(request), mask=_MASK))


ANSWER_SHORTEST = 6
"""Secrets shorter than this are not cut out of answers (they would cut ordinary words)."""


def masked_contents(contents: tuple[Content, ...], secrets: set[str]) -> tuple[Content, ...]:
    """``contents`` with every wire form of ``secrets`` cut out of their texts (an answer that
    quotes the request back: its headers, query and body)."""
    changed = False
    out: list[Content] = []
    for content in contents:
        fields: dict[str, Any] = {}
        for name in ("text", "arguments", "exception"):
            value = getattr(content, name)
            if isinstance(value, str):
                masked = mask_values(value, secrets, mask=_MASK, shortest=ANSWER_SHORTEST)
                if masked != value:
                    fields[name] = masked
        if isinstance(content.result, str):
            masked = mask_values(content.result, secrets, mask=_MASK, shortest=ANSWER_SHORTEST)
            if masked != content.result:
                fields["result"] = masked
        if fields:
            changed = True
            content = msgspec.structs.replace(content, **fields)
        out.append(content)
    return tuple(out) if changed else contents


async def send_request(http: httpx.AsyncClient, request: httpx.Request, stream: bool) -> httpx.Response:
    """Send once; a timeout or a transport failure becomes our error."""
    try:
        return await http.send(request, stream=stream)
    except httpx.TimeoutException as exc:
        raise APITimeoutError(f"no answer from POST {shown_url(request)} within the timeout") from exc
    except httpx.TransportError as exc:
        detail = without_secrets(f"{type(exc).__name__}: {exc}", request)
        raise APIConnectionError(f"POST {shown_url(request)} failed: {detail}") from exc


DEFAULT_MAX_RESPONSE_BYTES = 32 * 1024 * 1024
"""How many bytes of an answer (decompressed) a client reads at most, by default: 32 MiB."""
MAX_ERROR_BYTES = 64 * 1024
"""How much of an error status's body is read for its message."""


async def body_chunks(response: httpx.Response, limit: int | None = None) -> AsyncIterator[bytes]:
    """The streamed body, decompressed, up to ``limit`` bytes in all (``ResponseTooLargeError``
    past it); a connection lost midway is a truncated stream, a body that does not decompress as
    its ``Content-Encoding`` says is malformed."""
    total = 0
    try:
        async for chunk in response.aiter_bytes():
            total += len(chunk)
            if limit is not None and total > limit:
                raise ResponseTooLargeError(
                    f"the answer passed {limit:,} bytes (decompressed) and was not read further; "
                    "raise max_response_bytes if answers this large are expected",
                    limit=limit,
                )
            yield chunk
    except httpx.TimeoutException as exc:
        raise APITimeoutError("the stream stalled past the timeout") from exc
    except httpx.TransportError as exc:
        raise TruncatedStreamError(f"the connection broke during the stream: {exc}") from exc
    except httpx.DecodingError as exc:
        raise MalformedResponseError(f"{_undecodable(response)}: {exc}") from exc


async def read_all(response: httpx.Response, limit: int | None = None) -> bytes:
    """The whole body of a streamed response, up to ``limit`` bytes (decompressed)."""
    if limit is not None:
        return b"".join([chunk async for chunk in body_chunks(response, limit)])
    try:
        return await response.aread()
    except httpx.TimeoutException as exc:
        raise APITimeoutError("the answer stalled past the timeout") from exc
    except httpx.TransportError as exc:
        raise TruncatedStreamError(f"the connection broke during the answer: {exc}") from exc
    except httpx.DecodingError as exc:
        raise MalformedResponseError(f"{_undecodable(response)}: {exc}") from exc


def _undecodable(response: httpx.Response) -> str:
    encoding = response.headers.get("content-encoding", "")[:40]
    return f"the answer's body does not decode as its Content-Encoding ({encoding!r}) says"


async def status_error_of(request: httpx.Request, response: httpx.Response) -> APIStatusError:
    try:
        content = await read_all(response, MAX_ERROR_BYTES)
        detail, code = _error_detail(content)
    except (httpx.HTTPError, ResponseTooLargeError, MalformedResponseError, APITimeoutError):
        detail, code = "(the error body could not be read)", None
    finally:
        await response.aclose()
    status = response.status_code
    detail = without_secrets(detail, request)
    if len(detail) > 500:
        detail = detail[:500] + "…"
    reason = without_secrets(response.reason_phrase, request)
    return status_error(status)(
        f"{status} {reason} from POST {shown_url(request)}: {detail}",
        status_code=status,
        code=code,
        request_id=response.headers.get("x-request-id") or response.headers.get("request-id"),
        retry_after=retry_after(response.headers),
    )


class _ErrorBody(msgspec.Struct):
    error: Any = None
    message: Any = None
    detail: Any = None


def _error_detail(content: bytes) -> tuple[str, str | None]:
    """The server's explanation and error code, from the usual error shapes or the raw text."""
    try:
        body = msgspec.json.decode(content, type=_ErrorBody)
        error = body.error
        if isinstance(error, dict):
            code = error.get("code") or error.get("type")
            return str(error.get("message") or error), str(code) if code is not None else None
        return str(error or body.message or body.detail or "(no details)"), None
    except (msgspec.DecodeError, RecursionError):  # not JSON, or nested past any error's shape
        return content.decode("utf-8", "replace") or "(no details)", None


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date).

    A header that says nothing usable (not a number or a date, zero, negative, NaN, a date
    already passed) counts as absent, so the client waits its own backoff instead of retrying at
    once; ``retry-after-ms`` is read first, ``Retry-After`` when it is absent or unusable. A huge
    value (``1e308``, ``inf``, a date in the year 9999) is returned as it is, for the caller to
    refuse against its cap."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value:
            seconds = _seconds(value.strip(), scale, dates=name == "retry-after")
            if seconds is not None:
                return seconds
    return None


def _seconds(value: str, scale: float, *, dates: bool) -> float | None:
    """The positive wait ``value`` names, or None."""
    try:
        seconds = float(value) / scale
    except ValueError:
        if not dates:
            return None
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, OverflowError, IndexError):  # not a date, or out of range
            return None
    return seconds if seconds > 0 else None  # NaN is not > 0 either

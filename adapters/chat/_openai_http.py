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

import contextlib
import email.utils
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec

from agentledger.redaction import scrub_text

from ._openai_errors import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    TruncatedStreamError,
    status_error,
)

__all__ = (
    "body_chunks",
    "read_all",
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


def without_secrets(text: str, request: httpx.Request) -> str:
    """``text`` with every header and query value of ``request`` (and credentials) cut out."""
    secrets: set[str] = set()
    for name, value in request.headers.items():
        if name.lower() in _PLAIN_HEADERS:
            continue
        secrets.add(value)
        if value.lower().startswith(_SCHEMES):
            secrets.add(value.split(" ", 1)[1].strip())
    secrets.update(value for _, value in request.url.params.multi_items())
    for secret in sorted((s for s in secrets if len(s) >= 3), key=len, reverse=True):
        text = text.replace(secret, _MASK)
    return scrub_text(text)


async def send_request(http: httpx.AsyncClient, request: httpx.Request, stream: bool) -> httpx.Response:
    """Send once; a timeout or a transport failure becomes our error."""
    try:
        return await http.send(request, stream=stream)
    except httpx.TimeoutException as exc:
        raise APITimeoutError(f"no answer from POST {shown_url(request)} within the timeout") from exc
    except httpx.TransportError as exc:
        detail = without_secrets(f"{type(exc).__name__}: {exc}", request)
        raise APIConnectionError(f"POST {shown_url(request)} failed: {detail}") from exc


async def body_chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    """The streamed body; a connection lost midway is a truncated stream."""
    try:
        async for chunk in response.aiter_bytes():
            yield chunk
    except httpx.TimeoutException as exc:
        raise APITimeoutError("the stream stalled past the timeout") from exc
    except httpx.TransportError as exc:
        raise TruncatedStreamError(f"the connection broke during the stream: {exc}") from exc


async def read_all(response: httpx.Response) -> bytes:
    """The whole body of a streamed response."""
    try:
        return await response.aread()
    except httpx.TimeoutException as exc:
        raise APITimeoutError("the answer stalled past the timeout") from exc
    except httpx.TransportError as exc:
        raise TruncatedStreamError(f"the connection broke during the answer: {exc}") from exc


async def status_error_of(request: httpx.Request, response: httpx.Response) -> APIStatusError:
    try:
        await response.aread()
        detail, code = _error_detail(response.content)
    except httpx.HTTPError:
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
        request_id=response.headers.get("x-request-id"),
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
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date)."""
    with contextlib.suppress(ValueError):
        if "retry-after-ms" in headers:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
    value = headers.get("retry-after")
    if not value:
        return None
    with contextlib.suppress(ValueError):
        return max(0.0, float(value))
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())

"""The HTTP boundary of the OpenAI-compatible clients: httpx errors and statuses become ours.

Every foreign error is translated here, at the line where it happens, with ``raise ... from exc``:
transport failures, timeouts, connections lost in the middle of a stream, and error statuses
(with the server's explanation, its error code and the wait it asks for).
"""

from __future__ import annotations

import contextlib
import email.utils
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec

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
    "status_error_of",
)


async def send_request(http: httpx.AsyncClient, request: httpx.Request, stream: bool) -> httpx.Response:
    """Send once; a timeout or a transport failure becomes our error."""
    try:
        return await http.send(request, stream=stream)
    except httpx.TimeoutException as exc:
        raise APITimeoutError(f"no answer from POST {request.url} within the timeout") from exc
    except httpx.TransportError as exc:
        raise APIConnectionError(f"POST {request.url} failed: {type(exc).__name__}: {exc}") from exc


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
    return status_error(status)(
        f"{status} {response.reason_phrase} from POST {request.url}: {detail}",
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
    except (msgspec.DecodeError, msgspec.ValidationError):
        return content.decode("utf-8", "replace")[:500] or "(no details)", None
    error = body.error
    if isinstance(error, dict):
        code = error.get("code") or error.get("type")
        return str(error.get("message") or error), str(code) if code is not None else None
    return str(error or body.message or body.detail or "(no details)"), None


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

"""The errors of the OpenAI-compatible clients, as one tree under ``AgentLedgerError``.

::

    OpenAIError                                 any failed call to an OpenAI-compatible server
    ├── OpenAIConfigurationError (ValueError)   no model, or no API key for the hosted API
    ├── APIConnectionError                      the server could not be reached
    │   └── APITimeoutError                     no answer within the timeout
    │       └── DeadlineExceededError           the whole call passed the client's deadline
    ├── APIStatusError                          an error status (status_code, code, request_id)
    │   ├── BadRequestError                     400, 404, 422 and the other 4xx
    │   ├── AuthenticationError                 401, 403: the key is missing, wrong or not allowed
    │   │   └── TokenProviderError              the token provider failed: no request was sent
    │   ├── RateLimitError                      429, once the retries are used up (retry_after)
    │   └── ServerError                         5xx, once the retries are used up
    ├── ResponseFailedError                     the server reported a failure inside its answer
    ├── ResponseTooLargeError                   the answer, decompressed, passed the client's limit
    └── MalformedResponseError                  the answer is not the JSON the wire format says
        └── TruncatedStreamError                a stream ended before its final event

A run records any of them as ``ModelFailed`` (``error_type`` is the class name) and raises
``ModelCallError`` with the original as its cause. Messages never contain the API key, nor
any other value the request carried in a header or its query string (a server that echoes
them back is quoted without them), nor the URL's query string.
"""

from __future__ import annotations

from agentledger.errors import AgentLedgerError

__all__ = (
    "APIConnectionError",
    "APIStatusError",
    "APITimeoutError",
    "AuthenticationError",
    "BadRequestError",
    "DeadlineExceededError",
    "MalformedResponseError",
    "OpenAIConfigurationError",
    "OpenAIError",
    "RateLimitError",
    "ResponseFailedError",
    "ResponseTooLargeError",
    "ServerError",
    "TokenProviderError",
    "TruncatedStreamError",
    "status_error",
)


class OpenAIError(AgentLedgerError):
    """A call to an OpenAI-compatible server failed."""


class OpenAIConfigurationError(OpenAIError, ValueError):
    """The client cannot be built: no model, or no API key for the hosted OpenAI API."""


class APIConnectionError(OpenAIError):
    """The server could not be reached, or the connection broke before an answer."""


class APITimeoutError(APIConnectionError):
    """The server did not answer within the client's timeout."""


class DeadlineExceededError(APITimeoutError):
    """The model call as a whole took longer than the client's ``deadline`` (seconds): the token
    provider, connecting, every retry and its wait, and reading the whole answer (a stream: to its
    last event) all count. ``timeout`` bounds each read; this bounds the call, so a server that
    answers one byte at a time cannot hold it for ever. Not retried."""

    def __init__(self, message: str, *, deadline: float) -> None:
        super().__init__(message)
        self.deadline = deadline


class APIStatusError(OpenAIError):
    """The server answered with an error status."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        code: str | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.code = code
        self.request_id = request_id
        self.retry_after = retry_after


class BadRequestError(APIStatusError):
    """The server refused the request (400, 404, 422 and the other 4xx statuses)."""


class AuthenticationError(APIStatusError):
    """The API key is missing, wrong or not allowed to do this (401, 403)."""


class TokenProviderError(AuthenticationError):
    """The client's token provider (Azure's ``ad_token_provider``) raised, or returned something
    other than a non-empty text token: no request was sent. ``status_code`` is 401, what a request
    without a valid credential earns. The message names the provider's error, with credentials cut
    out of it; the provider's exception is not chained, since its message or traceback may hold
    the token."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status_code=401)


class RateLimitError(APIStatusError):
    """Too many requests (429), still refused after the client's retries."""


class ServerError(APIStatusError):
    """The server failed (5xx), still failing after the client's retries."""


class ResponseFailedError(OpenAIError):
    """The server answered 200 but reported a failure inside: an error event, a failed response."""


class ResponseTooLargeError(OpenAIError):
    """The answer (its body as decompressed, or a stream's bytes in all) grew past the client's
    ``max_response_bytes``: reading stopped there, so a small compressed body cannot inflate into
    gigabytes in memory."""

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class MalformedResponseError(OpenAIError):
    """The answer is not valid JSON, or not shaped as the wire format says."""


class TruncatedStreamError(MalformedResponseError):
    """A streamed answer ended (or the connection closed) before its final event."""


def status_error(status_code: int) -> type[APIStatusError]:
    """The error class for an HTTP error status."""
    if status_code in (401, 403):
        return AuthenticationError
    if status_code == 429:
        return RateLimitError
    if status_code >= 500:
        return ServerError
    if 400 <= status_code < 500:
        return BadRequestError
    return APIStatusError

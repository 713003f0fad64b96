"""OpenAI-compatible chat clients over httpx: Chat Completions and the Responses API.

``OpenAIChatClient`` speaks ``POST {base_url}/chat/completions``, the format most compatible
servers implement (vLLM, Ollama, llama.cpp's server, LiteLLM...); ``OpenAIResponsesClient``
speaks ``POST {base_url}/responses``. Both are configured by arguments or by the environment:

=====================  ===============================================================
argument               environment (used when the argument is not given)
=====================  ===============================================================
``model``              ``OPENAI_CHAT_MODEL_ID`` (chat) or ``OPENAI_RESPONSES_MODEL_ID``
                       (responses), then ``OPENAI_MODEL``
``api_key``            ``OPENAI_API_KEY``; required only for the hosted API
``base_url``           ``OPENAI_BASE_URL``, else ``https://api.openai.com/v1``
=====================  ===============================================================

so ``OpenAIChatClient().as_agent(name=..., instructions=..., tools=[...])`` works as it is.

``client_kwargs`` of a run reach every request of that run. These keys are read; any other key
is left alone for chat middleware and never sent:

- ``headers``: extra HTTP headers (they may replace ``Authorization`` for that run);
- ``extra_body``: fields merged into the JSON body, replacing what the client built;
- ``extra_query``: query parameters (``api-version`` for Azure-style deployments);
- ``timeout``: seconds (or an ``httpx.Timeout``) for this run's requests.

Errors are the tree in ``_openai_errors`` (re-exported here). 408, 429 and 5xx answers are
retried up to ``max_retries`` times, waiting what ``Retry-After`` (or ``retry-after-ms``) says,
else 0.5 s, 1 s, 2 s... capped at 8 s (a header naming no positive wait counts as absent); a wait
longer than ``max_retry_delay`` is not made and the error is raised at once. A whole call (every
retry and wait, the whole answer or stream) runs within ``deadline`` seconds, 10 minutes unless
told otherwise, else ``DeadlineExceededError``. The waiting goes through ``sleep`` so tests can
replace it. The API key
is sent only in the ``Authorization`` header: it is kept out of ``repr``, of every error message
(a server that echoes it back is masked) and so out of the run's events.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import httpx

from agentledger.clients import ChatOptions, ChatResponse
from agentledger.core.messages import Message

from ._http_client import DEFAULT_DEADLINE, HTTPChatClient, Sleep, WireStream
from ._openai_chat import ChatStream, chat_request, chat_response
from ._openai_errors import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    DeadlineExceededError,
    MalformedResponseError,
    OpenAIConfigurationError,
    OpenAIError,
    RateLimitError,
    ResponseFailedError,
    ResponseTooLargeError,
    ServerError,
    TokenProviderError,
    TruncatedStreamError,
)
from ._openai_http import DEFAULT_MAX_RESPONSE_BYTES
from ._openai_responses import ResponsesStream, responses_continuation, responses_request, responses_response

__all__ = (
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
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class _OpenAIClient(HTTPChatClient):
    """What both OpenAI wire formats share: their configuration and the bearer key."""

    provider_name = "openai"
    model_variable: ClassVar[str]

    def __init__(
        self,
        model: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        default_headers: Mapping[str, str] | None = None,
        timeout: float | httpx.Timeout | None = None,
        max_retries: int = 2,
        max_retry_delay: float = 60.0,
        http_client: httpx.AsyncClient | None = None,
        sleep: Sleep | None = None,
        max_response_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES,
        deadline: float | None = DEFAULT_DEADLINE,
    ) -> None:
        env = os.environ
        chosen = model or env.get(self.model_variable) or env.get("OPENAI_MODEL") or ""
        if not chosen:
            raise OpenAIConfigurationError(
                f"no model: pass model=... or set {self.model_variable} (or OPENAI_MODEL)"
            )
        url = (base_url or env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self._api_key = (api_key if api_key is not None else env.get("OPENAI_API_KEY")) or None
        if self._api_key is None and url == DEFAULT_BASE_URL:
            raise OpenAIConfigurationError("no API key: pass api_key=... or set OPENAI_API_KEY")
        super().__init__(
            chosen,
            base_url=url,
            default_headers=default_headers,
            timeout=timeout,
            max_retries=max_retries,
            max_retry_delay=max_retry_delay,
            http_client=http_client,
            sleep=sleep,
            max_response_bytes=max_response_bytes,
            deadline=deadline,
        )

    async def _auth_headers(self) -> dict[str, str]:
        return {} if self._api_key is None else {"Authorization": f"Bearer {self._api_key}"}

    def _credential(self) -> str | None:
        return self._api_key


class OpenAIChatClient(_OpenAIClient):
    """Chat Completions (``POST /chat/completions``); instructions become the system message."""

    path = "/chat/completions"
    model_variable = "OPENAI_CHAT_MODEL_ID"

    def _body(self, messages: Sequence[Message], options: ChatOptions, *, stream: bool) -> dict[str, Any]:
        return chat_request(messages, options, model=self.model, stream=stream)

    def _parse(self, payload: bytes, model: str, options: ChatOptions) -> ChatResponse:
        return chat_response(payload, model)

    def _stream(self, model: str, options: ChatOptions) -> WireStream:
        return ChatStream(model)


class OpenAIResponsesClient(_OpenAIClient):
    """The Responses API (``POST /responses``); instructions go to its ``instructions`` field."""

    path = "/responses"
    model_variable = "OPENAI_RESPONSES_MODEL_ID"

    def _body(self, messages: Sequence[Message], options: ChatOptions, *, stream: bool) -> dict[str, Any]:
        return responses_request(messages, options, model=self.model, stream=stream)

    def _parse(self, payload: bytes, model: str, options: ChatOptions) -> ChatResponse:
        return responses_response(payload, model)

    def _stream(self, model: str, options: ChatOptions) -> WireStream:
        return ResponsesStream(model)

    def _continuation(
        self, options: ChatOptions, response_id: str | None, reported: str | None
    ) -> str | None:
        return responses_continuation(options, response_id, reported)

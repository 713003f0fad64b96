"""A client for Anthropic's Messages API over httpx (no vendor SDK needed).

``AnthropicClient`` speaks ``POST {base_url}/v1/messages``, whole or streamed, and is configured by
arguments or by the environment:

=====================  ===============================================================
argument               environment (used when the argument is not given)
=====================  ===============================================================
``model``              ``ANTHROPIC_CHAT_MODEL_ID``, then ``ANTHROPIC_MODEL``, else
                       ``DEFAULT_MODEL``
``api_key``            ``ANTHROPIC_API_KEY``; required only for the hosted API
``base_url``           ``ANTHROPIC_BASE_URL``, else ``https://api.anthropic.com``
=====================  ===============================================================

so ``AnthropicClient().as_agent(name=..., instructions=..., tools=[...])`` works with only
``ANTHROPIC_API_KEY`` set. The key is sent in the ``x-api-key`` header, with
``anthropic-version`` (``api_version``); ``default_headers`` can add ``anthropic-beta``.

``client_kwargs`` of a run reach every request of that run, as for the OpenAI clients:
``headers``, ``extra_body``, ``extra_query`` and ``timeout``; any other key is left alone.

How messages, tools, tool choice, structured output, stop reasons and usage map to the wire:
see ``_anthropic_messages``. Retries (429, 529 and the other 5xx, 408; ``retry-after`` honoured),
the call's ``deadline``, ``max_response_bytes`` and the masking of the key work as in the OpenAI
clients, and the errors are the same classes (``agentledger.adapters.chat.openai``'s tree,
re-exported here).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from agentledger.clients import ChatOptions, ChatResponse
from agentledger.core.messages import Message

from ._anthropic_messages import MessagesStream, messages_request, messages_response, output_tool_name
from ._http_client import DEFAULT_DEADLINE, HTTPChatClient, Sleep, WireStream
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
    TruncatedStreamError,
)
from ._openai_http import DEFAULT_MAX_RESPONSE_BYTES

__all__ = (
    "ANTHROPIC_BASE_URL",
    "API_VERSION",
    "DEFAULT_MODEL",
    "APIConnectionError",
    "APIStatusError",
    "APITimeoutError",
    "AnthropicClient",
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
    "TruncatedStreamError",
)

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
"""The ``anthropic-version`` header sent unless ``api_version`` says otherwise."""
DEFAULT_MODEL = "claude-sonnet-4-5"
"""The model used when neither ``model`` nor the environment names one."""


class AnthropicClient(HTTPChatClient):
    """The Messages API (``POST /v1/messages``); instructions go to its ``system`` field."""

    provider_name = "anthropic"
    path = "/v1/messages"

    def __init__(
        self,
        model: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        api_version: str = API_VERSION,
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
        chosen = model or env.get("ANTHROPIC_CHAT_MODEL_ID") or env.get("ANTHROPIC_MODEL") or DEFAULT_MODEL
        url = (base_url or env.get("ANTHROPIC_BASE_URL") or ANTHROPIC_BASE_URL).rstrip("/")
        self._api_key = (api_key if api_key is not None else env.get("ANTHROPIC_API_KEY")) or None
        if self._api_key is None and url == ANTHROPIC_BASE_URL:
            raise OpenAIConfigurationError("no API key: pass api_key=... or set ANTHROPIC_API_KEY")
        self.api_version = api_version
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
        headers = {"anthropic-version": self.api_version}
        if self._api_key is not None:
            headers["x-api-key"] = self._api_key
        return headers

    def _credential(self) -> str | None:
        return self._api_key

    def _body(self, messages: Sequence[Message], options: ChatOptions, *, stream: bool) -> dict[str, Any]:
        return messages_request(messages, options, model=self.model, stream=stream)

    def _parse(self, payload: bytes, model: str, options: ChatOptions) -> ChatResponse:
        return messages_response(payload, model, output_tool_name(options))

    def _stream(self, model: str, options: ChatOptions) -> WireStream:
        return MessagesStream(model, output_tool_name(options))

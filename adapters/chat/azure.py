"""The OpenAI clients against Azure OpenAI: deployments, ``api-version``, keys or Entra tokens.

``AzureOpenAIChatClient`` and ``AzureOpenAIResponsesClient`` speak the same wire formats as
``OpenAIChatClient`` and ``OpenAIResponsesClient`` (and raise the same errors); what differs is
where a request goes and how it is authenticated:

=========================  ==============================================================
argument                   environment (used when the argument is not given)
=========================  ==============================================================
``deployment_name``        ``AZURE_OPENAI_CHAT_DEPLOYMENT_NAME`` (chat) or
                           ``AZURE_OPENAI_RESPONSES_DEPLOYMENT_NAME`` (responses)
``endpoint``               ``AZURE_OPENAI_ENDPOINT`` (``https://<resource>.openai.azure.com``)
``base_url``               ``AZURE_OPENAI_BASE_URL``: the whole URL before the operation,
                           instead of the one built from the endpoint
``api_key``                ``AZURE_OPENAI_API_KEY``, sent in the ``api-key`` header
``api_version``            ``AZURE_OPENAI_API_VERSION``, else ``CHAT_API_VERSION`` /
                           ``RESPONSES_API_VERSION``
``ad_token_provider``      none: a callable returning a bearer token (or an awaitable of one),
                           asked before every request, sent as ``Authorization: Bearer``
=========================  ==============================================================

Chat goes to ``{endpoint}/openai/deployments/{deployment}/chat/completions``; responses go to
``{endpoint}/openai/responses`` with the deployment as the model; both carry ``api-version`` in
the query (``client_kwargs["extra_query"]`` may replace it). A token provider needs no Azure
package here: ``azure.identity.get_bearer_token_provider(credential, scope)`` returns one. A
plain function runs in a worker thread, within the call's ``deadline``; one that raises, or
returns no usable token, is a ``TokenProviderError`` and nothing is sent. The key and every
token are kept out of errors and of the log as the OpenAI clients keep theirs.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Awaitable, Callable, Mapping

import anyio.to_thread
import httpx

from agentledger.redaction import mask_values, scrub_text

from ._http_client import DEFAULT_DEADLINE, Sleep
from ._openai_errors import OpenAIConfigurationError, TokenProviderError
from ._openai_http import DEFAULT_MAX_RESPONSE_BYTES
from .openai import OpenAIChatClient, OpenAIResponsesClient

__all__ = (
    "CHAT_API_VERSION",
    "RESPONSES_API_VERSION",
    "AzureOpenAIChatClient",
    "AzureOpenAIResponsesClient",
    "TokenProvider",
)

CHAT_API_VERSION = "2024-10-21"
"""The ``api-version`` of Chat Completions requests unless configured otherwise."""
RESPONSES_API_VERSION = "2025-04-01-preview"
"""The ``api-version`` of Responses requests unless configured otherwise."""

TokenProvider = Callable[[], str | Awaitable[str]]
"""What ``ad_token_provider`` is: called before each request for a bearer token."""


class _AzureSettings:
    """One client's resolved Azure configuration."""

    def __init__(
        self,
        *,
        deployment_name: str | None,
        deployment_variable: str,
        endpoint: str | None,
        base_url: str | None,
        api_key: str | None,
        api_version: str | None,
        default_version: str,
        ad_token_provider: TokenProvider | None,
    ) -> None:
        env = os.environ
        self.deployment = deployment_name or env.get(deployment_variable) or ""
        if not self.deployment:
            raise OpenAIConfigurationError(
                f"no deployment: pass deployment_name=... or set {deployment_variable}"
            )
        self.endpoint = (endpoint or env.get("AZURE_OPENAI_ENDPOINT") or "").rstrip("/")
        self.base_url = (base_url or env.get("AZURE_OPENAI_BASE_URL") or "").rstrip("/")
        if not self.endpoint and not self.base_url:
            raise OpenAIConfigurationError("no endpoint: pass endpoint=... or set AZURE_OPENAI_ENDPOINT")
        self.api_version = api_version or env.get("AZURE_OPENAI_API_VERSION") or default_version
        self.api_key = (api_key if api_key is not None else env.get("AZURE_OPENAI_API_KEY")) or None
        self.token_provider = ad_token_provider
        self._last_token: str | None = None
        if self.api_key is None and ad_token_provider is None:
            raise OpenAIConfigurationError(
                "no credential: pass api_key=... (or set AZURE_OPENAI_API_KEY) or ad_token_provider=..."
            )

    async def headers(self) -> dict[str, str]:
        if self.token_provider is not None:
            return {"Authorization": f"Bearer {await self._token(self.token_provider)}"}
        assert self.api_key is not None
        return {"api-key": self.api_key}

    async def _token(self, provider: TokenProvider) -> str:
        """A token from ``provider``; its failure, or a value that is no token, is a
        ``TokenProviderError`` whose message has the credentials cut out.

        A plain function runs in a worker thread (``azure.identity``'s provider blocks while it
        fetches a token), so the call's deadline can give up on one that hangs; a coroutine
        function is awaited on the loop."""
        failure: str | None = None
        try:
            if inspect.iscoroutinefunction(provider):
                token: object = provider()
            else:
                token = await anyio.to_thread.run_sync(provider, abandon_on_cancel=True)
            if inspect.isawaitable(token):
                token = await token
        except Exception as exc:  # the provider's own failure, whatever it is
            failure = f"{type(exc).__name__}: {exc}"
        if failure is not None:  # raised here, not in the handler, so the original is not chained
            raise TokenProviderError(self._scrubbed(f"ad_token_provider raised {failure}"))
        if not isinstance(token, str) or not token.strip():
            shown = "an empty str" if isinstance(token, str) else type(token).__name__
            raise TokenProviderError(f"ad_token_provider returned {shown}, not a token (a non-empty str)")
        if not (token.isascii() and token.isprintable()) or token != token.strip():
            raise TokenProviderError(
                "ad_token_provider returned a str with spaces around it or characters an HTTP header "
                "cannot carry (line breaks, control characters, non-ASCII letters)"
            )
        self._last_token = token
        return token

    def _scrubbed(self, text: str) -> str:
        """``text`` without the last token the provider gave nor any credential by its shape."""
        known = [t for t in (self._last_token, self.api_key) if t]
        return scrub_text(mask_values(text, known, mask="***") if known else text)


class _AzureAuth:
    """What both Azure clients send instead of OpenAI's: Azure's credential and ``api-version``."""

    _azure: _AzureSettings
    api_version: str

    async def _auth_headers(self) -> dict[str, str]:
        return await self._azure.headers()

    def _credential(self) -> str | None:
        return self._azure.api_key

    def _query(self) -> dict[str, str]:
        return {"api-version": self.api_version}


class AzureOpenAIChatClient(_AzureAuth, OpenAIChatClient):
    """Chat Completions on an Azure OpenAI deployment; see the module docstring."""

    provider_name = "azure.ai.openai"

    def __init__(
        self,
        deployment_name: str | None = None,
        *,
        endpoint: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        api_version: str | None = None,
        ad_token_provider: TokenProvider | None = None,
        default_headers: Mapping[str, str] | None = None,
        timeout: float | httpx.Timeout | None = None,
        max_retries: int = 2,
        max_retry_delay: float = 60.0,
        http_client: httpx.AsyncClient | None = None,
        sleep: Sleep | None = None,
        max_response_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES,
        deadline: float | None = DEFAULT_DEADLINE,
    ) -> None:
        self._azure = _AzureSettings(
            deployment_name=deployment_name,
            deployment_variable="AZURE_OPENAI_CHAT_DEPLOYMENT_NAME",
            endpoint=endpoint,
            base_url=base_url,
            api_key=api_key,
            api_version=api_version,
            default_version=CHAT_API_VERSION,
            ad_token_provider=ad_token_provider,
        )
        url = self._azure.base_url or f"{self._azure.endpoint}/openai/deployments/{self._azure.deployment}"
        super().__init__(
            self._azure.deployment,
            api_key="",  # never OPENAI_API_KEY: Azure's credential is sent by _auth_headers
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
        self.api_version = self._azure.api_version


class AzureOpenAIResponsesClient(_AzureAuth, OpenAIResponsesClient):
    """The Responses API on Azure OpenAI (the deployment is the model); see the module docstring."""

    provider_name = "azure.ai.openai"

    def __init__(
        self,
        deployment_name: str | None = None,
        *,
        endpoint: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        api_version: str | None = None,
        ad_token_provider: TokenProvider | None = None,
        default_headers: Mapping[str, str] | None = None,
        timeout: float | httpx.Timeout | None = None,
        max_retries: int = 2,
        max_retry_delay: float = 60.0,
        http_client: httpx.AsyncClient | None = None,
        sleep: Sleep | None = None,
        max_response_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES,
        deadline: float | None = DEFAULT_DEADLINE,
    ) -> None:
        self._azure = _AzureSettings(
            deployment_name=deployment_name,
            deployment_variable="AZURE_OPENAI_RESPONSES_DEPLOYMENT_NAME",
            endpoint=endpoint,
            base_url=base_url,
            api_key=api_key,
            api_version=api_version,
            default_version=RESPONSES_API_VERSION,
            ad_token_provider=ad_token_provider,
        )
        super().__init__(
            self._azure.deployment,
            api_key="",
            base_url=self._azure.base_url or f"{self._azure.endpoint}/openai",
            default_headers=default_headers,
            timeout=timeout,
            max_retries=max_retries,
            max_retry_delay=max_retry_delay,
            http_client=http_client,
            sleep=sleep,
            max_response_bytes=max_response_bytes,
            deadline=deadline,
        )
        self.api_version = self._azure.api_version

"""The Azure OpenAI clients: the request shape (URL, api-version, credentials) of recorded exchanges,
and what a token provider that fails, hangs or returns no token does to a call (against a real
server on 127.0.0.1, which must see no request)."""

from __future__ import annotations

import json
import threading
import traceback
from typing import Any

import anyio
import httpx
import pytest

from agentledger import Content, Message, ModelCallError
from agentledger.adapters.chat.azure import (
    CHAT_API_VERSION,
    RESPONSES_API_VERSION,
    AzureOpenAIChatClient,
    AzureOpenAIResponsesClient,
)
from agentledger.adapters.chat.openai import (
    AuthenticationError,
    DeadlineExceededError,
    OpenAIConfigurationError,
    TokenProviderError,
)
from agentledger.core.events import ModelFailed, RunStarted, encode_event
from agentledger.testing import FixedClock, SequentialIds, capture_events
from tests._loopback import json_answer, replying, serve

KEY = "azure-key-0123456789abcdef"
ENDPOINT = "https://contoso.openai.azure.com"
USER = [Message("user", (Content.from_text("Hello?"),))]

COMPLETION = {
    "id": "chatcmpl-1",
    "model": "gpt-4o-2024-08-06",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
}
RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "model": "gpt-4o-2024-08-06",
    "status": "completed",
    "output": [
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Hi.", "annotations": []}],
        }
    ],
    "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7},
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "AZURE_OPENAI_ENDPOINT",
        "AZURE_OPENAI_BASE_URL",
        "AZURE_OPENAI_API_KEY",
        "AZURE_OPENAI_API_VERSION",
        "AZURE_OPENAI_CHAT_DEPLOYMENT_NAME",
        "AZURE_OPENAI_RESPONSES_DEPLOYMENT_NAME",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-must-not-be-sent")


class Server:
    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answers.pop(0)

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self))


@pytest.mark.anyio
async def test_chat_goes_to_the_deployment_with_api_version_and_api_key() -> None:
    server = Server(httpx.Response(200, json=COMPLETION))
    llm = AzureOpenAIChatClient(
        "gpt-4o-prod", endpoint=ENDPOINT + "/", api_key=KEY, http_client=server.http()
    )
    answer = await llm.get_response(USER)
    request = server.requests[0]
    assert request.url.copy_with(query=None) == httpx.URL(
        "https://contoso.openai.azure.com/openai/deployments/gpt-4o-prod/chat/completions"
    )
    assert request.url.params["api-version"] == CHAT_API_VERSION
    assert request.headers["api-key"] == KEY
    assert "authorization" not in request.headers
    assert json.loads(request.content)["model"] == "gpt-4o-prod"
    assert answer.text == "Hi."
    assert KEY not in repr(llm)


@pytest.mark.anyio
async def test_responses_go_to_the_resource_with_the_deployment_as_model() -> None:
    server = Server(httpx.Response(200, json=RESPONSE))
    llm = AzureOpenAIResponsesClient("gpt-4o-prod", endpoint=ENDPOINT, api_key=KEY, http_client=server.http())
    answer = await llm.get_response(USER)
    request = server.requests[0]
    assert str(request.url) == f"{ENDPOINT}/openai/responses?api-version={RESPONSES_API_VERSION}"
    assert json.loads(request.content)["model"] == "gpt-4o-prod"
    assert request.headers["api-key"] == KEY
    assert answer.text == "Hi."


@pytest.mark.anyio
async def test_environment_configures_deployment_endpoint_key_and_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", ENDPOINT)
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    monkeypatch.setenv("AZURE_OPENAI_API_VERSION", "2025-01-01-preview")
    monkeypatch.setenv("AZURE_OPENAI_CHAT_DEPLOYMENT_NAME", "chat-dep")
    monkeypatch.setenv("AZURE_OPENAI_RESPONSES_DEPLOYMENT_NAME", "resp-dep")
    server = Server(httpx.Response(200, json=COMPLETION), httpx.Response(200, json=RESPONSE))
    await AzureOpenAIChatClient(http_client=server.http()).get_response(USER)
    await AzureOpenAIResponsesClient(http_client=server.http()).get_response(USER)
    chat, responses = server.requests
    assert chat.url.path == "/openai/deployments/chat-dep/chat/completions"
    assert json.loads(responses.content)["model"] == "resp-dep"
    assert {r.url.params["api-version"] for r in server.requests} == {"2025-01-01-preview"}
    assert {r.headers["api-key"] for r in server.requests} == {KEY}


@pytest.mark.anyio
async def test_a_token_provider_is_asked_before_every_request() -> None:
    """A bearer token from the provider (sync or async) replaces the api-key header, fresh each time."""
    tokens = iter(["token-one-abcdef", "token-two-abcdef"])

    async def provider() -> str:
        return next(tokens)

    server = Server(httpx.Response(200, json=COMPLETION), httpx.Response(200, json=COMPLETION))
    llm = AzureOpenAIChatClient(
        "dep", endpoint=ENDPOINT, ad_token_provider=provider, http_client=server.http()
    )
    await llm.get_response(USER)
    await llm.get_response(USER)
    assert [r.headers["authorization"] for r in server.requests] == [
        "Bearer token-one-abcdef",
        "Bearer token-two-abcdef",
    ]
    assert not any("api-key" in r.headers for r in server.requests)
    sync_server = Server(httpx.Response(200, json=RESPONSE))
    sync = AzureOpenAIResponsesClient(
        "dep",
        endpoint=ENDPOINT,
        ad_token_provider=lambda: "sync-token-abcdef",
        http_client=sync_server.http(),
    )
    await sync.get_response(USER)
    assert sync_server.requests[0].headers["authorization"] == "Bearer sync-token-abcdef"


@pytest.mark.anyio
async def test_base_url_and_extra_query_override() -> None:
    server = Server(httpx.Response(200, json=COMPLETION))
    llm = AzureOpenAIChatClient(
        "dep", base_url="http://proxy.test/openai/deployments/dep", api_key=KEY, http_client=server.http()
    )
    await llm.get_response(USER, client_kwargs={"extra_query": {"api-version": "2099-01-01"}})
    assert str(server.requests[0].url) == (
        "http://proxy.test/openai/deployments/dep/chat/completions?api-version=2099-01-01"
    )


def test_missing_configuration_is_a_configuration_error() -> None:
    with pytest.raises(OpenAIConfigurationError, match="AZURE_OPENAI_CHAT_DEPLOYMENT_NAME"):
        AzureOpenAIChatClient(endpoint=ENDPOINT, api_key=KEY)
    with pytest.raises(OpenAIConfigurationError, match="AZURE_OPENAI_ENDPOINT"):
        AzureOpenAIResponsesClient("dep", api_key=KEY)
    with pytest.raises(OpenAIConfigurationError, match="ad_token_provider"):
        AzureOpenAIChatClient("dep", endpoint=ENDPOINT)


@pytest.mark.anyio
async def test_the_key_stays_out_of_the_log_and_errors() -> None:
    echo = httpx.Response(
        401, json={"error": {"code": "401", "message": f"Access denied: key {KEY} invalid"}}
    )
    server = Server(httpx.Response(200, json=COMPLETION), echo)
    llm = AzureOpenAIChatClient(
        "dep", endpoint=ENDPOINT, api_key=KEY, http_client=server.http(), max_retries=0
    )
    agent: Any = llm.as_agent(name="A", clock=FixedClock(), ids=SequentialIds())
    with capture_events() as events:
        await agent.run("Hello?")
        with pytest.raises(ModelCallError) as caught:
            await agent.run("Again?")
    assert isinstance(caught.value.__cause__, AuthenticationError)
    assert KEY not in str(caught.value.__cause__)
    assert not any(KEY.encode() in encode_event(e) for e in events)
    started = [e for e in events if isinstance(e, RunStarted)]
    assert started[0].provider_name == "azure.ai.openai"


# -- token providers that fail, hang or give no token -----------------------------------------

TOKEN = "tok-0123456789abcdefghij"
BOUND = 10.0
"""How long a test lets a call run whose deadline is well under a second: a generous margin."""


@pytest.mark.anyio
async def test_a_token_provider_that_hangs_is_cut_off_at_the_deadline() -> None:
    """Three calls at once, each asking a provider that never returns: an async one awaiting for
    ever, and a plain function blocked in its thread. Each call ends at its deadline, naming it,
    and no request is sent."""
    released = threading.Event()

    async def waits_for_ever() -> str:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    def blocks() -> str:
        released.wait(BOUND)
        return TOKEN

    failures: list[BaseException] = []

    async def one(provider: Any, url: str) -> None:
        llm = AzureOpenAIChatClient("dep", base_url=url, ad_token_provider=provider, deadline=0.5)
        try:
            await llm.get_response(USER)
        except DeadlineExceededError as exc:
            failures.append(exc)

    try:
        async with serve(replying(json_answer(200, COMPLETION))) as server:
            with anyio.fail_after(BOUND):
                async with anyio.create_task_group() as group:
                    for provider in (waits_for_ever, blocks, blocks):
                        group.start_soon(one, provider, server.url)
    finally:
        released.set()  # the abandoned threads end too
    assert len(failures) == 3
    assert all("deadline of 0.5 s while getting the credential" in str(f) for f in failures)
    assert server.requests == []


@pytest.mark.anyio
async def test_a_token_provider_that_raises_is_an_authentication_error_without_its_secret() -> None:
    """The provider's failure is a TokenProviderError (an AuthenticationError) naming it, with the
    token it quoted cut out of the run's error, its cause, their traceback and the log; nothing
    is sent."""

    def provider() -> str:
        raise RuntimeError(f"token refresh failed: secret={TOKEN}")

    async with serve(replying(json_answer(200, COMPLETION))) as server:
        llm = AzureOpenAIChatClient("dep", base_url=server.url, ad_token_provider=provider, deadline=5)
        agent: Any = llm.as_agent(name="A", clock=FixedClock(), ids=SequentialIds())
        with capture_events() as events, anyio.fail_after(BOUND), pytest.raises(ModelCallError) as raised:
            await agent.run("Hello?")
    error = raised.value.__cause__
    assert isinstance(error, TokenProviderError)
    assert isinstance(error, AuthenticationError)
    assert error.status_code == 401
    assert "ad_token_provider raised RuntimeError" in str(error)
    shown = "".join(traceback.format_exception(raised.value))
    assert TOKEN not in shown
    assert "RuntimeError" in shown
    assert (error.__cause__, error.__context__) == (None, None)
    (failed,) = [e for e in events if isinstance(e, ModelFailed)]
    assert failed.error_type == "TokenProviderError"
    assert not any(TOKEN.encode() in encode_event(e) for e in events)
    assert server.requests == []


@pytest.mark.anyio
async def test_a_token_the_provider_gave_before_is_cut_out_of_its_later_failure() -> None:
    """A provider that gave a token, then fails quoting it bare (no ``secret=`` to recognise)."""
    given: list[str] = []

    async def provider() -> str:
        if given:
            raise RuntimeError(f"cannot refresh {given[0]}: expired")
        given.append(TOKEN)
        return TOKEN

    async with serve(replying(json_answer(200, COMPLETION))) as server:
        llm = AzureOpenAIChatClient("dep", base_url=server.url, ad_token_provider=provider, deadline=5)
        with anyio.fail_after(BOUND):
            assert (await llm.get_response(USER)).text == "Hi."
            with pytest.raises(TokenProviderError) as raised:
                await llm.get_response(USER)
        await llm.aclose()
    assert TOKEN not in str(raised.value)
    assert "cannot refresh *** expired" in str(raised.value).replace(":", "")
    assert [r.headers["authorization"] for r in server.requests] == [f"Bearer {TOKEN}"]


@pytest.mark.parametrize(
    ("token", "said"),
    [
        (None, "returned NoneType"),
        (42, "returned int"),
        (b"tok-bytes-0123456789", "returned bytes"),
        ("", "returned an empty str"),
        ("   ", "returned an empty str"),
        (f"{TOKEN}\r\nX-Injected: 1", "an HTTP header cannot carry"),
        (f" {TOKEN}", "spaces around it"),
    ],
    ids=["none", "int", "bytes", "empty", "blank", "line-break", "padded"],
)
@pytest.mark.anyio
async def test_a_provider_returning_no_usable_token_is_a_typed_error(token: Any, said: str) -> None:
    """A value that is not a non-empty header-safe str is refused before any request goes out."""
    async with serve(replying(json_answer(200, COMPLETION))) as server:
        llm = AzureOpenAIResponsesClient(
            "dep", base_url=server.url, ad_token_provider=lambda: token, deadline=5
        )
        with anyio.fail_after(BOUND), pytest.raises(TokenProviderError, match=said):
            await llm.get_response(USER)
    assert server.requests == []

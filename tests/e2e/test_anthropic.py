"""AnthropicClient against a real Anthropic-format server: LiteLLM's proxy on loopback, serving
``/v1/messages`` in front of the llama-server of the real-model tests (SmolLM2-135M).

The proxy is the ``litellm`` command of ``pip install 'litellm[proxy]'``: ``$AGENTLEDGER_LITELLM``
(``.ci/run`` installs it in a virtualenv of its own), else one beside this interpreter or on the
PATH. Missing pieces skip the tests with the reason, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentledger import Content, Message
from agentledger.adapters.chat.anthropic import AnthropicClient
from agentledger.clients import merge_updates
from tests._llama import MODEL_NAME, LlamaServer, free_port, llama_server
from tests._servers import describe_exit, startup_failure
from tests.e2e.test_llama_server import EXAMPLES, Weather, assert_tool_round_trip, weather_agent
from tests.e2e.test_llama_server import QUESTION as LLAMA_QUESTION

STARTUP_SECONDS = 180.0
ALIAS = "smollm2"
MASTER_KEY = f"sk-{secrets.token_hex(24)}"  # the proxy refuses to start without one


def _litellm() -> str:
    explicit = os.environ.get("AGENTLEDGER_LITELLM")
    beside = Path(sys.executable).with_name("litellm")
    found = explicit or (str(beside) if beside.is_file() else shutil.which("litellm"))
    if not found:
        reason = "LiteLLM's proxy is not installed (pip install 'litellm[proxy]')"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; under CI=true the end-to-end tests must run")
        pytest.skip(reason)
    return found


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """LiteLLM on 127.0.0.1 routing the model ``smollm2`` to llama-server; yields its base URL."""
    command = _litellm()
    folder = tmp_path_factory.mktemp("litellm")
    with llama_server(folder, ctx_size=2048) as llama:
        yield from _proxy(command, folder, llama)


def _proxy(command: str, folder: Path, llama: LlamaServer) -> Iterator[str]:
    config = folder / "config.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {ALIAS}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL_NAME}\n"
        f"      api_base: {llama.base_url}\n"
        "      api_key: none\n"
    )
    port = free_port()
    log = folder / f"litellm-{port}.log"
    env = {
        **os.environ,
        "LITELLM_MASTER_KEY": MASTER_KEY,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # the packaged price list, not one from the network
        "LITELLM_TELEMETRY": "False",
        "NO_DOCS": "True",
    }
    arguments = [command, "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    with (
        log.open("wb") as sink,
        subprocess.Popen(arguments, stdout=sink, stderr=subprocess.STDOUT, env=env) as process,
    ):
        try:
            _wait_ready(process, port, log)
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_ready(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    with httpx.Client(timeout=5.0) as http:
        while True:
            if process.poll() is not None:
                pytest.fail(startup_failure("litellm", describe_exit(process.returncode), log))
            try:
                if http.get(f"http://127.0.0.1:{port}/health/liveliness").status_code == 200:
                    return
            except httpx.TransportError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                pytest.fail(startup_failure("litellm", f"was not ready within {STARTUP_SECONDS:.0f} s", log))
            time.sleep(0.5)  # a poll interval, not a wait for something to happen


def _client(base_url: str) -> AnthropicClient:
    return AnthropicClient(ALIAS, api_key=MASTER_KEY, base_url=base_url, timeout=120.0)


QUESTION = [Message("user", (Content.from_text("Say hello in one short sentence."),))]


@pytest.mark.anyio
async def test_whole_and_streamed_answers(proxy: str) -> None:
    client = _client(proxy)
    options = {"temperature": 0.0, "max_tokens": 24}
    whole = await client.get_response(QUESTION, options=options)  # type: ignore[arg-type]
    assert whole.text.strip()
    assert whole.finish_reason in ("stop", "length")
    assert whole.usage is not None
    assert whole.usage.input_tokens > 0
    updates = [u async for u in client.get_streaming_response(QUESTION, options=options)]  # type: ignore[arg-type]
    streamed = merge_updates(updates)
    assert streamed.text.strip()
    assert streamed.finish_reason in ("stop", "length")
    await client.aclose()


@pytest.mark.anyio
async def test_a_tool_round_trip(proxy: str) -> None:
    """The llama-server tests' round trip, through the proxy: the call, our tool, the answer."""
    client = _client(proxy)
    weather = Weather()
    agent = weather_agent(client, weather)  # type: ignore[arg-type]
    response = await agent.run([*EXAMPLES, Message("user", LLAMA_QUESTION)])
    assert_tool_round_trip(list(response.events), weather, response.text)
    await client.aclose()

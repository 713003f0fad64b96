"""End to end: Arize Phoenix on loopback receives the protobuf export and serves the spans back.

The server runs as a subprocess (``python -m phoenix.server.main serve``) with its own working
directory and free ports; readiness is its ``/healthz`` endpoint, and the spans are read back
through its REST API (``GET /v1/projects/{project}/spans``). Phoenix ingests in the background,
so reading polls until every span is there, within a bound. Without arize-phoenix the tests
skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import importlib.metadata
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agentledger import FunctionInvocationContext, MemoryEventStore, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.export.otlp import Span, export_otlp, spans_from_events
from agentledger.core.events import Event
from agentledger.demo import run_demo
from agentledger.testing import FixedClock, SequentialIds, capture_events
from tests._servers import describe_exit, startup_failure

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::agentledger.ExperimentalWarning")]

STARTUP_LIMIT = 180.0  # seconds; a cold start imports a large application
INGEST_LIMIT = 60.0
KINDS = {"invoke_agent": "AGENT", "chat": "LLM", "execute_tool": "TOOL"}


def require(package: str) -> None:
    """Skip without the distribution ``package``; under CI=true its absence fails the test instead."""
    try:
        importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{package} is not installed, and CI must run this test")
        pytest.skip(f"{package} is not installed (pip install {package})")


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 right now, all different."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def wait_ready(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    """Poll /healthz until it answers 200; fail if the server exits or the bound passes."""
    deadline = time.monotonic() + STARTUP_LIMIT
    with httpx.Client(timeout=5.0) as client:
        while time.monotonic() < deadline:
            try:
                code = process.wait(timeout=0.25)  # paces the polling and notices an early exit
            except subprocess.TimeoutExpired:
                pass
            else:
                pytest.fail(startup_failure("Phoenix", f"{describe_exit(code)} before it was ready", log))
            try:
                if client.get(f"{url}/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                continue
    pytest.fail(startup_failure("Phoenix", f"was not ready within {STARTUP_LIMIT:.0f} s", log))


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Phoenix server on loopback for this module's tests; yields its base URL."""
    require("arize-phoenix")
    require("opentelemetry-proto")
    workdir = tmp_path_factory.mktemp("phoenix")
    http_port, grpc_port = free_ports(2)
    env = {key: value for key, value in os.environ.items() if not key.startswith("PHOENIX_")}
    env.update(
        PHOENIX_HOST="127.0.0.1",
        PHOENIX_PORT=str(http_port),
        PHOENIX_GRPC_PORT=str(grpc_port),
        PHOENIX_WORKING_DIR=str(workdir),
        PHOENIX_TELEMETRY_ENABLED="false",
    )
    log = workdir / "server.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "phoenix.server.main", "serve"], env=env, stdout=output, stderr=output
        )
        url = f"http://127.0.0.1:{http_port}"
        try:
            wait_ready(process, url, log)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class TaggedIds(SequentialIds):
    """Sequential ids under a tag: span ids derive from run ids, and one server holds all tests."""

    def __init__(self, tag: str) -> None:
        super().__init__()
        self.tag = tag

    def __call__(self, prefix: str) -> str:
        return f"{self.tag}-{super().__call__(prefix)}"


async def read_spans(url: str, project: str, count: int) -> list[dict[str, Any]]:
    """The project's spans once all ``count`` are stored (ingestion runs in the background)."""
    async with httpx.AsyncClient(base_url=url, timeout=10.0) as client:
        try:
            with anyio.fail_after(INGEST_LIMIT):
                while True:
                    response = await client.get(f"/v1/projects/{project}/spans", params={"limit": 1000})
                    if response.status_code == 200 and len(response.json()["data"]) >= count:
                        data: list[dict[str, Any]] = response.json()["data"]
                        return data
                    await anyio.sleep(0.1)  # polling interval
        except TimeoutError:
            pytest.fail(f"Phoenix stored fewer than {count} spans in {project!r}: {response.text[:500]}")


async def export_and_read(url: str, project: str, events: list[Event]) -> tuple[list[Span], dict[str, Any]]:
    """Export ``events`` as protobuf, read them back; ours and Phoenix's spans by span id."""
    expected = spans_from_events(events, provider_name="scripted")
    result = await export_otlp(
        events, url, provider_name="scripted", resource={"openinference.project.name": project}
    )
    assert (result.spans, result.status_code, result.rejected_spans) == (len(expected), 200, 0)
    stored = await read_spans(url, project, len(expected))
    return expected, {span["context"]["span_id"]: span for span in stored}


def assert_same_tree(expected: list[Span], stored: dict[str, Any]) -> None:
    """Phoenix holds exactly our spans: ids, names, parents, trace, kinds."""
    assert len(stored) == len(expected)
    for span in expected:
        got = stored[span.span_id]
        assert got["name"] == span.name
        assert got["parent_id"] == span.parent_span_id
        assert got["context"]["trace_id"] == span.trace_id
        assert got["span_kind"] == KINDS[span.name.split()[0]]


async def test_phoenix_receives_the_demo_run(phoenix: str) -> None:
    """The demo run exported as protobuf shows in Phoenix as the same span tree and attributes."""
    store = MemoryEventStore()
    response, _ = await run_demo(store, TaggedIds("demo"))
    expected, stored = await export_and_read(phoenix, "demo", await store.read(response.run_id))
    assert_same_tree(expected, stored)
    by_name = {span["name"]: span for span in stored.values()}
    agent = by_name["invoke_agent TripPlanner"]["attributes"]
    assert (agent["gen_ai.agent.name"], agent["gen_ai.operation.name"]) == ("TripPlanner", "invoke_agent")
    assert (agent["session.id"], agent["gen_ai.conversation.id"]) == ("demo-session_1", "demo-session_1")
    assert agent["gen_ai.provider.name"] == "scripted"
    chat = by_name["chat scripted-1"]["attributes"]
    assert (chat["llm.model_name"], chat["gen_ai.response.model"]) == ("scripted-1", "scripted-1")
    assert chat["llm.token_count.prompt"] == chat["gen_ai.usage.input_tokens"] > 0
    weather = by_name["execute_tool get_weather"]["attributes"]
    assert (weather["tool.name"], weather["gen_ai.tool.call.id"]) == ("get_weather", "call_1")
    remember = by_name["execute_tool remember_preference"]
    assert [event["name"] for event in remember["events"]] == ["agentledger.session_updated"] * 2
    assert {span["status_code"] for span in stored.values()} == {"UNSET"}


@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


@tool
def explode(ctx: FunctionInvocationContext) -> str:
    """Always fails."""
    raise RuntimeError("boom")


async def test_phoenix_shows_sub_agents_and_failures(phoenix: str) -> None:
    """A sub-agent run nests under its tool call in one trace, and a failed call is an ERROR span."""
    clock, ids = FixedClock(), TaggedIds("nested")
    child = ScriptedChatClient([Call("lookup", {"topic": "tides"}), "Moon."]).as_agent(
        name="Researcher", tools=[lookup], clock=clock, ids=ids
    )
    calls = [Call("research", {"task": "tides"}), Call("explode")]
    lead = ScriptedChatClient([calls, "Done."]).as_agent(
        name="Lead", tools=[child.as_tool(name="research"), explode], clock=clock, ids=ids
    )
    with capture_events() as events:
        await lead.run("Look into tides.")
    expected, stored = await export_and_read(phoenix, "nested", events)
    assert_same_tree(expected, stored)
    by_name = {span["name"]: span for span in stored.values()}
    research = by_name["execute_tool research"]
    assert by_name["invoke_agent Researcher"]["parent_id"] == research["context"]["span_id"]
    assert len({span["context"]["trace_id"] for span in stored.values()}) == 1
    failed = by_name["execute_tool explode"]
    assert (failed["status_code"], failed["status_message"]) == ("ERROR", "RuntimeError")  # no content
    assert failed["attributes"]["error.type"] == "RuntimeError"

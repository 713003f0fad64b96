"""MCP tools end to end against a real MCP server process on loopback.

The server (``tests/e2e/_mcp_server.py``, written with the mcp package's ``MCPServer``) runs as a
subprocess: over stdio, started by ``MCPStdioTool``; over streamable HTTP, started here (uvicorn
on a free port of 127.0.0.1, which the process prints once it listens) and stopped or killed by
the test. Tests marked with both transports run once over each.

Without the mcp package these tests skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import select
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from anyio.abc import SocketAttribute

if importlib.util.find_spec("mcp") is None:
    _REASON = "the mcp package is not installed; the MCP tests need it (pip install 'agentledger[mcp]')"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{_REASON}; under CI=true it must be installed", pytrace=False)
    pytest.skip(_REASON, allow_module_level=True)

from agentledger import (
    Agent,
    FunctionInvocationContext,
    FunctionTool,
    MemoryEventStore,
    Message,
    ReplayDivergence,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.mcp import (
    MCPConnectionError,
    MCPFunctionTool,
    MCPStdioTool,
    MCPStreamableHTTPTool,
    MCPTimeoutError,
    MCPTool,
    MCPToolError,
    MCPUnknownToolError,
)
from agentledger.core.events import (
    ApprovalRequested,
    ArgumentsRejected,
    Event,
    MiddlewareShortCircuit,
    ToolCalled,
    ToolFailed,
    ToolNotFound,
    ToolReturned,
    ToolsAdded,
)
from agentledger.replay import load, rerun
from agentledger.testing import FixedClock, SequentialIds

SERVER = Path(__file__).with_name("_mcp_server.py")
DEADLINE = 60  # seconds any one test may take before it is stopped as hung
TOOLS = ["add", "greet", "text-shout", "pixel", "fail", "transfer", "transfers", "hang"]

pytestmark = pytest.mark.anyio

Connect = Callable[..., MCPTool]


def stdio(**options: Any) -> MCPStdioTool:
    return MCPStdioTool("calculator", sys.executable, args=[str(SERVER), "stdio"], **options)


@contextlib.contextmanager
def _http_process() -> Iterator[tuple[subprocess.Popen[str], int]]:
    """The test server over streamable HTTP: the process and its port, stopped afterwards."""
    command = [sys.executable, str(SERVER), "http"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            ready, _, _ = select.select([process.stdout], [], [], DEADLINE)
            line = process.stdout.readline() if ready else ""
            if not line.strip().isdigit():
                pytest.fail(f"the MCP test server did not start (exit code {process.poll()})")
            yield process, int(line)
        finally:
            process.kill()
            process.wait()


@pytest.fixture(params=["stdio", "http"])
def connect(request: pytest.FixtureRequest) -> Iterator[Connect]:
    """Make an unconnected MCP tool for the test server over the parametrized transport."""
    if request.param == "stdio":
        yield stdio
        return
    with _http_process() as (_, port):
        url = f"http://127.0.0.1:{port}/mcp"
        yield lambda **options: MCPStreamableHTTPTool("calculator", url, **options)


def _agent(client: ScriptedChatClient, tools: Any, **options: Any) -> Agent:
    return Agent(client=client, name="Calc", tools=tools, clock=FixedClock(), ids=SequentialIds(), **options)


def _of(events: list[Event], kind: type[Event]) -> list[Any]:
    return [event for event in events if isinstance(event, kind)]


def _results(client: ScriptedChatClient, request: int) -> list[Any]:
    """What the model was answered, call by call, in the request ``request``."""
    return [content.result for content in client.requests[request].messages[-1].contents]


@contextlib.asynccontextmanager
async def _deadline() -> AsyncIterator[None]:
    with anyio.fail_after(DEADLINE):
        yield


# -- listing ------------------------------------------------------------------------------------


async def test_the_servers_tools_are_listed_with_their_schemas(connect: Connect) -> None:
    """Each listed tool is a FunctionTool offering the server's own schema and description."""
    async with _deadline(), connect() as server:
        assert server.is_connected
        assert [function.name for function in server.functions] == TOOLS
        by_name = {function.name: function for function in server.functions}
        greet = by_name["greet"]
        assert isinstance(greet, MCPFunctionTool)
        assert greet.description == "Greet someone by name."
        assert greet.parameters["properties"]["name"]["minLength"] == 1
        assert greet.parameters["required"] == ["name"]
        assert greet.spec.parameters == greet.parameters  # what the model is offered
        assert by_name["text-shout"].remote_name == "text.shout"
        assert await server.call_tool("text.shout", text="hi") == {"result": "HI"}  # structured first
        assert await server.call_tool("pixel") == [{"type": "image", "data": "AA==", "mimeType": "image/png"}]
        server.tool_result_content = "content_first"
        assert await server.call_tool("add", a=2, b=3) == "5"
        assert await server.call_tool("transfers") == {"result": []}  # no content blocks at all
        server.tool_result_content = "both"
        assert await server.call_tool("add", a=2, b=3) == [{"type": "text", "text": "5"}, {"result": 5}]
    assert not server.is_connected


async def test_prefix_and_allowed_tools_shape_the_list() -> None:
    """tool_name_prefix renames what the model sees; allowed_tools keeps only the named tools."""
    async with _deadline(), stdio(tool_name_prefix="calc", allowed_tools=["add", "calc_greet"]) as server:
        names = [(f.name, f.remote_name) for f in server.functions]
        assert names == [("calc_add", "add"), ("calc_greet", "greet")]
        with pytest.raises(MCPUnknownToolError, match="lists no tool 'nope'"):
            await server.call_tool("nope")


# -- runs ---------------------------------------------------------------------------------------


async def test_an_agent_calls_mcp_tools_through_middleware(connect: Connect) -> None:
    """A run calls the server's tools; each call is recorded and passes function middleware."""
    seen: list[tuple[str, dict[str, Any]]] = []

    async def watch(context: FunctionInvocationContext, call_next: Callable[[], Any]) -> None:
        seen.append((context.function.name, dict(context.arguments)))
        if context.arguments.get("name") == "Mallory":
            context.result = "Not greeting Mallory."  # answered by middleware: the server is not called
            return
        await call_next()

    calls = [Call("add", {"a": 2, "b": 40}), Call("greet", {"name": "Ada"})]
    calls.append(Call("greet", {"name": "Mallory"}))
    client = ScriptedChatClient([calls, Call("text-shout", {"text": "done"}), "42, Ada."])
    async with _deadline(), connect() as server:
        response = await _agent(client, server, middleware=[watch]).run("Add and greet.")
    assert response.text == "42, Ada."
    assert client.requests[0].tools == tuple(TOOLS)
    assert _results(client, 1) == ['{"result":42}', '{"result":"Hello, Ada!"}', "Not greeting Mallory."]
    assert _results(client, 2) == ['{"result":"DONE"}']
    called = _of(response.events, ToolCalled)
    assert [(e.name, e.arguments) for e in called] == [
        ("add", {"a": 2, "b": 40}),
        ("greet", {"name": "Ada"}),
        ("text-shout", {"text": "done"}),
    ]
    returned = {e.name: e.result for e in _of(response.events, ToolReturned)}
    assert returned == {
        "add": {"result": 42},
        "greet": {"result": "Hello, Ada!"},
        "text-shout": {"result": "DONE"},
    }
    assert [e.middleware for e in _of(response.events, MiddlewareShortCircuit)] == ["watch"]
    assert [name for name, _ in seen] == ["add", "greet", "greet", "text-shout"]


async def test_arguments_are_checked_against_the_servers_schema() -> None:
    """Arguments the server's schema refuses are rejected before anything is sent."""
    calls = [Call("add", {"a": "two", "b": 1}), Call("greet", {"name": ""}), Call("add", {"a": 1})]
    client = ScriptedChatClient([calls, "Sorry."])
    async with _deadline(), stdio() as server:
        response = await _agent(client, server, include_detailed_errors=True).run("Compute.")
    rejected = _of(response.events, ArgumentsRejected)
    assert [(e.name, e.reason) for e in rejected] == [
        ("add", "'two' is not of type 'integer' - at $.a"),
        ("greet", "'' should be non-empty - at $.name"),
        ("add", "'b' is a required property"),
    ]
    assert _of(response.events, ToolCalled) == []  # the server never saw them
    reason = "'two' is not of type 'integer' - at $.a"
    assert _results(client, 1)[0] == f"Error: Argument parsing failed. Reason: {reason}"


async def test_a_tool_error_is_a_failed_call() -> None:
    """isError from the server is ToolFailed (MCPToolError, the server's text); the run goes on."""
    client = ScriptedChatClient([[Call("fail", {"reason": "disk full"}), Call("divide")], "It failed."])
    async with _deadline(), stdio() as server:
        response = await _agent(client, server, include_detailed_errors=True).run("Try.")
        with pytest.raises(MCPToolError, match="disk full"):
            await server.call_tool("fail", reason="disk full")
    assert response.text == "It failed."
    [failed] = _of(response.events, ToolFailed)
    assert (failed.name, failed.error_type) == ("fail", "MCPToolError")
    server_text = "Error executing tool fail: disk full"
    assert failed.message == f"tool 'fail' of MCP server 'calculator' failed: {server_text}"
    assert [e.name for e in _of(response.events, ToolNotFound)] == ["divide"]
    assert _results(client, 1) == [
        f"Error: Function failed. Exception: MCPToolError: {failed.message}",
        'Error: Requested function "divide" not found.',
    ]


async def test_an_mcp_tool_can_require_approval() -> None:
    """A gated MCP tool is not called before a human approves; then it runs on the server."""
    client = ScriptedChatClient([Call("transfer", {"amount": 5}), "Sent 5."])
    approval = {"always_require_approval": ["transfer"]}
    async with _deadline(), stdio(approval_mode=approval) as server:
        gated = {f.name: f.approval_mode for f in server.functions}
        assert gated["transfer"] == "always_require"
        assert gated["add"] == "never_require"
        agent = _agent(client, server)
        session = agent.create_session()
        paused = await agent.run("Send 5.", session=session)
        assert paused.finish_reason == "awaiting_approval"
        assert [e.call_ids for e in _of(paused.events, ApprovalRequested)] == [("call_1",)]
        assert await server.call_tool("transfers") == {"result": []}  # not called yet
        answers = [request.to_approval_response(True) for request in paused.user_input_requests]
        resumed = await agent.run(Message("user", answers), session=session)
        assert resumed.text == "Sent 5."
        assert await server.call_tool("transfers") == {"result": [5]}
    assert [e.result for e in _of(resumed.events, ToolReturned)] == [{"result": "transferred 5"}]


def _loader(server: MCPTool) -> FunctionTool:
    """A tool that adds the server's tools to the run."""

    @tool(name="load_calculator")
    def load_calculator(ctx: FunctionInvocationContext) -> str:
        """Load the calculator's tools."""
        ctx.add_tools(server)
        return "Loaded the calculator."

    return load_calculator


@pytest.mark.filterwarnings("ignore::FutureWarning")  # progressive tools are experimental
async def test_mcp_tools_load_progressively() -> None:
    """A loader adds the server's tools with ctx.add_tools; the next model call is offered them."""
    client = ScriptedChatClient([Call("load_calculator"), Call("add", {"a": 1, "b": 1}), "2."])
    async with _deadline(), stdio(allowed_tools=["add", "greet"]) as server:
        agent = _agent(client, [_loader(server)])
        response = await agent.run("1 + 1?")
    assert [request.tools for request in client.requests] == [
        ("load_calculator",),
        ("load_calculator", "add", "greet"),
        ("load_calculator", "add", "greet"),
    ]
    [added] = _of(response.events, ToolsAdded)
    assert [spec.name for spec in added.tools] == ["add", "greet"]
    assert _results(client, 2) == ['{"result":2}']


# -- replay -------------------------------------------------------------------------------------


async def test_a_recorded_run_replays_with_the_server_stopped(connect: Connect) -> None:
    """rerun answers the MCP calls from the log: with the server gone, the run replays exactly;
    live tools against the stopped server fail, so the rerun diverges."""
    calls = [Call("add", {"a": 1, "b": 2}), Call("fail", {"reason": "no"}), Call("add", {"a": "x", "b": 1})]
    client = ScriptedChatClient([calls, Call("greet", {"name": "Ada"}), "Done."])
    store = MemoryEventStore()
    async with _deadline():
        async with connect() as server:
            agent = _agent(client, server, store=store)
            response = await agent.run("Go.")
        assert not server.is_connected
        recorded = await load(store, response.run_id)
        assert await rerun(recorded, agent) is not None

        # A new process would have no listing: the tools come back from the recorded specs.
        offline = connect()
        assert [f.name for f in offline.restore_tools(recorded.started.tools)] == TOOLS
        assert not offline.is_connected
        again = _agent(ScriptedChatClient([]), offline)
        replayed = await rerun(recorded, again)
        assert replayed is not None
        assert replayed.text == "Done."

        with pytest.raises(ReplayDivergence) as diverged:
            await rerun(recorded, agent, tools="live")
    assert "MCPConnectionError" in diverged.value.diff


@pytest.mark.filterwarnings("ignore::FutureWarning")
async def test_a_progressively_loaded_run_replays_with_the_server_stopped() -> None:
    """Tools added during the run are stood in from the log, refusing again the arguments the
    server's schema refused: no server needed."""
    script: list[Call | str] = [Call("load_calculator"), Call("greet", {"name": ""})]
    script += [Call("greet", {"name": "Ada"}), "Hi."]
    client = ScriptedChatClient(script)
    store = MemoryEventStore()
    async with _deadline():
        async with stdio() as server:
            agent = _agent(client, [_loader(server)], store=store)
            response = await agent.run("Greet Ada.")
        recorded = await load(store, response.run_id)
        assert [e.name for e in _of(recorded.events, ArgumentsRejected)] == ["greet"]
        replayed = await rerun(recorded, _agent(ScriptedChatClient([]), [_loader(stdio())]))
    assert replayed is not None
    assert replayed.text == "Hi."


# -- failures -----------------------------------------------------------------------------------


async def _kill_when_called(listener: Any) -> None:
    """Wait for ``hang`` to report its server's process id, then kill that process."""
    async with await listener.listeners[0].accept() as stream:
        pid = int((await stream.receive()).decode().strip())
    os.kill(pid, signal.SIGKILL)


async def test_a_server_killed_mid_call_is_a_failed_call(connect: Connect) -> None:
    """The server dies during a call: the call fails (MCPConnectionError), later calls too, the
    run ends normally and leaving the server's block raises nothing."""
    async with _deadline(), await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(SocketAttribute.local_port)
        client = ScriptedChatClient([Call("hang", {"port": port}), Call("add", {"a": 1, "b": 1}), "Lost it."])
        async with connect() as server, anyio.create_task_group() as group:
            group.start_soon(_kill_when_called, listener)
            response = await _agent(client, server, include_detailed_errors=True).run("Wait.")
    assert response.text == "Lost it."
    failed = _of(response.events, ToolFailed)
    assert [(e.name, e.error_type) for e in failed] == [
        ("hang", "MCPConnectionError"),
        ("add", "MCPConnectionError"),
    ]
    assert "closed the connection" in failed[0].message


async def test_a_call_past_request_timeout_is_a_failed_call() -> None:
    """A call that gets no answer within request_timeout fails with MCPTimeoutError."""
    async with _deadline(), await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(SocketAttribute.local_port)
        client = ScriptedChatClient([Call("hang", {"port": port}), "Too slow."])
        async with stdio() as server:
            server.request_timeout = 0.5  # the call never returns: it always runs out
            response = await _agent(client, server).run("Wait.")
    [failed] = _of(response.events, ToolFailed)
    assert failed.error_type == "MCPTimeoutError"
    assert failed.message == "MCP server 'calculator' timed out calling tool 'hang'"
    assert issubclass(MCPTimeoutError, TimeoutError)


async def test_connection_failures_are_typed() -> None:
    """No such command, a process that is no MCP server, nothing listening: MCPConnectionError."""
    missing = MCPStdioTool("missing", str(SERVER.with_name("no-such-server")))
    not_mcp = MCPStdioTool("silent", sys.executable, args=["-c", "pass"])
    with anyio.fail_after(DEADLINE), _http_process() as (process, port):
        process.kill()
        process.wait()
        nobody = MCPStreamableHTTPTool("nobody", f"http://127.0.0.1:{port}/mcp")
        for server in (missing, not_mcp, nobody):
            with pytest.raises(MCPConnectionError) as caught:
                await server.connect()
            assert caught.value.server == server.name
            assert not server.is_connected
    with pytest.raises(MCPConnectionError, match="connect first"):
        Agent(client=ScriptedChatClient([]), tools=missing)
    with pytest.raises(MCPConnectionError, match="is not connected"):
        await missing.call_tool("add", a=1, b=2)


def test_every_public_name_is_documented() -> None:
    """docs/api.md names everything agentledger.adapters.mcp exports."""
    import agentledger.adapters.mcp as module

    text = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
    assert [name for name in module.__all__ if f"`{name}" not in text and f"class {name}" not in text] == []


async def test_two_servers_without_a_prefix_restore_only_their_own_tools() -> None:
    """Each recorded spec names its server, so two servers restore their own tools, not each
    other's (without a prefix, names alone cannot tell them apart)."""
    client = ScriptedChatClient([Call("add", {"a": 1, "b": 2}), "Done."])
    store = MemoryEventStore()
    async with _deadline(), stdio() as server:
        agent = _agent(client, server, store=store)
        response = await agent.run("Go.")
    recorded = await load(store, response.run_id)
    assert {spec.origin for spec in recorded.started.tools} == {"mcp:calculator"}
    other_spec = msgspec.structs.replace(recorded.started.tools[0], name="translate", origin="mcp:translator")
    specs = [*recorded.started.tools, other_spec]
    calculator = stdio()
    translator = MCPStdioTool("translator", sys.executable, args=[str(SERVER), "stdio"])
    assert [f.name for f in calculator.restore_tools(specs)] == TOOLS
    assert [f.name for f in translator.restore_tools(specs)] == ["translate"]
    replayed = await rerun(recorded, _agent(ScriptedChatClient([]), calculator))
    assert replayed is not None
    assert replayed.text == "Done."

"""An MCP server connection whose tools are agentledger tools: lifecycle, listing, calls.

The connection (an ``mcp.Client`` over the transport a subclass makes) lives in a task of its
own, started by ``connect`` in a task group that ``close`` ends. A transport that breaks (the
server process dies, the HTTP server goes away) ends that task, never the caller's: calls in
flight and later calls raise ``MCPConnectionError``, which a run records as a failed call.
``connect`` and ``close`` belong in the same task, which ``async with server:`` gives for free.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypedDict

import anyio
import anyio.abc
import mcp
from mcp import types

from agentledger.core.events import ALWAYS_REQUIRE, APPROVAL_MODES, NEVER_REQUIRE, ToolSpec
from agentledger.errors import ToolDefinitionError
from agentledger.tools import ApprovalMode, FunctionTool

from ._errors import MCPConnectionError, MCPServerError, MCPUnknownToolError, translate
from ._function import MCPFunctionTool, mcp_origin
from ._results import RESULT_MODES, ResultMode, exposed_name, result_value

if TYPE_CHECKING:
    from typing import Self

__all__ = ("MCPSpecificApproval", "MCPTool")


class MCPSpecificApproval(TypedDict, total=False):
    """Approval per tool: the names (as the server lists them, or as the model sees them) that
    always need a human's approval, and those that never do. A name in neither list never
    does; a name in both always does."""

    always_require_approval: Collection[str]
    never_require_approval: Collection[str]


class MCPTool:
    """A connection to an MCP server; its tools become ``MCPFunctionTool`` objects.

    Use a subclass: ``MCPStdioTool`` (a local process over stdio) or ``MCPStreamableHTTPTool``
    (a server over streamable HTTP). ``async with server:`` connects and lists the tools
    (``server.functions``); leaving it closes the connection. ``Agent(tools=server)``,
    ``agent.run(..., tools=server)`` and ``ctx.add_tools(server)`` take the listed tools.
    """

    def __init__(
        self,
        name: str,
        description: str | None = None,
        approval_mode: ApprovalMode | MCPSpecificApproval | None = None,
        allowed_tools: Collection[str] | None = None,
        tool_name_prefix: str | None = None,
        load_tools: bool = True,
        parse_tool_results: Callable[[types.CallToolResult], Any] | None = None,
        load_prompts: bool = True,
        request_timeout: float | None = None,
        tool_result_content: ResultMode = "structured_first",
    ) -> None:
        if tool_result_content not in RESULT_MODES:
            raise ValueError(
                f"MCP server {name!r}: tool_result_content must be one of {', '.join(RESULT_MODES)}, "
                f"not {tool_result_content!r}"
            )
        if isinstance(approval_mode, str) and approval_mode not in APPROVAL_MODES:
            raise ToolDefinitionError(
                f"MCP server {name!r}: approval_mode must be 'always_require', 'never_require' or a "
                f"dict of tool names, not {approval_mode!r}"
            )
        if request_timeout is not None and request_timeout <= 0:
            raise ValueError(
                f"MCP server {name!r}: request_timeout must be positive, not {request_timeout!r}"
            )
        self.name = name
        self.description = description or ""
        self.approval_mode = approval_mode
        self.allowed_tools = allowed_tools
        self.tool_name_prefix = tool_name_prefix
        self.load_tools_flag = load_tools
        self.parse_tool_results = parse_tool_results
        self.load_prompts_flag = load_prompts  # prompts are not loaded: accepted for ported code
        self.request_timeout = request_timeout
        self.tool_result_content: ResultMode = tool_result_content
        self._functions: list[MCPFunctionTool] = []
        self._listed: set[str] | None = None  # the server's own tool names, once listed
        self._client: mcp.Client | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._closing = anyio.Event()
        self._lost: str | None = None

    # -- the transport (subclasses) -----------------------------------------------------------

    def get_mcp_client(self) -> Any:
        """The ``mcp`` transport to connect through: an async context manager of streams."""
        raise NotImplementedError(f"{type(self).__name__} does not say how to reach its server")

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        return self._client is not None

    async def connect(self, *, reset: bool = False) -> None:
        """Connect (within ``request_timeout``, if set) and, with ``load_tools``, list the tools.

        Raises ``MCPConnectionError`` when the server cannot be reached or does not complete the
        handshake, ``MCPTimeoutError`` when it takes longer than ``request_timeout``.
        """
        if self._stack is not None:
            if not reset:
                return
            await self.close()
        stack = contextlib.AsyncExitStack()
        group = await stack.enter_async_context(anyio.create_task_group())
        self._closing, self._lost = anyio.Event(), None
        try:
            with anyio.fail_after(self.request_timeout):
                await group.start(self._hold)
        except BaseException as exc:
            self._closing.set()
            await stack.aclose()
            if isinstance(exc, Exception):
                raise translate(exc, self.name, "connecting") from exc
            raise
        self._stack = stack
        if self.load_tools_flag:
            try:
                await self.load_tools()
            except BaseException:
                await self.close()
                raise

    async def _hold(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The connection's own task: open the client, hand it over, keep it until ``close``."""
        started = False
        try:
            async with mcp.Client(self.get_mcp_client(), read_timeout_seconds=self.request_timeout) as client:
                self._client, started = client, True
                task_status.started()
                await self._closing.wait()
        except Exception as exc:
            if not started:
                raise
            self._lost = str(translate(exc, self.name, "holding the connection"))  # the server went away
        finally:
            self._client = None
        if started and not self._closing.is_set() and self._lost is None:
            self._lost = f"MCP server {self.name!r} closed the connection"

    async def close(self) -> None:
        """Close the connection (a stdio server's process ends). Closing twice is harmless."""
        stack, self._stack = self._stack, None
        self._closing.set()
        if stack is not None:
            await stack.aclose()

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- tools ----------------------------------------------------------------------------------

    @property
    def functions(self) -> list[MCPFunctionTool]:
        """The server's tools as last listed (or restored), after ``allowed_tools``."""
        return list(self._functions)

    def as_function_tools(self) -> list[FunctionTool]:
        """The tools ``tools=`` and ``ctx.add_tools`` take for this server: its ``functions``."""
        if not self._functions and self._listed is None:
            raise MCPConnectionError(
                f"MCP server {self.name!r} has no tools yet: connect first (async with server: ...), "
                "or restore_tools(...) from a recorded run",
                server=self.name,
            )
        return list(self._functions)

    async def load_tools(self) -> None:
        """List the server's tools (every page) and make ``functions`` from them. A tool listed
        unchanged keeps its object, so adding it to a run again is a no-op."""
        client = self._connected("listing tools")
        listed: list[types.Tool] = []
        cursor: str | None = None
        try:
            while True:
                page = await client.list_tools(cursor=cursor)
                listed.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
        except Exception as exc:
            raise translate(exc, self.name, "listing tools") from exc
        self._listed = {tool.name for tool in listed}
        self._functions = self._build(
            (tool.name, tool.description or tool.title or "", tool.input_schema) for tool in listed
        )

    def restore_tools(self, specs: Iterable[ToolSpec]) -> list[MCPFunctionTool]:
        """Make ``functions`` from recorded tool specs, without connecting: for a rerun of a
        recorded run with the server stopped (``recorded.started.tools``). Only this server's
        specs are taken: those whose ``origin`` names it (``"mcp:<name>"``); in logs that
        record no origin, with a ``tool_name_prefix``, the names that carry it. With
        ``allowed_tools``, only the names it allows. Calls still need a connection."""
        prefix = exposed_name("", self.tool_name_prefix) if self.tool_name_prefix else ""
        own = mcp_origin(self.name)

        def mine(spec: ToolSpec) -> bool:
            if spec.origin:
                return spec.origin == own
            return not prefix or spec.name.startswith(prefix)

        entries = [
            (
                spec.name[len(prefix) :] if prefix and spec.name.startswith(prefix) else spec.name,
                spec.description,
                spec.parameters,
            )
            for spec in specs
            if mine(spec)
        ]
        self._functions = self._build(entries)
        return self.functions

    def _build(self, entries: Iterable[tuple[str, str, dict[str, Any]]]) -> list[MCPFunctionTool]:
        known = {function.remote_name: function for function in self._functions}
        built: list[MCPFunctionTool] = []
        names: set[str] = set()
        for remote, description, schema in entries:
            name = exposed_name(remote, self.tool_name_prefix)
            if self.allowed_tools is not None and not {remote, name} & set(self.allowed_tools):
                continue
            if name in names:
                raise MCPServerError(
                    f"MCP server {self.name!r} lists two tools named {name!r} once made valid tool names",
                    server=self.name,
                )
            names.add(name)
            approval = self._approval(remote, name)
            kept = known.get(remote)
            if kept is not None and kept.same_as(description, schema, approval):
                built.append(kept)
                continue
            built.append(
                MCPFunctionTool(
                    self,
                    name=name,
                    remote_name=remote,
                    description=description,
                    input_schema=schema,
                    approval_mode=approval,
                )
            )
        return built

    def _approval(self, remote: str, name: str) -> ApprovalMode:
        mode = self.approval_mode
        if mode is None or isinstance(mode, str):
            return mode or NEVER_REQUIRE
        if {remote, name} & set(mode.get("always_require_approval") or ()):
            return ALWAYS_REQUIRE
        return NEVER_REQUIRE

    # -- calls ----------------------------------------------------------------------------------

    async def call_tool(self, tool_name: str, **kwargs: Any) -> Any:
        """Call the server's tool ``tool_name`` (its own name) with ``kwargs`` as arguments.

        Returns the result as an agentledger tool returns it: the structured content, the text
        or the content blocks, as ``tool_result_content`` says; ``parse_tool_results`` replaces
        that mapping. Raises ``MCPToolError``
        when the tool reports an error, ``MCPUnknownToolError`` for a name the server does not
        list, ``MCPTimeoutError`` past ``request_timeout``, ``MCPConnectionError`` when not
        connected or when the connection is lost during the call.
        """
        client = self._connected(f"calling tool {tool_name!r}")
        if self._listed is not None and tool_name not in self._listed:
            raise MCPUnknownToolError(
                f"MCP server {self.name!r} lists no tool {tool_name!r}", server=self.name
            )
        try:
            result = await client.call_tool(tool_name, kwargs, read_timeout_seconds=self.request_timeout)
        except Exception as exc:
            raise translate(exc, self.name, f"calling tool {tool_name!r}") from exc
        if self.parse_tool_results is not None and not result.is_error:
            return self.parse_tool_results(result)
        return result_value(result, self.name, tool_name, self.tool_result_content)

    def _connected(self, doing: str) -> mcp.Client:
        client = self._client
        if client is None:
            reason = self._lost or f"MCP server {self.name!r} is not connected"
            raise MCPConnectionError(f"{reason} ({doing})", server=self.name)
        return client

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

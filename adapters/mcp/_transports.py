"""The two ways to reach an MCP server: a local process over stdio, a server over streamable HTTP."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import httpx2
from mcp import StdioServerParameters, stdio_client, types
from mcp.client.streamable_http import streamable_http_client

from agentledger.tools import ApprovalMode

from ._results import ResultMode
from ._server import MCPSpecificApproval, MCPTool

__all__ = ("MCPStdioTool", "MCPStreamableHTTPTool")


class MCPStdioTool(MCPTool):
    """An MCP server run as a local process (``command`` with ``args``), spoken to over its
    stdin and stdout. Connecting starts the process; closing ends it. ``env`` is added to a
    minimal default environment (the mcp package's), not to this process's whole environment."""

    def __init__(
        self,
        name: str,
        command: str,
        *,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        encoding: str | None = None,
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
        super().__init__(
            name,
            description=description,
            approval_mode=approval_mode,
            allowed_tools=allowed_tools,
            tool_name_prefix=tool_name_prefix,
            load_tools=load_tools,
            parse_tool_results=parse_tool_results,
            load_prompts=load_prompts,
            request_timeout=request_timeout,
            tool_result_content=tool_result_content,
        )
        self.command = command
        self.args = list(args or [])
        self.env = env
        self.cwd = cwd
        self.encoding = encoding or "utf-8"

    def get_mcp_client(self) -> Any:
        parameters = StdioServerParameters(
            command=self.command, args=self.args, env=self.env, cwd=self.cwd, encoding=self.encoding
        )
        return stdio_client(parameters)


class MCPStreamableHTTPTool(MCPTool):
    """An MCP server at ``url``, spoken to over streamable HTTP. ``static_headers`` go with every
    request (an ``Authorization`` header, say); ``http_client`` (an ``httpx2.AsyncClient``, the
    HTTP library of the mcp package) replaces the default client and is not closed here."""

    def __init__(
        self,
        name: str,
        url: str,
        *,
        static_headers: Mapping[str, str] | None = None,
        http_client: httpx2.AsyncClient | None = None,
        terminate_on_close: bool = True,
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
        if static_headers is not None and http_client is not None:
            raise ValueError(f"MCP server {name!r}: give static_headers or http_client, not both")
        super().__init__(
            name,
            description=description,
            approval_mode=approval_mode,
            allowed_tools=allowed_tools,
            tool_name_prefix=tool_name_prefix,
            load_tools=load_tools,
            parse_tool_results=parse_tool_results,
            load_prompts=load_prompts,
            request_timeout=request_timeout,
            tool_result_content=tool_result_content,
        )
        self.url = url
        self.static_headers = dict(static_headers or {})
        self.http_client = http_client
        self.terminate_on_close = terminate_on_close

    def get_mcp_client(self) -> Any:
        client = self.http_client
        if client is None and self.static_headers:
            # The mcp package's own defaults: a long read timeout for the server's event stream.
            timeout = httpx2.Timeout(30.0, read=300.0)
            client = httpx2.AsyncClient(headers=self.static_headers, timeout=timeout)
            return _owning(client, self.url, self.terminate_on_close)
        return streamable_http_client(
            self.url, http_client=client, terminate_on_close=self.terminate_on_close
        )


def _owning(client: httpx2.AsyncClient, url: str, terminate_on_close: bool) -> Any:
    """The transport over ``client``, closing the client when the transport closes."""
    import contextlib

    @contextlib.asynccontextmanager
    async def transport() -> Any:
        async with (
            client,
            streamable_http_client(url, http_client=client, terminate_on_close=terminate_on_close) as streams,
        ):
            yield streams

    return transport()

"""MCP servers' tools as agentledger tools, with the official ``mcp`` package
(``pip install 'agentledger[mcp]'``).

``MCPStdioTool`` starts a server as a local process and speaks to it over stdio;
``MCPStreamableHTTPTool`` speaks streamable HTTP to a server at a URL. Both are async context
managers: ``async with MCPStdioTool(name="files", command=...) as server:`` connects and lists
the tools, which ``server.functions`` holds as ``MCPFunctionTool`` objects, and which
``Agent(tools=server)``, ``agent.run(..., tools=server)`` and ``ctx.add_tools(server)`` take.

Each MCP tool is a ``FunctionTool``: the model is offered the server's input schema, arguments
are checked against it before they are sent, approvals and function middleware apply, and each
call is recorded (``ToolCalled``, then ``ToolReturned`` or ``ToolFailed``). A rerun of a recorded
run answers the calls from the log and needs no server (see docs/mcp.md).
"""

from __future__ import annotations

try:
    import mcp as _mcp  # noqa: F401
except ModuleNotFoundError as exc:  # pragma: no cover - the extra is installed in the tests
    if exc.name != "mcp":
        raise
    raise ModuleNotFoundError(
        "agentledger.adapters.mcp needs the mcp package: pip install 'agentledger[mcp]'"
    ) from exc

from ._errors import MCPConnectionError, MCPServerError, MCPTimeoutError, MCPToolError, MCPUnknownToolError
from ._function import MCPFunctionTool
from ._server import MCPSpecificApproval, MCPTool
from ._transports import MCPStdioTool, MCPStreamableHTTPTool

__all__ = (
    "MCPConnectionError",
    "MCPFunctionTool",
    "MCPServerError",
    "MCPSpecificApproval",
    "MCPStdioTool",
    "MCPStreamableHTTPTool",
    "MCPTimeoutError",
    "MCPTool",
    "MCPToolError",
    "MCPUnknownToolError",
)

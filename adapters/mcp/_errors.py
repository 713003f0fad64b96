"""The errors of MCP servers, and the translation of what the ``mcp`` package raises into them.

::

    AgentLedgerError
    └── MCPServerError                          something went wrong with an MCP server
        ├── MCPConnectionError (ConnectionError)  cannot connect, not connected, or the
        │                                         connection was lost (the server died)
        ├── MCPTimeoutError (TimeoutError)      no answer within ``request_timeout``
        ├── MCPToolError                        the server ran the tool and reported an error
        └── MCPUnknownToolError (LookupError)   the server lists no tool by that name

A tool call that fails in any of these ways is a failed call (``ToolFailed``, with the error's
class name and message), like any tool that raises: the run goes on.
"""

from __future__ import annotations

from agentledger.errors import AgentLedgerError

__all__ = (
    "MCPConnectionError",
    "MCPServerError",
    "MCPTimeoutError",
    "MCPToolError",
    "MCPUnknownToolError",
    "translate",
)

# JSON-RPC error codes the mcp package uses for a lost connection and a request timeout.
_CONNECTION_CLOSED = -32000
_REQUEST_TIMEOUT = -32001


class MCPServerError(AgentLedgerError):
    """Something went wrong with an MCP server: ``server`` names it (its ``name=``)."""

    def __init__(self, message: str, *, server: str = "") -> None:
        super().__init__(message)
        self.server = server


class MCPConnectionError(MCPServerError, ConnectionError):
    """The server could not be reached, is not connected, or the connection was lost."""


class MCPTimeoutError(MCPServerError, TimeoutError):
    """The server did not answer within ``request_timeout``."""


class MCPToolError(MCPServerError):
    """The server ran the tool and reported an error (a result with ``isError``, or a JSON-RPC
    error answering the call); the message is the server's text."""


class MCPUnknownToolError(MCPServerError, LookupError):
    """The server lists no tool by that name."""


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (possibly nested) exception groups, or ``exc`` itself."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def translate(exc: Exception, server: str, doing: str) -> MCPServerError:
    """What the ``mcp`` package (or the transport under it) raised, as an ``MCPServerError``.

    ``doing`` says what was attempted ("calling tool 'add'", "connecting"), for the message.
    """
    if isinstance(exc, MCPServerError):
        return exc
    from mcp import MCPError

    leaves = _leaves(exc)
    first = leaves[0]
    if isinstance(first, MCPError):
        if first.code == _REQUEST_TIMEOUT:
            return MCPTimeoutError(f"MCP server {server!r} timed out {doing}", server=server)
        if first.code == _CONNECTION_CLOSED:
            return MCPConnectionError(
                f"MCP server {server!r} closed the connection while {doing}", server=server
            )
        return MCPToolError(
            f"MCP server {server!r} answered an error while {doing}: {first.message}", server=server
        )
    if isinstance(first, TimeoutError):
        return MCPTimeoutError(f"MCP server {server!r} timed out {doing}", server=server)
    detail = "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in leaves)
    return MCPConnectionError(f"MCP server {server!r} failed while {doing}: {detail}", server=server)

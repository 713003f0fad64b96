"""An MCP server for the MCP tests, written with the mcp package's server API (``MCPServer``).

``python _mcp_server.py stdio`` serves over stdin/stdout. ``python _mcp_server.py http``
binds a free port on 127.0.0.1, listens, prints the port on one line and serves streamable HTTP
(path ``/mcp``) with uvicorn on that socket: the port is printed only once connections queue, so
the reader may connect at once.

Its tools: arithmetic and a greeting (results), ``fail`` (a tool error with the given text),
``transfer``/``transfers`` (a side effect the server keeps, to see whether a call ran), and
``hang``, which connects to the test's loopback port, sends its process id and never returns:
the test then knows the call is in progress and may kill the server.
"""

from __future__ import annotations

import socket
import sys
import threading
from typing import Annotated

from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

server = MCPServer("calculator", log_level="WARNING")
_transfers: list[int] = []


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def greet(name: Annotated[str, Field(min_length=1, description="Who to greet.")]) -> str:
    """Greet someone by name."""
    return f"Hello, {name}!"


@server.tool(name="text.shout")
def shout(text: str) -> str:
    """Upper-case a text (a name with a dot, which agentledger tool names cannot hold)."""
    return text.upper()


@server.tool()
def pixel() -> Image:
    """A one-byte "image" (a content block that is not text)."""
    return Image(data=b"\x00", format="png")


@server.tool()
def fail(reason: str) -> str:
    """Always fails, with the reason given."""
    raise ToolError(reason)


@server.tool()
def transfer(amount: int) -> str:
    """Move money (the server remembers each transfer)."""
    _transfers.append(amount)
    return f"transferred {amount}"


@server.tool()
def transfers() -> list[int]:
    """The transfers made so far."""
    return list(_transfers)


@server.tool()
def hang(port: int) -> str:
    """Tell the test on ``port`` this process's id, then never return."""
    import os

    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(str(os.getpid()).encode() + b"\n")
        threading.Event().wait()
    return "unreachable"


def _serve_http() -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(sock.getsockname()[1], flush=True)
    app = server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    if sys.argv[1:] == ["http"]:
        _serve_http()
    else:
        server.run()

"""``agentledger serve``: a local web UI over an event store (the ``serve`` extra: Starlette and
uvicorn).

``create_app`` builds the ASGI app; ``serve`` runs it with uvicorn until interrupted. See
docs/serve.md.
"""

from __future__ import annotations

import secrets
import socket
from collections.abc import Callable

from agentledger.store import EventStore

from ._app import AgentFor, create_app
from ._guard import host_is_loopback

__all__ = ("AgentFor", "create_app", "host_is_loopback", "new_token", "serve")


def new_token() -> str:
    """A fresh write token: 32 random bytes, URL-safe."""
    return secrets.token_urlsafe(32)


def serve(
    store: EventStore,
    *,
    host: str = "127.0.0.1",
    port: int = 8321,
    token: str,
    agent_for: AgentFor | None = None,
    on_ready: Callable[[str], None] = print,
    poll_interval: float = 1.0,
) -> None:
    """Serve the UI over ``store`` on ``host:port`` until interrupted; ``on_ready`` is given the
    address to open (with the token in its fragment) once the socket listens."""
    import uvicorn

    app = create_app(
        store,
        token=token,
        agent_for=agent_for,
        bound_to_loopback=host_is_loopback(host),
        poll_interval=poll_interval,
    )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)  # connections made once the address is printed wait for uvicorn to take them
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False))
    on_ready(f"http://{shown}:{bound}/#token={token}")
    server.run(sockets=[sock])

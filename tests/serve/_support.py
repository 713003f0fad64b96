"""What the serve tests share: a store to serve, a server on a free port, the bank agent.

``running`` serves an app with uvicorn in a thread of its own (its own event loop), on a socket
bound to port 0, and stops it on exit; waits are bounded polls, never fixed sleeps. The tests
write to the store through another connection, as another process would.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec

from agentledger import Agent, AgentSession
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.adapters.serve import AgentFor, create_app
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.core.events import Event
from tests import cli_agents
from tests._browser import wait_until

__all__ = ("TOKEN", "Served", "append_logs", "bank_for", "pause", "read", "record", "running")

TOKEN = "test-token-0123456789abcdefghijklmnopqrstuv"


class Served(msgspec.Struct, kw_only=True):
    url: str
    port: int


def record(
    path: Path, script: Sequence[ScriptEntry], prompts: Sequence[str], *, name: str = "bank"
) -> list[str]:
    """Runs of the bank agent (each in a session of its own), answered by ``script``; their ids."""

    async def go() -> list[str]:
        store = SqliteEventStore(path)
        agent = cli_agents.bank_agent()
        agent.name = name
        agent.client = ScriptedChatClient(list(script))
        agent.store = store
        ids = [
            (await agent.run(p, session=AgentSession(f"s-{i}-{p[:8]}"))).run_id for i, p in enumerate(prompts)
        ]
        await store.aclose()
        return ids

    return anyio.run(go)


def pause(path: Path, amount: int = 5) -> str:
    """A run of the bank agent paused on one ``wire`` call; its id."""
    [run] = record(path, [Call("wire", {"amount": amount})], [f"Send {amount}."])
    return run


def read(path: Path, run_id: str) -> list[Event]:
    async def go() -> list[Event]:
        store = SqliteEventStore(path, read_only=True)
        try:
            return await store.read(run_id)
        finally:
            await store.aclose()

    return anyio.run(go)


def append_logs(path: Path, logs: dict[str, list[Event]]) -> None:
    """Store recorded logs as they are, one stream per run."""

    async def go() -> None:
        store = SqliteEventStore(path)
        for stream, events in logs.items():
            await store.append(stream, events, expected_version=0)
        await store.aclose()

    anyio.run(go)


def bank_for(path: Path) -> AgentFor:
    """Builds the bank agent for a decision (its ``wire`` adds to ``cli_agents.WIRED``)."""

    async def build(run_id: str) -> Agent:
        return cli_agents.bank_agent()

    return build


@contextmanager
def running(
    path: Path, *, agent_for: AgentFor | None = None, host: str = "127.0.0.1", poll: float = 0.05
) -> Iterator[Served]:
    """The UI over the SQLite store at ``path``, served until the block ends."""
    import uvicorn

    holder: dict[str, Any] = {}
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((host, 0))
    port = sock.getsockname()[1]

    def serve() -> None:
        store = SqliteEventStore(path, read_only=agent_for is None)
        app = create_app(
            store, token=TOKEN, agent_for=agent_for, bound_to_loopback=host == "127.0.0.1", poll_interval=poll
        )
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        holder["server"] = server
        try:
            server.run(sockets=[sock])
        finally:
            anyio.run(store.aclose)

    thread = threading.Thread(target=serve, name="serve", daemon=True)
    thread.start()
    wait_until(lambda: "server" in holder and holder["server"].started, "the server to start")
    try:
        yield Served(url=f"http://127.0.0.1:{port}", port=port)
    finally:
        holder["server"].should_exit = True
        thread.join(timeout=30)
        sock.close()

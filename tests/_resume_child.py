"""A process that resumes paused batches from a shared store, for tests/run/test_claims.py.

Run as ``python -m tests._resume_child KIND LOCATION LEDGER`` (``KIND`` is ``sqlite`` with a file
path, or ``postgres`` with ``DSN|SCHEMA``). It talks through its standard streams, never through
timing. For each line ``resume SESSION`` it rebuilds the session from the store, prints
``ready``, waits for the line ``go``, resumes the session's paused batch with an approval and
prints ``ran`` or ``refused ERROR_TYPE``. The tool appends one line to the file ``LEDGER`` each
time it runs, so the test counts executions across processes. ``quit`` ends it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio

from agentledger import Agent, AgentSession, ApprovalError, Content, Message, tool
from agentledger.adapters.chat.scripted import ScriptedChatClient
from agentledger.core.events import Event
from agentledger.listing import RunQuery
from agentledger.store import EventStore, SupportsAclose, list_runs

__all__ = ("bank_agent", "open_store", "session_of")


def open_store(kind: str, location: str) -> EventStore:
    if kind == "sqlite":
        from agentledger.adapters.stores.sqlite import SqliteEventStore

        return SqliteEventStore(location)
    from agentledger.adapters.stores.postgres import PostgresEventStore

    dsn, schema = location.split("|")
    return PostgresEventStore(dsn, schema=schema)


def bank_agent(store: EventStore, ledger: Path, client: Any) -> Agent:
    @tool(approval_mode="always_require")
    def wire(amount: int, note: str) -> str:
        """Send money."""
        with ledger.open("a", encoding="utf-8") as out:
            out.write(f"{note}\n")
        return f"sent {amount}"

    return Agent(client=client, tools=[wire], store=store, name="bank")


async def session_of(store: EventStore, session_id: str) -> AgentSession:
    """The session as its runs in ``store`` left it."""
    runs = await list_runs(store, RunQuery(session=session_id, limit=None))
    events: list[Event] = []
    for run in reversed(runs):  # oldest first
        events.extend(await store.read(run.run_id))
    return AgentSession.from_events(events, session_id)


async def main(kind: str, location: str, ledger: str) -> None:
    store = open_store(kind, location)
    agent = bank_agent(store, Path(ledger), ScriptedChatClient(["Sent."], repeat=True))
    try:
        while True:
            line = (await anyio.to_thread.run_sync(sys.stdin.readline)).split()
            if not line or line[0] == "quit":
                return
            session = await session_of(store, line[1])
            answers = tuple(Content.from_approval_response(c, approved=True) for c in session.paused_runs)
            print("ready", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)  # go
            try:
                await agent.run(Message("user", answers), session=session)
            except ApprovalError as exc:
                print(f"refused {type(exc).__name__}", flush=True)
            else:
                print("ran", flush=True)
    finally:
        if isinstance(store, SupportsAclose):
            await store.aclose()


if __name__ == "__main__":
    kind, location, ledger = sys.argv[1:4]
    anyio.run(main, kind, location, ledger)

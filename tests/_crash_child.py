"""A process that resumes a paused batch and may be killed at one point of the approved call's
life, for tests/run/test_crash_resume.py.

Run as ``python -m tests._crash_child KIND LOCATION LEDGER SESSION POINT [rerun]``. ``KIND`` is
``sqlite``, ``jsonl`` (a directory or a ``.jsonl`` journal) or ``postgres`` (``DSN|SCHEMA``). The
process rebuilds the session ``SESSION`` from the store and resumes its paused batch with an
approval. With a ``POINT`` other than ``none`` it prints ``ready`` there and waits to be killed:

- ``before-claim``: the append of the claim to the paused run's log is about to be made;
- ``after-claim``: that append returned, nothing of the call has started;
- ``in-tool``: inside the approved tool, after its side effect (a line in ``LEDGER``);
- ``after-returned``: the tool's result is stored and the model is being asked again.

Otherwise it prints ``ran RUN_ID TEXT``, ``refused ERROR_TYPE CALL_IDS`` or, when the session has
no call waiting, ``nothing waits``. With ``rerun`` the
caller first says the paused calls may run again (``AgentSession.allow_rerun``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from agentledger import Agent, ApprovalError, Content, Message, tool
from agentledger.adapters.chat.scripted import ScriptedChatClient
from agentledger.chat import ChatResponse
from agentledger.core.events import BatchClaimed, Event
from agentledger.errors import CallOutcomeUnknownError
from agentledger.store import EventStore
from tests._resume_child import session_of

__all__ = ("open_store", "wire_agent")


def open_store(kind: str, location: str) -> EventStore:
    if kind == "sqlite":
        from agentledger.adapters.stores.sqlite import SqliteEventStore

        return SqliteEventStore(location)
    if kind == "jsonl":
        from agentledger.adapters.stores.jsonl import JsonlEventStore

        return JsonlEventStore(location)
    from agentledger.adapters.stores.postgres import PostgresEventStore

    dsn, schema = location.split("|")
    return PostgresEventStore(dsn, schema=schema)


async def _killed_here() -> None:
    """Say ``ready`` and wait for the test to kill this process."""
    print("ready", flush=True)
    await anyio.sleep_forever()


class _FaultAtClaim:
    """The real store, with a fault point around the append of a claim (nothing else differs)."""

    def __init__(self, store: EventStore, point: str) -> None:
        self.store = store
        self.point = point

    async def append(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        claim = any(type(e) is BatchClaimed for e in events)
        if claim and self.point == "before-claim":
            await _killed_here()
        version = await self.store.append(stream, events, expected_version)
        if claim and self.point == "after-claim":
            await _killed_here()
        return version

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


class _AskedAgain(ScriptedChatClient):
    """Answers the model call after the tool's result, or waits to be killed there."""

    def __init__(self, point: str) -> None:
        super().__init__(["Sent."], repeat=True)
        self.point = point

    async def get_response(self, messages: Any, **kwargs: Any) -> ChatResponse:
        if self.point == "after-returned":
            await _killed_here()
        return await super().get_response(messages, **kwargs)


def wire_agent(store: Any, ledger: Path, client: Any, point: str = "none") -> Agent:
    @tool(approval_mode="always_require")
    async def wire(amount: int, note: str) -> str:
        """Send money."""
        with ledger.open("a", encoding="utf-8") as out:
            out.write(f"{note}\n")
        if point == "in-tool":
            await _killed_here()
        return f"sent {amount}"

    return Agent(client=client, tools=[wire], store=store, name="bank")


async def main(kind: str, location: str, ledger: str, session_id: str, point: str, rerun: bool) -> None:
    store = open_store(kind, location)
    faulty: Any = _FaultAtClaim(store, point) if point in ("before-claim", "after-claim") else store
    agent = wire_agent(faulty, Path(ledger), _AskedAgain(point), point)
    session = await session_of(store, session_id)
    calls = tuple(session.paused_runs)
    if not calls:
        print("nothing waits", flush=True)
        return
    if rerun:
        session.allow_rerun(*calls)
    answers = tuple(Content.from_approval_response(c, approved=True) for c in calls)
    try:
        response = await agent.run(Message("user", answers), session=session)
    except CallOutcomeUnknownError as exc:
        print(f"refused {type(exc).__name__} {','.join(exc.call_ids)}", flush=True)
    except ApprovalError as exc:
        print(f"refused {type(exc).__name__} {','.join(calls)} {exc}", flush=True)
    else:
        print(f"ran {response.run_id} {response.text}", flush=True)


if __name__ == "__main__":
    kind, location, ledger, session_id, point = sys.argv[1:6]
    anyio.run(main, kind, location, ledger, session_id, point, sys.argv[6:7] == ["rerun"])

"""Exactly once through a crash: a resuming process killed with SIGKILL at each point of an
approved call's life, on every durable store, then resumed by new processes.

Each case pauses a run on a real store, starts a process that resumes it and stops at one fault
point (tests/_crash_child.py prints ``ready`` there), kills it with SIGKILL, and resumes again in
new processes. The tool writes one line to a ledger file each time it runs, so the test counts
executions across processes: the call runs once, or the resume is refused with the typed error,
and a call whose result is stored is never run again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from agentledger import AgentSession
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core import BatchClaimed, RunCompleted, ToolCalled, ToolReturned
from agentledger.replay import load, rerun
from agentledger.store import EventStore, SupportsAclose
from tests._crash_child import open_store, wire_agent
from tests._temporal_env import drop_schema, require_postgres, unique_schema

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
STORES = ("sqlite", "jsonl-directory", "jsonl-journal", "postgres")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=STORES)
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(kind, location) of a store no other test uses."""
    name = request.param
    if name == "sqlite":
        yield "sqlite", str(tmp_path / "bank.db")
    elif name == "jsonl-directory":
        yield "jsonl", str(tmp_path / "bank")
    elif name == "jsonl-journal":
        yield "jsonl", str(tmp_path / "bank.jsonl")
    else:
        dsn = require_postgres()
        schema = unique_schema("agentledger_crash")
        try:
            yield "postgres", f"{dsn}|{schema}"
        finally:
            drop_schema(dsn, schema)


def _resume(kind: str, location: str, ledger: Path, point: str = "none", *, rerun: bool = False) -> str:
    """Resume session ``s`` in a new process: its one line of outcome, or, at a fault point, kill
    it there with SIGKILL and return ``killed``."""
    arguments = [sys.executable, "-m", "tests._crash_child", kind, location, str(ledger), "s", point]
    process = subprocess.Popen(
        [*arguments, *(["rerun"] if rerun else [])], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        if point == "none":
            process.wait(timeout=60)
            assert process.returncode == 0, (line, process.returncode)
            return line
        assert line == "ready", (point, line, process.poll())
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
        assert process.returncode == -signal.SIGKILL
        return "killed"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


async def _close(store: EventStore) -> None:
    if isinstance(store, SupportsAclose):
        await store.aclose()
    elif hasattr(store, "close"):
        store.close()


async def _paused(kind: str, location: str, ledger: Path) -> str:
    """Pause a run on session ``s`` in this process; its run id."""
    store = open_store(kind, location)
    try:
        client = ScriptedChatClient([Call("wire", {"amount": 5, "note": "wired"})])
        paused = await wire_agent(store, ledger, client).run("Send 5.", session=AgentSession("s"))
        assert paused.finish_reason == "awaiting_approval"
        return paused.run_id
    finally:
        await _close(store)


async def _claims(kind: str, location: str, run_id: str) -> list[BatchClaimed]:
    store = open_store(kind, location)
    try:
        return [e for e in await store.read(run_id) if type(e) is BatchClaimed]
    finally:
        await _close(store)


async def _log_types(kind: str, location: str, run_id: str) -> list[str]:
    store = open_store(kind, location)
    try:
        return [type(e).__name__ for e in await store.read(run_id)]
    finally:
        await _close(store)


async def _replays(kind: str, location: str, ledger: Path, run_id: str) -> None:
    """The run replays against the agent's code without a difference (``rerun`` raises one)."""
    store = open_store(kind, location)
    try:
        replayed = await rerun(await load(store, run_id), wire_agent(store, ledger, ScriptedChatClient([])))
        assert replayed is not None
        assert replayed.text == "Sent."
    finally:
        await _close(store)


def _runs(ledger: Path) -> list[str]:
    return ledger.read_text(encoding="utf-8").splitlines() if ledger.exists() else []


async def _prepare(where: tuple[str, str], tmp_path: Path) -> tuple[str, str, Path, str]:
    kind, location = where
    ledger = tmp_path / "ledger.txt"
    paused = await _paused(kind, location, ledger)
    return kind, location, ledger, paused


async def test_killed_before_the_claim_is_stored_the_next_resume_runs_the_call_once(
    where: tuple[str, str], tmp_path: Path
) -> None:
    kind, location, ledger, paused = await _prepare(where, tmp_path)
    assert await anyio.to_thread.run_sync(_resume, kind, location, ledger, "before-claim") == "killed"
    assert await _claims(kind, location, paused) == []
    outcome = await anyio.to_thread.run_sync(_resume, kind, location, ledger)
    assert outcome.startswith("ran "), outcome
    assert outcome.endswith(" Sent."), outcome
    assert _runs(ledger) == ["wired"]


async def test_killed_after_the_claim_a_resume_is_refused_and_allow_rerun_runs_the_call_once(
    where: tuple[str, str], tmp_path: Path
) -> None:
    kind, location, ledger, paused = await _prepare(where, tmp_path)
    assert await anyio.to_thread.run_sync(_resume, kind, location, ledger, "after-claim") == "killed"
    refused = await anyio.to_thread.run_sync(_resume, kind, location, ledger)
    assert refused.startswith("refused ApprovalError "), refused
    assert "has not started any of its calls" in refused
    assert "allow_rerun(" in refused
    assert _runs(ledger) == []
    ran = await anyio.to_thread.run_sync(lambda: _resume(kind, location, ledger, rerun=True))
    assert ran.startswith("ran "), ran
    assert ran.endswith(" Sent."), ran
    assert _runs(ledger) == ["wired"]
    claims = await _claims(kind, location, paused)
    assert [c.after_run_id for c in claims] == [None, claims[0].by_run_id]


async def test_killed_inside_the_tool_the_call_is_unknown_and_never_run_again(
    where: tuple[str, str], tmp_path: Path
) -> None:
    kind, location, ledger, paused = await _prepare(where, tmp_path)
    assert await anyio.to_thread.run_sync(_resume, kind, location, ledger, "in-tool") == "killed"
    call_id = (await _claims(kind, location, paused))[0].answers[0].call_id
    for _ in range(2):  # asked again, still refused: the call may have taken effect
        refused = await anyio.to_thread.run_sync(_resume, kind, location, ledger)
        assert refused == f"refused CallOutcomeUnknownError {call_id}", refused
    assert _runs(ledger) == ["wired"]
    holder = (await _claims(kind, location, paused))[0].by_run_id
    types = await _log_types(kind, location, holder)
    assert types[-1] == ToolCalled.__name__  # the log shows the call started, and nothing after
    assert ToolReturned.__name__ not in types
    # The caller vouches that the call did not take effect: that run is finished from its log,
    # the call run once more in it, and the claim records the permission.
    finished = await anyio.to_thread.run_sync(lambda: _resume(kind, location, ledger, rerun=True))
    assert finished == f"ran {holder} Sent.", finished
    assert _runs(ledger) == ["wired", "wired"]
    types = await _log_types(kind, location, holder)
    assert types.count(ToolCalled.__name__) == 2
    assert types.count(ToolReturned.__name__) == 1
    assert types[-1] == RunCompleted.__name__
    claims = await _claims(kind, location, paused)
    assert [(c.by_run_id, c.after_run_id, c.rerun) for c in claims] == [
        (holder, None, ()),
        (holder, holder, (call_id,)),
    ]
    await _replays(kind, location, ledger, holder)  # the stopped start is nothing a rerun repeats


async def test_killed_after_the_result_is_stored_a_resume_finishes_the_run_without_the_tool(
    where: tuple[str, str], tmp_path: Path
) -> None:
    kind, location, ledger, paused = await _prepare(where, tmp_path)
    assert await anyio.to_thread.run_sync(_resume, kind, location, ledger, "after-returned") == "killed"
    holder = (await _claims(kind, location, paused))[0].by_run_id
    refused = await anyio.to_thread.run_sync(_resume, kind, location, ledger)
    assert refused.startswith("refused ApprovalError "), refused
    assert "which ran calls" in refused
    assert "allow_rerun(" in refused
    finished = await anyio.to_thread.run_sync(lambda: _resume(kind, location, ledger, rerun=True))
    assert finished == f"ran {holder} Sent.", finished  # that very run, finished from its log
    assert _runs(ledger) == ["wired"]
    types = await _log_types(kind, location, holder)
    assert types.count(ToolCalled.__name__) == types.count(ToolReturned.__name__) == 1
    assert types[-1] == RunCompleted.__name__
    claims = await _claims(kind, location, paused)
    assert [(c.by_run_id, c.after_run_id) for c in claims] == [(holder, None), (holder, holder)]
    await _replays(kind, location, ledger, holder)  # like a run that was never stopped
    again = await anyio.to_thread.run_sync(_resume, kind, location, ledger)
    assert again == "nothing waits"  # the session rebuilt from the store knows the batch ran
    assert _runs(ledger) == ["wired"]

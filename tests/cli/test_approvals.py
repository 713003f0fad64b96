"""The approvals inbox: what waits for a person, and paused runs that another run resumed."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from agentledger import Agent, AgentSession, Message, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.cli import main
from agentledger.listing import OUTCOMES, RunQuery
from agentledger.store import list_runs


@tool(approval_mode="always_require")
def wire(amount: int) -> str:
    """Send money."""
    return f"sent {amount}"


def _record(path: Path) -> tuple[str, str, str]:
    """Session s1: a run paused and resumed, then a second paused run; session s2: one paused run.
    Returns the run ids (resumed paused run, its resumer, the paused run of s1 still waiting)."""

    async def go() -> tuple[str, str, str]:
        store = SqliteEventStore(path)
        script: list[ScriptEntry] = [Call("wire", {"amount": 5}), "Sent.", Call("wire", {"amount": 9})]
        script.append(Call("wire", {"amount": 1}))
        agent = Agent(client=ScriptedChatClient(script), tools=[wire], store=store, name="bank")
        first = AgentSession("s1")
        paused = await agent.run("Send 5.", session=first)
        answer = Message("user", tuple(r.to_approval_response(True) for r in paused.user_input_requests))
        resumer = await agent.run(answer, session=first)
        waiting = await agent.run("Send 9.", session=first)
        await agent.run("Send 1.", session=AgentSession("s2"))
        await store.aclose()
        return paused.run_id, resumer.run_id, waiting.run_id

    return anyio.run(go)


def test_approvals_lists_the_waiting_calls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One JSON object per waiting call: run, session, call id, tool, arguments, since when; a
    paused run that another run resumed is not listed."""
    path = tmp_path / "runs.db"
    resumed, _, waiting = _record(path)
    assert main(["approvals", "--json", "--store", str(path)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["session_id"], r["tool"], json.loads(r["arguments"])) for r in rows] == [
        ("s2", "wire", {"amount": 1}),
        ("s1", "wire", {"amount": 9}),
    ]
    assert rows[1]["run_id"] == waiting
    assert resumed not in {r["run_id"] for r in rows}
    assert all(r["call_id"] and r["since"] > 0 and r["since_utc"] for r in rows)
    assert main(["approvals", "--session", "s1", "--store", str(path)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["run", "session", "call", "tool", "arguments", "since", "(UTC)"]
    assert len(table) == 2
    assert waiting in table[1]
    assert '{"amount":9}' in table[1]


def test_runs_filters_and_links_paused_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`runs --outcome awaiting_approval` lists the paused runs nobody resumed; a resumed one is
    completed and names the run that resumed it, in `runs` and in `show`."""
    path = tmp_path / "runs.db"
    resumed, resumer, waiting = _record(path)
    query = ["--outcome", "awaiting_approval", "--session", "s1", "--json"]
    assert main(["runs", *query, "--store", str(path)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["run_id"], r["outcome"], r["resumed_by"]) for r in rows] == [
        (waiting, "awaiting_approval", None)
    ]
    assert main(["runs", "--json", "--store", str(path)]) == 0
    by_id = {r["run_id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert (by_id[resumed]["outcome"], by_id[resumed]["resumed_by"]) == ("completed", resumer)
    assert main(["runs", "--store", str(path)]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(resumed))
    assert f"resumed by {resumer}" in line
    assert main(["show", resumed, "--store", str(path)]) == 0
    assert f"paused batch claimed by run {resumer}" in capsys.readouterr().out
    assert main(["show", resumed, "--json", "--store", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["resumed_by"] == resumer


def test_the_store_filter_and_the_summary_agree(tmp_path: Path) -> None:
    """The outcomes a store filters on are the ones its summaries carry."""
    path = tmp_path / "runs.db"
    _record(path)

    async def outcomes() -> dict[str, list[str]]:
        store = SqliteEventStore(path, read_only=True)
        found: dict[str, list[str]] = {}
        for outcome in OUTCOMES:
            runs = await list_runs(store, RunQuery(outcome=outcome, limit=None))
            found[outcome] = sorted(r.outcome for r in runs)
        await store.aclose()
        return found

    found = anyio.run(outcomes)
    assert found == {
        "completed": ["completed", "completed"],
        "awaiting_approval": ["awaiting_approval", "awaiting_approval"],
        "incomplete": [],
        "failed": [],
    }

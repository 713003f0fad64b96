"""``agentledger approve`` / ``reject``: a decision resumes the paused run through its claim."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from agentledger import AgentSession
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.cli import main
from agentledger.core.events import ApprovalResolved, BatchClaimed, Event, ToolCalled
from tests import cli_agents

BANK = "tests.cli_agents:bank_agent"


def _pause(path: Path, *batches: ScriptEntry) -> list[str]:
    """One paused run per batch of calls, each in its own session; their run ids."""

    async def go() -> list[str]:
        store = SqliteEventStore(path)
        agent = cli_agents.bank_agent()
        agent.client = ScriptedChatClient([*batches])
        agent.store = store
        ids = []
        for n, _ in enumerate(batches):
            ids.append((await agent.run("Send.", session=AgentSession(f"s{n}"))).run_id)
        await store.aclose()
        return ids

    return anyio.run(go)


def _read(path: Path, run_id: str) -> list[Event]:
    async def go() -> list[Event]:
        store = SqliteEventStore(path, read_only=True)
        try:
            return await store.read(run_id)
        finally:
            await store.aclose()

    return anyio.run(go)


@pytest.fixture(autouse=True)
def _fresh_ledger() -> None:
    cli_agents.WIRED.clear()


def test_approve_runs_the_call_once_through_the_claim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``approve`` resumes the run: the paused log ends with the claim, the resume records the
    answer with its reason and runs the call once; ``--json`` says so in one object."""
    path = tmp_path / "runs.db"
    [run] = _pause(path, [Call("wire", {"amount": 5})])
    store = ["--store", str(path), "--agent", BANK]
    assert main(["approve", run, "call_1", "--reason", "known payee", "--json", *store]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["run_id"], result["finish_reason"], result["text"]) == (run, "completed", "Sent.")
    assert result["answers"][0]["reason"] == "known payee"
    assert cli_agents.WIRED == [5]
    claim = _read(path, run)[-1]
    assert isinstance(claim, BatchClaimed)
    assert claim.by_run_id == result["resumed_by"]
    resumed = _read(path, result["resumed_by"])
    assert [(e.approved, e.reason) for e in resumed if isinstance(e, ApprovalResolved)] == [
        (True, "known payee")
    ]
    assert main(["approve", run, "call_1", *store]) == 1  # decided: a second decision is refused
    assert "already taken by run" in capsys.readouterr().err
    assert cli_agents.WIRED == [5]


def test_reject_needs_a_reason_and_runs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``reject`` without ``--reason`` is a usage error; with one, the call is answered with the
    rejection and never runs."""
    path = tmp_path / "runs.db"
    [run] = _pause(path, [Call("wire", {"amount": 5})])
    store = ["--store", str(path), "--agent", BANK]
    assert main(["reject", run, "call_1", *store]) == 2
    assert "needs --reason" in capsys.readouterr().err
    assert main(["reject", run, "--all", "--reason", "not today", *store]) == 0
    out = capsys.readouterr().out
    assert "call_1 rejected: not today" in out
    assert cli_agents.WIRED == []
    resumer = out.split("resumed by run ")[1].split(":")[0]
    assert not any(isinstance(e, ToolCalled) for e in _read(path, resumer))


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["call_9"], "does not wait on call 'call_9'"),
        (["call_1"], "also waits on call_2: a batch is decided as a whole"),
        (["call_1", "call_2", "--arguments", '{"amount": 5}'], "--arguments checks one call"),
        ([], "name the calls to approve"),
    ],
)
def test_refusals_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], error: str
) -> None:
    """A call that does not wait, a batch answered in part, or a vague request: one line, and
    nothing runs."""
    path = tmp_path / "runs.db"
    [run] = _pause(path, [Call("wire", {"amount": 5}), Call("wire", {"amount": 6})])
    assert main(["approve", run, *argv, "--store", str(path), "--agent", BANK]) in (1, 2)
    err = capsys.readouterr().err
    assert error in err
    assert len(err.strip().splitlines()) == 1
    assert cli_agents.WIRED == []
    assert not isinstance(_read(path, run)[-1], BatchClaimed)


def test_arguments_other_than_the_ones_seen_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--arguments`` names what the person saw: a call that holds other arguments is refused
    with ``ApprovalMismatchError``'s line; the same arguments in another spelling pass."""
    path = tmp_path / "runs.db"
    [run] = _pause(path, [Call("wire", {"amount": 5})])
    store = ["--store", str(path), "--agent", BANK]
    assert main(["approve", run, "call_1", "--arguments", '{"amount": 50}', *store]) == 1
    assert "its arguments are not the ones decided on" in capsys.readouterr().err
    assert cli_agents.WIRED == []
    assert main(["approve", run, "call_1", "--arguments", '{ "amount":5 }', *store]) == 0
    assert cli_agents.WIRED == [5]


def test_a_run_that_is_not_paused_is_not_decided(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A completed run waits on nothing: ``CallNotWaitingError``'s line, exit 1."""
    path = tmp_path / "runs.db"
    [run] = _pause(path, "No calls.")
    assert main(["approve", run, "--all", "--store", str(path), "--agent", BANK]) == 1
    assert "does not wait for approval" in capsys.readouterr().err


def test_a_missing_store_is_not_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A decision on a store that does not exist is a usage error, and no file appears."""
    path = tmp_path / "none.db"
    assert main(["approve", "run_1", "call_1", "--store", str(path)]) == 2
    assert not path.exists()


def test_another_agent_cannot_spend_the_decision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A decision carried on by an agent of another name (the demo, without ``--agent``) is
    refused before any claim: that agent lacks the run's tools and would use the answer up."""
    path = tmp_path / "runs.db"
    [run] = _pause(path, [Call("wire", {"amount": 5})])
    assert main(["approve", run, "call_1", "--store", str(path)]) == 1
    assert "was paused by agent 'bank'" in capsys.readouterr().err
    assert not isinstance(_read(path, run)[-1], BatchClaimed)

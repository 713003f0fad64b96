"""The command line driven from scripts: python -m, --json, plain text on a pipe, runs served by
the store with filters, run id prefixes, replay's agent check, the demo's clock, and stores
holding one stream that does not decode."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from agentledger.adapters.stores.jsonl import JsonlEventStore
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.cli import main
from tests._runs import T0, Ending, corrupt_line, record, run_events
from tests.test_listing import corrupt

STORES: dict[str, Callable[[Path], SqliteEventStore | JsonlEventStore]] = {
    "sqlite": lambda d: SqliteEventStore(d / "events.sqlite"),
    "directory": lambda d: JsonlEventStore(d / "runs"),
    "journal": lambda d: JsonlEventStore(d / "runs.jsonl"),
}
PATHS = {"sqlite": "events.sqlite", "directory": "runs", "journal": "runs.jsonl"}


def _fill(store: SqliteEventStore | JsonlEventStore, count: int = 4) -> None:
    """Record ``count`` runs into ``store``, then close it: the commands open the store themselves."""

    async def go() -> None:
        async with store:
            for number in range(count):
                ending: Ending = "failed" if number % 2 else "completed"
                agent, session, at = ("Planner", "Booker")[number % 2], f"s{number % 2}", T0 + number * 10**9
                events = run_events(f"run_{number:02d}", agent=agent, ending=ending, session=session, at=at)
                await record(store, events)

    anyio.run(go)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> str:
    _fill(SqliteEventStore(tmp_path / "events.sqlite"))
    return str(tmp_path / "events.sqlite")


def test_python_dash_m_agentledger_runs_the_command(tmp_path: Path) -> None:
    """`python -m agentledger` is the command."""
    out = subprocess.run(
        [sys.executable, "-m", "agentledger", "--version"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert out.stdout.startswith("agentledger ")


def test_runs_json_lines_newest_first(sqlite_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`runs --json` writes one JSON object per run, newest first."""
    assert main(["runs", "--json", "--store", sqlite_store]) == 0
    lines = capsys.readouterr().out.splitlines()
    runs = [json.loads(line) for line in lines]
    assert [r["run_id"] for r in runs] == ["run_03", "run_02", "run_01", "run_00"]
    assert runs[0]["agent"] == "Booker"
    assert runs[0]["outcome"] == "failed"
    assert runs[1]["answer"] == "answer of run_02"
    assert runs[0]["started_at"] == T0 + 3 * 10**9
    assert runs[0]["started"].startswith("2023-11-14T22:13:23")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--limit", "1"], ["run_03"]),
        (["--agent", "Planner"], ["run_02", "run_00"]),
        (["--session", "s1"], ["run_03", "run_01"]),
        (["--outcome", "completed", "--limit", "1"], ["run_02"]),
        (["--since", "2023-11-14T22:13:22"], ["run_03", "run_02"]),
    ],
)
def test_runs_filters(
    sqlite_store: str, args: list[str], expected: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """--limit, --agent, --session, --outcome and --since select runs."""
    assert main(["runs", "--json", "--store", sqlite_store, *args]) == 0
    assert [json.loads(line)["run_id"] for line in capsys.readouterr().out.splitlines()] == expected


def test_runs_limit_defaults_to_50(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --limit, the 50 newest runs; --limit 0 lists all."""
    _fill(SqliteEventStore(tmp_path / "events.sqlite"), 55)
    assert main(["runs", "--json", "--store", str(tmp_path / "events.sqlite")]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 50
    assert json.loads(listed[0])["run_id"] == "run_54"
    assert main(["runs", "--json", "--limit", "0", "--store", str(tmp_path / "events.sqlite")]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 55


def test_since_accepts_a_duration(sqlite_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A duration counts back from now (the stored runs are older than a day); a bad one is refused."""
    assert main(["runs", "--since", "1d", "--json", "--store", sqlite_store]) == 0
    assert capsys.readouterr().out == ""
    assert main(["runs", "--since", "yesterday", "--store", sqlite_store]) == 2
    assert "--since must be a duration" in capsys.readouterr().err


def test_runs_on_a_pipe_is_plain_text(sqlite_store: str) -> None:
    """Piped, `runs` prints aligned columns: no box drawing, no colour codes."""
    out = subprocess.run(
        [sys.executable, "-m", "agentledger", "runs", "--store", sqlite_store],
        capture_output=True, text=True, check=True, env={"FORCE_COLOR": "", "PATH": "/usr/bin:/bin"},
    ).stdout  # fmt: skip
    lines = out.splitlines()
    assert lines[0].split() == ["run", "started", "(UTC)", "agent", "session", "events", "outcome", "answer"]
    assert lines[1].split()[:5] == ["run_03", "2023-11-14", "22:13:23", "Booker", "s1"]
    assert not set(out) & set("┃│┏━─╭\x1b")


def test_show_on_a_pipe_is_plain_text(sqlite_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`show` piped is the tree indented with spaces, without guide lines."""
    assert main(["show", "run_02", "--store", sqlite_store]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "run run_02 · agent Planner · session s0"
    assert lines[1].startswith("    0  run started")
    assert not set("".join(lines)) & set("└├│━\x1b")


def test_show_and_state_json(sqlite_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`show --json` and `state --json` each print one JSON document on one line."""
    assert main(["show", "run_02", "--json", "--store", sqlite_store]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    shown = json.loads(out)
    assert (shown["run_id"], shown["agent"], shown["outcome"]) == ("run_02", "Planner", "completed")
    assert [e["type"] for e in shown["events"]] == [
        "RunStarted",
        "ModelCalled",
        "ModelResponded",
        "RunCompleted",
    ]
    assert shown["children"] == []
    assert main(["state", "run_02", "--at", "1", "--json", "--store", sqlite_store]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert json.loads(out)["phase"] == "awaiting_model"


def test_a_unique_prefix_names_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A unique prefix works wherever a run id does; an exact id wins over longer ones."""
    with closing(SqliteEventStore(tmp_path / "events.sqlite")) as store:
        anyio.run(record, store, run_events("run_abc123"))
        anyio.run(record, store, run_events("run_x"))
        anyio.run(record, store, run_events("run_x2"))
    path = str(tmp_path / "events.sqlite")
    assert main(["state", "run_ab", "--at", "1", "--json", "--store", path]) == 0
    assert json.loads(capsys.readouterr().out)["seq"] == 1
    assert main(["show", "run_x", "--json", "--store", path]) == 0
    assert json.loads(capsys.readouterr().out)["run_id"] == "run_x"
    assert main(["export", "run_abc", "--store", path]) == 0
    assert '"run_id":"run_abc123"' in capsys.readouterr().out


def test_an_ambiguous_prefix_is_one_line_listing_candidates(
    sqlite_store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A prefix of several runs exits 2 with one line naming a few of them."""
    assert main(["show", "run_0", "--store", sqlite_store]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "'run_0' matches 4 runs: run_00, run_01, run_02, run_03" in err


@pytest.mark.parametrize("command", ["show", "state", "view", "export"])
def test_an_empty_run_id_is_refused_even_when_the_store_holds_one_run(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``show ""`` names no run: as a prefix it would name the only run of the store."""
    monkeypatch.chdir(tmp_path)
    with closing(SqliteEventStore(tmp_path / "events.sqlite")) as store:
        anyio.run(record, store, run_events("run_only"))
    assert main([command, "", "--store", str(tmp_path / "events.sqlite")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert "the run id is empty" in captured.err
    assert not list(tmp_path.glob("*.html"))


def test_demo_records_the_real_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The demo's run starts now, not at a fixed date."""
    before = time.time_ns()
    assert main(["demo", "--store", str(tmp_path / "d.db")]) == 0
    after = time.time_ns()
    capsys.readouterr()
    assert main(["runs", "--json", "--store", str(tmp_path / "d.db")]) == 0
    (run,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert before <= run["started_at"] <= after


def test_replay_refuses_a_run_of_another_agent(sqlite_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --agent, replay uses the demo agent: a run of another agent is refused, not compared."""
    assert main(["replay", "run_02", "--store", sqlite_store]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "recorded by agent 'Planner', but the demo agent (no --agent given) is 'TripPlanner'" in err
    assert "--force" in err
    assert main(["replay", "run_02", "--force", "--store", sqlite_store]) == 1  # compared: it diverges
    assert "diverged at seq" in capsys.readouterr().out


AGENT_MODULE = """
from agentledger.demo import build_demo_agent

def agent():
    return build_demo_agent(store=False)
"""


def test_replay_imports_an_agent_from_the_current_directory(tmp_path: Path) -> None:
    """`--agent module:name` finds a module in the current directory without PYTHONPATH."""
    (tmp_path / "my_trip_agent.py").write_text(AGENT_MODULE)
    run = [sys.executable, "-P", "-m", "agentledger.cli"]  # -P: no directory put on sys.path by Python
    subprocess.run([*run, "demo", "--store", "d.db"], cwd=tmp_path, check=True, capture_output=True)
    out = subprocess.run(
        [*run, "replay", "run_", "--agent", "my_trip_agent:agent", "--store", "d.db"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "no divergence" in out.stdout


@pytest.mark.parametrize("name", list(STORES))
def test_runs_lists_the_others_when_one_stream_does_not_decode(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One corrupt stream is listed in its place as damaged, with where; the others as runs."""
    _fill(STORES[name](tmp_path))
    corrupt(name, tmp_path, "run_01")
    assert main(["runs", "--json", "--store", str(tmp_path / PATHS[name])]) == 0
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert [row["run_id"] for row in rows] == ["run_03", "run_02", "run_01", "run_00"]
    damaged = rows[2]
    assert damaged["outcome"] == "damaged"
    assert damaged["reason"].startswith("its log does not decode: ")
    assert captured.err == ""


def _session_with_a_corrupt_earlier_run(name: str, tmp_path: Path) -> str:
    """Three runs of one session; the first one's second record does not decode."""
    store = STORES[name](tmp_path)

    async def go() -> None:
        async with store:
            for number in range(3):
                await record(store, run_events(f"run_{number}", session="s", at=T0 + number))

    anyio.run(go)
    if name == "sqlite":
        import sqlite3

        with sqlite3.connect(tmp_path / "events.sqlite") as db:
            db.execute(
                "UPDATE events SET data = ? WHERE seq = 1"
                " AND stream = (SELECT id FROM streams WHERE name = ?)",
                (
                    b'{"type":"ModelCalled","run_id":"run_0","seq":1,"at":"x"}\n{}\n{"type":"RunCompleted"}',
                    "run_0",
                ),
            )
        db.close()
    else:
        file = tmp_path / "runs" / "run_0.jsonl" if name == "directory" else tmp_path / "runs.jsonl"
        corrupt_line(file, "run_0", 1)
    return str(tmp_path / PATHS[name])


@pytest.mark.filterwarnings("default::agentledger.errors.UnreadableStreamWarning")
@pytest.mark.parametrize("name", list(STORES))
def test_show_state_and_view_of_a_run_whose_session_has_a_corrupt_earlier_run(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Loading the run's session history skips the bad run with one warning line; the commands work."""
    path = _session_with_a_corrupt_earlier_run(name, tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["show", "run_2", "--store", path]) == 0
    assert "run run_2" in capsys.readouterr().out
    assert main(["state", "run_2", "--at", "1", "--json", "--store", path]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["seq"] == 1
    assert captured.err.count("\n") == 1
    assert captured.err.startswith("agentledger: warning: skipped stream 'run_0': ")
    assert main(["view", "run_2", "--store", path]) == 0
    captured = capsys.readouterr()
    assert "wrote run_2.html" in captured.out
    assert captured.err.startswith("agentledger: warning: skipped stream 'run_0': ")

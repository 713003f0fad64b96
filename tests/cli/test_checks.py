"""``agentledger check`` (recorded runs as a regression suite) and ``agentledger diff``."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import anyio
import pytest

from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.cli import main
from tests.check_agents import ITEMS, shop
from tests.replay_tree_agents import NoModel

AGENTS = "tests.check_agents"


@pytest.fixture
def five(tmp_path: Path) -> tuple[str, dict[str, str]]:
    """Five runs of the shop in a SQLite store: (store path, run id by item)."""
    path = str(tmp_path / "shop.db")

    async def record() -> dict[str, str]:
        store = SqliteEventStore(path)
        runs = {}
        for item in ITEMS:
            agent = shop(recording_item=item)
            agent.store = store
            runs[item] = (await agent.run(f"How much is {item}?")).run_id
        store.close()
        return runs

    return path, anyio.run(record)


def _junit(path: Path) -> tuple[int, int, list[str]]:
    suite = ET.parse(path).getroot()
    failed = [case.get("name", "") for case in suite if case.find("failure") is not None]
    return int(suite.get("tests", "0")), int(suite.get("failures", "0")), failed


def test_check_passes_five_runs_then_names_the_one_a_change_breaks(
    five: tuple[str, dict[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, runs = five
    NoModel.calls = 0
    junit = tmp_path / "check.xml"
    args = ["check", "--store", path, "--tools", "live", "--junit", str(junit)]
    assert main([*args, "--agent", f"{AGENTS}:same"]) == 0
    out = capsys.readouterr().out
    assert "5 runs checked: 5 passed, 0 drift accepted, 0 diverged, 0 drift, 0 could not replay, 0 damaged" in out
    assert _junit(junit) == (5, 0, [])

    assert main([*args, "--agent", f"{AGENTS}:dearer_tea"]) == 1
    out = capsys.readouterr().out
    [tea_line] = [line for line in out.splitlines() if line.startswith(runs["tea"])]
    assert "diverged" in tea_line
    assert "ToolReturned.result: 'tea: 3 EUR' -> 'tea: 30 EUR'" in tea_line
    tests, failures, failed = _junit(junit)
    assert (tests, failures) == (5, 1)
    assert failed[0].startswith(runs["tea"])
    assert NoModel.calls == 0


def test_check_in_json_with_jobs_and_a_limit(
    five: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, runs = five
    assert (
        main(["check", "--store", path, "--agent", f"{AGENTS}:same", "--jobs", "3", "--limit", "4", "--json"])
        == 0
    )
    *verdicts, summary = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [v["run_id"] for v in verdicts] == [runs[item] for item in reversed(ITEMS)][:4]  # newest first
    assert {v["verdict"] for v in verdicts} == {"passed"}
    assert {v["kind"] for v in verdicts} == {"run"}
    assert [c["how"] for c in verdicts[0]["calls"]] == ["ran"]  # the default runs the tool's code
    assert summary == {
        "kind": "summary",
        "checked": 4,
        "passed": True,
        "drift_accepted": 0,
        "diverged": 0,
        "drift": 0,
        "could_not_replay": 0,
        "damaged": 0,
        "skipped": 0,
        "calls": {"ran": 4, "double": 0, "recorded": 0, "refused": 0},
    }


def test_check_skips_and_counts_other_agents_runs(
    five: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = five
    assert main(["check", "--store", path, "--agent", f"{AGENTS}:other_agent"]) == 1  # nothing checked
    assert "0 runs checked" in (out := capsys.readouterr().out)
    assert "5 runs of other agents skipped" in out


def test_check_usage_errors_exit_2(
    five: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = five
    assert main(["check", "--store", path, "--jobs", "0"]) == 2
    assert "--jobs" in capsys.readouterr().err


@pytest.fixture
def two(tmp_path: Path) -> tuple[str, str, str]:
    """Two runs that differ in input, tool arguments, tool result and answer."""
    path = str(tmp_path / "two.db")

    async def record() -> tuple[str, str]:
        store = SqliteEventStore(path)
        first = shop(recording_item="tea")
        first.store = store
        a = (await first.run("How much is tea?")).run_id
        second = shop({"tea": 3, "coffee": 9})
        second.client = ScriptedChatClient([Call("price", {"item": "coffee"}), "Coffee is dear."])
        second.store = store
        b = (await second.run("How much is coffee?")).run_id
        store.close()
        return a, b

    a, b = anyio.run(record)
    return path, a, b


def test_diff_lists_each_difference(two: tuple[str, str, str], capsys: pytest.CaptureFixture[str]) -> None:
    path, a, b = two
    assert main(["diff", a, b, "--store", path, "--json"]) == 1
    found = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    places = {(f["event_type"], f["field"]) for f in found}
    assert ("RunStarted", "messages[0].contents[0].text") in places  # the input
    assert ("ToolCalled", "arguments.item") in places  # the tool's arguments
    assert ("ToolReturned", "result") in places  # the tool's result
    assert ("RunCompleted", "text") in places  # the answer
    [result] = [f for f in found if (f["event_type"], f["field"]) == ("ToolReturned", "result")]
    assert (result["a"], result["b"]) == ("tea: 3 EUR", "coffee: 9 EUR")
    assert main(["diff", a, b, "--store", path]) == 1
    assert "differences" in capsys.readouterr().out


def test_a_run_against_itself_has_no_difference(
    two: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, a, _ = two
    assert main(["diff", a, a, "--store", path]) == 0
    assert "no difference" in capsys.readouterr().out


def test_export_cassette_pins_a_run(
    two: tuple[str, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentledger.replay.cassette import read_cassette

    path, a, _ = two
    target = tmp_path / "cassettes" / "pinned.jsonl"
    target.parent.mkdir()
    assert main(["export", a, "--store", path, "--cassette", str(target)]) == 0
    assert "(8 events, 1 run)" in capsys.readouterr().out
    assert read_cassette(target).run_id == a


def test_replay_exits_125_where_the_agent_cannot_be_built(
    two: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`git bisect run agentledger replay ...` skips a commit whose agent does not import."""
    path, a, _ = two
    assert main(["replay", a, "--store", path, "--agent", "tests.no_such_module:agent"]) == 125
    assert "cannot load the agent" in capsys.readouterr().err


def test_a_module_that_does_not_compile_cannot_replay(
    two: tuple[str, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A syntax error in the agent's module: replay exits 125 (bisect skips), check refuses it
    once before any run (exit 2) in the same words, nothing raises past the command."""
    path, a, _ = two
    (tmp_path / "halfway.py").write_text(
        (Path(__file__).resolve().parents[1] / "broken_agents" / "syntax_error.txt").read_text()
    )
    monkeypatch.chdir(tmp_path)
    assert main(["replay", a, "--store", path, "--agent", "halfway:agent"]) == 125
    said = capsys.readouterr().err
    assert "SyntaxError" in said
    assert main(["check", "--store", path, "--agent", "halfway:agent"]) == 2
    captured = capsys.readouterr()
    assert captured.err == said  # one line, the words replay uses
    assert captured.out == ""


@pytest.mark.parametrize(
    ("factory", "code", "said"),
    [("async_factory", 2, "is an async function"), ("exits", 125, "SystemExit")],
)
def test_factories_that_cannot_give_an_agent(
    two: tuple[str, str, str], factory: str, code: int, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path, a, _ = two
    assert main(["replay", a, "--store", path, "--agent", f"tests.broken_agents.factories:{factory}"]) == code
    err = capsys.readouterr().err
    assert said in err
    assert err.count("\n") == 1


def test_check_that_checks_nothing_fails(
    five: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """A gate whose selection is empty does not pass silently."""
    path, _ = five
    assert main(["check", "--store", path, "--agent", f"{AGENTS}:same", "--session", "nobody"]) == 1
    assert "no run was checked" in capsys.readouterr().err


def test_check_refuses_a_junit_path_before_replaying(
    five: tuple[str, dict[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = five
    assert main(["check", "--store", path, "--junit", str(tmp_path / "no" / "such" / "out.xml")]) == 2
    captured = capsys.readouterr()
    assert "--junit" in captured.err
    assert captured.out == ""


def test_export_cassette_refuses_a_tree_with_a_missing_child(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.replay_tree_agents import build

    full, lead_only = tmp_path / "full.db", tmp_path / "lead.db"

    async def record() -> str:
        store = SqliteEventStore(full)
        lead = build(recording=True, store=store)
        run_id = (await lead.run("What makes the tides?", session=lead.create_session())).run_id
        target = SqliteEventStore(lead_only)
        await target.append(run_id, await store.read(run_id), 0)
        store.close()
        target.close()
        return run_id

    run_id = anyio.run(record)
    assert main(["export", run_id, "--store", str(lead_only), "--cassette", str(tmp_path / "c.jsonl")]) == 1
    assert "is not in the store" in capsys.readouterr().err
    assert not (tmp_path / "c.jsonl").exists()


def test_check_replays_a_paused_run_and_the_run_that_resumed_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A paused run's log goes on with the claim of the run that resumed it: both replay."""
    from agentledger import Message
    from tests.check_agents import till

    path = str(tmp_path / "till.db")

    async def record() -> list[str]:
        store = SqliteEventStore(path)
        agent = till(recording=True)
        agent.store = store
        session = agent.create_session()
        paused = await agent.run("Refund 5 euros.", session=session)
        [request] = paused.user_input_requests
        resumed = await agent.run(Message("user", [request.to_approval_response(True)]), session=session)
        store.close()
        return [paused.run_id, resumed.run_id]

    runs = anyio.run(record)
    assert main(["check", "--store", path, "--agent", f"{AGENTS}:till", "--tools", "live"]) == 0
    out = capsys.readouterr().out
    assert "2 runs checked: 2 passed" in out
    for run_id in runs:
        assert main(["replay", run_id, "--store", path, "--agent", f"{AGENTS}:till", "--tools", "live"]) == 0

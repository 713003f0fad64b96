"""``agentledger check`` (recorded runs as a regression suite) and ``agentledger diff``."""

from __future__ import annotations

import json
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import anyio
import pytest

from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.cli import main
from tests._runs import corrupt_line
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
    totals = "5 runs checked: 5 passed, 0 drift accepted, 0 diverged, 0 drift, 0 could not replay, 0 damaged"
    assert totals in out
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


def _journal(tmp_path: Path, items: tuple[str, ...] = ("tea", "jam")) -> tuple[Path, dict[str, str]]:
    """Runs of the shop in a JSONL journal (one file): its path and the run id by item."""
    from agentledger.adapters.stores.jsonl import JsonlEventStore

    path = tmp_path / "runs.jsonl"

    async def go() -> dict[str, str]:
        async with JsonlEventStore(path) as store:
            runs = {}
            for item in items:
                agent = shop(recording_item=item)
                agent.store = store
                runs[item] = (await agent.run(f"How much is {item}?")).run_id
            return runs

    return path, anyio.run(go)


def _lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().split(b"\n") if line]


def _write(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines))


def _stray_stream(path: Path) -> None:
    """A stream whose first record is no RunStarted (a run's log with its start cut off)."""
    lines = _lines(path)
    stray = lines[1].replace(b'"run_id":"', b'"run_id":"stray-', 1).replace(b'"seq":1,', b'"seq":0,', 1)
    _write(path, [*lines, stray])


DAMAGE = {
    "its first record does not decode": lambda path, runs: corrupt_line(path, runs["tea"], 0),
    "a record inside does not decode": lambda path, runs: corrupt_line(path, runs["tea"], 3),
    "it does not begin a run": lambda path, runs: _stray_stream(path),
}


@pytest.mark.filterwarnings("default::agentledger.errors.UnreadableStreamWarning")
@pytest.mark.parametrize("case", list(DAMAGE))
def test_check_fails_on_a_damaged_stream_and_names_it(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stream that cannot be read, or does not begin a run, fails the gate (exit 1), named on
    its line and as a JUnit error. --skip-unreadable skips, with a warning, what no listing can
    read; a run whose log breaks past its first and last records still fails."""
    path, runs = _journal(tmp_path)
    DAMAGE[case](path, runs)
    damaged = f"stray-{runs['tea']}" if case == "it does not begin a run" else runs["tea"]
    junit = tmp_path / "check.xml"
    args = ["check", "--store", str(path), "--agent", f"{AGENTS}:same"]
    assert main([*args, "--junit", str(junit)]) == 1
    captured = capsys.readouterr()
    [line] = [line for line in captured.out.splitlines() if line.startswith(damaged + " ")]
    assert f"damaged: stream '{damaged}' is no readable run: " in line
    assert ", 1 damaged" in captured.out
    assert captured.err == ""
    [case_element] = [c for c in ET.parse(junit).getroot() if c.get("name", "").startswith(damaged)]
    error = case_element.find("error")
    assert error is not None
    assert error.get("type") == "damaged"

    skipped = main([*args, "--skip-unreadable"])
    captured = capsys.readouterr()
    if case == "a record inside does not decode":
        assert skipped == 1
        assert ", 1 damaged" in captured.out
    else:
        assert skipped == 0
        assert damaged not in captured.out
        assert f"skipped stream '{damaged}'" in captured.err


def test_no_mutation_of_a_log_passes_the_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every record of two runs' journal deleted, doubled or garbled in turn: check never exits 0
    (each mutation leaves a stream unreadable, a run without its start, or a run cut short)."""
    path, _ = _journal(tmp_path)
    original = _lines(path)
    mutations: list[tuple[str, list[bytes]]] = []
    for index, line in enumerate(original):
        rest = original[:index] + original[index + 1 :]
        mutations.append((f"line {index + 1} deleted", rest))
        doubled = [*original[: index + 1], line, *original[index + 1 :]]
        mutations.append((f"line {index + 1} doubled", doubled))
        garbled = [*original[:index], b'{"type":"RunStarted","seq":"zero"}', *original[index + 1 :]]
        mutations.append((f"line {index + 1} garbled", garbled))
    passed = []
    for name, lines in mutations:
        _write(path, lines)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a torn last line is cut off with a warning
            status = main(["check", "--store", str(path), "--agent", f"{AGENTS}:same"])
        capsys.readouterr()
        if status == 0:
            passed.append(name)
    _write(path, original)
    assert main(["check", "--store", str(path), "--agent", f"{AGENTS}:same"]) == 0  # the log itself passes
    assert passed == []


@pytest.fixture
def tills(tmp_path: Path) -> tuple[str, list[str]]:
    """A till's refund paused for approval and the run that resumed it, approved, in SQLite."""
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

    return path, anyio.run(record)


@pytest.fixture
def research(tmp_path: Path) -> tuple[str, str]:
    """A lead agent's run whose sub-agent searched and kept a note, in SQLite."""
    from tests.replay_tree_agents import build

    path = str(tmp_path / "tree.db")

    async def record() -> str:
        store = SqliteEventStore(path)
        lead = build(recording=True, store=store)
        run_id = (await lead.run("What makes the tides?", session=lead.create_session())).run_id
        store.close()
        return run_id

    return path, anyio.run(record)


def _line_of(out: str, run_id: str) -> str:
    [line] = [line for line in out.splitlines() if line.startswith(run_id + " ")]
    return line


def test_the_default_check_runs_changed_tools_and_names_the_call(
    five: tuple[str, dict[str, str]],
    tills: tuple[str, list[str]],
    research: tuple[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without --tools, check runs the tools' current code: a changed plain tool, a changed
    approval-gated tool (its approved call runs again) and a changed tool of a sub-agent each
    fail the gate, and the line names the call."""
    shop_store, runs = five
    assert main(["check", "--store", shop_store, "--agent", f"{AGENTS}:dearer_tea"]) == 1
    line = _line_of(capsys.readouterr().out, runs["tea"])
    assert "diverged" in line
    assert "'tea: 3 EUR' -> 'tea: 30 EUR', in call_1 (price)" in line

    till_store, (_, resumed) = tills
    assert main(["check", "--store", till_store, "--agent", f"{AGENTS}:till"]) == 0
    assert "1 call ran" in _line_of(capsys.readouterr().out, resumed)  # the approved call ran
    assert main(["check", "--store", till_store, "--agent", f"{AGENTS}:till_changed"]) == 1
    line = _line_of(capsys.readouterr().out, resumed)
    assert "'refunded 5 EUR' -> 'gave back 5 EUR', in call_1 (refund)" in line
    # --tools live keeps an approved call's one execution: the change is not tested there.
    assert main(["check", "--store", till_store, "--agent", f"{AGENTS}:till_changed", "--tools", "live"]) == 0
    assert "1 call from the log (refund)" in _line_of(capsys.readouterr().out, resumed)

    tree_store, lead = research
    changed = "tests.replay_tree_agents:changed_tool_body"
    assert main(["check", "--store", tree_store, "--agent", "tests.replay_tree_agents:same"]) == 0
    assert "3 calls ran" in _line_of(capsys.readouterr().out, lead)  # the sub-agent and its two tools
    assert main(["check", "--store", tree_store, "--agent", changed]) == 1
    line = _line_of(capsys.readouterr().out, lead)
    assert "> call_1 (researcher) > " in line
    assert "in call_1 (search)" in line


def test_a_tool_marked_never_to_run_is_answered_from_the_log_or_by_its_double(
    tills: tuple[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refund marked replay="recorded" never runs in any mode (its body would fail the test):
    the log answers it, and the line, --json and JUnit say so; one with a double runs the double."""
    path, (_, resumed) = tills
    junit = tmp_path / "check.xml"
    for mode in ("test", "live", "recorded"):
        args = ["check", "--store", path, "--agent", f"{AGENTS}:till_from_the_log", "--tools", mode]
        assert main([*args, "--junit", str(junit)]) == 0
        assert "1 call from the log (refund)" in _line_of(capsys.readouterr().out, resumed)
    [case] = [c for c in ET.parse(junit).getroot() if c.get("name", "").startswith(resumed)]
    properties = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert properties["calls.recorded"] == "1"
    assert properties["calls.ran"] == "0"
    assert case.findtext("system-out") == "call_1 refund: from the log"

    assert main(["check", "--store", path, "--agent", f"{AGENTS}:till_with_a_double", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    [row] = [r for r in rows if r.get("run_id") == resumed]
    assert [(c["tool"], c["how"]) for c in row["calls"]] == [("refund", "double")]
    assert rows[-1]["calls"]["double"] == 1


def test_accepted_drift_is_its_own_verdict_everywhere(
    five: tuple[str, dict[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--accept-drift passes a run whose only finding is drift as 'drift accepted': its line, the
    totals, --json and JUnit (a property and the drift in system-out) all say so."""
    path, runs = five
    junit = tmp_path / "check.xml"
    args = ["check", "--store", path, "--agent", f"{AGENTS}:new_instructions", "--accept-drift"]
    assert main([*args, "--junit", str(junit)]) == 0
    out = capsys.readouterr().out
    assert "drift accepted: " in _line_of(out, runs["tea"])
    assert "RunStarted.instructions" in _line_of(out, runs["tea"])
    assert "5 runs checked: 0 passed, 5 drift accepted, 0 diverged, 0 drift" in out
    suite = ET.parse(junit).getroot()
    assert (suite.get("failures"), suite.get("errors")) == ("0", "0")
    for case in suite:
        assert {p.get("name"): p.get("value") for p in case.iter("property")}["verdict"] == "drift_accepted"
        assert (case.findtext("system-out") or "").startswith("drift accepted (--accept-drift):\n")
    assert main([*args, "--json"]) == 0
    *verdicts, summary = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {v["verdict"] for v in verdicts} == {"drift_accepted"}
    assert (summary["drift_accepted"], summary["passed"]) == (5, True)
    assert main(args[:-1]) == 1  # without the flag, drift fails
    assert "5 drift" in capsys.readouterr().out


@pytest.mark.parametrize(
    "agent",
    [
        "shop",
        "shop:",
        ":shop",
        "tests.no_such_module:agent",
        "tests.check_agents:no_such_name",
        "tests.check_agents:ITEMS",
        "tests.broken_agents.factories:async_factory",
        "tests.broken_agents.factories:exits",
    ],
)
def test_a_bad_agent_is_refused_once_before_any_run(
    agent: str, five: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """An --agent that cannot give an agent: exit 2 and one line on stderr, in replay's words,
    before any run is replayed (nothing on stdout)."""
    path, runs = five
    main(["replay", runs["tea"], "--store", path, "--agent", agent])
    said = capsys.readouterr().err
    junit = Path(path).parent / "j.xml"
    assert main(["check", "--store", path, "--agent", agent, "--junit", str(junit)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == said
    assert captured.err.count("\n") == 1
    assert not junit.exists()


def test_check_without_an_agent_says_it_compared_with_the_demo(
    five: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Runs of another agent than the demo's, checked without --agent: each skipped line and the
    closing message say the runs were compared with the demo agent, by name."""
    path, runs = five
    assert main(["check", "--store", path]) == 1
    captured = capsys.readouterr()
    line = _line_of(captured.out, runs["tea"])
    assert "skipped: a run of agent 'shop', not of the demo agent (no --agent given) ('" in line
    assert "not of the demo agent (no --agent given) ('" in captured.err


def test_a_resumed_runs_input_says_what_it_answered(
    tills: tuple[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A resumed run's input is an approval, not text: lines, --json and JUnit names show it."""
    path, (paused, resumed) = tills
    junit = tmp_path / "check.xml"
    assert main(["check", "--store", path, "--agent", f"{AGENTS}:till", "--junit", str(junit)]) == 0
    assert "  '[approves call_1]'  passed" in _line_of(capsys.readouterr().out, resumed)
    names = [c.get("name") for c in ET.parse(junit).getroot()]
    assert f"{resumed}: [approves call_1]" in names
    assert f"{paused}: Refund 5 euros." in names
    assert main(["check", "--store", path, "--agent", f"{AGENTS}:till", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["run_id"]: r["input"] for r in rows[:-1]}[resumed] == "[approves call_1]"


def test_export_cassette_refuses_a_folder_that_does_not_exist(
    two: tuple[str, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Like -o, --cassette into a missing folder is a usage error (exit 2); nothing is made."""
    path, a, _ = two
    target = tmp_path / "no" / "such" / "c.jsonl"
    assert main(["export", a, "--store", path, "--cassette", str(target)]) == 2
    assert "--cassette" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()

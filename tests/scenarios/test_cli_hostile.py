"""The command line against hostile stores and arguments: one line on stderr, a non-zero exit, no
file written outside where the user said, and stores that reading leaves exactly as they were."""

from __future__ import annotations

import os
import sqlite3
import warnings
from pathlib import Path

import anyio
import pytest

from agentledger import Agent, StoreError, TornTailWarning
from agentledger.adapters.chat.scripted import ScriptedChatClient
from agentledger.adapters.stores.jsonl import JsonlEventStore
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.cli import main
from agentledger.core.events import RunFailed
from agentledger.store import EventStore
from agentledger.testing import FixedClock, SequentialIds

pytestmark = pytest.mark.usefixtures("in_tmp")


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


class Ids(SequentialIds):
    """Ids a hostile log could hold: whatever the store says."""

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id

    def __call__(self, prefix: str) -> str:
        return self.run_id if prefix == "run" else super().__call__(prefix)


def record(store: EventStore, run_id: str = "run_1") -> None:
    agent = Agent(client=ScriptedChatClient(["hello"]), store=store, clock=FixedClock(), ids=Ids(run_id))
    anyio.run(agent.run, "hi")


def one_line_error(args: list[str], capsys: pytest.CaptureFixture[str], code: int) -> str:
    assert main(args) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("agentledger: ")
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("run_id", ["../escaped", "/ABSOLUTE/run", "..", ".hidden", "a/../../b"])
def test_view_writes_into_the_current_directory_under_a_safe_name(
    tmp_path: Path, run_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = run_id.replace("/ABSOLUTE", str(tmp_path))  # an absolute path outside the directory
    inside = tmp_path / "work"
    inside.mkdir()
    os.chdir(inside)
    record(JsonlEventStore(inside / "runs.jsonl"), run_id)
    assert main(["view", run_id, "--store", "runs.jsonl"]) == 0
    capsys.readouterr()
    written = sorted(p.name for p in inside.iterdir() if p.suffix == ".html")
    assert len(written) == 1
    assert not written[0].startswith(".")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]  # nothing beside it, run.html neither


def test_an_unusable_otlp_url_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    record(JsonlEventStore("runs.jsonl"))
    for url in ("::::", "ftp://host/", "http://", "http://host:port/"):
        err = one_line_error(["export", "run_1", "--otlp", url, "--store", "runs.jsonl"], capsys, 2)
        assert "--otlp" in err


def test_an_agent_factory_that_fails_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """One line, and 125: the code as it is cannot replay at all (`git bisect run` skips it)."""
    record(JsonlEventStore("runs.jsonl"))
    err = one_line_error(["replay", "run_1", "--agent", "json:dumps", "--store", "runs.jsonl"], capsys, 125)
    assert "cannot build the agent 'json:dumps'" in err


@pytest.mark.parametrize(
    "args",
    [
        ["view", "run_1", "-o", "a\0b.html"],
        ["export", "run_1", "-o", "a\0b.jsonl"],
        ["export", "run_1", "--otlp-file", "a\0b.json"],
    ],
)
def test_a_nul_byte_in_an_output_path_is_one_line(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    record(JsonlEventStore("runs.jsonl"))
    one_line_error([*args, "--store", "runs.jsonl"], capsys, 2)


def test_a_nul_byte_in_the_store_path_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    one_line_error(["runs", "--store", "a\0b.db"], capsys, 2)


@pytest.mark.parametrize("command", [["show", "run_1"], ["state", "run_1"], ["export", "run_1"],
                                     ["view", "run_1"], ["replay", "run_1"]])  # fmt: skip
def test_a_log_from_a_newer_schema_is_refused(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    record(JsonlEventStore("runs.jsonl"))
    log = Path("runs.jsonl")
    lines = log.read_bytes().splitlines()
    lines[0] = lines[0].replace(b'"agent_id"', b'"schema_version":2,"agent_id"')
    log.write_bytes(b"\n".join(lines) + b"\n")
    err = one_line_error([*command, "--store", "runs.jsonl"], capsys, 1)
    assert "schema version 2" in err
    assert not Path("run_1.html").exists()


def test_reading_an_empty_file_leaves_it_empty(capsys: pytest.CaptureFixture[str]) -> None:
    Path("empty.db").touch()
    assert main(["runs", "--store", "empty.db"]) == 0
    one_line_error(["show", "run_1", "--store", "empty.db"], capsys, 2)
    assert Path("empty.db").stat().st_size == 0
    assert sorted(p.name for p in Path().iterdir()) == ["empty.db"]


def test_reading_commands_leave_a_sqlite_database_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    store = SqliteEventStore("events.db")
    record(store)
    store.close()
    with sqlite3.connect("events.db") as connection:  # back to a rollback journal: nothing beside it
        connection.execute("PRAGMA journal_mode = DELETE")
    connection.close()
    before = Path("events.db").read_bytes()
    for command in (["runs"], ["show", "run_1"], ["state", "run_1"], ["export", "run_1"]):
        assert main([*command, "--store", "events.db"]) == 0
    assert Path("events.db").read_bytes() == before
    assert sorted(p.name for p in Path().iterdir()) == ["events.db"]
    capsys.readouterr()


def test_reading_a_wal_database_creates_no_file_beside_it(capsys: pytest.CaptureFixture[str]) -> None:
    """A database as the store leaves it (WAL, closed) reads without a -wal or -shm file appearing."""
    store = SqliteEventStore("events.db")
    record(store)
    store.close()
    assert sorted(p.name for p in Path().iterdir()) == ["events.db"]
    before = Path("events.db").read_bytes()
    for command in (["runs"], ["show", "run_1"], ["state", "run_1"], ["export", "run_1"]):
        assert main([*command, "--store", "events.db"]) == 0
    reader = SqliteEventStore("events.db", read_only=True)
    assert [type(e).__name__ for e in reader.read_sync("run_1")][-1] == "RunCompleted"
    reader.close()
    assert Path("events.db").read_bytes() == before
    assert sorted(p.name for p in Path().iterdir()) == ["events.db"]
    capsys.readouterr()


def test_a_reader_sees_what_a_running_writer_committed() -> None:
    """With a writer holding the database open (its -wal file there), a reader reads through it."""
    writer = SqliteEventStore("events.db")
    record(writer)
    assert Path("events.db-wal").exists()
    reader = SqliteEventStore("events.db", read_only=True)
    assert [type(e).__name__ for e in reader.read_sync("run_1")][-1] == "RunCompleted"
    record(writer, "run_2")
    assert reader.streams_sync() == ["run_1", "run_2"]
    reader.close()
    writer.close()


def test_a_reader_opened_before_any_writer_sees_a_writer_that_comes_later() -> None:
    """A reader that found no writer (and read the file as immutable) reads through the writer's
    files once one has opened the database."""
    first = SqliteEventStore("events.db")
    record(first)
    first.close()
    reader = SqliteEventStore("events.db", read_only=True)
    assert reader.streams_sync() == ["run_1"]
    assert not Path("events.db-wal").exists()
    writer = SqliteEventStore("events.db")
    record(writer, "run_2")
    assert reader.streams_sync() == ["run_1", "run_2"]
    assert [type(e).__name__ for e in reader.read_sync("run_2")][-1] == "RunCompleted"
    reader.close()
    writer.close()


def test_a_read_only_store_refuses_to_append() -> None:
    store = SqliteEventStore("events.db")
    record(store)
    store.close()
    reader = SqliteEventStore("events.db", read_only=True)
    assert [e.seq for e in reader.read_sync("run_1")] == list(range(4))
    failed = RunFailed(run_id="run_1", seq=4, at=0, error_type="E", message="m")
    with pytest.raises(StoreError, match="readonly"):
        reader.append_sync("run_1", [failed], 4)
    reader.close()


def test_replaying_an_interrupted_run_says_it_is_incomplete(capsys: pytest.CaptureFixture[str]) -> None:
    record(JsonlEventStore("runs.jsonl"))
    log = Path("runs.jsonl")
    log.write_bytes(b"".join(log.read_bytes().splitlines(keepends=True)[:-1]))  # RunCompleted lost
    err = one_line_error(["replay", "run_1", "--store", "runs.jsonl"], capsys, 1)
    assert "incomplete" in err
    assert "diverged" not in err


def test_an_unexpected_error_is_still_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    record(JsonlEventStore("runs.jsonl"))

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("a bug\nover two lines")

    monkeypatch.setattr("agentledger.render.plain_run", broken)  # show on a pipe
    one_line_error(["show", "run_1", "--store", "runs.jsonl"], capsys, 1)


@pytest.mark.parametrize("layout", ["runs", "runs.jsonl"])
def test_reading_commands_leave_a_torn_jsonl_log_as_it_is(
    layout: str, capsys: pytest.CaptureFixture[str]
) -> None:
    record(JsonlEventStore(layout))
    log = Path(layout) / "run_1.jsonl" if layout == "runs" else Path(layout)
    with log.open("ab") as file:
        file.write(b'{"type":"RunFailed","run_')  # what a writer killed mid-write leaves
    before = log.read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("default")  # shown as the command shows warnings, not raised
        assert main(["show", "run_1", "--store", layout]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "torn" in err
    assert "read-only" in err
    assert log.read_bytes() == before
    reader = JsonlEventStore(layout, read_only=True)
    with pytest.warns(TornTailWarning):
        assert len(reader.read_sync("run_1")) == 4
    with pytest.raises(StoreError, match="read-only"):
        reader.append_sync("run_1", [], 4)
    assert log.read_bytes() == before

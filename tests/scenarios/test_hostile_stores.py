"""Damaged stores: every read path reports ``LogCorruptError`` or ``StoreError`` with the place.

Each case is a mutation of a real log that once escaped as a foreign exception (``TypeError``,
``UnicodeDecodeError``, ``ValueError``, ``RecursionError``): text where SQLite keeps integers,
undecodable text in the schema or a stream name, a catalog line naming no possible stream, and
values nested past the recursion limit. The command line must say so in one line.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentledger import Agent, LogCorruptError, StoreError
from agentledger.adapters.chat.scripted import ScriptedChatClient
from agentledger.adapters.stores.jsonl import JsonlEventStore
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.cli import main
from agentledger.core import decode_event, decode_events
from agentledger.core.depth import MAX_DEPTH
from agentledger.core.events import Event
from agentledger.store import EventStore
from agentledger.testing import FixedClock, SequentialIds

READ_COMMANDS = [["runs"], ["show", "run_1"], ["state", "run_1"], ["export", "run_1"]]


def record_run(store: EventStore) -> None:
    agent = Agent(client=ScriptedChatClient(["hello"]), store=store, clock=FixedClock(), ids=SequentialIds())
    anyio.run(agent.run, "hi")


def sqlite_log(tmp_path: Path) -> Path:
    path = tmp_path / "events.db"
    store = SqliteEventStore(path)
    record_run(store)
    store.close()
    return path


def sqlite_read(path: Path) -> list[Event]:
    """The events of run_1, read through a store that is closed again, whatever the read raised."""
    with closing(SqliteEventStore(path)) as store:
        return store.read_sync("run_1")


def sqlite_streams(path: Path) -> list[str]:
    with closing(SqliteEventStore(path)) as store:
        return store.streams_sync()


def edit(path: Path, *statements: str) -> None:
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in statements:
            connection.execute(statement)
    finally:
        connection.close()


def deep_record(depth: int) -> bytes:
    result = b"[" * depth + b"]" * depth
    return (
        b'{"type":"ToolReturned","run_id":"run_1","seq":0,"at":0,"call_id":"c","name":"n","result":'
        + result
        + b"}"
    )


def fails_in_one_line(store: Path, command: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main([*command, "--store", str(store)])
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.count("\n") == 1
    assert err.startswith("agentledger: ")
    return err


# -- SQLite ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("column", ["seq", "last"])
def test_sqlite_text_where_seq_belongs_is_corruption(
    tmp_path: Path, column: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sqlite_log(tmp_path)
    edit(path, "DROP TRIGGER events_follow", f"UPDATE events SET {column} = 'x' || {column}")
    with pytest.raises(LogCorruptError, match="expected integer seq and last") as caught:
        sqlite_read(path)
    assert "run_1" in caught.value.where
    for command in READ_COMMANDS[1:]:
        fails_in_one_line(path, command, capsys)


def test_sqlite_undecodable_stream_name_is_corruption(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sqlite_log(tmp_path)
    edit(path, "UPDATE streams SET name = CAST(X'ff00fe' AS TEXT)")
    with pytest.raises(StoreError, match="decode"):
        sqlite_streams(path)
    fails_in_one_line(path, ["runs"], capsys)


def test_sqlite_undecodable_schema_text_is_a_store_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sqlite_log(tmp_path)
    edit(
        path,
        "PRAGMA writable_schema = ON",
        "UPDATE sqlite_master SET sql = CAST(X'435245415445205441424c45ff' AS TEXT) WHERE name = 'streams'",
    )
    with pytest.raises(StoreError):
        sqlite_streams(path)
    for command in READ_COMMANDS:
        fails_in_one_line(path, command, capsys)


def test_sqlite_blob_data_too_deep_is_corruption(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = sqlite_log(tmp_path)
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("UPDATE events SET data = ?, last = seq WHERE seq = 0", (deep_record(1200),))
        connection.execute("DELETE FROM events WHERE seq > 0")
    finally:
        connection.close()
    with pytest.raises(LogCorruptError, match="nested deeper") as caught:
        sqlite_read(path)
    assert caught.value.where.endswith("stream 'run_1' seq 0")
    for command in READ_COMMANDS[1:]:
        fails_in_one_line(path, command, capsys)


# -- JSONL ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 990, 1_000, 100_000])
@pytest.mark.parametrize("layout", ["runs", "runs.jsonl"])
def test_jsonl_record_nested_too_deep_is_corruption(
    tmp_path: Path, depth: int, layout: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store_path = tmp_path / layout
    record_run(JsonlEventStore(store_path))
    log = store_path / "run_1.jsonl" if layout == "runs" else store_path
    lines = log.read_bytes().splitlines()
    log.write_bytes(b"\n".join([deep_record(depth), *lines[1:]]) + b"\n")
    with pytest.raises(LogCorruptError, match="nested deeper") as caught:
        JsonlEventStore(store_path).read_sync("run_1")
    assert caught.value.where == f"{log}:1"
    for command in READ_COMMANDS[1:]:
        fails_in_one_line(store_path, command, capsys)


def test_jsonl_record_at_the_depth_limit_reads(tmp_path: Path) -> None:
    log = tmp_path / "runs.jsonl"
    log.write_bytes(deep_record(MAX_DEPTH - 1) + b"\n")
    (event,) = JsonlEventStore(log).read_sync("run_1")
    assert event.seq == 0


@pytest.mark.parametrize("name", [b'""', b'"' + b"x" * 300 + b'"'], ids=["empty", "too-long"])
def test_jsonl_catalog_naming_no_possible_stream_is_corruption(
    tmp_path: Path, name: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    record_run(JsonlEventStore(runs))
    with (runs / "streams.index").open("ab") as catalog:
        catalog.write(name + b"\n")
    with pytest.raises(LogCorruptError, match="expected a stream name") as caught:
        JsonlEventStore(runs).streams_sync()
    assert caught.value.where == f"{runs / 'streams.index'}:2"
    fails_in_one_line(runs, ["runs"], capsys)


# -- the decoder itself ---------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [MAX_DEPTH, 999, 5_000])
def test_decode_event_refuses_deep_records_with_a_decode_error(depth: int) -> None:
    import msgspec

    with pytest.raises(msgspec.DecodeError, match="nested deeper"):
        decode_event(deep_record(depth))
    with pytest.raises(msgspec.DecodeError, match="nested deeper"):
        decode_events(b"[" + deep_record(depth) + b"]")


def test_brackets_inside_strings_do_not_count() -> None:
    text: Any = "[" * 2_000 + "{" * 2_000
    record = b'{"type":"ToolReturned","run_id":"r","seq":0,"at":0,"call_id":"c","name":"n","result":"'
    assert decode_event(record + text.encode() + b'"}').seq == 0


@pytest.mark.parametrize("layout", ["runs", "runs.jsonl"])
def test_a_record_whose_text_is_not_utf8_is_corruption(
    tmp_path: Path, layout: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store_path = tmp_path / layout
    record_run(JsonlEventStore(store_path))
    log = store_path / "run_1.jsonl" if layout == "runs" else store_path
    log.write_bytes(log.read_bytes().replace(b'"role":"assistant"', b'"role":"\x80assistant"'))
    # msgspec words it by version: "invalid start byte" (0.22) or "Invalid UTF-8" (0.23)
    with pytest.raises(LogCorruptError, match=r"(?i)not UTF-8|invalid start byte|invalid UTF-8") as caught:
        JsonlEventStore(store_path).read_sync("run_1")
    assert caught.value.where.startswith(f"{log}:")
    for command in READ_COMMANDS[1:]:
        fails_in_one_line(store_path, command, capsys)


def test_a_journal_read_of_many_runs_reports_only_the_runs_asked_for(tmp_path: Path) -> None:
    log = tmp_path / "runs.jsonl"
    store = JsonlEventStore(log)
    agent = Agent(
        client=ScriptedChatClient(["a", "b", "c"]), store=store, clock=FixedClock(), ids=SequentialIds()
    )
    for _ in range(3):
        anyio.run(agent.run, "hi")
    lines = log.read_bytes().splitlines()
    lines[-1] = lines[-1].replace(b'"text":"c"', b'"text":3')  # run_3's last event, now corrupt
    log.write_bytes(b"\n".join(lines) + b"\n")
    fresh = JsonlEventStore(log)
    many = fresh.read_many_sync(["run_1", "run_2"])
    assert [len(events) for events in many.values()] == [4, 4]
    with pytest.raises(LogCorruptError, match=f"{log}:{len(lines)}"):
        fresh.read_many_sync(["run_1", "run_2", "run_3"])


OWN_SEQ_CASES = [
    ((0, 0), "expected seq 1 of 'run_1', found seq 0"),
    ((7, 3), "expected seq 0 of 'run_1', found seq 7"),
]


@pytest.mark.parametrize(("claims", "expected"), OWN_SEQ_CASES)
def test_sqlite_records_whose_own_seq_is_not_their_row_are_corruption(
    tmp_path: Path, claims: tuple[int, int], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each record's own ``seq`` must match its place in the row (found by fuzzing at 5,000 examples)."""
    path = sqlite_log(tmp_path)
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        [(data,)] = connection.execute("SELECT data FROM events WHERE seq = 0 AND last = 1").fetchall()
        first, second = bytes(data).split(b"\n")
        first = first.replace(b'"seq":0,', b'"seq":%d,' % claims[0])
        second = second.replace(b'"seq":1,', b'"seq":%d,' % claims[1])
        connection.execute("DROP TRIGGER IF EXISTS events_follow")
        connection.execute("UPDATE events SET data = ? WHERE seq = 0", (first + b"\n" + second,))
    finally:
        connection.close()
    with pytest.raises(LogCorruptError, match=expected) as caught:
        sqlite_read(path)
    assert "stream 'run_1' seq" in caught.value.where
    for command in READ_COMMANDS[1:]:
        fails_in_one_line(path, command, capsys)


@pytest.mark.parametrize("replacement", ["empty file", "older copy", "removed"])
def test_a_sqlite_file_replaced_under_a_running_writer_refuses_appends(
    tmp_path: Path, replacement: str
) -> None:
    """A restore from a backup, an empty file renamed over the database, or a deletion: the writer
    notices the path names another file and refuses to append, instead of acknowledging appends
    that land in the old file."""
    import os

    from agentledger.core.events import RunStarted

    path = tmp_path / "events.db"
    writer = SqliteEventStore(path)
    record_run(writer)
    copy = tmp_path / "backup.db"
    with closing(sqlite3.connect(path)) as source, closing(sqlite3.connect(copy)) as target:
        source.backup(target)
    if replacement == "empty file":
        (tmp_path / "empty.db").write_bytes(b"")
        os.replace(tmp_path / "empty.db", path)
    elif replacement == "older copy":
        os.replace(copy, path)
    else:
        os.unlink(path)
    event = RunStarted(run_id="run_2", seq=0, at=0, agent_id="a")
    with pytest.raises(StoreError, match="replaced or removed"):
        writer.append_sync("run_2", [event], 0)
    with pytest.raises(StoreError):  # and it stays refused
        writer.append_sync("run_2", [event], 0)
    writer.close()


def test_a_sqlite_stream_listed_without_events_is_corruption(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sqlite_log(tmp_path)
    edit(path, "DELETE FROM events")
    store = SqliteEventStore(path)
    assert store.streams_sync() == ["run_1"]
    with pytest.raises(LogCorruptError, match="listed but holds no events"):
        store.read_sync("run_1")
    assert store.read_sync("run_2") == []  # a stream it does not name is simply empty
    store.close()
    for command in READ_COMMANDS[1:]:
        fails_in_one_line(path, command, capsys)


def test_a_sqlite_reader_follows_the_path_to_the_file_that_replaced_it(tmp_path: Path) -> None:
    import os

    path = sqlite_log(tmp_path)
    other = tmp_path / "other.db"
    store = SqliteEventStore(other)
    agent = Agent(client=ScriptedChatClient(["other"]), store=store, clock=FixedClock(), ids=SequentialIds())
    anyio.run(agent.run, "another question")
    store.close()
    reader = SqliteEventStore(path, read_only=True)
    before = reader.read_sync("run_1")
    os.replace(other, path)
    assert reader.read_sync("run_1") != before  # the events of the file the path names now
    reader.close()


def test_a_stream_created_between_a_readers_two_statements_reads_whole(tmp_path: Path) -> None:
    """A reader finds no events, then finds the stream listed: a writer committed both in
    between (as a resume's new run does while another process reads it). That is a stream
    with events, read again, not a stream whose events were lost."""
    from agentledger.core.events import RunStarted

    path = tmp_path / "events.sqlite"
    writer, reader = SqliteEventStore(path), SqliteEventStore(path)
    reader.read_sync("warm-up")  # opens the reader's connection
    event = RunStarted(run_id="run_7", seq=0, at=0, agent_id="agent")
    written: list[bool] = []

    def between(statement: str) -> None:
        if statement.startswith("SELECT 1 FROM streams") and not written:
            written.append(True)
            writer.append_sync("run_7", [event], 0)

    connection = reader._connect()
    connection.set_trace_callback(between)
    try:
        assert reader.read_sync("run_7") == [event]
    finally:
        connection.set_trace_callback(None)
        writer.close()
        reader.close()
    assert written == [True]

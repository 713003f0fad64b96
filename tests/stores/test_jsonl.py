"""JsonlEventStore (directory and journal layouts) against the durable store contract, and what
JSONL adds of its own: torn tails, line checks, safe file names."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar

import pytest

from agentledger.adapters.stores import _lines
from agentledger.adapters.stores.jsonl import JsonlEventStore, TornTailWarning
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.core.events import encode_event
from agentledger.errors import LogCorruptError, StoreError
from agentledger.store import EventStore
from agentledger.testing.stores import (
    CrashOutcome,
    DurableStoreContract,
    make_events,
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _replace_line(path: Path, index: int, data: bytes) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[index] = data
    path.write_bytes(b"\n".join(lines))


class TestJsonlDirectory(DurableStoreContract):
    atomic_batches = False
    repair_warning = TornTailWarning
    crash_outcomes: ClassVar[Mapping[str, CrashOutcome]] = {
        "idle": CrashOutcome(0, repaired=False),
        "torn-record": CrashOutcome(0, repaired=True),
        "mid-batch": CrashOutcome(1, repaired=True),
        "before-fsync": CrashOutcome(3, repaired=False),
    }
    location_name = "runs"

    @classmethod
    def install_fault(cls, store: EventStore, point: str, hang: Callable[[], None]) -> None:
        """A torn record, part of a batch, or a whole batch not yet synced: then ``hang``."""
        write_all = _lines.write_all

        def partial_write(fd: int, data: bytes) -> None:
            if not data.startswith(b"{"):
                write_all(fd, data)  # not an event record (the catalog of stream names)
                return
            first = data.index(b"\n") + 1
            write_all(fd, data[: first // 2] if point == "torn-record" else data[: first + 10])
            hang()

        if point in ("torn-record", "mid-batch"):
            _lines.write_all = partial_write
        elif point == "before-fsync":
            _lines._sync = lambda fd: hang()
        else:
            super().install_fault(store, point, hang)

    def open_store(self, location: Path) -> JsonlEventStore:
        return JsonlEventStore(location)

    def log_file(self, stream: str) -> Path:
        return self.location / f"{stream}.jsonl"

    async def corrupt(self, stream: str, seq: int, data: bytes) -> str:
        path = self.log_file(stream)
        _replace_line(path, seq, data)
        return f"{path}:{seq + 1}"

    @pytest.fixture(params=["idle", "torn-record", "mid-batch", "before-fsync", "loop"])
    def crash_point(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)


class TestJsonlJournal(TestJsonlDirectory):
    location_name = "runs.jsonl"

    def log_file(self, stream: str) -> Path:
        return self.location


# -- JSONL --------------------------------------------------------------------------------------

LAYOUTS = ["runs", "runs.jsonl"]


def _jsonl_file(store: JsonlEventStore, stream: str) -> Path:
    return store.path if store.layout == "journal" else store.path / f"{stream}.jsonl"


@pytest.mark.parametrize("name", LAYOUTS)
def test_jsonl_lines_are_encoded_events(tmp_path: Path, name: str) -> None:
    """Each stored line is exactly encode_event(event), one event per line."""
    store = JsonlEventStore(tmp_path / name)
    events = make_events("run_1", 0, 3, "x")
    store.append_sync("run_1", events, 0)
    assert _jsonl_file(store, "run_1").read_bytes() == b"".join(encode_event(e) + b"\n" for e in events)


@pytest.mark.parametrize("name", LAYOUTS)
@pytest.mark.parametrize("reader", ["same store", "fresh store"])
def test_jsonl_torn_tail_is_cut_with_a_warning(tmp_path: Path, name: str, reader: str) -> None:
    """A last record without its line end is cut off with a TornTailWarning, and appends go on."""
    store = JsonlEventStore(tmp_path / name)
    events = make_events("run_1", 0, 3, "x")
    store.append_sync("run_1", events, 0)
    path = _jsonl_file(store, "run_1")
    size = path.stat().st_size
    with path.open("ab") as file:
        file.write(encode_event(make_events("run_1", 3, 1, "torn")[0])[:25])
    handle = store if reader == "same store" else JsonlEventStore(tmp_path / name)
    with pytest.warns(TornTailWarning, match=r"line 4 was torn .* cut off its 25 bytes"):
        assert handle.read_sync("run_1") == events
    assert path.stat().st_size == size
    more = make_events("run_1", 3, 1, "more")
    assert handle.append_sync("run_1", more, 3) == 4
    assert JsonlEventStore(tmp_path / name).read_sync("run_1") == events + more


@pytest.mark.parametrize("name", LAYOUTS)
def test_jsonl_garbage_middle_line_is_corrupt(tmp_path: Path, name: str) -> None:
    """A middle line that is not JSON raises LogCorruptError naming the file and line."""
    store = JsonlEventStore(tmp_path / name)
    store.append_sync("run_1", make_events("run_1", 0, 4, "x"), 0)
    path = _jsonl_file(store, "run_1")
    _replace_line(path, 1, b"\x00\x00 not json")
    with pytest.raises(LogCorruptError, match="malformed") as info:
        JsonlEventStore(tmp_path / name).read_sync("run_1")
    assert info.value.where == f"{path}:2"


def test_jsonl_journal_files_events_under_their_run_id(tmp_path: Path) -> None:
    """A journal refuses events whose run_id is not the stream, and writes none of the batch."""
    store = JsonlEventStore(tmp_path / "all.jsonl")
    mixed = make_events("run_1", 0, 1, "x") + make_events("run_2", 1, 1, "y")
    with pytest.raises(ValueError, match="run_id"):
        store.append_sync("run_1", mixed, 0)
    assert store.read_sync("run_1") == []
    assert not store.path.exists()


def test_jsonl_directory_names_are_safe_files(tmp_path: Path) -> None:
    """Any stream name maps to one file inside the directory and is listed back unchanged."""
    store = JsonlEventStore(tmp_path / "runs")
    names = ["../escape", "a/b", ".hidden", "ünï code", "streams"]
    for name in names:
        store.append_sync(name, make_events(name, 0, 1, "x"), 0)
    assert JsonlEventStore(tmp_path / "runs").streams_sync() == names
    assert sorted(p.parent for p in tmp_path.rglob("*.jsonl")) == [tmp_path / "runs"] * len(names)
    assert store.read_sync("a/b") == make_events("a/b", 0, 1, "x")
    with pytest.raises(ValueError, match="non-empty"):
        store.append_sync("", [], 0)
    assert store.read_sync("") == []


def test_jsonl_directory_lists_copied_in_logs_last(tmp_path: Path) -> None:
    """A log file copied into the directory is listed after the streams the store created."""
    store = JsonlEventStore(tmp_path / "runs")
    store.append_sync("run_b", make_events("run_b", 0, 1, "x"), 0)
    copied = make_events("run_a", 0, 2, "y")
    (tmp_path / "runs" / "run_a.jsonl").write_bytes(b"".join(encode_event(e) + b"\n" for e in copied))
    assert store.streams_sync() == ["run_b", "run_a"]
    assert store.read_sync("run_a") == copied


@pytest.mark.parametrize("name", LAYOUTS)
def test_jsonl_replaced_file_is_read_again(tmp_path: Path, name: str) -> None:
    """A log file replaced behind the store's back is read again from its start."""
    store = JsonlEventStore(tmp_path / name)
    events = make_events("run_1", 0, 5, "x")
    store.append_sync("run_1", events, 0)
    path = _jsonl_file(store, "run_1")
    shorter = path.with_suffix(".tmp")
    shorter.write_bytes(b"".join(encode_event(e) + b"\n" for e in events[:2]))
    os.replace(shorter, path)
    assert store.read_sync("run_1") == events[:2]


def test_jsonl_layout_follows_the_path(tmp_path: Path) -> None:
    """A .jsonl path or an existing file is a journal; any other path is a directory."""
    existing = tmp_path / "log"
    existing.write_bytes(b"")
    assert JsonlEventStore(tmp_path / "a.jsonl").layout == "journal"
    assert JsonlEventStore(existing).layout == "journal"
    assert JsonlEventStore(tmp_path / "runs").layout == "directory"


@pytest.mark.parametrize("name", LAYOUTS)
def test_jsonl_without_fsync_keeps_every_event(tmp_path: Path, name: str) -> None:
    """fsync=False stores the same lines (durability is left to the OS)."""
    store = JsonlEventStore(tmp_path / name, fsync=False)
    events = make_events("run_1", 0, 4, "x")
    store.append_sync("run_1", events, 0)
    assert JsonlEventStore(tmp_path / name).read_sync("run_1") == events


# -- SQLite -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["runs", "runs.jsonl", "e.sqlite"])
def test_closed_store_refuses_work(tmp_path: Path, name: str) -> None:
    """Every call on a closed store raises StoreError."""
    path = tmp_path / name
    store = SqliteEventStore(path) if name.endswith(".sqlite") else JsonlEventStore(path)
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.read_sync("run_1")


@pytest.mark.anyio
async def test_a_conflicting_writer_fails_the_run_with_one_typed_error(tmp_path: Path) -> None:
    """Another writer taking the run's stream first gives the run a plain ConflictError."""
    from agentledger import Agent, ConflictError
    from agentledger.adapters.chat.scripted import ScriptedChatClient
    from agentledger.testing import SequentialIds

    store = JsonlEventStore(tmp_path / "runs")
    first = Agent(client=ScriptedChatClient(["one"]), store=store, ids=SequentialIds())
    await first.run("hi")
    second = Agent(client=ScriptedChatClient(["two"]), store=store, ids=SequentialIds())
    with pytest.raises(ConflictError) as info:
        await second.run("hi")
    assert info.value.__context__ is None or not isinstance(info.value.__context__, ConflictError)
    assert [e.seq for e in await store.read("run_1")] == [0, 1, 2, 3]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("damage", ["delete", "duplicate", "swap"])
def test_jsonl_lines_lost_repeated_or_moved_are_corrupt(tmp_path: Path, layout: str, damage: str) -> None:
    """A line deleted, duplicated or moved in a JSONL log is reported with its position, never read past."""
    store = JsonlEventStore(tmp_path / layout)
    store.append_sync("run_1", make_events("run_1", 0, 5, "x"), 0)
    path = _jsonl_file(store, "run_1")
    lines = path.read_bytes().splitlines(keepends=True)
    if damage == "delete":
        del lines[2]
    elif damage == "duplicate":
        lines.insert(2, lines[2])
    else:
        lines[2], lines[3] = lines[3], lines[2]
    path.write_bytes(b"".join(lines))
    with pytest.raises(LogCorruptError, match="expected seq") as info:
        JsonlEventStore(tmp_path / layout).read_sync("run_1")
    assert info.value.where.startswith(f"{path}:")


def test_jsonl_journal_makes_its_directories_when_it_first_writes(tmp_path: Path) -> None:
    """A journal whose directories are missing gets them on its first append, not before
    (opening the store or reading creates nothing); one removed later is made again."""
    path = tmp_path / "a" / "b" / "runs.jsonl"
    store = JsonlEventStore(path)
    assert store.read_sync("run_1") == []
    assert not (tmp_path / "a").exists()
    assert store.append_sync("run_1", make_events("run_1", 0, 2, "a"), 0) == 2
    assert store.read_sync("run_1") == make_events("run_1", 0, 2, "a")
    path.unlink()
    path.parent.rmdir()
    assert store.append_sync("run_2", make_events("run_2", 0, 1, "b"), 0) == 1
    store.close()
    fresh = JsonlEventStore(path)
    assert fresh.read_sync("run_2") == make_events("run_2", 0, 1, "b")
    assert fresh.streams_sync() == ["run_2"]
    fresh.close()

"""Group commit in the durable stores: appends that arrive during a commit share the next one.

Each store is subclassed so that its first commit waits for the test: while it is held, the
other appends queue; the test knows they all have once every task is blocked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from agentledger.adapters.stores._group import Append, LoopGroups
from agentledger.adapters.stores.jsonl import JsonlEventStore
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.errors import ConflictError, StoreError
from agentledger.testing.stores import make_events


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Gate:
    """Holds the first commit until ``open``; records the size of every group committed."""

    def __init__(self) -> None:
        self.groups: list[int] = []
        self.opened = threading.Event()
        self.entered = threading.Event()
        self.failure: tuple[int, BaseException] | None = None  # the group to fail (from 1), and how

    def enter(self, size: int) -> None:
        self.groups.append(size)
        if len(self.groups) == 1:
            self.entered.set()
            self.opened.wait(30)
        if self.failure is not None and self.failure[0] == len(self.groups):
            raise self.failure[1]


class GatedSqlite(SqliteEventStore):
    gate = Gate()

    def commit_group(self, group: list[Any]) -> None:
        self.gate.enter(len(group))
        super().commit_group(group)


class GatedJsonl(JsonlEventStore):
    gate = Gate()

    def commit_group(self, group: list[Any]) -> None:
        self.gate.enter(len(group))
        super().commit_group(group)


STORES: dict[str, Callable[[Path], GatedSqlite | GatedJsonl]] = {
    "sqlite": lambda d: GatedSqlite(d / "e.sqlite"),
    "jsonl directory": lambda d: GatedJsonl(d / "runs"),
    "jsonl journal": lambda d: GatedJsonl(d / "runs.jsonl"),
}


@pytest.fixture(params=list(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[GatedSqlite | GatedJsonl]:
    """The store, closed at teardown too: a test that fails before its own close leaves nothing open."""
    opened = STORES[request.param](tmp_path)
    opened.gate = Gate()
    yield opened
    opened.close()


def reopen(store: GatedSqlite | GatedJsonl) -> SqliteEventStore | JsonlEventStore:
    if isinstance(store, SqliteEventStore):
        return SqliteEventStore(store.path)
    return JsonlEventStore(store.path)


async def held_then_released(
    store: GatedSqlite | GatedJsonl, appends: list[tuple[str, int, str]]
) -> list[Any]:
    """A lone first append holds the commit; ``appends`` queue behind it; then all go on."""
    outcomes: list[Any] = [None] * len(appends)

    async def one(index: int, stream: str, version: int, tag: str) -> None:
        try:
            outcomes[index] = await store.append(stream, make_events(stream, version, 2, tag), version)
        except StoreError as exc:
            outcomes[index] = exc

    async with anyio.create_task_group() as group:
        group.start_soon(store.append, "run_first", make_events("run_first", 0, 1, "first"), 0)
        await anyio.wait_all_tasks_blocked()
        for index, (stream, version, tag) in enumerate(appends):
            group.start_soon(one, index, stream, version, tag)
        await anyio.wait_all_tasks_blocked()
        store.gate.opened.set()
    return outcomes


@pytest.mark.anyio
async def test_appends_during_a_commit_share_the_next_one(store: GatedSqlite | GatedJsonl) -> None:
    """A lone writer commits alone at once; the 30 appends that came meanwhile commit together."""
    appends = [(f"run_{i}", 0, f"t{i}") for i in range(30)]
    outcomes = await held_then_released(store, appends)
    assert outcomes == [2] * 30
    assert store.gate.groups == [1, 30]
    fresh = reopen(store)
    for stream, _, tag in appends:
        assert await fresh.read(stream) == make_events(stream, 0, 2, tag)
    assert await fresh.streams() == ["run_first"] + [stream for stream, _, _ in appends]
    fresh.close()
    store.close()


@pytest.mark.anyio
async def test_a_conflict_fails_only_its_own_append(store: GatedSqlite | GatedJsonl) -> None:
    """In one group, versions are checked in queue order: only the stale append fails."""
    appends = [
        ("run_a", 0, "a"),
        ("run_a", 0, "stale"),
        ("run_b", 0, "b"),
        ("run_a", 2, "a2"),
        ("run_c", 5, "gap"),
    ]
    outcomes = await held_then_released(store, appends)
    assert outcomes[0] == 2
    assert outcomes[2] == 2
    assert outcomes[3] == 4
    assert isinstance(outcomes[1], ConflictError)
    assert (outcomes[1].expected, outcomes[1].actual) == (0, 2)
    assert isinstance(outcomes[4], ConflictError)
    assert (outcomes[4].expected, outcomes[4].actual) == (5, 0)
    assert store.gate.groups == [1, 5]
    fresh = reopen(store)
    assert await fresh.read("run_a") == make_events("run_a", 0, 2, "a") + make_events("run_a", 2, 2, "a2")
    assert await fresh.read("run_b") == make_events("run_b", 0, 2, "b")
    assert await fresh.read("run_c") == []
    assert "run_c" not in await fresh.streams()
    fresh.close()
    store.close()


@pytest.mark.anyio
async def test_a_large_group_keeps_every_batch_in_order(store: GatedSqlite | GatedJsonl) -> None:
    """203 appends in one group (SQLite inserts the 202 accepted in statements of 128, 64, 8 and
    2 rows): each stream's two batches land in order, and a stale append in the middle fails alone."""
    appends = [(f"run_{i}", version, f"t{i}_{version}") for i in range(101) for version in (0, 2)]
    appends.insert(150, ("run_3", 0, "stale"))
    outcomes = await held_then_released(store, appends)
    assert store.gate.groups == [1, 203]
    stale = outcomes.pop(150)
    assert isinstance(stale, ConflictError)
    assert (stale.expected, stale.actual) == (0, 4)
    assert outcomes == [2, 4] * 101
    fresh = reopen(store)
    for i in range(101):
        stream = f"run_{i}"
        expected = make_events(stream, 0, 2, f"t{i}_0") + make_events(stream, 2, 2, f"t{i}_2")
        assert await fresh.read(stream) == expected
    assert await fresh.streams() == ["run_first"] + [f"run_{i}" for i in range(101)]
    fresh.close()
    store.close()


@pytest.mark.anyio
async def test_a_failed_commit_fails_every_append_of_its_group_only(store: GatedSqlite | GatedJsonl) -> None:
    """A group that cannot be written fails each of its appends; the next group goes on."""
    store.gate.failure = (2, StoreError("the disk is gone"))
    outcomes = await held_then_released(store, [("run_x", 0, "x"), ("run_y", 0, "y")])
    assert [str(outcome) for outcome in outcomes] == ["the disk is gone"] * 2
    assert await store.read("run_first") == make_events("run_first", 0, 1, "first")
    assert await store.read("run_y") == []
    assert await store.append("run_x", make_events("run_x", 0, 2, "x"), 0) == 2
    async with reopen(store) as fresh:
        assert await fresh.read("run_x") == make_events("run_x", 0, 2, "x")
    store.close()


def test_blocking_appends_from_threads_share_commits(tmp_path: Path) -> None:
    """append_sync from many threads while a commit is held: each append is committed once, whole."""
    store = GatedSqlite(tmp_path / "e.sqlite")
    store.gate = Gate()
    first = threading.Thread(
        target=store.append_sync, args=("run_first", make_events("run_first", 0, 1, "f"), 0)
    )
    first.start()
    assert store.gate.entered.wait(30)  # the first commit is held: later appends queue behind it
    threads = [
        threading.Thread(target=store.append_sync, args=(f"run_{i}", make_events(f"run_{i}", 0, 2, "t"), 0))
        for i in range(8)
    ]
    for thread in threads:
        thread.start()
    store.gate.opened.set()
    for thread in [first, *threads]:
        thread.join()
    assert store.gate.groups[0] == 1
    assert sum(store.gate.groups) == 9
    assert [len(store.read_sync(f"run_{i}")) for i in range(8)] == [2] * 8
    store.close()


@pytest.mark.anyio
async def test_a_cancelled_append_still_waits_for_its_commit(store: GatedSqlite | GatedJsonl) -> None:
    """Cancelled while its commit is held, an append is settled first, then cancelled: never half-done."""
    outcomes: list[str] = []

    async def cancelled_append() -> None:
        with anyio.CancelScope() as scope:
            cancel_scopes.append(scope)
            await store.append("run_c", make_events("run_c", 0, 2, "c"), 0)
            outcomes.append("returned")
        outcomes.append("cancelled" if scope.cancelled_caught else "not cancelled")

    cancel_scopes: list[anyio.CancelScope] = []
    async with anyio.create_task_group() as group:
        group.start_soon(store.append, "run_first", make_events("run_first", 0, 1, "first"), 0)
        await anyio.wait_all_tasks_blocked()
        group.start_soon(cancelled_append)
        await anyio.wait_all_tasks_blocked()
        cancel_scopes[0].cancel()
        await anyio.wait_all_tasks_blocked()
        assert outcomes == []  # still waiting for the held commit
        store.gate.opened.set()
    assert outcomes == ["cancelled"]
    assert store.gate.groups == [1, 1]
    async with reopen(store) as fresh:
        assert await fresh.read("run_c") == make_events("run_c", 0, 2, "c")
    store.close()


def test_appends_through_two_connections_see_each_other(tmp_path: Path) -> None:
    """Two stores on one database take turns on a stream: each sees the other's appends."""
    one, two = SqliteEventStore(tmp_path / "e.sqlite"), SqliteEventStore(tmp_path / "e.sqlite")
    assert one.append_sync("run_a", make_events("run_a", 0, 1, "1"), 0) == 1
    assert two.append_sync("run_a", make_events("run_a", 1, 1, "2"), 1) == 2
    with pytest.raises(ConflictError) as raised:
        one.append_sync("run_a", make_events("run_a", 1, 1, "stale"), 1)
    assert (raised.value.expected, raised.value.actual) == (1, 2)
    assert one.append_sync("run_a", make_events("run_a", 2, 1, "3"), 2) == 3
    with pytest.raises(ConflictError):
        two.append_sync("run_a", make_events("run_a", 2, 1, "stale"), 2)
    assert two.read_sync("run_a") == (
        make_events("run_a", 0, 1, "1") + make_events("run_a", 1, 1, "2") + make_events("run_a", 2, 1, "3")
    )
    one.close()
    two.close()


def recording_groups(held: anyio.Event | None = None) -> tuple[LoopGroups[bytes], list[list[str]]]:
    """Group commit on the event loop (PostgreSQL's), with a commit that records each group;
    with ``held``, the second commit waits for it."""
    groups: list[list[str]] = []

    async def commit(group: list[Append[bytes]]) -> None:
        groups.append([append.stream for append in group])
        if held is not None and len(groups) == 2:
            await held.wait()
        await anyio.lowlevel.checkpoint()  # a round trip to the server
        for append in group:
            append.succeed()

    return LoopGroups(commit), groups


@pytest.mark.anyio
async def test_appends_ready_in_one_pass_of_the_loop_share_one_group() -> None:
    """Tasks that become ready together (a commit woke them) append in one group: the first
    lets the others run before it takes the group, instead of committing alone."""
    commits, groups = recording_groups()
    versions: list[int] = []

    async def one(stream: str) -> None:
        versions.append(await commits.run(Append(stream, [b"{}"], 0)))

    async with anyio.create_task_group() as group:
        for i in range(10):
            group.start_soon(one, f"run_{i}")
    assert groups == [[f"run_{i}" for i in range(10)]]
    assert versions == [1] * 10


@pytest.mark.anyio
async def test_a_lone_append_on_the_loop_commits_alone_and_the_next_ones_together() -> None:
    """A lone writer is not held for company; appends that queue meanwhile share the next group."""
    held = anyio.Event()
    commits, groups = recording_groups(held)
    assert await commits.run(Append("run_a", [b"{}"], 0)) == 1
    async with anyio.create_task_group() as group:
        group.start_soon(commits.run, Append("run_a", [b"{}"], 1))
        await anyio.wait_all_tasks_blocked()  # its commit is held: the next two queue
        group.start_soon(commits.run, Append("run_b", [b"{}"], 0))
        group.start_soon(commits.run, Append("run_c", [b"{}"], 0))
        await anyio.wait_all_tasks_blocked()
        held.set()
    assert groups == [["run_a"], ["run_a"], ["run_b", "run_c"]]

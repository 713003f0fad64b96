"""The ``EventStore`` contract: the tests every store passes, from the memory reference on.

Subclass ``StoreContract`` in a test module and implement ``open_store``; pytest collects the
inherited tests. A durable store subclasses ``DurableStoreContract``, which adds what only a store
outside the process can show: reopening, closing, damaged records, and other processes that race,
contend, or are killed in the middle of an append (``python -m agentledger.testing._store_child``).

::

    import pytest

    pytest.register_assert_rewrite("agentledger.testing.stores")  # detailed assertion messages
    from agentledger.testing.stores import StoreContract


    class TestMyStore(StoreContract):
        def open_store(self, location):
            return MyStore(location)

The tests are async (``@pytest.mark.anyio``): they need anyio's pytest plugin, which anyio
installs, and pytest itself, which ``agentledger`` does not depend on.
"""

from __future__ import annotations

import json
import typing
import warnings
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import ClassVar, NamedTuple

import anyio
import anyio.lowlevel

try:
    import pytest
except ImportError:  # pragma: no cover - exercised only without pytest
    raise ImportError("agentledger.testing.stores needs pytest: pip install pytest") from None

from agentledger import AgentSession
from agentledger.core.events import Event
from agentledger.errors import ConflictError, LogCorruptError, StoreError
from agentledger.store import EventStore, SupportsAclose, SupportsAppendNowait, read_many

from . import capture_events
from ._store_child import BATCH, batch, make_events
from ._store_process import Child
from ._store_runs import by_stream, record_runs

__all__ = ("CrashOutcome", "DurableStoreContract", "StoreContract", "make_events", "record_runs")

EVERY_EVENT_TYPE = {cls.__name__ for cls in typing.get_args(Event)}


# -- the contract -----------------------------------------------------------------------------


class StoreContract:
    """What every ``EventStore`` does; subclasses implement ``open_store``."""

    location_name: ClassVar[str] = "store"

    def open_store(self, location: Path) -> EventStore:
        """A store over ``location`` (a path in an empty temporary directory)."""
        raise NotImplementedError

    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[EventStore]:
        """A fresh store; every handle opened during the test is closed after it."""
        self.location = tmp_path / self.location_name
        self.opened: list[EventStore] = []
        yield self.another()
        for opened in self.opened:
            if isinstance(opened, SupportsAclose):
                await opened.aclose()

    def another(self) -> EventStore:
        """Another handle on the same streams (for durable stores, a fresh reopen)."""
        store = self.open_store(self.location)
        self.opened.append(store)
        return store

    @pytest.mark.anyio
    async def test_unknown_stream_reads_empty(self, store: EventStore) -> None:
        """An unknown stream reads as empty and is not listed."""
        assert await store.read("run_missing") == []
        assert await store.read("run_missing", after=3) == []
        assert await store.streams() == []

    @pytest.mark.anyio
    async def test_agent_runs_record_every_event_type(self, store: EventStore) -> None:
        """Runs of a scripted agent with store= read back exactly, every event type included."""
        with capture_events() as events:
            await record_runs(store)
        assert {type(e).__name__ for e in events} == EVERY_EVENT_TYPE
        expected = by_stream(events)
        reader = self.another()
        assert await reader.streams() == list(expected)
        for stream, stream_events in expected.items():
            assert await reader.read(stream) == stream_events

    @pytest.mark.anyio
    async def test_session_state_rebuilds_from_the_store(self, store: EventStore) -> None:
        """Folding the stored runs gives back the live session's state and history."""
        session = await record_runs(store)
        reader = self.another()
        events = [e for stream in await reader.streams() for e in await reader.read(stream)]
        rebuilt = AgentSession.from_events(events, session.session_id)
        assert rebuilt.state.snapshot() == session.state.snapshot()
        assert rebuilt.history == session.history

    @pytest.mark.anyio
    async def test_versions_and_seq_continue_across_batches(self, store: EventStore) -> None:
        """Each append returns the new version; read gives seq 0, 1, 2... with no gaps."""
        stream, versions = "run_seq", []
        for start, size in [(0, 1), (1, 4), (5, 2)]:
            versions.append(await store.append(stream, make_events(stream, start, size, f"b{start}"), start))
        assert versions == [1, 5, 7]
        events = await store.read(stream)
        assert [e.seq for e in events] == list(range(7))
        assert await store.append(stream, [], 7) == 7

    @pytest.mark.anyio
    async def test_read_after(self, store: EventStore) -> None:
        """read(after=n) returns the events with seq > n, also when streams interleave."""
        streams = {name: make_events(name, 0, 6, name) for name in ("run_x", "run_y")}
        for start, stop in [(0, 2), (2, 3), (3, 6)]:
            for name, events in streams.items():
                await store.append(name, events[start:stop], start)
        reader = self.another()
        for name, events in streams.items():
            for after in (-5, -1, 0, 1, 3, 5, 6, 40):
                assert await reader.read(name, after=after) == events[max(after + 1, 0) :]

    @pytest.mark.anyio
    async def test_read_many_equals_reading_one_by_one(self, store: EventStore) -> None:
        """read_many gives every asked stream whole (empty for an unknown one), like read does."""
        streams = {name: make_events(name, 0, 4, name) for name in ("run_a", "run_b", "run_c")}
        for name, events in streams.items():
            await store.append(name, events[:1], 0)
            await store.append(name, events[1:], 1)
        many = await read_many(self.another(), ["run_c", "run_a", "run_nope"])
        assert many == {"run_c": streams["run_c"], "run_a": streams["run_a"], "run_nope": []}

    @pytest.mark.anyio
    async def test_reads_during_appends_see_whole_batches(self, store: EventStore) -> None:
        """A read while another task appends returns a prefix of the log ending on a batch."""
        stream, size, batches = "run_live", 3, 15
        done = anyio.Event()
        seen: list[int] = []

        async def write() -> None:
            for k in range(batches):
                await store.append(stream, make_events(stream, k * size, size, f"b{k}"), k * size)
            done.set()

        async def watch(reader: EventStore) -> None:
            while not done.is_set():
                events = await reader.read(stream)
                assert [e.seq for e in events] == list(range(len(events)))
                seen.append(len(events))
                await anyio.lowlevel.checkpoint()  # a store without IO never yields on its own

        async with anyio.create_task_group() as group:
            group.start_soon(write)
            group.start_soon(watch, store)
            group.start_soon(watch, self.another())
        assert all(n % size == 0 for n in seen)
        assert len(await store.read(stream)) == size * batches

    @pytest.mark.anyio
    @pytest.mark.parametrize("stale", [0, 2, 4])
    async def test_conflict_leaves_the_stream_unchanged(self, store: EventStore, stale: int) -> None:
        """A stale expected_version raises ConflictError and writes nothing."""
        stream = "run_conflict"
        before = make_events(stream, 0, 3, "a")
        await store.append(stream, before, 0)
        with pytest.raises(ConflictError) as info:
            await store.append(stream, make_events(stream, stale, 2, "late"), stale)
        assert (info.value.stream, info.value.expected, info.value.actual) == (stream, stale, 3)
        assert await store.read(stream) == before
        assert await self.another().read(stream) == before
        assert await store.append(stream, make_events(stream, 3, 1, "next"), 3) == 4

    @pytest.mark.anyio
    async def test_conflict_on_a_new_stream_creates_nothing(self, store: EventStore) -> None:
        """Appending to an unknown stream at a version other than 0 conflicts and lists nothing."""
        with pytest.raises(ConflictError):
            await store.append("run_new", make_events("run_new", 2, 1, "x"), 2)
        assert await store.streams() == []
        assert await store.read("run_new") == []

    @pytest.mark.anyio
    async def test_streams_are_listed_in_creation_order(self, store: EventStore) -> None:
        """streams() lists each stream once, oldest first, however appends interleave."""
        for name, version in [("run_b", 0), ("run_a", 0), ("run_b", 1), ("run_c", 0), ("run_a", 1)]:
            await store.append(name, make_events(name, version, 1, "x"), version)
        assert await store.streams() == ["run_b", "run_a", "run_c"]
        assert await self.another().streams() == ["run_b", "run_a", "run_c"]

    @pytest.mark.anyio
    @pytest.mark.parametrize("handles", ["one store", "two handles"])
    async def test_two_tasks_race_one_conflicts(self, store: EventStore, handles: str) -> None:
        """Two tasks appending at the same version: exactly one ConflictError, nothing lost."""
        stream = "run_race"
        base = make_events(stream, 0, 2, "base")
        await store.append(stream, base, 0)
        writers = {"a": store, "b": store if handles == "one store" else self.another()}
        ready = {tag: anyio.Event() for tag in writers}
        go = anyio.Event()
        outcome: dict[str, str] = {}

        async def write(tag: str) -> None:
            version = len(await writers[tag].read(stream))
            ready[tag].set()
            await go.wait()
            try:
                await writers[tag].append(stream, make_events(stream, version, 3, tag), version)
                outcome[tag] = "ok"
            except ConflictError as exc:
                outcome[tag] = f"conflict at {exc.actual}"

        async with anyio.create_task_group() as group:
            for tag in writers:
                group.start_soon(write, tag)
            for event in ready.values():
                await event.wait()
            go.set()
        assert sorted(outcome.values()) == ["conflict at 5", "ok"]
        winner = next(tag for tag, result in outcome.items() if result == "ok")
        assert await self.another().read(stream) == base + make_events(stream, 2, 3, winner)

    @pytest.mark.anyio
    async def test_contending_writers_lose_and_duplicate_nothing(self, store: EventStore) -> None:
        """Writers retrying on ConflictError append every batch exactly once, in their order."""
        stream, writers, batches = "run_busy", 4, 5
        handles = [store, self.another()]

        async def write(index: int) -> None:
            handle, version = handles[index % 2], 0
            for k in range(batches):
                while True:
                    try:
                        events = make_events(stream, version, 2, f"w{index}-{k}")
                        version = await handle.append(stream, events, version)
                        break
                    except ConflictError as exc:
                        version = exc.actual

        async with anyio.create_task_group() as group:
            for index in range(writers):
                group.start_soon(write, index)
        events = await self.another().read(stream)
        assert [e.seq for e in events] == list(range(writers * batches * 2))
        tags = [getattr(e, "call_id", "") for e in events]
        for index in range(writers):
            mine = [t for t in tags if t.startswith(f"w{index}-")]
            assert mine == [f"w{index}-{k}-{i}" for k in range(batches) for i in range(2)]

    @pytest.mark.anyio
    async def test_append_nowait_is_append_without_awaiting(self, store: EventStore) -> None:
        """A store with append_nowait appends and conflicts exactly as append does."""
        if not isinstance(store, SupportsAppendNowait):
            pytest.skip(f"{type(store).__name__} has no append_nowait (SupportsAppendNowait)")
        stream = "run_nowait"
        assert store.append_nowait(stream, make_events(stream, 0, 2, "a"), 0) == 2
        with pytest.raises(ConflictError) as info:
            store.append_nowait(stream, make_events(stream, 1, 1, "late"), 1)
        assert (info.value.expected, info.value.actual) == (1, 2)
        assert await store.append(stream, make_events(stream, 2, 1, "b"), 2) == 3
        expected = make_events(stream, 0, 2, "a") + make_events(stream, 2, 1, "b")
        assert await self.another().read(stream) == expected


class CrashOutcome(NamedTuple):
    """What a crash at one point leaves of the interrupted batch."""

    survivors: int
    """How many of the batch's events are stored."""
    repaired: bool
    """Whether the next read repairs a torn record (and warns with ``repair_warning``)."""


class DurableStoreContract(StoreContract):
    """What a store outside the process adds: reopening, closing, damage, other processes, crashes.

    The other processes open the store with ``reopen(reopen_args())``, so the subclass must be
    importable by its module name there (pytest's default import mode does that).
    """

    atomic_batches: ClassVar[bool]
    """Whether a batch survives a crash whole or not at all (else a prefix of it may)."""
    repair_warning: ClassVar[type[Warning] | None] = None
    """The warning a read gives when it cuts off a record torn by a crash, if the store can tear."""
    crash_outcomes: ClassVar[Mapping[str, CrashOutcome]] = {"idle": CrashOutcome(0, repaired=False)}
    """The exact outcome of each crash point; ``loop`` (killed while appending) has none."""

    async def corrupt(self, stream: str, seq: int, data: bytes) -> str:
        """Overwrite the stored record of ``stream`` at ``seq``; returns the position to report."""
        raise NotImplementedError

    def reopen_args(self) -> list[str]:
        """What another process needs to open this test's store (JSON); by default the location."""
        return [str(self.location)]

    @classmethod
    def reopen(cls, args: list[str]) -> EventStore:
        """In another process: the store ``reopen_args()`` describes."""
        contract = cls()
        contract.location = Path(args[0])
        return contract.open_store(contract.location)

    @classmethod
    def install_fault(cls, store: EventStore, point: str, hang: Callable[[], None]) -> None:
        """In another process: make the next append of ``store`` call ``hang`` at ``point``.

        ``hang`` never returns (the test kills the process). Override to add crash points beyond
        ``idle`` and ``loop``, listing them in a ``crash_point`` fixture and ``crash_outcomes``.
        """
        raise NotImplementedError(f"{cls.__name__} has no crash point {point!r}")

    @pytest.fixture(params=["idle", "loop"])
    def crash_point(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    async def spawn(self, stream: str, *args: str) -> Child:
        contract = f"{type(self).__module__}:{type(self).__qualname__}"
        return await Child.start(contract, json.dumps(self.reopen_args()), stream, *args)

    @pytest.mark.anyio
    async def test_reopened_store_continues(self, store: EventStore) -> None:
        """A store closed and opened again reads every event and appends at the stored version."""
        stream = "run_reopen"
        await store.append(stream, make_events(stream, 0, 3, "a"), 0)
        reopened = self.another()
        assert await reopened.read(stream) == make_events(stream, 0, 3, "a")
        assert await reopened.append(stream, make_events(stream, 3, 2, "b"), 3) == 5
        assert isinstance(reopened, SupportsAclose)
        await reopened.aclose()
        with pytest.raises(ConflictError):
            await store.append(stream, make_events(stream, 3, 1, "c"), 3)
        expected = make_events(stream, 0, 3, "a") + make_events(stream, 3, 2, "b")
        assert await self.another().read(stream) == expected

    @pytest.mark.anyio
    async def test_closed_store_refuses_work(self, store: EventStore) -> None:
        """After aclose() every call raises StoreError; other handles go on working."""
        stream, closing = "run_closed", self.another()
        assert isinstance(closing, SupportsAclose), "a durable store closes with aclose()"
        await closing.append(stream, make_events(stream, 0, 2, "a"), 0)
        await closing.aclose()
        with pytest.raises(StoreError):
            await closing.read(stream)
        with pytest.raises(StoreError):
            await closing.streams()
        with pytest.raises(StoreError):
            await closing.append(stream, make_events(stream, 2, 1, "b"), 2)
        assert await store.read(stream) == make_events(stream, 0, 2, "a")

    @pytest.mark.anyio
    async def test_corrupt_record_names_its_position(self, store: EventStore) -> None:
        """A stored record that does not decode raises LogCorruptError saying where and what."""
        stream = "run_bad"
        await store.append(stream, make_events(stream, 0, 5, "x"), 0)
        where = await self.corrupt(stream, 2, b'{"type": "ToolCalled", "run_id": "run_bad", "seq": 2}')
        with pytest.raises(LogCorruptError) as info:
            await self.another().read(stream)
        assert info.value.where == where
        assert "expected one event" in str(info.value)
        assert "missing required field `at`" in str(info.value)

    @pytest.mark.anyio
    async def test_two_processes_race_one_conflicts(self, store: EventStore) -> None:
        """Two processes appending at the same version: exactly one ConflictError, nothing lost."""
        stream = "run_procs"
        base = make_events(stream, 0, 2, "base")
        await store.append(stream, base, 0)
        children = {tag: await self.spawn(stream, "race", tag) for tag in "ab"}
        for child in children.values():
            await child.expect("ready")
        for child in children.values():
            await child.send("go")
        outcome = {tag: await child.finish() for tag, child in children.items()}
        assert sorted(outcome.values()) == ["conflict 4", "ok 4"]
        winner = next(tag for tag, result in outcome.items() if result == "ok 4")
        assert await self.another().read(stream) == base + make_events(stream, 2, 2, winner)

    @pytest.mark.anyio
    async def test_contending_processes_lose_and_duplicate_nothing(self, store: EventStore) -> None:
        """Processes retrying on ConflictError append every batch exactly once, in their order."""
        stream, batches = "run_procs_busy", 12
        children = {tag: await self.spawn(stream, "contend", tag, str(batches)) for tag in "pq"}
        for child in children.values():
            await child.expect("ready")
        for child in children.values():
            await child.send("go")
        for child in children.values():
            assert (await child.finish()).startswith("done ")
        events = await self.another().read(stream)
        assert [e.seq for e in events] == list(range(2 * batches * 2))
        tags = [getattr(e, "call_id", "") for e in events]
        for tag in children:
            assert [t for t in tags if t.startswith(tag)] == [
                f"{tag}{k}-{i}" for k in range(batches) for i in range(2)
            ]

    @pytest.mark.anyio
    async def test_kill_9_mid_append_leaves_whole_records(self, store: EventStore, crash_point: str) -> None:
        """After kill -9 mid-append the log holds whole records only, and appending goes on."""
        stream, before = "run_crash", 2
        child = await self.spawn(stream, "crash", crash_point, str(before))
        await child.expect("ready")
        await child.finish(kill=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            events = await self.another().read(stream)
        repair = self.repair_warning
        repaired = [w for w in caught if repair is not None and issubclass(w.category, repair)]
        assert [w for w in caught if w not in repaired] == []
        intended = [e for k in range(len(events) // BATCH + 1) for e in batch(stream, k)]
        assert events == intended[: len(events)]
        if crash_point in self.crash_outcomes:
            survivors, was_repaired = self.crash_outcomes[crash_point]
            assert (len(events), bool(repaired)) == (before * BATCH + survivors, was_repaired)
        assert len(events) >= before * BATCH
        assert not self.atomic_batches or len(events) % BATCH == 0
        more = make_events(stream, len(events), 2, "after")
        assert await self.another().append(stream, more, len(events)) == len(events) + 2
        assert await self.another().read(stream) == events + more

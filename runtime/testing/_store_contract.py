"""``StoreContract``: what every event store does (see ``agentledger.testing.stores``)."""

from __future__ import annotations

import typing
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import anyio
import anyio.lowlevel

try:
    import pytest
except ImportError:  # pragma: no cover - exercised only without pytest
    raise ImportError("agentledger.testing.stores needs pytest: pip install pytest") from None

from agentledger import AgentSession
from agentledger.core.events import Event
from agentledger.errors import ConflictError
from agentledger.store import EventStore, SupportsAclose, SupportsAppendNowait, read_many

from . import capture_events
from ._store_child import make_events
from ._store_runs import by_stream, record_runs

__all__ = ("StoreContract",)

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
    async def test_concurrent_calls_finishing_out_of_order_read_back_as_kept(self, store: EventStore) -> None:
        """A batch whose later calls finish first: the run's owner numbers their events when it
        feeds them, after they were checked, and the store writes them with the numbers the
        log keeps (read back equal, ``seq`` without a gap)."""
        from agentledger import Agent, tool
        from agentledger.adapters.chat.scripted import Call, ScriptedChatClient

        last_done = anyio.Event()

        @tool
        async def first() -> str:
            await last_done.wait()
            return "first"

        @tool
        async def middle() -> str:
            return "middle"

        @tool
        async def last() -> str:
            last_done.set()
            return "last"

        client = ScriptedChatClient([[Call("first"), Call("middle"), Call("last")], "done"])
        agent = Agent(client=client, tools=[first, middle, last], store=store)
        response = await agent.run("go")
        stored = await self.another().read(response.run_id)
        assert stored == response.events
        assert [e.seq for e in stored] == list(range(len(stored)))

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

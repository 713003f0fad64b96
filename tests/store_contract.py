"""The ``EventStore`` contract: the tests every store passes, from the memory reference on.

Subclass ``StoreContract`` and implement ``open_store``; a durable store subclasses
``DurableStoreContract``, which adds what only a store outside the process can show: reopening,
damaged records, and other processes that race, contend, or are killed in the middle of an append
(``store_crash_child.py``).
"""

from __future__ import annotations

import subprocess
import sys
import typing
import warnings
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import pytest

from agentledger import (
    Agent,
    AgentContext,
    AgentSession,
    ChatContext,
    Content,
    ExperimentalWarning,
    FunctionInvocationContext,
    Message,
    MiddlewareTermination,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptedRequest
from agentledger.adapters.stores._lines import TornTailWarning
from agentledger.adapters.stores._threaded import ThreadedStore
from agentledger.core.events import Event
from agentledger.errors import ConflictError, LogCorruptError, ModelCallError
from agentledger.store import EventStore, read_many
from agentledger.testing import FixedClock, SequentialIds, capture_events

from .store_crash_child import BATCH, POINTS, batch, make_events

__all__ = ("DurableStoreContract", "StoreContract", "record_runs")

CallNext = Callable[[], Awaitable[None]]
CHILD = Path(__file__).with_name("store_crash_child.py")
EVERY_EVENT_TYPE = {cls.__name__ for cls in typing.get_args(Event)}


# -- realistic runs ---------------------------------------------------------------------------


@tool
def lookup(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


@tool
def remember(key: str, value: str, ctx: FunctionInvocationContext) -> str:
    """Keep a traveller's preference in session state."""
    assert ctx.session is not None
    ctx.session.state[key] = value
    return "remembered"


@tool
def book(nights: int) -> dict[str, object]:
    """Book a room."""
    return {"confirmation": f"HTL-{nights}", "nights": nights}


@tool
def unlock(ctx: FunctionInvocationContext) -> str:
    """Offer the booking tool."""
    ctx.add_tools(book)
    return "book is available"


@tool
def lock(ctx: FunctionInvocationContext) -> str:
    """Stop offering the booking tool."""
    ctx.remove_tools("book")
    return "book is gone"


@tool
def broken() -> str:
    """A tool whose backend is down."""
    raise RuntimeError("backend down")


@tool
def stop() -> str:
    """Guarded by middleware that ends the run."""
    return "never seen"


@tool(approval_mode="always_require")
def pay(amount: int) -> str:
    """Pay (a person approves first)."""
    return f"paid {amount}"


async def guard(context: FunctionInvocationContext, call_next: CallNext) -> None:
    """Answer empty bookings in the tool's place; end the run on ``stop``."""
    if context.function.name == "book" and context.arguments.get("nights", 0) < 1:
        context.result = "Error: book at least one night."
        return
    if context.function.name == "stop":
        raise MiddlewareTermination("stopped by policy")
    await call_next()


async def brief(context: AgentContext, call_next: CallNext) -> None:
    """Add an instruction to every run's input."""
    context.messages = [*context.messages, Message("user", (Content.from_text("Answer briefly."),))]
    await call_next()


async def cool(context: ChatContext, call_next: CallNext) -> None:
    """Send every model call with temperature 0."""
    context.options = {**context.options, "temperature": 0.0}
    await call_next()


def _unreachable(request: ScriptedRequest) -> str:
    raise ConnectionError("model unreachable")


class _Scenarios:
    """Runs that share one store, clock, id source and session; together they record every event type."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.clock, self.ids = FixedClock(), SequentialIds()
        self.session = AgentSession(self.ids("session"))

    def agent(self, *script: Any, max_iterations: int = 40, tools: Any = None) -> Agent:
        return Agent(
            client=ScriptedChatClient(list(script)),
            tools=tools or [lookup, remember, unlock, lock, broken, stop, pay],
            middleware=[guard, brief],
            store=self.store,
            clock=self.clock,
            ids=self.ids,
            max_iterations=max_iterations,
        )

    async def plan(self) -> None:
        """Parallel calls, session writes, tools added and removed, a short-circuit, three errors."""
        planner = self.agent(
            [Call("lookup", {"city": "Lisbon"}), Call("remember", {"key": "room", "value": "quiet"})],
            Call("unlock"),
            Call("book", {"nights": 0}),
            Call("book", {"nights": 2}),
            Call("lock"),
            Call("ghost"),
            Call("lookup", "{not json"),
            Call("broken"),
            "Booked 2 nights in Lisbon.",
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            await planner.run("Plan Lisbon.", session=self.session, options={"tool_choice": "required"})

    async def approve(self) -> None:
        """A call that waits for approval, approved by the next run."""
        cashier = self.agent(Call("pay", {"amount": 5}, call_id="call_pay"), "Paid 5.")
        paused = await cashier.run("Pay 5.", session=self.session)
        answer = paused.user_input_requests[0].to_approval_response(True)
        await cashier.run(Message("user", (answer,)), session=self.session)

    async def terminate(self) -> None:
        """Middleware that ends the run."""
        await self.agent(Call("stop", call_id="call_stop"), "unused").run("Stop.", session=self.session)

    async def overrun(self) -> None:
        """An iteration limit whose final answer still asks for a call; chat middleware at work."""
        oslo = Call("lookup", {"city": "Oslo"}, "call_oslo")
        rome = Call("lookup", {"city": "Rome"}, "call_rome")
        agent = self.agent(oslo, rome, max_iterations=1)
        await agent.run("Keep looking.", session=self.session, middleware=[cool])

    async def delegate(self) -> None:
        """A sub-agent run started by a tool call."""
        research = self.agent("Lisbon is sunny all week.").as_tool(name="research")
        call = Call("research", {"task": "weather"}, call_id="call_research")
        await self.agent(call, "Sunny.", tools=[research]).run("Research Lisbon.", session=self.session)

    async def fail(self) -> None:
        """A model call that raises."""
        with pytest.raises(ModelCallError):
            await self.agent(_unreachable).run("Anyone there?", session=self.session)


async def record_runs(store: EventStore) -> AgentSession:
    """Run every scenario into ``store``; returns the session they share."""
    runs = _Scenarios(store)
    for scenario in (runs.plan, runs.approve, runs.terminate, runs.overrun, runs.delegate, runs.fail):
        await scenario()
    return runs.session


def _by_stream(events: list[Event]) -> dict[str, list[Event]]:
    streams: dict[str, list[Event]] = {}
    for event in events:
        streams.setdefault(event.run_id, []).append(event)
    return streams


# -- the contract -----------------------------------------------------------------------------


class StoreContract:
    """What every ``EventStore`` does; subclasses implement ``open_store``."""

    location_name: ClassVar[str] = "store"

    def open_store(self, location: Path) -> EventStore:
        """A store over ``location`` (a path in an empty temporary directory)."""
        raise NotImplementedError

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[EventStore]:
        self.location = tmp_path / self.location_name
        self.opened: list[EventStore] = []
        yield self.another()
        for opened in self.opened:
            close = getattr(opened, "close", None)
            if close is not None:
                close()

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
        expected = _by_stream(events)
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


class DurableStoreContract(StoreContract):
    """What a store outside the process adds: reopening, damage, other processes, crashes."""

    kind: ClassVar[str]
    """The store_crash_child.py name of the store."""
    atomic_batches: ClassVar[bool]
    """Whether a crash can leave part of a batch (whole records) behind."""

    def open_store(self, location: Path) -> ThreadedStore:
        raise NotImplementedError

    def another(self) -> ThreadedStore:
        store = super().another()
        assert isinstance(store, ThreadedStore)
        return store

    def corrupt(self, stream: str, seq: int, data: bytes) -> str:
        """Overwrite the stored record of ``stream`` at ``seq``; returns the position to report."""
        raise NotImplementedError

    @pytest.fixture(params=["idle", "loop"])
    def crash_point(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    def spawn(self, *args: str) -> subprocess.Popen[str]:
        command = [sys.executable, str(CHILD), self.kind, str(self.location), *args]
        pipe = subprocess.PIPE
        return subprocess.Popen(command, stdin=pipe, stdout=pipe, stderr=pipe, text=True)

    def expect(self, child: subprocess.Popen[str], word: str) -> str:
        """The child's next line, which must start with ``word``."""
        assert child.stdout is not None
        line = child.stdout.readline()
        if not line.startswith(word):
            child.kill()
            _, err = child.communicate(timeout=60)
            pytest.fail(f"the child said {line!r}, not {word!r}:\n{err}")
        return line.strip()

    def finish(self, child: subprocess.Popen[str], *, kill: bool = False) -> str:
        if kill:
            child.kill()
        out, err = child.communicate(timeout=60)
        assert kill or child.returncode == 0, err
        return out.strip()

    @pytest.mark.anyio
    async def test_reopened_store_continues(self, store: EventStore) -> None:
        """A store closed and opened again reads every event and appends at the stored version."""
        stream = "run_reopen"
        await store.append(stream, make_events(stream, 0, 3, "a"), 0)
        async with self.another() as reopened:
            assert await reopened.read(stream) == make_events(stream, 0, 3, "a")
            assert await reopened.append(stream, make_events(stream, 3, 2, "b"), 3) == 5
        with pytest.raises(ConflictError):
            await store.append(stream, make_events(stream, 3, 1, "c"), 3)
        expected = make_events(stream, 0, 3, "a") + make_events(stream, 3, 2, "b")
        assert await self.another().read(stream) == expected

    @pytest.mark.anyio
    async def test_corrupt_record_names_its_position(self, store: EventStore) -> None:
        """A stored record that does not decode raises LogCorruptError saying where and what."""
        stream = "run_bad"
        await store.append(stream, make_events(stream, 0, 5, "x"), 0)
        where = self.corrupt(stream, 2, b'{"type": "ToolCalled", "run_id": "run_bad", "seq": 2}')
        with pytest.raises(LogCorruptError) as info:
            await self.another().read(stream)
        assert info.value.where == where
        assert "expected one event" in str(info.value)
        assert "missing required field `at`" in str(info.value)

    def test_two_processes_race_one_conflicts(self, store: EventStore) -> None:
        """Two processes appending at the same version: exactly one ConflictError, nothing lost."""
        stream = "run_procs"
        base = make_events(stream, 0, 2, "base")
        self.another().append_sync(stream, base, 0)
        children = {tag: self.spawn(stream, "race", tag) for tag in "ab"}
        for child in children.values():
            assert self.expect(child, "ready") == "ready"
        for child in children.values():
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        outcome = {tag: self.finish(child) for tag, child in children.items()}
        assert sorted(outcome.values()) == ["conflict 4", "ok 4"]
        winner = next(tag for tag, result in outcome.items() if result == "ok 4")
        assert self.another().read_sync(stream) == base + make_events(stream, 2, 2, winner)

    def test_contending_processes_lose_and_duplicate_nothing(self, store: EventStore) -> None:
        """Processes retrying on ConflictError append every batch exactly once, in their order."""
        stream, batches = "run_procs_busy", 12
        children = {tag: self.spawn(stream, "contend", tag, str(batches)) for tag in "pq"}
        for child in children.values():
            self.expect(child, "ready")
        for child in children.values():
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children.values():
            assert self.finish(child).startswith("done ")
        events = self.another().read_sync(stream)
        assert [e.seq for e in events] == list(range(2 * batches * 2))
        tags = [getattr(e, "call_id", "") for e in events]
        for tag in children:
            assert [t for t in tags if t.startswith(tag)] == [
                f"{tag}{k}-{i}" for k in range(batches) for i in range(2)
            ]

    def test_kill_9_mid_append_leaves_whole_records(self, store: EventStore, crash_point: str) -> None:
        """After kill -9 mid-append the log holds whole records only, and appending goes on."""
        stream, before = "run_crash", 2
        child = self.spawn(stream, "crash", crash_point, str(before))
        self.expect(child, "ready")
        self.finish(child, kill=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            events = self.another().read_sync(stream)
        torn = [w for w in caught if issubclass(w.category, TornTailWarning)]
        assert [w for w in caught if w not in torn] == []
        intended = [e for k in range(len(events) // BATCH + 1) for e in batch(stream, k)]
        assert events == intended[: len(events)]
        if crash_point in POINTS:
            survivors, was_torn = POINTS[crash_point]
            assert (len(events), bool(torn)) == (before * BATCH + survivors, was_torn)
        assert len(events) >= before * BATCH
        assert not self.atomic_batches or len(events) % BATCH == 0
        more = make_events(stream, len(events), 2, "after")
        assert self.another().append_sync(stream, more, len(events)) == len(events) + 2
        assert self.another().read_sync(stream) == events + more

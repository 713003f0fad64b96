"""MemoryEventStore against the store contract, and its bounds: the default of an Agent keeps memory
bounded, never a live run lost."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentledger import (
    Agent,
    BaseChatClient,
    ChatResponse,
    Content,
    FunctionInvocationContext,
    MemoryEventStore,
    Message,
    RunEvictedError,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core.events import Event, RunCompleted, RunFailed
from agentledger.errors import ConflictError, RunNotFoundError
from agentledger.replay import load
from agentledger.store import DEFAULT_MAX_EVENTS, DEFAULT_MAX_RUNS, EventStore, SupportsEviction
from agentledger.testing import SequentialIds
from agentledger.testing.stores import StoreContract, make_events


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def finished(stream: str, steps: int, *, failed: bool = False) -> list[Event]:
    """A run's log: ``steps`` tool calls, then the run's end."""
    end: Event = (
        RunFailed(run_id=stream, seq=steps, at=steps, error_type="X", message="m")
        if failed
        else RunCompleted(run_id=stream, seq=steps, at=steps)
    )
    return [*make_events(stream, 0, steps, "s"), end]


def test_an_agent_keeps_a_bounded_store_by_default() -> None:
    """Agent() bounds its store; MemoryEventStore() keeps everything; store=False keeps none."""
    store = Agent(client=ScriptedChatClient([])).store
    assert isinstance(store, MemoryEventStore)
    assert (store.max_runs, store.max_events) == (DEFAULT_MAX_RUNS, DEFAULT_MAX_EVENTS)
    unbounded = MemoryEventStore()
    assert Agent(client=ScriptedChatClient([]), store=unbounded).store is unbounded
    assert (unbounded.max_runs, unbounded.max_events) == (None, None)
    assert isinstance(store, SupportsEviction)


@pytest.mark.parametrize("bad", [-1, 1.5, "3"])
def test_limits_are_whole_numbers(bad: object) -> None:
    with pytest.raises(ValueError, match="max_runs must be a whole number"):
        MemoryEventStore(max_runs=bad)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_the_oldest_finished_runs_are_evicted_first() -> None:
    """Past max_runs the runs that finished first go; asking for one raises RunEvictedError."""
    store = MemoryEventStore(max_runs=2)
    for name, failed in [("run_1", False), ("run_2", True), ("run_3", False)]:
        await store.append(name, finished(name, 2, failed=failed), 0)
    assert await store.streams() == ["run_2", "run_3"]
    assert store.evicted == 1
    with pytest.raises(RunEvictedError) as info:
        await store.read("run_1")
    assert info.value.run_id == "run_1"
    assert isinstance(info.value, RunNotFoundError)
    with pytest.raises(RunEvictedError):
        await store.read_many(["run_3", "run_1"])
    with pytest.raises(RunEvictedError):
        await store.append("run_1", make_events("run_1", 3, 1, "late"), 3)
    with pytest.raises(ConflictError):  # a stream never seen: an ordinary conflict
        await store.append("run_9", make_events("run_9", 3, 1, "late"), 3)
    assert await store.read("run_9") == []
    assert await store.read("run_3") == finished("run_3", 2)


@pytest.mark.anyio
async def test_a_run_still_going_is_never_evicted() -> None:
    """Runs without their end stay whatever the limits; once one ends, it can go."""
    store = MemoryEventStore(max_runs=0, max_events=1)
    for name in ["run_1", "run_2"]:
        await store.append(name, make_events(name, 0, 3, "s"), 0)
    assert await store.streams() == ["run_1", "run_2"]
    await store.append("run_1", [RunCompleted(run_id="run_1", seq=3, at=3)], 3)
    assert await store.streams() == ["run_2"]
    assert await store.append("run_2", make_events("run_2", 3, 2, "more"), 3) == 5


@pytest.mark.anyio
async def test_the_event_budget_evicts_until_it_holds() -> None:
    """max_events counts every event kept; finished runs go, oldest first, until the count fits."""
    store = MemoryEventStore(max_events=10)
    for index in range(4):
        await store.append(f"run_{index}", finished(f"run_{index}", 3), 0)  # 4 events each
    assert await store.streams() == ["run_2", "run_3"]
    assert sum([len(await store.read(s)) for s in await store.streams()]) == 8


@pytest.mark.anyio
async def test_the_store_forgets_evicted_names_past_remember() -> None:
    """Only the last `remember` evicted names are kept: an older one reads as unknown."""
    store = MemoryEventStore(max_runs=0, remember=2)
    for index in range(3):
        await store.append(f"run_{index}", finished(f"run_{index}", 1), 0)
    assert await store.read("run_0") == []
    for name in ["run_1", "run_2"]:
        with pytest.raises(RunEvictedError):
            await store.read(name)


@pytest.mark.anyio
async def test_a_store_bounded_by_runs_remembers_ten_times_as_many_evicted_names() -> None:
    """The names of evicted runs stay within the store's budget: 10 x ``max_runs`` of them."""
    store = MemoryEventStore(max_runs=2)
    for index in range(25):
        await store.append(f"run_{index}", finished(f"run_{index}", 1), 0)
    assert store.remember == 20
    assert await store.read("run_2") == []  # forgotten: 23 were evicted, the last 20 remembered
    with pytest.raises(RunEvictedError):
        await store.read("run_3")
    assert MemoryEventStore(max_events=5).remember == 100_000


class WaitingClient(BaseChatClient):
    """Answers once ``runs`` model calls are waiting at once: every run is in flight by then."""

    provider_name = "waiting"

    def __init__(self, runs: int) -> None:
        self.runs = runs
        self.arrived = 0
        self.release = anyio.Event()

    async def get_response(self, messages: Sequence[Message], **kwargs: Any) -> ChatResponse:
        self.arrived += 1
        if self.arrived == self.runs:
            self.release.set()
        await self.release.wait()
        return ChatResponse(Message("assistant", (Content.from_text("done"),)), model="waiting-1")


@pytest.mark.anyio
async def test_more_runs_in_flight_than_the_limit_all_complete() -> None:
    """Twenty runs at once on a store keeping two: every run completes; two stay."""
    store = MemoryEventStore(max_runs=2)
    agent = Agent(client=WaitingClient(20), store=store)
    texts: list[str] = []

    async def one() -> None:
        texts.append((await agent.run("go")).text)

    async with anyio.create_task_group() as group:
        for _ in range(20):
            group.start_soon(one)
    assert texts == ["done"] * 20
    assert len(await store.streams()) == 2
    assert store.evicted == 18


@tool
def remember(topic: str, ctx: FunctionInvocationContext) -> str:
    """Remember a topic in the session."""
    assert ctx.session is not None
    ctx.session.state[topic] = True
    return f"Remembered {topic}."


@pytest.mark.anyio
async def test_a_session_outlives_the_eviction_of_its_runs() -> None:
    """The live session keeps its state and history; rebuilding it from the store is refused."""
    script = [Call("remember", {"topic": t}) if i % 2 == 0 else f"ok {t}" for t in "abc" for i in range(2)]
    client = ScriptedChatClient(script)
    store = MemoryEventStore(max_runs=1)
    agent = Agent(client=client, tools=[remember], store=store, ids=SequentialIds())
    session = agent.create_session()
    responses = [await agent.run(f"remember {topic}", session=session) for topic in "abc"]
    assert session.state.snapshot() == {"a": True, "b": True, "c": True}
    last_request = client.requests[-2]  # the third run's first model call
    assert [m.text for m in last_request.messages if m.role == "user"] == [
        "remember a",
        "remember b",
        "remember c",
    ]
    last = responses[-1].run_id
    assert await store.streams() == [last]
    assert store.session_evicted(session.session_id)
    with pytest.raises(RunEvictedError) as info:
        await load(store, last)
    assert info.value.session_id == session.session_id
    assert "with_session=False" in str(info.value)
    recorded = await load(store, last, with_session=False)
    assert recorded.events == responses[-1].events
    with pytest.raises(RunEvictedError):
        await load(store, responses[0].run_id)


class TestMemoryStore(StoreContract):
    def open_store(self, location: Path) -> EventStore:
        return self.opened[0] if self.opened else MemoryEventStore()


_appends = st.lists(
    st.tuples(st.sampled_from("abcde"), st.integers(min_value=1, max_value=3), st.booleans()), max_size=40
)
_limit = st.one_of(st.none(), st.integers(min_value=0, max_value=6))


@settings(max_examples=300, deadline=None)
@given(_appends, _limit, _limit)
def test_eviction_follows_its_definition_for_any_appends(
    appends: list[tuple[str, int, bool]], max_runs: int | None, max_events: int | None
) -> None:
    """After every append, finished runs are evicted oldest finished first while a limit is
    passed; runs in flight never; an evicted run refuses appends, a finished one written to
    again is in flight again."""
    store = MemoryEventStore(max_runs=max_runs, max_events=max_events, remember=100)
    logs: dict[str, int] = {}  # the definition: events per stream kept
    done: dict[str, None] = {}  # finished streams, in the order they finished
    gone: dict[str, int] = {}  # evicted streams, with the version they had
    for stream, count, ends in appends:
        version = logs.get(stream, 0)
        events = make_events(stream, version, count - 1 if ends else count, "s")
        if ends:
            events.append(RunCompleted(run_id=stream, seq=version + count - 1, at=0))
        if stream in gone:  # written to at the version it had
            with pytest.raises(RunEvictedError):
                store.append_nowait(stream, events, gone[stream])
            continue
        assert store.append_nowait(stream, events, version) == version + count
        logs[stream] = version + count
        done.pop(stream, None)
        if ends:
            done[stream] = None
        while done and (
            (max_runs is not None and len(done) > max_runs)
            or (max_events is not None and sum(logs.values()) > max_events)
        ):
            oldest = next(iter(done))
            gone[oldest] = logs.pop(oldest)
            del done[oldest]
        assert {s: len(store.read_nowait(s)) for s in logs} == logs
        assert store.evicted == len(gone)

"""``run/driver.py``: ``LocalDriver``, the executor of a run in this process.

A concurrent batch on asyncio: one task per call, started eagerly where Python can (3.12+).
Whether a call's task is started at once or scheduled, each call runs as its own task, in its
own copy of the context, a cancel scope it opens may span a wait, a call that waits lets the
others go on, and the log keeps the model's order. Cancelling a run cancels every call of the
batch in flight, and the log says so.

A run cancelled while its append is being committed still ends with ``RunFailed``. The durable
stores commit in a worker thread (SQLite, JSONL) or over a connection (PostgreSQL), and the
caller awaits the outcome. A cancellation that arrives in that wait leaves the events committed
while the run only sees the cancellation. The run then reads its stream back before it records
anything else, so ``RunFailed`` follows at the right version instead of being refused as a
conflict and lost.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from agentledger import (
    Agent,
    BaseChatClient,
    ChatOptions,
    ChatResponse,
    Content,
    MemoryEventStore,
    Message,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.stores.jsonl import JsonlEventStore
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.core import RunFailed
from agentledger.core.events import Event, ToolCalled, ToolReturned
from agentledger.errors import StoreError
from agentledger.store import EventStore
from agentledger.testing import FixedClock, SequentialIds, events_of

pytestmark = pytest.mark.anyio

_SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the batch's own tasks are asyncio's (trio goes through a task group)


def _agent(calls: list[Call], tools: list[object]) -> Agent:
    client = ScriptedChatClient([calls, "done"])
    return Agent(client=client, tools=tools, clock=FixedClock(), ids=SequentialIds())


async def test_each_call_of_a_batch_runs_as_a_task_of_its_own_in_a_copy_of_the_context() -> None:
    tasks: list[asyncio.Task[object] | None] = []
    seen: list[str] = []

    @tool(name="mark")
    async def mark_async(n: int) -> str:
        """Note the task and what an earlier call set."""
        tasks.append(asyncio.current_task())
        seen.append(_SEEN.get())
        _SEEN.set(f"set by {n}")
        return str(n)

    run_task = None

    async def run() -> None:
        nonlocal run_task
        run_task = asyncio.current_task()
        response = await _agent([Call("mark", {"n": i}) for i in range(3)], [mark_async]).run("go")
        assert [e.result for e in events_of(response.events, ToolReturned)] == ["0", "1", "2"]

    await run()
    assert len(set(map(id, tasks))) == 3  # one task per call
    assert run_task not in tasks
    assert None not in tasks
    assert seen == ["", "", ""]  # no call sees what another call set
    assert _SEEN.get() == ""  # nor does the run's caller


async def test_a_call_that_waits_lets_the_others_run_and_the_log_keeps_the_model_order() -> None:
    order: list[str] = []
    released = anyio.Event()

    @tool
    async def step(n: int) -> str:
        """The first call waits until the last one has run."""
        order.append(f"start {n}")
        if n == 0:
            await released.wait()
        if n == 2:
            released.set()
        order.append(f"end {n}")
        return str(n)

    response = await _agent([Call("step", {"n": i}) for i in range(3)], [step]).run("go")
    assert order.index("end 2") < order.index("end 0")  # the batch did not wait for call 0
    calls = [e for e in response.events if isinstance(e, ToolCalled | ToolReturned)]
    assert [(type(e).__name__, e.call_id) for e in calls] == [
        (kind, call_id)
        for call_id in [c.call_id for c in events_of(response.events, ToolCalled)]
        for kind in ("ToolCalled", "ToolReturned")
    ]
    assert response.text == "done"


async def test_a_cancel_scope_a_call_opens_spans_its_wait() -> None:
    @tool
    async def bounded(n: int) -> str:
        """Waits inside a cancel scope (it must close in the task that opened it)."""
        with anyio.fail_after(5):
            await anyio.lowlevel.checkpoint()
            await anyio.lowlevel.checkpoint()
        return f"ok {n}"

    response = await _agent([Call("bounded", {"n": i}) for i in range(3)], [bounded]).run("go")
    assert [e.result for e in events_of(response.events, ToolReturned)] == ["ok 0", "ok 1", "ok 2"]


@pytest.mark.skipif(sys.version_info < (3, 12), reason="tasks start eagerly from Python 3.12")
async def test_from_python_3_12_a_batch_of_calls_that_do_not_wait_never_yields_to_the_loop() -> None:
    """Started eagerly, calls that do not wait finish inside the batch: the run goes on to its
    next model call before the event loop runs anything else. (Scheduled, each call would wait
    its turn in the loop's queue, behind what an earlier call scheduled.)"""
    events: list[str] = []

    @tool
    async def quick(n: int) -> str:
        """Returns at once."""
        events.append(f"call {n}")
        if n == 0:
            asyncio.get_running_loop().call_soon(events.append, "the loop ran")
        return str(n)

    def answer(request: object) -> str:
        events.append("model called again")
        return "done"

    client = ScriptedChatClient([[Call("quick", {"n": i}) for i in range(3)], answer])
    agent = Agent(client=client, tools=[quick], clock=FixedClock(), ids=SequentialIds())
    response = await agent.run("go")
    await asyncio.sleep(0)
    assert events == ["call 0", "call 1", "call 2", "model called again", "the loop ran"]
    assert response.text == "done"


async def test_cancelling_a_batch_cancels_every_call(clock: FixedClock, ids: SequentialIds) -> None:
    """A cancelled run stops all its running calls and records RunFailed with error_type Cancelled."""
    started: list[int] = []
    stopped: list[int] = []
    never = anyio.Event()

    @tool
    async def wait(n: int) -> str:
        started.append(n)
        try:
            await never.wait()
        finally:
            stopped.append(n)
        return "unreachable"

    store = MemoryEventStore()
    client = ScriptedChatClient([[Call("wait", {"n": i}) for i in range(5)], "never"])
    agent = Agent(client=client, tools=[wait], clock=clock, ids=ids, store=store)
    async with anyio.create_task_group() as group:
        group.start_soon(agent.run, "go")
        await anyio.wait_all_tasks_blocked()
        assert sorted(started) == [0, 1, 2, 3, 4]
        group.cancel_scope.cancel()
    assert sorted(stopped) == [0, 1, 2, 3, 4]
    events = await store.read("run_1")
    assert isinstance(events[-1], RunFailed)
    assert events[-1].error_type == "Cancelled"


class CommitsThenWaits:
    """A store whose ``nth`` append is committed by the real store, then waits to be cancelled,
    as an append does when the cancellation arrives after its commit and before it returns."""

    def __init__(self, inner: EventStore, nth: int) -> None:
        self.inner = inner
        self.nth = nth
        self.appends = 0
        self.committed = anyio.Event()

    async def append(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        self.appends += 1
        version = await self.inner.append(stream, events, expected_version)
        if self.appends == self.nth:
            self.committed.set()
            await anyio.sleep_forever()
        return version

    async def read(self, stream: str, after: int = -1) -> list[Event]:
        return await self.inner.read(stream, after)

    async def streams(self) -> list[str]:
        return await self.inner.streams()


@tool
def echo(text: str) -> str:
    """Say it back."""
    return text


@pytest.fixture(params=["sqlite", "jsonl", "postgres"])
async def durable(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    if request.param == "sqlite":
        store: EventStore = SqliteEventStore(tmp_path / "events.db")
    elif request.param == "jsonl":
        store = JsonlEventStore(tmp_path / "runs")
    else:
        from agentledger.adapters.stores.postgres import PostgresEventStore
        from tests._temporal_env import drop_schema, require_postgres, unique_schema

        dsn, schema = require_postgres(), unique_schema()
        store = PostgresEventStore(dsn, schema=schema)
    yield store
    await store.aclose()  # type: ignore[attr-defined]
    if request.param == "postgres":
        drop_schema(dsn, schema)


@pytest.mark.parametrize("nth", [1, 2, 3])
async def test_a_run_cancelled_during_a_committed_append_ends_with_run_failed(
    durable: EventStore, nth: int
) -> None:
    store = CommitsThenWaits(durable, nth)
    client = ScriptedChatClient([Call("echo", {"text": "a"}), Call("echo", {"text": "b"}), "done"])
    agent = Agent(client=client, tools=[echo], store=store, clock=FixedClock(), ids=SequentialIds())
    async with anyio.create_task_group() as group:
        group.start_soon(agent.run, "go")
        await store.committed.wait()
        group.cancel_scope.cancel()
    log = await durable.read("run_1")
    assert [e.seq for e in log] == list(range(len(log)))
    assert isinstance(log[-1], RunFailed)
    assert log[-1].error_type == "Cancelled"


class InDoubt(StoreError):
    """What a store raises when it cannot say whether an append was written."""


class CommitsThenFails(CommitsThenWaits):
    """A store whose ``nth`` append is committed, then reported as failed with an unknown outcome
    (a connection lost at COMMIT)."""

    async def append(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        self.appends += 1
        version = await self.inner.append(stream, events, expected_version)
        if self.appends == self.nth:
            raise InDoubt("the connection was lost at commit")
        return version


@pytest.mark.parametrize("nth", [1, 2, 3])
async def test_a_run_whose_append_is_in_doubt_reads_back_before_recording_its_end(
    durable: EventStore, nth: int
) -> None:
    """An append that raised after it was written: the run fails with that error, and its
    RunFailed follows the events the store holds, none of them twice."""
    store = CommitsThenFails(durable, nth)
    client = ScriptedChatClient([Call("echo", {"text": "a"}), Call("echo", {"text": "b"}), "done"])
    agent = Agent(client=client, tools=[echo], store=store, clock=FixedClock(), ids=SequentialIds())
    with pytest.raises(InDoubt):
        await agent.run("go")
    log = await durable.read("run_1")
    assert [e.seq for e in log] == list(range(len(log)))
    assert isinstance(log[-1], RunFailed)
    assert log[-1].error_type == "InDoubt"


class _ParkedClient(BaseChatClient):
    """Calls the tool once, then waits on ``release`` before it answers: a run parked on its
    second model call."""

    provider_name = "parked"

    def __init__(self) -> None:
        super().__init__()
        self.parked = anyio.Event()
        self.release = anyio.Event()

    async def get_response(
        self, messages: Sequence[Message], *, options: ChatOptions | None = None, **kwargs: Any
    ) -> ChatResponse:
        if not any(m.role == "tool" for m in messages):
            call = Content.from_function_call("c1", "ping", arguments='{"n": 1}')
            return ChatResponse(Message("assistant", (call,)))
        self.parked.set()
        await self.release.wait()
        return ChatResponse(text="done")


def _drive_frame(task: asyncio.Task[Any]) -> Any:
    """The frame of ``RunLoop.drive`` in the chain of awaits of ``task``."""
    coroutine: Any = task.get_coro()
    while coroutine is not None:
        if coroutine.__qualname__ == "RunLoop.drive":
            return coroutine.cr_frame
        coroutine = coroutine.cr_await
    raise AssertionError("no RunLoop.drive in the run's awaits")


@pytest.mark.parametrize("durable", [False, True])
async def test_a_run_waiting_on_its_model_keeps_nothing_of_the_steps_before(
    tmp_path: Path, durable: bool
) -> None:
    @tool(name="ping")
    async def ping(n: int) -> str:
        """Answer."""
        return "ok"

    client = _ParkedClient()
    store: EventStore | bool = JsonlEventStore(tmp_path / "runs") if durable else False
    agent = Agent(client=client, tools=[ping], store=store, clock=FixedClock(), ids=SequentialIds())
    task = asyncio.ensure_future(agent.run("go"))
    await client.parked.wait()
    # What the loop still holds while the model is called: no finished flush (or a coroutine
    # that did nothing), no runner of the batch that ran; each would stay alive, for the
    # collector to walk, in every run waiting on its model.
    held = list(_drive_frame(task).f_locals.values())
    assert not [v for v in held if inspect.iscoroutine(v) and v.cr_frame is None]
    assert not [v for v in held if isinstance(v, functools.partial)]
    assert not [v for v in held if isinstance(v, list | tuple) and v and callable(v[0])]
    client.release.set()
    response = await task
    assert response.text == "done"
    if durable:
        assert isinstance(store, JsonlEventStore)
        assert len(await store.read(response.run_id)) == len(response.events)

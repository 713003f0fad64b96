"""A concurrent batch on asyncio: one task per call, started eagerly where Python can (3.12+).

Whether a call's task is started at once or scheduled, each call runs as its own task, in its
own copy of the context, a cancel scope it opens may span a wait, a call that waits lets the
others go on, and the log keeps the model's order.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys

import anyio
import anyio.lowlevel
import pytest

from agentledger import Agent, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core.events import ToolCalled, ToolReturned
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

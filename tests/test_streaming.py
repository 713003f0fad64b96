"""Streaming runs: updates as they happen, early exit, failures."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

import pytest

from agentledger import (
    Agent,
    AgentResponseUpdate,
    FunctionInvocationContext,
    MemoryEventStore,
    ModelCallError,
    RunError,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry, ScriptExhausted
from agentledger.core import RunFailed
from agentledger.testing import FixedClock, SequentialIds

pytestmark = pytest.mark.anyio


@tool
def ok(x: int) -> int:
    return x * 2


@tool
def broken() -> str:
    raise ValueError("secret detail")


async def gate(context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]) -> None:
    if context.function.name == "ok" and context.arguments["x"] < 0:
        context.result = "negative refused"
        return
    await call_next()


def _agent(client: ScriptedChatClient, clock: FixedClock, ids: SequentialIds, **kw: object) -> Agent:
    return Agent(client=client, tools=[ok, broken], middleware=[gate], clock=clock, ids=ids, **kw)  # type: ignore[arg-type]


async def test_updates_in_order_with_what_the_model_sees(clock: FixedClock, ids: SequentialIds) -> None:
    """Text arrives in deltas; each call's result update carries exactly what the model is sent."""
    script: list[ScriptEntry] = [
        [Call("ok", {"x": 2}), Call("ok", {"x": -1}), Call("broken"), Call("ghost")],
        "all done now",
    ]
    client = ScriptedChatClient(script)
    updates: list[AgentResponseUpdate] = []
    async for update in _agent(client, clock, ids).run_stream("go"):
        updates.append(update)
    assert {u.run_id for u in updates} == {"run_1"}
    results = {c.call_id: c.result for u in updates if u.role == "tool" for c in u.contents}
    sent = {c.call_id: c.result for c in client.requests[1].messages[-1].contents}
    assert results == sent
    assert results["call_2"] == "negative refused"
    assert results["call_3"] == "Error: Function failed."
    text = "".join(u.text for u in updates if u.role == "assistant")
    assert text == "all done now"
    assert len([u for u in updates if u.role == "assistant" and u.text]) == 3


async def test_run_with_stream_true_streams(clock: FixedClock, ids: SequentialIds) -> None:
    """agent.run(..., stream=True) is run_stream, as the reference spells it."""
    client = ScriptedChatClient(["hello there"])
    texts = [u.text async for u in _agent(client, clock, ids).run("hi", stream=True)]
    assert "".join(texts) == "hello there"


async def test_leaving_early_cancels_and_records(clock: FixedClock, ids: SequentialIds) -> None:
    """Closing the stream after the first update cancels the run, recorded as RunFailed Cancelled."""
    store = MemoryEventStore()
    client = ScriptedChatClient([Call("ok", {"x": 1}), "one two three"])
    agent = _agent(client, clock, ids, store=store)
    async with contextlib.aclosing(agent.run_stream("go")) as stream:
        async for _update in stream:
            break
    events = await store.read("run_1")
    assert isinstance(events[-1], RunFailed)
    assert events[-1].error_type == "Cancelled"


async def test_failure_reaches_the_consumer_unwrapped(clock: FixedClock, ids: SequentialIds) -> None:
    """A run that fails raises its own typed error to the code iterating the stream."""
    client = ScriptedChatClient([])
    with pytest.raises(ModelCallError):
        async for _update in _agent(client, clock, ids).run_stream("go"):
            pass


async def test_a_failure_keeps_the_client_error_as_its_cause(clock: FixedClock, ids: SequentialIds) -> None:
    """As with run(): the ModelCallError from a stream carries the client's own error as __cause__."""
    with pytest.raises(ModelCallError) as caught:
        async for _update in _agent(ScriptedChatClient([]), clock, ids).run_stream("go"):
            pass
    assert isinstance(caught.value.__cause__, ScriptExhausted)


async def test_a_plain_break_leaves_the_caller_alone(clock: FixedClock, ids: SequentialIds) -> None:
    """Breaking out of a stream without closing it never cancels the caller; the run still ends in the log."""
    import gc

    import anyio

    store = MemoryEventStore()
    client = ScriptedChatClient([Call("ok", {"x": 1}), "one two three"])
    agent = _agent(client, clock, ids, store=store)
    async for _update in agent.run_stream("go"):
        break
    gc.collect()
    await anyio.wait_all_tasks_blocked()
    await anyio.lowlevel.checkpoint()  # the caller goes on: it was not cancelled
    events = await store.read("run_1")
    assert type(events[-1]).__name__ in ("RunFailed", "RunCompleted")


async def test_stream_as_a_context_manager(clock: FixedClock, ids: SequentialIds) -> None:
    """`async with agent.run_stream(...)` closes the run when the block is left."""
    store = MemoryEventStore()
    client = ScriptedChatClient([Call("ok", {"x": 1}), "one two three"])
    async with _agent(client, clock, ids, store=store).run_stream("go") as stream:
        async for _update in stream:
            break
    events = await store.read("run_1")
    assert isinstance(events[-1], RunFailed)
    assert events[-1].error_type == "Cancelled"


async def test_the_final_response_of_a_closed_stream(clock: FixedClock, ids: SequentialIds) -> None:
    """After ``aclose``: a run it cancelled has no response (a typed error saying so); one that
    had already ended still gives its response; iterating a closed stream just ends."""
    agent = _agent(ScriptedChatClient([Call("ok", {"x": 1}), "one two three"]), clock, ids)
    stream = agent.run_stream("go")
    await stream.__anext__()
    await stream.aclose()
    assert [u async for u in stream] == []
    with pytest.raises(RunError, match="closed before its run ended") as caught:
        await stream.get_final_response()
    assert caught.value.run_id == "run_1"

    finished = agent.run_stream("again")  # the script's answer the cancelled run never reached
    updates = [u async for u in finished]
    await finished.aclose()
    response = await finished.get_final_response()
    assert response.text == "one two three"
    assert updates[-1].finish_reason == "stop"


async def test_a_stream_at_a_loop_limit_does_not_show_the_calls_that_are_not_run() -> None:
    """The last call after a limit asks for a tool anyway: that call is skipped (recorded as
    CallsSkipped), so the stream shows no call for it, as the reference framework's does."""
    from agentledger.core.events import CallsSkipped

    @tool
    def again() -> str:
        """Go round once more."""
        return "round"

    client = ScriptedChatClient([Call("again", call_id="c1"), Call("again", call_id="c2")])
    agent = client.as_agent(name="Loop", tools=[again], max_iterations=1)
    shown: list[str | None] = []
    stream = agent.run("Loop.", stream=True)
    async with stream:
        async for update in stream:
            shown.extend(c.call_id for c in update.contents if c.type == "function_call")
        response = await stream.get_final_response()
    assert shown == ["c1"]
    assert [e.call_ids for e in response.events if isinstance(e, CallsSkipped)] == [("c2",)]

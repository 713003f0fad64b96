"""RunLoop, the owner of a run: it numbers what steps record, feeds it in the model's order and
decides when a batch waits, whatever the executor does and however its calls interleave.

A scripted executor stands in for a driver: each tool call waits on an anyio event the test
sets, so the calls finish in an order the test chooses. Only ``agentledger.core`` and anyio.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import anyio
import pytest

from agentledger.core import (
    ApprovalRequested,
    CallModel,
    Command,
    Event,
    FinishRun,
    InvokeTools,
    ModelResponded,
    RunMachine,
    RunStarted,
    SessionUpdated,
    ToolCalled,
    ToolReturned,
)
from agentledger.core.errors import UnrecordableError
from agentledger.core.events import RunConfig, StateChange, ToolSpec
from agentledger.core.loop import RunLoop, StepLog
from agentledger.core.messages import Content, Message

pytestmark = pytest.mark.anyio

RUN = "run-1"
TOOLS = (ToolSpec(name="t"), ToolSpec(name="danger", approval_mode="always_require"))


def call(call_id: str, name: str = "t") -> Content:
    return Content.from_function_call(call_id, name, arguments="{}")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


class Script:
    """An executor: the model answers from ``answers``; call ``i`` finishes when ``release[i]``
    is set (all set from the start unless the test holds some)."""

    def __init__(self, answers: list[Message], *, calls: int = 0, sequential: bool = False) -> None:
        self.answers = answers
        self.release = [anyio.Event() for _ in range(calls)]
        for event in self.release:
            event.set()
        self.done = [anyio.Event() for _ in range(calls)]
        self.started: list[str] = []
        self.finished: list[str] = []
        self.gated_asked: list[tuple[str, ...]] = []
        self.hold: tuple[str, ...] = ()
        self._sequential = sequential
        self._index = 0

    @property
    def sequential(self) -> bool:
        return self._sequential

    def before(self, command: Command) -> None:
        return None

    async def call_model(self, command: CallModel, step: StepLog) -> None:
        step.record(ModelResponded, iteration=command.iteration, message=self.answers.pop(0))

    async def awaiting_approval(self, command: InvokeTools) -> Sequence[str]:
        self.gated_asked.append(command.gated)
        return [g for g in command.gated if g in self.hold]

    def tool_calls(self, command: InvokeTools) -> Sequence[Callable[[StepLog], Awaitable[None]]]:
        return [self._runner(call) for call in command.calls]

    def _runner(self, call: Content) -> Callable[[StepLog], Awaitable[None]]:
        index = self._index
        self._index += 1

        async def run(step: StepLog) -> None:
            call_id, name = call.call_id or "", call.name or ""
            self.started.append(call_id)
            step.record(ToolCalled, call_id=call_id, name=name, arguments={})
            await self.release[index].wait()
            step.record(
                SessionUpdated, session_id="s", by=call_id, changes=(StateChange("k", "set", call_id),)
            )
            step.record(ToolReturned, call_id=call_id, name=name, result=call_id)
            self.finished.append(call_id)
            self.done[index].set()

        return run

    async def gather(self, calls: Sequence[Awaitable[None]]) -> None:
        async with anyio.create_task_group() as group:
            for each in calls:
                group.start_soon(_await, each)


async def _await(each: Awaitable[None]) -> None:
    await each


def started_loop(clock: Clock | None = None, **loop: object) -> RunLoop:
    owner = RunLoop(RunMachine(), RUN, clock or Clock(), **loop)  # type: ignore[arg-type]
    owner.record(
        RunStarted, agent_id="a", messages=(Message("user", ("go",)),), tools=TOOLS, config=RunConfig()
    )
    owner.begin()
    return owner


def lanes(log: Sequence[Event]) -> list[tuple[str, str | None]]:
    return [(type(e).__name__, getattr(e, "call_id", None) or getattr(e, "by", None)) for e in log]


async def test_concurrent_calls_are_kept_call_by_call_in_the_models_order() -> None:
    """Call 2 finishes before call 1: the log still holds call 1's events, then call 2's, and
    ``seq`` counts up without a gap."""
    script = Script(
        [Message("assistant", (call("c1"), call("c2"))), Message("assistant", ("done",))], calls=2
    )
    script.release[0] = anyio.Event()  # call 1 waits until call 2 is done
    owner = started_loop()

    async def release_first_when_second_done() -> None:
        await script.done[1].wait()
        script.release[0].set()

    async with anyio.create_task_group() as group:
        group.start_soon(release_first_when_second_done)
        finish = await owner.drive(script)
    assert script.finished == ["c2", "c1"]
    assert finish == FinishRun(reason="completed", text="done")
    assert [e.seq for e in owner.log] == list(range(len(owner.log)))
    batch = [lane for lane in lanes(owner.log) if lane[0] in {"ToolCalled", "SessionUpdated", "ToolReturned"}]
    assert batch == [
        ("ToolCalled", "c1"), ("SessionUpdated", "c1"), ("ToolReturned", "c1"),
        ("ToolCalled", "c2"), ("SessionUpdated", "c2"), ("ToolReturned", "c2"),
    ]  # fmt: skip


async def test_the_same_run_leaves_the_same_log_whichever_call_finishes_first() -> None:
    """Two runs of one script, their calls finishing in opposite orders: equal logs."""

    async def run(first: int) -> list[Event]:
        script = Script(
            [Message("assistant", (call("c1"), call("c2"))), Message("assistant", ("ok",))], calls=2
        )
        other = 1 - first
        script.release[other] = anyio.Event()
        owner = started_loop()

        async def release_other() -> None:
            await script.done[first].wait()
            script.release[other].set()

        async with anyio.create_task_group() as group:
            group.start_soon(release_other)
            await owner.drive(script)
        return owner.log

    one, two = await run(0), await run(1)
    assert [(type(e), getattr(e, "call_id", None)) for e in one] == [
        (type(e), getattr(e, "call_id", None)) for e in two
    ]
    assert [e.seq for e in one] == [e.seq for e in two]


async def test_a_cancelled_batch_keeps_what_its_calls_recorded() -> None:
    """Cancelled while call 1 waits: its ``ToolCalled`` is in the log (started, no result), after
    everything call 2 recorded; nothing is lost and the run can still be failed."""
    script = Script([Message("assistant", (call("c1"), call("c2")))], calls=2)
    script.release[0] = anyio.Event()  # never set
    owner = started_loop()
    with anyio.move_on_after(5) as scope:  # a safety net only: the test cancels it itself

        async def cancel_when_second_done() -> None:
            await script.done[1].wait()
            scope.cancel()

        async with anyio.create_task_group() as group:
            group.start_soon(cancel_when_second_done)
            await owner.drive(script)
    assert scope.cancel_called
    batch = [lane for lane in lanes(owner.log) if lane[0] in {"ToolCalled", "SessionUpdated", "ToolReturned"}]
    assert batch == [
        ("ToolCalled", "c1"),
        ("ToolCalled", "c2"),
        ("SessionUpdated", "c2"),
        ("ToolReturned", "c2"),
    ]
    assert owner.machine.transcript.awaits("c1")
    assert owner.fail("Cancelled", "cancelled") is True
    assert type(owner.log[-1]).__name__ == "RunFailed"
    assert [e.seq for e in owner.log] == list(range(len(owner.log)))


async def test_a_gated_call_that_waits_holds_the_whole_batch() -> None:
    """The loop asks the executor which gated calls would wait; one does: ``ApprovalRequested``
    names it and no call of the batch runs."""
    script = Script([Message("assistant", (call("c1"), call("c2", "danger")))], calls=2)
    script.hold = ("c2",)
    owner = started_loop()
    finish = await owner.drive(script)
    assert script.gated_asked == [("c2",)]
    assert script.started == []
    requested = [e for e in owner.log if isinstance(e, ApprovalRequested)]
    assert [r.call_ids for r in requested] == [("c2",)]
    assert finish.reason == "awaiting_approval"


async def test_a_gated_call_that_cannot_run_does_not_hold_the_batch() -> None:
    """No gated call would wait (its arguments cannot run): the batch runs at once."""
    script = Script(
        [Message("assistant", (call("c1"), call("c2", "danger"))), Message("assistant", ("ok",))], calls=2
    )
    owner = started_loop()
    finish = await owner.drive(script)
    assert script.gated_asked == [("c2",)]
    assert sorted(script.started) == ["c1", "c2"]
    assert not any(isinstance(e, ApprovalRequested) for e in owner.log)
    assert finish.reason == "completed"


async def test_sequential_calls_run_one_after_another_in_order() -> None:
    script = Script(
        [Message("assistant", (call("c1"), call("c2"))), Message("assistant", ("ok",))],
        calls=2,
        sequential=True,
    )
    owner = started_loop()
    await owner.drive(script)
    assert script.started == ["c1", "c2"]
    assert script.finished == ["c1", "c2"]


async def test_steps_keep_their_own_time_unless_the_owner_restamps() -> None:
    """A local step's events keep the time they were recorded at; a workflow's owner gives
    every event its own clock's time when it feeds them."""
    clock = Clock()
    kept = started_loop(clock)
    step = kept.step()
    step.record(ModelResponded, iteration=1, message=Message("assistant", ("hi",)))
    recorded_at = step.events[0].at
    clock.now += 100
    kept.feed(step)
    assert [e.at for e in kept.log if isinstance(e, ModelResponded)] == [recorded_at]

    restamped = started_loop(clock, restamp=True)
    step = restamped.step()
    step.record(ModelResponded, iteration=1, message=Message("assistant", ("hi",)))
    clock.now += 100
    restamped.feed(step)
    fed = [e for e in restamped.log if isinstance(e, ModelResponded)]
    assert fed[0].at == clock.now


async def test_a_record_into_a_fed_step_goes_to_the_owner() -> None:
    """A task a step left running records after the step was fed: the event reaches the log
    at once, never a buffer nobody reads."""
    owner = started_loop()
    step = owner.step()
    owner.feed(step)
    before = len(owner.log)
    event = step.record(SessionUpdated, session_id="s", by="late", changes=())
    assert owner.log[before:] == [event]
    assert event.seq == before


async def test_a_step_refuses_what_the_log_could_not_give_back() -> None:
    """The gate applies in the step: the event is not kept, so nothing is fed for it."""
    owner = started_loop()
    step = owner.step()
    with pytest.raises(UnrecordableError):
        step.record(SessionUpdated, session_id="s", by="x", changes=(StateChange("k", "set", "\udc80"),))
    assert not step.events


async def test_the_head_of_a_batch_is_live_the_calls_after_it_wait() -> None:
    """While both calls run, the observer has seen the first call start (it heads the model's
    order) but nothing of the second, which has recorded its start too."""
    seen: list[tuple[str, str | None]] = []
    script = Script([Message("assistant", (call("c1"), call("c2"))), Message("assistant", ("ok",))], calls=2)
    script.release = [anyio.Event(), anyio.Event()]
    owner = started_loop(observer=lambda events: seen.extend(lanes(events)))
    snapshot: list[list[tuple[str, str | None]]] = []

    async def look_then_release() -> None:
        await anyio.wait_all_tasks_blocked()
        snapshot.append([lane for lane in seen if lane[0] == "ToolCalled"])
        script.release[1].set()
        script.release[0].set()

    async with anyio.create_task_group() as group:
        group.start_soon(look_then_release)
        await owner.drive(script)
    assert script.started == ["c1", "c2"]
    assert snapshot == [[("ToolCalled", "c1")]]
    assert [lane for lane in seen if lane[0] == "ToolCalled"] == [("ToolCalled", "c1"), ("ToolCalled", "c2")]


def test_a_held_record_keeps_the_step_back_until_it_is_fed() -> None:
    """A live step feeds what it records at once; once it holds a record (one from another
    thread), that and every later record wait until the step is fed, in the step's order."""
    owner = RunLoop(RunMachine(), RUN, Clock())
    owner.record(RunStarted, agent_id="a", tools=TOOLS, config=RunConfig())
    step = owner.step(live=True)
    step.record(SessionUpdated, session_id="s", by="loop", changes=())
    assert len(owner.log) == 2
    step.hold(SessionUpdated, session_id="s", by="thread", changes=())
    step.record(SessionUpdated, session_id="s", by="after", changes=())
    assert len(owner.log) == 2
    owner.promote(step)  # even at the head again, a step that held a record stays held back
    step.record(SessionUpdated, session_id="s", by="last", changes=())
    assert [getattr(e, "by", None) for e in owner.log[1:]] == ["loop", "thread", "after"]
    owner.feed(step)
    assert [getattr(e, "by", None) for e in owner.log[1:]] == ["loop", "thread", "after", "last"]


def test_a_record_held_after_the_step_ended_is_refused() -> None:
    """The owner feeds from its own thread only: a record held for another thread after its step
    was fed gets ``TransitionError``; the event goes nowhere silently."""
    from agentledger.core import TransitionError

    owner = RunLoop(RunMachine(), RUN, Clock())
    owner.record(RunStarted, agent_id="a", tools=TOOLS, config=RunConfig())
    step = owner.step()
    owner.feed(step)
    with pytest.raises(TransitionError, match="after the step ended"):
        step.hold(SessionUpdated, session_id="s", by="late", changes=())
    assert len(owner.log) == 1


async def test_an_observer_with_observes_hears_only_the_reactions_to_those_inputs() -> None:
    everything: list[Event] = []
    writes: list[Event] = []
    one = started_loop(observer=everything.extend)
    two = started_loop(observer=writes.extend, observes=frozenset({SessionUpdated}))
    for owner in (one, two):
        answer = Message("assistant", (call("c1"),))
        await owner.drive(Script([answer, Message("assistant", ("done",))], calls=1))
    assert [type(e) for e in writes] == [SessionUpdated]
    # The unfiltered observer heard every event kept after it was set: the whole log.
    assert everything == one.log
    assert [type(e) for e in one.log] == [type(e) for e in two.log]

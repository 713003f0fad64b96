"""The run loop: one owner per run, the same for every driver.

Theory of operation. A run has one owner, ``RunLoop``. It holds the run's ``RunMachine`` and its
log, and it is the only code that numbers events and feeds them to the machine. Everything else
records into a ``StepLog``: each model call and each tool call gets its own, and hands its events
back when it is over. The owner stamps them with the next ``seq`` and feeds them to the machine
in the model's order (the order of the calls in the model's answer), whatever order concurrent
calls finished in, so the same run always leaves the same log.

``RunLoop.drive(executor)`` is the loop: take the machine's next command, carry it out through
the driver's ``Executor``, feed back what was recorded, and go round until the machine finishes
the run. The local driver and the Temporal workflow are two executors of this one loop; neither
numbers an event, orders a batch or decides whether a batch waits for approval.

The step at the head of the model's order (a model call, a call of a sequential batch, the first
unfinished call of a concurrent one) is *live*: what it records is fed at once, so sinks see it
as it happens (a tool call's span opens when the call starts, and a sub-agent's run nests in
it). The events of a later concurrent call wait in its step until every call before it is fed,
and what a step holds for another thread (``StepLog.hold``: a sync tool's worker) waits until
the step is fed, so the order of the log never depends on timing.

A step cut off (cancelled, or failed with an error of the driver's own) still hands back what
it recorded: the owner feeds it before the error goes on, so a tool call that started and did
not finish is in the log as ``ToolCalled`` without a result, never silently gone.

The loop never awaits anything but the executor, and reads time only from the clock it is given;
it imports nothing beyond the core, so a Temporal workflow runs it in its sandbox.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import msgspec

from .commands import CallModel, Command, FinishRun, InvokeTools
from .errors import TransitionError
from .events import ApprovalRequested, Event, EventBase
from .limits import check_event, checked_bytes
from .machine import Reaction, RunMachine

__all__ = ("Executor", "RunLoop", "StepLog")

Observer = Callable[[Sequence[Event]], None]
"""Told of every event the owner keeps (inputs with what the machine derived), in log order."""

_set_field = msgspec.structs.force_setattr


class StepLog:
    """What one step (a model call, a tool call) records, kept until its owner feeds it.

    ``record`` builds and checks an input event (``check_event``: one the log could not give
    back raises ``UnrecordableError`` and is not kept). Its ``seq`` is the step's own count until
    the owner renumbers it. A live step (the head of the model's order) hands what it records to
    the owner at once. ``hold`` keeps a record from code the owner cannot feed from (another
    thread) and ends that until the step is fed, so the step's own order holds. Once fed, the
    step is closed: a late record (a task the step left running) goes to the owner at once, so
    nothing recorded is ever dropped, and a late ``hold`` raises ``TransitionError``.
    """

    __slots__ = ("at", "closed", "events", "live", "owner", "run_id", "threaded")

    def __init__(
        self, run_id: str, at: Callable[[], int], owner: RunLoop | None = None, *, live: bool = False
    ) -> None:
        self.run_id = run_id
        self.at = at
        self.owner = owner
        self.events: Sequence[Event] = ()  # a list from the first record it keeps
        self.closed = False
        self.live = live and owner is not None
        self.threaded = False  # held a record from elsewhere: never live again

    def record(self, cls: type[EventBase], **fields: Any) -> Event:
        """Record one input event of ``cls`` with ``fields``; returns it."""
        return self.put(cls, fields)

    def put(self, cls: type[EventBase], fields: dict[str, Any]) -> Event:
        """``record`` with the fields as one mapping (what a recorder passes on unpacked once)."""
        owner = self.owner
        if owner is not None and (self.live or self.closed):
            return owner.put(cls, fields)
        return self._keep(cls, fields)

    def hold(self, cls: type[EventBase], **fields: Any) -> Event:
        """Record an event the owner must not feed now (it comes from another thread): kept
        until the step is fed, and so is everything the step records after it."""
        if self.closed:
            raise TransitionError(
                f"{cls.__name__} was recorded into a step of run {self.run_id!r} from another "
                "thread after the step ended; record from the call itself, before it returns",
                run_id=self.run_id,
            )
        self.threaded, self.live = True, False
        return self._keep(cls, fields)

    def _keep(self, cls: type[EventBase], fields: dict[str, Any]) -> Event:
        events = self.events
        event: Any = cls(run_id=self.run_id, seq=len(events), at=self.at(), **fields)
        check_event(event)
        if isinstance(events, list):
            events.append(event)
        else:  # most steps keep nothing: a live one hands its records to the owner
            self.events = [event]
        return event  # type: ignore[no-any-return]

    def take(self, *, close: bool = False) -> Sequence[Event]:
        """Hand over what the step holds (and, with ``close``, end it)."""
        events, self.events = self.events, ()
        if close:
            self.closed, self.live = True, False
        return events

    def go_live(self) -> None:
        """The step heads the model's order: what it records from now on is fed at once
        (unless it has held a record from elsewhere)."""
        self.live = not self.threaded and not self.closed

    def extend(self, events: Sequence[Event]) -> None:
        """Keep events a step recorded elsewhere (an activity on another worker)."""
        if events:
            self.events = [*self.events, *events]


class Executor(Protocol):
    """How a driver carries out the machine's commands; the loop decides everything else."""

    @property
    def sequential(self) -> bool:
        """Whether a batch's calls run one after another rather than concurrently."""
        ...

    def before(self, command: Command) -> Awaitable[None] | None:
        """What the driver does before a command (store the log so far, continue as new...):
        an awaitable the loop awaits, or None when that is done already or nothing is to do (a
        step with nothing to wait for costs no coroutine)."""
        ...

    async def call_model(self, command: CallModel, step: StepLog) -> None:
        """Make the model call, recording its outcome in ``step``."""
        ...

    async def awaiting_approval(self, command: InvokeTools) -> Sequence[str]:
        """Of the batch's gated calls, those that would wait for a human (their arguments can
        run, or middleware could repair them); a gated call that cannot run is not shown."""
        ...

    def tool_calls(self, command: InvokeTools) -> Sequence[Callable[[StepLog], Awaitable[None]]]:
        """One runner per call of the batch, in the model's order, resolved now (a tool removed
        by an earlier call of the batch still runs in it); each records its outcome in a step."""
        ...

    async def gather(self, calls: Sequence[Awaitable[None]]) -> None:
        """Run ``calls`` concurrently and wait for all of them; cancelled, cancel them all."""
        ...


class RunLoop:
    """The owner of one run: numbers and feeds its events, keeps its log, drives its loop."""

    __slots__ = (
        "clock", "commands", "live", "log", "machine", "observer", "observes", "restamp", "run_id",
        "step_type", "strays",
    )  # fmt: skip

    def __init__(
        self,
        machine: RunMachine,
        run_id: str,
        clock: Callable[[], int],
        *,
        observer: Observer | None = None,
        observes: frozenset[type[EventBase]] | None = None,
        restamp: bool = False,
        live: bool = True,
        step_type: type[StepLog] = StepLog,
        log: Sequence[Event] = (),
    ) -> None:
        self.machine = machine
        self.run_id = run_id
        self.clock = clock
        self.observer = observer
        self.observes = observes
        """Only the reactions to these input types reach ``observer`` (None: every reaction);
        an observer that follows a few kinds of input is then not called for the others."""
        self.restamp = restamp
        """Whether fed events take the owner's time (a workflow's clock) instead of their own."""
        self.live = live
        """Whether the step at the head of the model's order is fed as it records (off for a
        workflow: its steps report back whole)."""
        self.step_type = step_type
        """What ``step()`` makes (a driver with threads gives a step that locks)."""
        self.strays: StepLog | None = None
        """Where a driver holds records from threads outside any step; fed before anything else
        the owner feeds, closed when the run ends."""
        self.log: list[Event] = list(log)
        # A list, not a deque: it holds one or two commands at a time, and a run waiting on its
        # model keeps it (a deque's first block is some 600 bytes for the collector to walk).
        self.commands: list[Command] = []

    # -- events -------------------------------------------------------------------------------

    def record(self, cls: type[EventBase], **fields: Any) -> Event:
        """Record one input event of the owner's own (outside any step) and feed it at once."""
        return self.put(cls, fields)

    def put(self, cls: type[EventBase], fields: dict[str, Any]) -> Event:
        """``record`` with the fields as one mapping."""
        strays = self.strays
        if strays is not None and strays.events:
            self._drain()
        event: Any = cls(run_id=self.run_id, seq=self.machine.next_seq, at=self.clock(), **fields)
        check_event(event)
        log = self.log
        kept = len(log)
        self.machine.handle_into(event, log, self.commands)
        if self.observer is not None and (self.observes is None or cls in self.observes):
            self.observer(log[kept:])
        return event  # type: ignore[no-any-return]

    def step(self, *, live: bool = False) -> StepLog:
        """A new step of this run, for the driver to record one model or tool call into."""
        return self.step_type(self.run_id, self.clock, self, live=live and self.live)

    def promote(self, step: StepLog) -> None:
        """The step is now the head of the model's order: feed what it holds, then go live
        (unless another thread records into it)."""
        if self.live and not step.closed:
            if step.events:  # a step not started yet holds nothing (a thread's record keeps it
                self._feed(step.take())  # from going live, and is fed with the step)
            step.go_live()

    def feed(self, step: StepLog) -> None:
        """Number the step's events from the next ``seq`` and feed them; the step closes."""
        events = step.take(close=True)
        strays = self.strays
        if strays is not None and strays.events:
            self._drain()
        if events:
            self._number(events)

    def _feed(self, events: Sequence[Event]) -> None:
        strays = self.strays
        if strays is not None and strays.events:
            self._drain()
        if events:
            self._number(events)

    def _drain(self) -> None:
        strays = self.strays
        if strays is not None and strays.events:
            self._number(strays.take())

    def _number(self, events: Sequence[Event]) -> None:
        machine = self.machine
        at = self.clock() if self.restamp and events else 0
        for event in events:
            if event.seq != machine.next_seq or self.restamp:
                checked_bytes(event)  # the bytes the gate kept carry the step's numbering: drop them
                _set_field(event, "seq", machine.next_seq)
                if self.restamp:
                    _set_field(event, "at", at)
            self._handle(event)

    def adopt(self, events: Sequence[Event]) -> None:
        """Feed events already numbered as the log keeps them (a start step stored them)."""
        for event in events:
            self._handle(event)

    def _handle(self, event: Event) -> None:
        """The machine takes one numbered input into the log and the command queue."""
        log = self.log
        kept = len(log)
        self.machine.handle_into(event, log, self.commands)
        observer = self.observer
        if observer is not None and (self.observes is None or type(event) in self.observes):
            observer(log[kept:])

    def begin(self) -> None:
        """Hand over to the loop (after agent middleware): the machine's first command."""
        if self.strays is not None:  # (``_drain`` only where a thread ever recorded)
            self._drain()
        self._take(self.machine.begin())

    def carry_on(self) -> None:
        """Go on with a run whose stored log the machine has observed (a run continued after its
        process stopped): the command it waits on is the loop's first."""
        command = self.machine.pending()
        if command is None:
            phase, run_id = self.machine.phase.value, self.run_id
            raise TransitionError(f"run {run_id!r} waits on nothing in phase {phase}", run_id=run_id)
        self.commands.append(command)

    def finish(self, **result: Any) -> None:
        """Record how the loop ended (``RunMachine.finish``)."""
        if self.strays is not None:
            self._drain()
        self._take(self.machine.finish(self.clock(), **result))
        if self.strays is not None:
            self._end_strays()

    def fail(self, error_type: str, message: str) -> bool:
        """Record ``RunFailed`` unless the run already ended; whether it was recorded."""
        if not self.machine.is_open:
            return False
        self._drain()
        self._take(self.machine.fail(self.clock(), error_type, message))
        self._end_strays()
        return True

    def _end_strays(self) -> None:
        """The run ended: a thread recording into it from now on is told so (``hold`` raises).
        What it held in between reaches the machine, which refuses it as after the end."""
        if self.strays is not None:
            self._number(self.strays.take(close=True))

    def take_finish(self) -> FinishRun:
        """The ``FinishRun`` the machine just issued outside the loop (agent middleware ended it)."""
        command = self.commands.pop()
        assert isinstance(command, FinishRun), command
        return command

    def _take(self, step: Reaction) -> None:
        events, commands = step
        self.log.extend(events)
        if commands:
            self.commands.extend(commands)
        observer = self.observer
        if observer is not None and events and (self.observes is None or type(events[0]) in self.observes):
            observer(events)

    # -- the loop -----------------------------------------------------------------------------

    async def drive(self, executor: Executor) -> FinishRun:
        """Carry out the machine's commands until it finishes the run."""
        commands = self.commands
        while True:
            command = commands.pop(0)
            if type(command) is FinishRun:
                return command
            waiting = executor.before(command)
            if waiting is not None:
                await waiting
                waiting = None  # done: the run waits on its next step without it
            if type(command) is CallModel:
                step = self.step(live=True)
                try:
                    await executor.call_model(command, step)
                finally:
                    self.feed(step)
            else:
                assert type(command) is InvokeTools
                if command.gated:
                    held = tuple(await executor.awaiting_approval(command))
                    if held:  # the whole batch waits for the answer
                        self.record(ApprovalRequested, call_ids=held)
                        continue
                runners = executor.tool_calls(command)
                if executor.sequential or len(runners) < 2:
                    # One call at a time, awaited here: a batch costs no coroutine of its own.
                    for index in range(len(runners)):  # (no runner left bound once they ran)
                        step = self.step(live=True)
                        try:
                            await runners[index](step)
                        finally:
                            self.feed(step)
                else:
                    await self._parallel(executor, runners)
                runners = ()  # run: the next model call waits without the batch's runners

    async def _parallel(
        self, executor: Executor, runners: Sequence[Callable[[StepLog], Awaitable[None]]]
    ) -> None:
        """Run a batch's calls together, feeding each step in the model's order of the calls."""
        steps = [self.step(live=i == 0) for i in range(len(runners))]
        done = [False] * len(steps)
        fed = 0

        async def one(index: int) -> None:
            nonlocal fed
            await runners[index](steps[index])
            done[index] = True
            if index != fed:
                return  # a call before it is still running: it waits its turn
            while fed < len(steps) and done[fed]:  # in the model's order, as soon as it can
                fed += 1
                self.feed(steps[fed - 1])
            if fed < len(steps):
                self.promote(steps[fed])

        try:
            await executor.gather([one(i) for i in range(len(steps))])
        finally:  # cut off: what the unfinished calls recorded is kept, in the model's order
            for step in steps[fed:]:
                self.feed(step)

"""Recorders: how everything that happens in a run becomes an event of its log.

Tools, middleware, sub-agents and the steps of a driver all record through a ``Recorder``:
``record(EventType, **fields)`` gives the event its run id, ``seq`` and ``at`` and keeps it. The
``LiveRecorder`` of a run in this process feeds each event to the run's ``RunMachine`` at once
(so the machine's decisions follow immediately) and hands every event, input or derived, to the
run's sinks. A ``StepRecorder`` keeps the events of one step for a driver whose machine lives
elsewhere (a Temporal workflow): that driver stamps and feeds them when the step reports back.

Both check every input event before they keep it (``check_event``: it must read back from the
log as it is): one that would not raises ``UnrecordableError`` and is neither kept nor fed to
the machine, so ``seq`` never skips and the log stays readable; the step that recorded it
records a failure instead.

Sinks observe a run; they never decide what its log holds. A sink that raises is reported (logged
on ``agentledger.sinks``, counted in ``sink_failures``) and the event is kept all the same.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..core.commands import Command, FinishRun
from ..core.events import Event, EventBase, RunCompleted
from ..core.limits import check_event, safe_text
from ..core.machine import RunMachine, Step
from ..redaction import scrub_text

__all__ = ("LiveRecorder", "Sink", "StepRecorder", "capture_sinks", "watching")

Sink = Callable[[Event], None]
_log = logging.getLogger("agentledger.sinks")

capture_sinks: contextvars.ContextVar[tuple[Sink, ...]] = contextvars.ContextVar(
    "agentledger_capture", default=()
)
"""Sinks that see every event of every run started in this context (sub-agents included)."""


@contextlib.contextmanager
def watching(sink: Sink) -> Iterator[None]:
    """Hand every event of every run started inside the block to ``sink``."""
    token = capture_sinks.set((*capture_sinks.get(), sink))
    try:
        yield
    finally:
        capture_sinks.reset(token)


class LiveRecorder:
    """Stamps input events, feeds them to the machine and keeps the run's log (thread-safe)."""

    def __init__(self, machine: RunMachine, run_id: str, clock: Callable[[], int], sinks: Sequence[Sink]):
        self.machine = machine
        self.run_id = run_id
        self.clock = clock
        self.sinks = tuple(sinks) + capture_sinks.get()
        self.log: list[Event] = []
        self.commands: collections.deque[Command] = collections.deque()
        self.lock = threading.RLock()
        self.sink_failures = 0
        """How many times a sink raised on an event of this run (each logged once per sink)."""
        self._failed_sinks: list[Sink] = []

    def record(self, cls: type[EventBase], **fields: Any) -> Event:
        with self.lock:  # the body of _take, inlined: this runs for every input event
            event: Any = cls(run_id=self.run_id, seq=self.machine.next_seq, at=self.clock(), **fields)
            check_event(event)
            events, commands = self.machine.handle(event)
            self.log.extend(events)
            if commands:
                self.commands.extend(commands)
            for sink in self.sinks:
                for each in events:
                    try:
                        sink(each)
                    except Exception as exc:
                        self._sink_failed(sink, each, exc)
        return event  # type: ignore[no-any-return]

    def begin(self) -> None:
        """Hand over to the loop (after agent middleware): the machine's first command."""
        with self.lock:
            self._take(self.machine.begin())

    def finish(self, **result: Any) -> None:
        """Record how the loop ended (``RunMachine.finish``); an answer given in the run's place
        (``result``) that the log could not give back raises ``UnrecordableError`` first."""
        with self.lock:
            if result:
                given: dict[str, Any] = {
                    k: tuple(v) if k == "messages" else v for k, v in result.items() if v is not None
                }
                check_event(RunCompleted(run_id=self.run_id, seq=self.machine.next_seq, at=0, **given))
            self._take(self.machine.finish(self.clock(), **result))

    def fail(self, error_type: str, message: str) -> bool:
        """Record ``RunFailed`` unless the run already ended; whether it was recorded."""
        with self.lock:
            if not self.machine.is_open:
                return False
            message = scrub_text(safe_text(message))
            self._take(self.machine.fail(self.clock(), safe_text(error_type), message))
            return True

    def next_command(self) -> Command:
        return self.commands.popleft()

    def take_finish(self) -> FinishRun:
        """The ``FinishRun`` the machine just issued outside the loop (agent middleware ended it)."""
        command = self.commands.pop()
        assert isinstance(command, FinishRun), command
        return command

    def _take(self, step: Step) -> None:
        events, commands = step
        self.log.extend(events)
        if commands:
            self.commands.extend(commands)
        for sink in self.sinks:
            for event in events:
                try:
                    sink(event)
                except Exception as exc:
                    self._sink_failed(sink, event, exc)

    def _sink_failed(self, sink: Sink, event: Event, exc: Exception) -> None:
        """A sink raised: the event is kept all the same and the other sinks still see it; the
        first failure of each sink in a run is logged with its traceback, every one is counted."""
        self.sink_failures += 1
        if sink in self._failed_sinks:
            return
        self._failed_sinks.append(sink)
        _log.error(
            "event sink %r raised on %s (seq %d) of run %r; the event is recorded and the run goes on",
            sink, type(event).__name__, event.seq, self.run_id, exc_info=exc,
        )  # fmt: skip


class StepRecorder:
    """Keeps what one step records, numbered from 0; its driver stamps ``seq`` and ``at``."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.events: list[Event] = []
        self.lock = threading.RLock()

    def record(self, cls: type[EventBase], **fields: Any) -> Event:
        with self.lock:
            event: Any = cls(run_id=self.run_id, seq=len(self.events), at=0, **fields)
            check_event(event)
            self.events.append(event)
        return event  # type: ignore[no-any-return]

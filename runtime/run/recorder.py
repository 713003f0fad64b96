"""Recording in this process: where a run's events go while its owner drives it.

A run's events all reach its log through its owner, the ``RunLoop`` of ``agentledger.core``:
it numbers them and feeds them to the machine. In this process the owner is the run's
``RunRecorder`` (a ``RunLoop``), which is also what tools, middleware and sub-agents record
through (the ``Recorder`` of its binding and its ``RunContext``): inside a step
(one model call, one tool call: ``RunRecorder.into(step)``) an event goes to that step's
``StepLog``, which the owner feeds when the step is over, in the model's order; outside any step
(agent middleware, the run's start) it goes to the owner at once. Concurrent calls therefore
never share a buffer and need no lock, and the run's log comes out in the same order every time.

Every input event is checked before it is kept (``check_event``: it must read back from the log
as it is): one that would not raises ``UnrecordableError`` and is neither kept nor fed to the
machine, so ``seq`` never skips and the log stays readable; the step that recorded it records a
failure instead.

Sinks observe a run; they never decide what its log holds. They are told of each event once
the owner has kept it, outside the machine. A sink that raises is reported (logged on
``agentledger.sinks``, counted in ``sink_failures``) and the event is kept all the same.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..context import SessionSink
from ..core.errors import TransitionError
from ..core.events import Event, EventBase, RunCompleted, SessionUpdated, ToolsAdded, ToolsRemoved
from ..core.limits import check_event, safe_text
from ..core.loop import RunLoop, StepLog
from ..core.machine import RunMachine
from ..redaction import scrub_text
from ..session import AgentSession
from .registry import ToolRegistry

__all__ = ("RunRecorder", "Sink", "Sinks", "capture_sinks", "watching")

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


class Sinks:
    """The sinks of one run, each told of every event the owner keeps, each failure isolated."""

    __slots__ = ("_failed", "failures", "run_id", "sinks")

    def __init__(self, run_id: str, sinks: Sequence[Sink]) -> None:
        self.run_id = run_id
        self.sinks = tuple(sinks)
        self.failures = 0
        """How many times a sink raised on an event of this run (each logged once per sink)."""
        self._failed: list[Sink] = []

    def __call__(self, events: Sequence[Event]) -> None:
        for sink in self.sinks:
            for event in events:
                try:
                    sink(event)
                except Exception as exc:
                    self._sink_failed(sink, event, exc)

    def _sink_failed(self, sink: Sink, event: Event, exc: Exception) -> None:
        """A sink raised: the event is kept all the same and the other sinks still see it; the
        first failure of each sink in a run is logged with its traceback, every one is counted."""
        self.failures += 1
        if sink in self._failed:
            return
        self._failed.append(sink)
        _log.error(
            "event sink %r raised on %s (seq %d) of run %r; the event is recorded and the run goes on",
            sink, type(event).__name__, event.seq, self.run_id, exc_info=exc,
        )  # fmt: skip


_FOLLOWED: frozenset[type[EventBase]] = frozenset({SessionUpdated, ToolsAdded, ToolsRemoved})
"""The events live state follows: session writes and tool changes."""


class _Follow:
    """What a run's owner tells of each kept event: the sinks, and the live state that follows
    the log (session writes, tool changes). Apart from the recorder, so that the owner refers to
    no object that refers back to it: a run leaves no reference cycle for the collector."""

    __slots__ = ("parent", "registry", "session", "sinks")

    def __init__(self, sinks: Sinks | None, session: AgentSession | None, parent: SessionSink | None):
        self.sinks = sinks
        self.session = session
        self.parent = parent if session is not None else None
        self.registry: ToolRegistry | None = None

    def __call__(self, events: Sequence[Event]) -> None:
        if self.sinks is not None:
            self.sinks(events)
        for event in events:
            if type(event) in _FOLLOWED:  # rare: most events change no live state
                self._follow(event)

    def _follow(self, event: Event) -> None:
        if type(event) is SessionUpdated:
            if self.session is not None:
                self._settle(self.session, event)
        elif self.registry is not None:
            self.registry.settle(event)  # type: ignore[arg-type]

    def _settle(self, session: AgentSession, event: SessionUpdated) -> None:
        if event.session_id != session.session_id:
            return
        session.state.settle(event.changes)
        parent = self.parent
        if parent is not None:
            origin = event.origin_run_id
            where = (origin, event.origin_seq or 0) if origin else (event.run_id, event.seq)
            parent(f"{event.run_id}/{event.by}", event.changes, where)


class RunRecorder(RunLoop):
    """The run's owner in this process (its ``RunLoop``) and the ``Recorder`` its binding and
    context record through: into the current step, else to the owner at once. One object for
    both: a run waiting on its model keeps one owner, not an owner and a recorder around it."""

    __slots__ = ("_follow", "current_step", "sinks", "thread")

    def __init__(
        self,
        machine: RunMachine,
        run_id: str,
        clock: Callable[[], int],
        sinks: Sequence[Sink],
        *,
        session: AgentSession | None = None,
        parent: SessionSink | None = None,
        log: Sequence[Event] = (),
    ) -> None:
        all_sinks = tuple(sinks) + capture_sinks.get()
        self.sinks = Sinks(run_id, all_sinks) if all_sinks else None
        # The session's live state follows its writes in the order the log keeps them, and a
        # caller sharing it (a sub-agent's) is given a copy of each write as it is kept. A run
        # with neither sinks nor a session follows only its tools: the registry itself is told
        # (``follow``), and no follower is made.
        follows = self.sinks is not None or session is not None
        self._follow = follow = _Follow(self.sinks, session, parent) if follows else None
        super().__init__(
            machine,
            run_id,
            clock,
            observer=follow,
            observes=None if self.sinks is not None else _FOLLOWED,  # no sinks: live state only
            step_type=LocalStep,
            log=log,
        )
        self.thread = threading.get_ident()
        """The thread the run's owner feeds on (its event loop's)."""
        self.current_step: contextvars.ContextVar[StepLog | None] = contextvars.ContextVar(
            "agentledger_step", default=None
        )
        """The step this run records into in the current context (``into``): one variable per
        run, so a sub-agent's run, inside its caller's call, has its own."""

    def follow(self, registry: ToolRegistry) -> None:
        """Keep ``registry`` (the run's live tools) in step with the tool changes as kept."""
        if self._follow is not None:
            self._follow.registry = registry
        else:
            self.observer = registry

    def release(self) -> None:
        """The run is over: stop following its live state (the registry refers to this
        recorder, so holding it would keep a reference cycle alive for the collector)."""
        if self._follow is not None:
            self._follow.registry = None
        else:
            self.observer = None

    @property
    def sink_failures(self) -> int:
        """How many times a sink raised on an event of this run."""
        return self.sinks.failures if self.sinks is not None else 0

    def record(self, cls: type[EventBase], **fields: Any) -> Event:
        step = self.current_step.get()
        if threading.get_ident() == self.thread:
            # A live step (this run's, made by its loop) hands each record to the owner at once.
            return self.put(cls, fields) if step is None or step.live else step.put(cls, fields)
        if step is not None:
            return step.hold(cls, **fields)
        return self._strays().hold(cls, **fields)  # a thread that did not inherit a call's context

    def _strays(self) -> StepLog:
        """Where records from threads outside any step wait for the owner (made on first use)."""
        with _STEP_LOCK:
            if self.strays is None:
                if not self.machine.is_open:
                    raise TransitionError(
                        f"a thread recorded into run {self.run_id!r} after the run ended", run_id=self.run_id
                    )
                self.strays = LocalStep(self.run_id, self.clock, self)
            return self.strays

    def into(self, step: StepLog) -> contextlib.AbstractContextManager[StepLog]:
        """Inside the block (and the tasks it starts), this run records into ``step``."""
        return _Into(self, step)

    def finish(self, **result: Any) -> None:
        """Record how the loop ended (``RunMachine.finish``); an answer given in the run's place
        (``result``) that the log could not give back raises ``UnrecordableError`` first."""
        if result:
            given: dict[str, Any] = {
                k: tuple(v) if k == "messages" else v for k, v in result.items() if v is not None
            }
            check_event(RunCompleted(run_id=self.run_id, seq=self.machine.next_seq, at=0, **given))
        super().finish(**result)

    def fail(self, error_type: str, message: str) -> bool:
        """Record ``RunFailed`` unless the run already ended; whether it was recorded."""
        if not self.machine.is_open:
            return False
        return super().fail(safe_text(error_type), scrub_text(safe_text(message)))


class _Into:
    """``RunRecorder.into``: a plain context manager (one per model call and per tool call)."""

    __slots__ = ("recorder", "step", "token")

    def __init__(self, recorder: RunRecorder, step: StepLog) -> None:
        self.recorder = recorder
        self.step = step
        self.token: contextvars.Token[StepLog | None] | None = None

    def __enter__(self) -> StepLog:
        self.token = self.recorder.current_step.set(self.step)
        return self.step

    def __exit__(self, *exc_info: object) -> None:
        assert self.token is not None
        self.recorder.current_step.reset(self.token)


_STEP_LOCK = threading.Lock()
"""Between a worker thread holding a record in a step and the owner taking what it holds: one for
all steps, since it is held for a list swap and taken only when another thread records."""


class LocalStep(StepLog):
    """A step in this process: a sync tool's worker thread may hold records in it while the
    owner takes them, so both go through a lock (never the run's)."""

    __slots__ = ()

    def hold(self, cls: type[EventBase], **fields: Any) -> Event:
        with _STEP_LOCK:
            return super().hold(cls, **fields)

    def take(self, *, close: bool = False) -> Sequence[Event]:
        with _STEP_LOCK:  # StepLog.take, under the lock
            events, self.events = self.events, ()
            if close:
                self.closed, self.live = True, False
            return events

    def go_live(self) -> None:
        with _STEP_LOCK:
            super().go_live()

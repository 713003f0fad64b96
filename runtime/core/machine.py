"""RunMachine: one agent run as a pure state machine.

Theory of operation. The driver feeds the machine *input events* (facts from outside: model
output, tool outcomes, session writes, middleware decisions); the machine checks the pair
(phase, event type) against ``TRANSITIONS``, folds the event into its projections and answers with
the events it derives (its own decisions: which tools the model is offered, a reset
``tool_choice``, a limit reached) and the *commands* the driver must carry out next. It never
awaits, reads a clock or draws a random number: time and ids arrive inside the inputs, and a
derived event takes ``at`` from the input that caused it. Feeding the inputs of a log to a new
machine therefore derives the same events again.

An input that is not allowed in the current phase raises ``TransitionError`` and changes nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from .errors import TransitionError
from .events import (
    ApprovalRequested,
    ApprovalResolved,
    ArgumentsRejected,
    CallsSkipped,
    ChildRunStarted,
    Event,
    EventBase,
    IterationLimitReached,
    MiddlewareShortCircuit,
    ModelCalled,
    ModelFailed,
    ModelRequestRewritten,
    ModelResponded,
    RunCompleted,
    RunConfig,
    RunFailed,
    RunInputRewritten,
    RunStarted,
    RunTerminated,
    SessionUpdated,
    ToolCalled,
    ToolChoice,
    ToolChoiceReset,
    ToolFailed,
    ToolNotFound,
    ToolReturned,
    ToolsAdded,
    ToolsRemoved,
)
from .messages import Content, Message, Usage
from .projections import TRANSCRIPT_FOLDS, ToolsProjection, TranscriptProjection

__all__ = (
    "DERIVED",
    "TRANSITIONS",
    "CallModel",
    "Command",
    "FinishRun",
    "InvokeTools",
    "Phase",
    "RunMachine",
    "TransitionError",
    "refold",
    "transition_table",
)


class Phase(enum.Enum):
    __hash__ = object.__hash__  # members are singletons; Enum's own hash runs Python code per lookup

    NEW = "new"
    STARTED = "started"
    AWAITING_MODEL = "awaiting_model"
    RUNNING_TOOLS = "running_tools"
    FINISHING = "finishing"
    DONE = "done"


class CallModel(msgspec.Struct, frozen=True, kw_only=True):
    """Ask the model once, offering ``tools`` with ``tool_choice``."""

    iteration: int
    messages: tuple[Message, ...]
    tools: tuple[str, ...]
    tool_choice: ToolChoice | None


class InvokeTools(msgspec.Struct, frozen=True, kw_only=True):
    """Run this batch of calls (concurrently unless the run is sequential)."""

    iteration: int
    calls: tuple[Content, ...]
    approved: bool = False


class FinishRun(msgspec.Struct, frozen=True, kw_only=True):
    """The loop is over: ``reason`` is completed, terminated, awaiting_approval or failed."""

    reason: str
    text: str = ""


Command = CallModel | InvokeTools | FinishRun
Step = tuple[list[Event], list[Command]]
_Handler = Callable[["RunMachine", Any], None]


def _is_required(choice: ToolChoice | None) -> bool:
    if isinstance(choice, dict):
        return choice.get("mode") == "required"
    return choice == "required"


class RunMachine:
    """The transition table of one run, with its live projections."""

    def __init__(self, history: Sequence[Message] = ()) -> None:
        self.phase = Phase.NEW
        self.run_id = ""
        self.next_seq = 0
        self.iteration = 0
        self.history = tuple(history)
        self.tools = ToolsProjection()
        self.transcript = TranscriptProjection()
        self.config = RunConfig()
        self.tool_choice: ToolChoice | None = None
        self.usage = Usage()
        self.calls_made = 0
        self.error_streak = 0
        self.final_call = False
        self.model_calls = 0
        self.limit_reason = ""
        self.terminated = False
        self.awaiting_approval: tuple[str, ...] = ()
        self._batch_failed = False
        self._at = 0
        self._out: list[Event] = []
        self._commands: list[Command] = []

    # -- inputs -----------------------------------------------------------------------------

    def handle(self, event: Event) -> Step:
        """Take one input event; return it with the derived events, and the next commands."""
        handler = self._accepts.get(type(event))
        if handler is None:
            raise TransitionError(
                f"{type(event).__name__} is not accepted in phase {self.phase.value}",
                run_id=self.run_id,
                seq=event.seq,
            )
        if event.seq != self.next_seq or (self.phase is not Phase.NEW and event.run_id != self.run_id):
            raise TransitionError(
                f"expected seq {self.next_seq} of run {self.run_id!r}, "
                f"got seq {event.seq} of run {event.run_id!r}",
                run_id=self.run_id,
                seq=event.seq,
            )
        self._out = [event]
        self._commands = []
        self.next_seq += 1
        self._at = event.at
        self._project(event)
        handler(self, event)
        return self._out, self._commands

    @property
    def phase(self) -> Phase:
        return self._phase

    @phase.setter
    def phase(self, phase: Phase) -> None:
        self._phase = phase
        self._accepts = _BY_PHASE[phase]

    def _project(self, event: Event) -> None:
        """Fold ``event`` into the live projections (the same folds a rebuild uses)."""
        kind = type(event)
        if kind in _TOOL_EVENTS:
            self.tools.apply(event)
        fold = _TRANSCRIPT_FOLDS.get(kind)
        if fold is not None:
            fold(self.transcript, event)

    def begin(self) -> Step:
        """Start the loop once agent middleware hands over: the first model call, or approvals."""
        if self.phase is not Phase.STARTED:
            raise TransitionError(f"begin is not accepted in phase {self.phase.value}", run_id=self.run_id)
        self._out = []
        self._commands = []
        approvals = [
            c for m in self.transcript.messages for c in m.contents if c.type == "function_approval_response"
        ]
        if approvals:
            self._resume_approvals(approvals)
        else:
            self._call_model()
        return self._out, self._commands

    # -- helpers ------------------------------------------------------------------------------

    def _derive(self, cls: type[EventBase], **fields: Any) -> None:
        event: Any = cls(run_id=self.run_id, seq=self.next_seq, at=self._at, **fields)
        self.next_seq += 1
        self._project(event)
        self._out.append(event)

    def _call_model(self, tool_choice: ToolChoice | None = None, *, final: bool = False) -> None:
        self.iteration += 1
        self.model_calls += 1
        self.final_call = final
        choice = "none" if final else (tool_choice if tool_choice is not None else self.tool_choice)
        count = len(self.history) + len(self.transcript.messages)
        names = self.tools.names
        self._derive(
            ModelCalled, iteration=self.iteration, tools=names, tool_choice=choice, message_count=count
        )
        messages = (*self.history, *self.transcript.messages)
        self._commands.append(
            CallModel(iteration=self.iteration, messages=messages, tools=names, tool_choice=choice)
        )
        self.phase = Phase.AWAITING_MODEL

    def _finish(self, reason: str) -> None:
        self._commands.append(FinishRun(reason=reason, text=self.last_text()))
        self.phase = Phase.FINISHING

    def last_text(self) -> str:
        for message in reversed(self.transcript.messages):
            if message.role == "assistant":
                return message.text
        return ""

    # -- transitions --------------------------------------------------------------------------

    def _on_started(self, event: RunStarted) -> None:
        """Take the run id, limits and tool_choice; wait for agent middleware to hand over."""
        self.run_id = event.run_id
        self.config = event.config
        self.tool_choice = event.options.get("tool_choice")
        self.phase = Phase.STARTED

    def _on_rewritten(self, event: RunInputRewritten) -> None:
        """Agent middleware replaced the input; a new tool_choice takes effect."""
        if "tool_choice" in event.options:
            self.tool_choice = event.options["tool_choice"]

    def _on_noop(self, event: Event) -> None:
        """Recorded facts (session writes, tool list changes, calls starting) the loop needn't act on."""

    def _on_agent_short_circuit(self, event: MiddlewareShortCircuit) -> None:
        """Agent middleware answered for the run (call_id None): finish; else just recorded."""
        if event.call_id is None:
            self._finish("short_circuit")

    def _on_model_responded(self, event: ModelResponded) -> None:
        """No calls: finish. Calls: reset a required tool_choice, refuse unknown tools, run the rest."""
        if event.usage is not None:
            self.usage = self.usage + event.usage
        calls = event.message.function_calls
        if self.final_call:
            if calls:
                skipped = tuple(c.call_id or "" for c in calls)
                self._derive(
                    CallsSkipped, iteration=self.iteration, call_ids=skipped, reason=self.limit_reason
                )
            self._finish("limit_reached")
            return
        if not calls:
            self._finish("completed")
            return
        if self.model_calls == 1 and _is_required(self.tool_choice):
            previous = self.tool_choice
            self.tool_choice = None
            self._derive(ToolChoiceReset, iteration=self.iteration, previous=previous)
        self._batch_failed = False
        self.phase = Phase.RUNNING_TOOLS
        known = self.tools.specs
        runnable = []
        for call in calls:
            if call.name in known:
                runnable.append(call)
            else:
                self._batch_failed = True
                reason = "not in the tools offered" if known else "no tools are offered"
                self._derive(ToolNotFound, call_id=call.call_id, name=call.name, reason=reason)
        self.calls_made += len(runnable)
        if runnable:
            self._commands.append(InvokeTools(iteration=self.iteration, calls=tuple(runnable)))
        self._after_result()

    def _on_model_failed(self, event: ModelFailed) -> None:
        """Finish as failed; the driver records RunFailed."""
        self._finish("failed")

    def _on_call_failed(self, event: ToolFailed | ArgumentsRejected) -> None:
        """Mark the batch as erroring; when it is whole, count it and go on or stop."""
        self._batch_failed = True
        self._after_result()

    def _on_call_done(self, event: ToolReturned | MiddlewareShortCircuit) -> None:
        """When the batch is whole: call the model again, or make the final call at a limit."""
        self._after_result()

    def _on_terminated(self, event: RunTerminated) -> None:
        """Finish after the current batch (at once outside a batch)."""
        self.terminated = True
        if self.phase is not Phase.RUNNING_TOOLS:
            self._finish("terminated")
        else:
            self._after_result()

    def _on_approval_requested(self, event: ApprovalRequested) -> None:
        """Hold these calls; when the rest of the batch is done, pause the run for approval."""
        self.awaiting_approval = (*self.awaiting_approval, *event.call_ids)
        self._after_result()

    def _after_result(self) -> None:
        """When every call of the batch is answered, decide what the loop does next."""
        if self.phase is not Phase.RUNNING_TOOLS:
            return
        if self.transcript.batch:  # open until every call not held for approval has its result
            return
        if self.awaiting_approval:
            self._finish("awaiting_approval")
            return
        self.error_streak = self.error_streak + 1 if self._batch_failed else 0
        if self.terminated:
            self._finish("terminated")
        elif self._limit_reached():
            self._call_model(final=True)
        else:
            self._call_model()

    def _limit_reached(self) -> bool:
        config = self.config
        checks = (
            ("max_iterations", self.iteration, config.max_iterations),
            ("max_consecutive_errors", self.error_streak, config.max_consecutive_errors),
            ("max_function_calls", self.calls_made, config.max_function_calls),
        )
        for reason, value, limit in checks:
            if limit is not None and value >= limit:
                self.limit_reason = reason
                self._derive(IterationLimitReached, iteration=self.iteration, reason=reason, limit=limit)
                return True
        return False

    def _resume_approvals(self, approvals: list[Content]) -> None:
        """A run that carries approval responses first settles the calls it answers."""
        self.iteration = 1
        self.phase = Phase.RUNNING_TOOLS
        self._batch_failed = False
        responses = {c.call_id: bool(c.approved) for c in approvals}
        pending = _pending_calls((*self.history, *self.transcript.messages), responses)
        for call in pending:
            self._derive(ApprovalResolved, call_id=call.call_id or "", approved=responses[call.call_id])
        approved = tuple(c for c in pending if responses[c.call_id] and c.name in self.tools.specs)
        for call in pending:  # approved, but its tool is not offered in this run (added at run time)
            if responses[call.call_id] and call.name not in self.tools.specs:
                self._batch_failed = True
                reason = "not in the tools offered to this run"
                self._derive(ToolNotFound, call_id=call.call_id or "", name=call.name or "", reason=reason)
        if approved:
            self.calls_made += len(approved)
            self._commands.append(InvokeTools(iteration=self.iteration, calls=approved, approved=True))
        self._after_result()

    def _on_finished(self, event: RunCompleted | RunFailed) -> None:
        """The run is over; nothing more is accepted."""
        self.phase = Phase.DONE


def _pending_calls(messages: Sequence[Message], responses: dict[str | None, bool]) -> list[Content]:
    """The function calls in ``messages`` that an approval response answers, in call order."""
    return [c for m in messages for c in m.contents if c.type == "function_call" and c.call_id in responses]


def _table() -> dict[tuple[Phase, type], _Handler]:
    m = RunMachine
    table: dict[tuple[Phase, type], _Handler] = {
        (Phase.NEW, RunStarted): m._on_started,
        (Phase.STARTED, RunInputRewritten): m._on_rewritten,
        (Phase.STARTED, SessionUpdated): m._on_noop,
        (Phase.STARTED, MiddlewareShortCircuit): m._on_agent_short_circuit,
        (Phase.STARTED, RunTerminated): m._on_terminated,
        (Phase.AWAITING_MODEL, ModelResponded): m._on_model_responded,
        (Phase.AWAITING_MODEL, ModelFailed): m._on_model_failed,
        (Phase.AWAITING_MODEL, SessionUpdated): m._on_noop,
        (Phase.AWAITING_MODEL, RunTerminated): m._on_terminated,
        (Phase.AWAITING_MODEL, MiddlewareShortCircuit): m._on_noop,
        (Phase.AWAITING_MODEL, ModelRequestRewritten): m._on_noop,
        (Phase.RUNNING_TOOLS, ToolCalled): m._on_noop,
        (Phase.RUNNING_TOOLS, ToolReturned): m._on_call_done,
        (Phase.RUNNING_TOOLS, MiddlewareShortCircuit): m._on_call_done,
        (Phase.RUNNING_TOOLS, ToolFailed): m._on_call_failed,
        (Phase.RUNNING_TOOLS, ArgumentsRejected): m._on_call_failed,
        (Phase.RUNNING_TOOLS, ToolsAdded): m._on_noop,
        (Phase.RUNNING_TOOLS, ToolsRemoved): m._on_noop,
        (Phase.RUNNING_TOOLS, SessionUpdated): m._on_noop,
        (Phase.RUNNING_TOOLS, ChildRunStarted): m._on_noop,
        (Phase.RUNNING_TOOLS, RunTerminated): m._on_terminated,
        (Phase.RUNNING_TOOLS, ApprovalRequested): m._on_approval_requested,
        (Phase.FINISHING, SessionUpdated): m._on_noop,
        (Phase.FINISHING, RunCompleted): m._on_finished,
    }
    for phase in (Phase.STARTED, Phase.AWAITING_MODEL, Phase.RUNNING_TOOLS, Phase.FINISHING):
        table[(phase, RunFailed)] = m._on_finished
    return table


TRANSITIONS = _table()
"""(phase, input event type) -> handler. Anything not listed raises ``TransitionError``."""

_BY_PHASE: dict[Phase, dict[type, _Handler]] = {
    phase: {kind: handler for (p, kind), handler in TRANSITIONS.items() if p is phase} for phase in Phase
}
_TOOL_EVENTS = frozenset({RunStarted, ToolsAdded, ToolsRemoved})
_TRANSCRIPT_FOLDS = TRANSCRIPT_FOLDS


DERIVED: tuple[type, ...] = (
    ModelCalled,
    ToolChoiceReset,
    IterationLimitReached,
    ToolNotFound,
    ApprovalResolved,
    CallsSkipped,
)
"""Event types the machine produces itself; every other event is an input."""


def refold(events: Sequence[Event], history: Sequence[Message] = ()) -> RunMachine:
    """Feed a run's input events to a new machine and check it derives the recorded rest.

    Raises ``TransitionError`` at the first recorded event the machine does not reproduce.
    """
    machine = RunMachine(history)
    derived: list[Event] = []
    for event in events:
        if isinstance(event, DERIVED):
            if not derived and machine.phase is Phase.STARTED:
                derived = machine.begin()[0]
            if not derived or derived[0] != event:
                expected = derived[0] if derived else None
                raise TransitionError(
                    f"recorded {event!r} but the machine derives {expected!r}",
                    run_id=machine.run_id,
                    seq=event.seq,
                )
            derived.pop(0)
            continue
        if derived:
            raise TransitionError(
                f"the machine derives {derived[0]!r} before {event!r}", run_id=machine.run_id, seq=event.seq
            )
        derived = machine.handle(event)[0][1:]
    return machine


def transition_table() -> str:
    """The transition table as Markdown (docs/events.md embeds this, a test keeps it current)."""
    rows = ["| phase | input | what the machine does |", "|---|---|---|"]
    for (phase, event_type), handler in TRANSITIONS.items():
        doc = (handler.__doc__ or "").strip().splitlines()[0]
        rows.append(f"| {phase.value} | {event_type.__name__} | {doc} |")
    rows.append(
        "| started | begin() | Call the model with the tools offered, or settle approval responses. |"
    )
    return "\n".join(rows)

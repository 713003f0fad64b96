"""RunMachine: one agent run as a pure state machine, and the only place a run decides anything.

Theory of operation. A driver feeds the machine *input events* (facts from outside: model output,
tool outcomes, session writes, middleware decisions); the machine checks the pair (phase, event
type) against ``TRANSITIONS``, folds the event into its projections and answers with the events it
derives (its own decisions: the tools the model is offered, a reset ``tool_choice``, a limit
reached, an unknown tool, how the run ended) and the *commands* the driver must carry out next.
It never awaits, reads a clock or draws a random number: time and ids arrive inside the inputs,
and a derived event takes ``at`` from the input that caused it. Feeding the inputs of a log to a
new machine therefore derives the same events again: ``observe`` does exactly that, one recorded
event at a time, and refuses a log whose derived events this machine would not have made.

An input that is not allowed in the current phase raises ``TransitionError`` and changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .approvals import approval_requests
from .commands import CallModel, Command, FinishRun, InvokeTools, Phase
from .errors import TransitionError
from .events import (
    ApprovalRequested,
    ApprovalResolved,
    ArgumentsRejected,
    BatchClaimed,
    BatchResumed,
    CallsSkipped,
    Event,
    EventBase,
    IterationLimitReached,
    MiddlewareShortCircuit,
    ModelCalled,
    ModelResponded,
    RunCompleted,
    RunConfig,
    RunFailed,
    RunStarted,
    ToolCalled,
    ToolChoice,
    ToolChoiceReset,
    ToolFailed,
    ToolNotFound,
    ToolReturned,
    ToolsAdded,
    ToolsRemoved,
)
from .messages import Content, Message, Usage, malformed_calls
from .projections import TRANSCRIPT_FOLDS, ModelCall, ToolsProjection, TranscriptProjection
from .transitions import BY_PHASE, TRANSITIONS, Transitions

__all__ = ("DERIVED", "TRANSITIONS", "RunMachine", "Step", "refold", "transition_table")

Step = tuple[list[Event], list[Command]]
_OPEN = frozenset({Phase.STARTED, Phase.AWAITING_MODEL, Phase.RUNNING_TOOLS, Phase.FINISHING})


class RunMachine(Transitions):
    """The transition table of one run, with its live projections."""

    def __init__(self, history: Sequence[Message] = ()) -> None:
        self._phase = Phase.NEW
        self._accepts = BY_PHASE[Phase.NEW]
        self.run_id = ""
        self.next_seq = 0
        self.iteration = 0
        self.history = tuple(history)
        self.tools = ToolsProjection()
        self.transcript = TranscriptProjection()
        self.config = RunConfig()
        self.tool_choice: ToolChoice | None = None
        self.usage = Usage()
        self.cost = 0.0
        self.calls_made = 0
        self.error_streak = 0
        self.final_call = False
        self.model_calls = 0
        self.limit_reason = ""
        self.terminated = False
        self.finish_reason = ""
        self.input_count = 0
        self.awaiting_approval: tuple[str, ...] = ()
        self.failure: tuple[str, str] | None = None  # (error type, message) RunFailed will carry
        self.approvals: tuple[Content, ...] = ()  # approval responses in the run's input
        self.claimed_by: str | None = None  # the run that claimed this paused run's batch
        self.conversation_id: str | None = None  # a conversation the service keeps, once known
        self.held = 0  # how many messages (history included) that service already holds
        self._batch: InvokeTools | None = None
        self._batch_failed = False
        self._at = 0
        self._out: list[Event] = []
        self._commands: list[Command] = []
        self._expected: list[Event] = []  # derived events ``observe`` still has to see

    @property
    def phase(self) -> Phase:
        """Where the run is; only the machine's own transitions change it."""
        return self._phase

    @property
    def is_open(self) -> bool:
        """Started and not yet ended: ``fail`` is accepted."""
        return self._phase in _OPEN

    # -- inputs -----------------------------------------------------------------------------

    def handle(self, event: Event) -> Step:
        """Take one input event; return it with the derived events, and the next commands."""
        kind = type(event)
        handler = self._accepts.get(kind)
        if handler is None:
            raise self._refuse(f"{type(event).__name__} is not accepted in phase {self._phase.value}", event)
        if event.seq != self.next_seq or (self._phase is not Phase.NEW and event.run_id != self.run_id):
            raise self._refuse(
                f"expected seq {self.next_seq} of run {self.run_id!r}, got seq {event.seq} of run "
                f"{event.run_id!r}",
                event,
            )
        guard = _GUARDS.get(kind)
        if guard is not None:
            guard(self, event)
        self._out = [event]
        self._commands = []
        self.next_seq += 1
        self._at = event.at
        self._project(event)
        handler(self, event)
        return self._out, self._commands

    def begin(self) -> Step:
        """Start the loop once agent middleware hands over: the first model call, or approvals."""
        if self._phase is not Phase.STARTED:
            raise TransitionError(f"begin is not accepted in phase {self._phase.value}", run_id=self.run_id)
        self._open_step()
        self.input_count = len(self.transcript.messages)
        if self.approvals:
            self._resume_approvals(self.approvals)
        else:
            self._call_model()
        return self._out, self._commands

    def finish(
        self,
        at: int,
        *,
        messages: Sequence[Message] | None = None,
        text: str | None = None,
        usage: Usage | None = None,
    ) -> Step:
        """Record how the finished loop ended: ``RunFailed`` after a failed model call, else
        ``RunCompleted`` with the run's own messages, text and usage (or what agent middleware
        answered instead: ``messages``, ``text``, ``usage``)."""
        if self._phase is not Phase.FINISHING:
            raise TransitionError(f"finish is not accepted in phase {self._phase.value}", run_id=self.run_id)
        self._open_step(at)
        if self.failure is not None:
            error_type, message = self.failure
            self._derive(RunFailed, error_type=error_type, message=message)
        else:
            own = self.response_messages() if messages is None else list(messages)
            final_text = text if text is not None else _response_text(own)
            self._derive(
                RunCompleted,
                messages=tuple(own),
                text=final_text,
                usage=self.usage if usage is None else usage,
                reason=self.finish_reason,
            )
        self._phase_to(Phase.DONE)
        return self._out, self._commands

    def fail(self, at: int, error_type: str, message: str) -> Step:
        """The run cannot go on (an exception, a cancellation): record ``RunFailed``."""
        if not self.is_open:
            raise TransitionError(f"fail is not accepted in phase {self._phase.value}", run_id=self.run_id)
        self._open_step(at)
        self._derive(RunFailed, error_type=error_type, message=message)
        self._phase_to(Phase.DONE)
        return self._out, self._commands

    def observe(self, event: Event, *, strict: bool = True) -> None:
        """Fold one recorded event, checking it is what this machine would have recorded there.

        Input events take their transition; a derived event must equal the one the machine
        derives at that point. Raises ``TransitionError`` where the log and the machine disagree.
        ``strict=False`` (reading a log, not resuming it) takes a derived event that differs from
        the machine's only in its fields as recorded: an older version may have counted the
        messages a model saw differently.
        """
        if isinstance(event, DERIVED):
            if not self._expected and self._phase is Phase.STARTED:
                self._expected = self.begin()[0]
            self._expect(event, strict)
        elif type(event) is RunCompleted and self._phase is Phase.FINISHING and not self._expected:
            self._expected = self.finish(
                event.at, messages=event.messages, text=event.text, usage=event.usage
            )[0]
            self._expect(event)
        elif type(event) is RunFailed and self.is_open and not self._expected:
            self.fail(event.at, event.error_type, event.message)
        else:
            if self._expected:
                raise self._refuse(f"the machine derives {self._expected[0]!r} before {event!r}", event)
            self._expected = self.handle(event)[0][1:]

    def pending(self) -> Command | None:
        """The command the run waits on now (after ``observe``, what a driver carries out next)."""
        if self._phase is Phase.AWAITING_MODEL:
            call = self.transcript.calls[-1]
            return CallModel(
                iteration=call.iteration,
                messages=self.request_messages(),
                tools=call.tools,
                tool_choice=call.tool_choice,
                conversation_id=call.conversation_id,
                final=self.final_call,
            )
        if self._phase is Phase.RUNNING_TOOLS and self._batch is not None:
            open_ids = set(self.transcript.pending)
            calls = tuple(c for c in self._batch.calls if c.call_id in open_ids)
            gated = tuple(g for g in self._batch.gated if g in open_ids)
            approved = tuple(a for a in self._batch.approved if a in open_ids)
            return InvokeTools(iteration=self._batch.iteration, calls=calls, gated=gated, approved=approved)
        if self._phase is Phase.FINISHING:
            return FinishRun(reason=self.finish_reason, text=self.last_text())
        return None

    # -- what a run produced ------------------------------------------------------------------

    def response_messages(self) -> list[Message]:
        """The messages this run added to the conversation (its input left out)."""
        return self.transcript.messages[self.input_count :]

    def approval_requests(self) -> list[Content]:
        """One request per call the run paused on, for the caller to answer."""
        return approval_requests(self.response_messages(), self.awaiting_approval)

    # -- helpers ------------------------------------------------------------------------------

    def _refuse(self, message: str, event: Event) -> TransitionError:
        return TransitionError(message, run_id=self.run_id, seq=event.seq)

    def _check_call(self, event: Any) -> None:
        """In a batch, a call's start or result must be one an open call awaits."""
        call_id = event.call_id
        if call_id is not None and self._phase is Phase.RUNNING_TOOLS and not self.transcript.awaits(call_id):
            raise self._refuse(f"call {call_id!r} is not awaiting a result in this batch", event)

    def _check_claim(self, event: BatchClaimed) -> None:
        """A claim is on a run paused for approval, answers calls it awaits, and is the first,
        or takes over from the claim before it."""
        if self.finish_reason != "awaiting_approval":
            raise self._refuse(f"run {self.run_id!r} did not pause for approval: nothing to claim", event)
        stray = [a.call_id for a in event.answers if a.call_id not in self.awaiting_approval]
        if stray:
            raise self._refuse(f"calls {stray} do not wait for approval in this run", event)
        if self.claimed_by is not None and event.after_run_id != self.claimed_by:
            raise self._refuse(f"the batch is claimed by run {self.claimed_by!r} already", event)

    def _check_answer(self, event: ModelResponded) -> None:
        """A model answer whose calls cannot be run (no call id, one id twice) is a failed model
        call, never a response: the rule a step applies before recording one."""
        problem = malformed_calls(event.message.contents) if event.message.contents else None
        if problem is not None:
            raise self._refuse(f"ModelResponded cannot carry such calls: {problem}", event)

    def _check_gated(self, event: ApprovalRequested) -> None:
        gated = self._batch.gated if self._batch is not None else ()
        stray = [c for c in event.call_ids if c not in gated]
        if stray:
            raise self._refuse(f"calls {stray} were not gated for approval in this batch", event)

    def _expect(self, event: Event, strict: bool = True) -> None:
        expected = self._expected.pop(0) if self._expected else None
        if expected == event:
            return
        if not strict and type(expected) is type(event):
            if isinstance(event, ModelCalled):  # the transcript keeps what the log says was sent
                calls = self.transcript.calls
                calls[-1] = ModelCall.of(event)
            return
        self._expected = []
        raise self._refuse(f"recorded {event!r} but the machine derives {expected!r}", event)

    def _open_step(self, at: int | None = None) -> None:
        self._out = []
        self._commands = []
        if at is not None:
            self._at = at

    def _phase_to(self, phase: Phase) -> None:
        self._phase = phase
        self._accepts = BY_PHASE[phase]

    def _project(self, event: Event) -> None:
        """Fold ``event`` into the live projections (the same folds a rebuild uses)."""
        kind = type(event)
        if kind in _TOOL_EVENTS:
            self.tools.apply(event)
        fold = TRANSCRIPT_FOLDS.get(kind)
        if fold is not None:
            fold(self.transcript, event)

    def _derive(self, cls: type[EventBase], **fields: Any) -> None:
        event: Any = cls(run_id=self.run_id, seq=self.next_seq, at=self._at, **fields)
        self.next_seq += 1
        self._project(event)
        self._out.append(event)


def _response_text(messages: Sequence[Message]) -> str:
    """The text of a response: its last assistant message that has any."""
    for message in reversed(messages):
        if message.role == "assistant" and message.text:
            return message.text
    return ""


_GUARDS: dict[type, Any] = {
    **dict.fromkeys(
        (ToolCalled, ToolReturned, ToolFailed, ArgumentsRejected, MiddlewareShortCircuit),
        RunMachine._check_call,
    ),
    ApprovalRequested: RunMachine._check_gated,
    ModelResponded: RunMachine._check_answer,
    BatchClaimed: RunMachine._check_claim,
}
"""Checks an input must pass before it changes anything (besides its phase and seq)."""
_TOOL_EVENTS = frozenset({RunStarted, ToolsAdded, ToolsRemoved})

DERIVED: tuple[type, ...] = (
    ModelCalled,
    ToolChoiceReset,
    IterationLimitReached,
    ToolNotFound,
    ApprovalResolved,
    CallsSkipped,
    BatchResumed,
)
"""Event types the machine derives from an input; ``RunCompleted``/``RunFailed`` it derives on
``finish``/``fail``. Every other event is an input."""


def refold(events: Sequence[Event], history: Sequence[Message] = ()) -> RunMachine:
    """A new machine that has observed ``events``: raises ``TransitionError`` at the first
    recorded event the machine does not reproduce."""
    machine = RunMachine(history)
    for event in events:
        machine.observe(event)
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
    rows.append("| finishing | finish() | Record RunCompleted, or RunFailed after a failed model call. |")
    rows.append("| any open phase | fail() | Record RunFailed: the run cannot go on. |")
    return "\n".join(rows)

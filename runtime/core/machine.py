"""RunMachine: one agent run as a pure state machine, and the only place a run decides anything.

Theory of operation. A driver feeds the machine *inputs*: recorded events (facts from outside:
model output, tool outcomes, session writes, middleware decisions) and three calls of its own
(``begin``, ``finish``, ``fail``). The machine looks the pair (phase, input) up in
``TRANSITIONS``: the entry names the check the input must pass, the handler that decides what
the run does, and the phases the run may be in afterwards. It folds an event into its
projections and answers with the events it derives (its own decisions: the tools the model is
offered, a reset ``tool_choice``, a limit reached, an unknown tool, how the run ended) and the
*commands* the driver must carry out next. It never awaits, reads a clock or draws a random
number: time and ids arrive inside the inputs, and a derived event takes ``at`` from the input
that caused it. Feeding the inputs of a log to a new machine therefore derives the same events
again: ``observe`` does exactly that, one recorded event at a time, and refuses a log whose
derived events this machine would not have made.

An input that is not allowed in the current phase raises ``TransitionError`` and changes nothing.

This module is the machine whole: its state, its decisions and its table are read in one place,
which is worth more than a short file (``docs/architecture.md``, rule 5). State is read from
outside through read-only properties; only the machine's transitions change it.
"""

from __future__ import annotations

from collections.abc import Callable, MutableSequence, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import msgspec

from .approvals import approval_requests, approval_responses, resumed_batch
from .commands import CallModel, Command, FinishRun, InvokeTools, Phase
from .errors import TransitionError
from .events import (
    ALWAYS_REQUIRE,
    ApprovalRequested,
    ApprovalResolved,
    ArgumentsRejected,
    BatchClaimed,
    BatchResumed,
    CallsSkipped,
    ChildRunStarted,
    ContextProvided,
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
from .messages import Content, Message, MessageView, Usage, malformed_calls
from .projections import TRANSCRIPT_FOLDS, ModelCall, ToolsProjection, TranscriptProjection

__all__ = (
    "DERIVED",
    "TRANSITIONS",
    "Begin",
    "Fail",
    "Finish",
    "Reaction",
    "RunMachine",
    "Transition",
    "transition_table",
)

Reaction = tuple[list[Event], list[Command]]
"""What the machine answers an input with: the events (the input first, then what it derived)
and the commands the driver carries out next."""
In = TypeVar("In")

_CallOutcome = ToolCalled | ToolReturned | ToolFailed | ArgumentsRejected | MiddlewareShortCircuit


# -- the driver's own inputs ----------------------------------------------------------------------


class Begin(msgspec.Struct, frozen=True, gc=False):
    """``begin()``: agent middleware handed over to the loop."""

    verb: ClassVar[str] = "begin"
    at: int | None = None


class Finish(msgspec.Struct, frozen=True, gc=False):
    """``finish(at, ...)``: the loop is over; what agent middleware answered, if it did."""

    verb: ClassVar[str] = "finish"
    at: int
    messages: Sequence[Message] | None = None
    text: str | None = None
    usage: Usage | None = None


class Fail(msgspec.Struct, frozen=True, gc=False):
    """``fail(at, error_type, message)``: the run cannot go on."""

    verb: ClassVar[str] = "fail"
    at: int
    error_type: str
    message: str


@dataclass(frozen=True, slots=True)
class Transition(Generic[In]):
    """One entry of ``TRANSITIONS``: what an input does in a phase, and where it may lead."""

    handler: Callable[[RunMachine, In], None]
    """Decides what the run does: derives events, issues commands, moves the phase."""
    leads_to: frozenset[Phase]
    """Every phase the run may be in once the handler is done (the machine holds itself to it)."""
    guard: Callable[[RunMachine, In], None] | None = None
    """A check the input must pass before anything changes (raises ``TransitionError``)."""
    moves_to: Phase | None = None
    """The one phase the transition leads to, where it leads to one other than its own: the
    machine moves there once the handler is done, so that handler sets no phase."""

    @property
    def does(self) -> str:
        """The first line of the handler's docstring: what the transition does, in words."""
        return (self.handler.__doc__ or "").strip().splitlines()[0]


def _is_required(choice: ToolChoice | None) -> bool:
    if isinstance(choice, dict):
        return choice.get("mode") == "required"
    return choice == "required"


def _last_text(messages: list[Message] | tuple[Message, ...]) -> str:
    for message in reversed(messages):
        if message.role == "assistant":
            return message.text
    return ""


def _response_text(messages: Sequence[Message]) -> str:
    """The text of a response: its last assistant message that has any."""
    for message in reversed(messages):
        if message.role == "assistant" and (text := message.text):
            return text
    return ""


# The phases the machine's methods name, as module names: on Python 3.11 reading a member off
# its enum class (``Phase.NEW``) costs several times a plain attribute's look-up, and nearly
# every input names one or two.
_NEW, _STARTED, _AWAITING_MODEL = Phase.NEW, Phase.STARTED, Phase.AWAITING_MODEL
_RUNNING_TOOLS, _FINISHING = Phase.RUNNING_TOOLS, Phase.FINISHING

_NO_CONFIG = RunConfig()
_NO_USAGE = Usage()  # both frozen: every machine starts from the same ones


class RunMachine:
    """One run: its state, the transitions of ``TRANSITIONS`` over it, and its live projections."""

    __slots__ = (
        "_accepts",
        "_approvals",
        "_at",
        "_awaiting_approval",
        "_batch",
        "_batch_failed",
        "_calls_made",
        "_claimed_by",
        "_commands",
        "_config",
        "_conversation_id",
        "_cost",
        "_error_streak",
        "_expected",
        "_failure",
        "_final_call",
        "_finish_reason",
        "_held",
        "_history",
        "_input_count",
        "_iteration",
        "_limit_reason",
        "_model_calls",
        "_next_seq",
        "_out",
        "_phase",
        "_run_id",
        "_terminated",
        "_tool_choice",
        "_tools",
        "_transcript",
        "_usage",
    )

    def __init__(self, history: Sequence[Message] = ()) -> None:
        self._phase = _NEW
        self._accepts = BY_PHASE[_NEW]
        self._run_id = ""
        self._next_seq = 0
        self._iteration = 0
        self._history = tuple(history)
        self._tools = ToolsProjection()
        self._transcript = TranscriptProjection()
        self._config = _NO_CONFIG
        self._tool_choice: ToolChoice | None = None
        self._usage = _NO_USAGE
        self._cost = 0.0
        self._calls_made = 0
        self._error_streak = 0
        self._final_call = False
        self._model_calls = 0
        self._limit_reason = ""
        self._terminated = False
        self._finish_reason = ""
        self._input_count = 0
        self._awaiting_approval: tuple[str, ...] = ()
        self._failure: tuple[str, str] | None = None  # (error type, message) RunFailed will carry
        self._approvals: tuple[Content, ...] = ()  # approval responses in the run's input
        self._claimed_by: str | None = None  # the run that claimed this paused run's batch
        self._conversation_id: str | None = None  # a conversation the service keeps, once known
        self._held = 0  # how many messages (history included) that service already holds
        self._batch: InvokeTools | None = None
        self._batch_failed = False
        self._at = 0
        self._out: list[Event]  # where the reaction to the input being handled goes (``handle``)
        self._commands: MutableSequence[Command]
        self._expected: Sequence[Event] = ()  # derived events ``observe`` still has to see

    @classmethod
    def from_events(cls, events: Sequence[Event], history: Sequence[Message] = ()) -> RunMachine:
        """A new machine that has observed ``events``: raises ``TransitionError`` at the first
        recorded event the machine does not reproduce."""
        machine = cls(history)
        for event in events:
            machine.observe(event)
        return machine

    # -- state, read-only -------------------------------------------------------------------

    @property
    def phase(self) -> Phase:
        """Where the run is; only the machine's own transitions change it."""
        return self._phase

    @property
    def is_open(self) -> bool:
        """Started and not yet ended: ``fail`` is accepted."""
        return Fail in self._accepts

    @property
    def run_id(self) -> str:
        """The run's id, from its ``RunStarted`` (``""`` before)."""
        return self._run_id

    @property
    def next_seq(self) -> int:
        """The ``seq`` the next input must carry."""
        return self._next_seq

    @property
    def iteration(self) -> int:
        """How many model calls the loop has made (the resumed batch counts as the first)."""
        return self._iteration

    @property
    def history(self) -> tuple[Message, ...]:
        """The conversation the run continues (its session's history)."""
        return self._history

    @property
    def tools(self) -> ToolsProjection:
        """The tools the run offers, as its events have changed them."""
        return self._tools

    @property
    def transcript(self) -> TranscriptProjection:
        """The run's messages, model calls and open calls."""
        return self._transcript

    @property
    def config(self) -> RunConfig:
        """The run's limits, from its ``RunStarted``."""
        return self._config

    @property
    def tool_choice(self) -> ToolChoice | None:
        """The ``tool_choice`` the next model call offers."""
        return self._tool_choice

    @property
    def usage(self) -> Usage:
        """The tokens the run's model calls used, summed."""
        return self._usage

    @property
    def calls_made(self) -> int:
        """How many function calls the run has issued."""
        return self._calls_made

    @property
    def error_streak(self) -> int:
        """How many batches in a row had a failing call."""
        return self._error_streak

    @property
    def model_calls(self) -> int:
        """How many model calls the run has made."""
        return self._model_calls

    @property
    def terminated(self) -> bool:
        """Whether a ``RunTerminated`` asked the run to stop."""
        return self._terminated

    @property
    def finish_reason(self) -> str:
        """Why the loop ended (``""`` until it does)."""
        return self._finish_reason

    @property
    def input_count(self) -> int:
        """How many of the transcript's messages are the run's input."""
        return self._input_count

    @property
    def awaiting_approval(self) -> tuple[str, ...]:
        """The ids of the calls held for approval."""
        return self._awaiting_approval

    @property
    def failure(self) -> tuple[str, str] | None:
        """The (error type, message) ``finish`` records as ``RunFailed``, if the loop failed."""
        return self._failure

    @property
    def conversation_id(self) -> str | None:
        """The conversation the service keeps, once known."""
        return self._conversation_id

    # -- inputs -----------------------------------------------------------------------------

    def handle(self, event: Event) -> Reaction:
        """Take one input event; return it with the derived events, and the next commands."""
        out: list[Event] = []
        commands: list[Command] = []
        self.handle_into(event, out, commands)
        # Handed over, not kept: a run waiting on a model call holds two lists fewer for the
        # collector to walk. The next input sets both again; nothing else appends to them.
        del self._out, self._commands
        return out, commands

    def handle_into(self, event: Event, log: list[Event], commands: MutableSequence[Command]) -> None:
        """``handle``, appending to the owner's own ``log`` (the event, then what it derives) and
        ``commands`` instead of returning new lists: one input costs no list of its own. A
        refused event appends nothing."""
        kind = type(event)
        edge = self._accepts.get(kind)
        if edge is None:
            raise self._refuse(f"{kind.__name__} is not accepted in phase {self._phase.value}", event)
        if event.seq != self._next_seq or (self._phase is not _NEW and event.run_id != self._run_id):
            raise self._refuse(
                f"expected seq {self._next_seq} of run {self._run_id!r}, got seq {event.seq} of run "
                f"{event.run_id!r}",
                event,
            )
        if edge.guard is not None:
            edge.guard(self, event)
        self._out = log
        self._commands = commands
        self._next_seq += 1
        self._at = event.at
        kept, issued = len(log), len(commands)
        log.append(event)
        try:
            # Fold it into the live projections (the folds a rebuild uses), inline: once per event.
            if kind in _TOOL_EVENTS:
                self._tools.apply(event)
            fold = TRANSCRIPT_FOLDS.get(kind)
            if fold is not None:
                fold(self._transcript, event)
            edge.handler(self, event)
            phase = edge.moves_to
            if phase is not None:  # the phase and what it accepts, set in place: once per input
                self._phase = phase
                self._accepts = BY_PHASE[phase]
            elif self._phase not in edge.leads_to:
                self._astray(edge, kind.__name__)
        except BaseException:  # a bug in a handler: the owner's log keeps no half of a reaction
            del log[kept:]
            while len(commands) > issued:
                commands.pop()
            raise

    def begin(self) -> Reaction:
        """Start the loop once agent middleware hands over: the first model call, or approvals."""
        return self._call(Begin())

    def finish(
        self,
        at: int,
        *,
        messages: Sequence[Message] | None = None,
        text: str | None = None,
        usage: Usage | None = None,
    ) -> Reaction:
        """Record how the finished loop ended: ``RunFailed`` after a failed model call, else
        ``RunCompleted`` with the run's own messages, text and usage (or what agent middleware
        answered instead: ``messages``, ``text``, ``usage``)."""
        return self._call(Finish(at, messages, text, usage))

    def fail(self, at: int, error_type: str, message: str) -> Reaction:
        """The run cannot go on (an exception, a cancellation): record ``RunFailed``."""
        return self._call(Fail(at, error_type, message))

    def observe(self, event: Event, *, strict: bool = True) -> None:
        """Fold one recorded event, checking it is what this machine would have recorded there.

        Input events take their transition; a derived event must equal the one the machine
        derives at that point. Raises ``TransitionError`` where the log and the machine disagree.
        ``strict=False`` (reading a log, not resuming it) takes a derived event that differs from
        the machine's only in its fields as recorded: an older version may have counted the
        messages a model saw differently.
        """
        if isinstance(event, DERIVED):
            if not self._expected and self._phase is _STARTED:
                self._expected = self.begin()[0]
            self._expect(event, strict)
        elif type(event) is RunCompleted and self._phase is _FINISHING and not self._expected:
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
        if self._phase is _AWAITING_MODEL:
            call = self._transcript.calls[-1]
            return CallModel(
                iteration=call.iteration,
                messages=self.request_messages(),
                tools=call.tools,
                tool_choice=call.tool_choice,
                conversation_id=call.conversation_id,
                final=self._final_call,
            )
        if self._phase is _RUNNING_TOOLS and self._batch is not None:
            open_ids = set(self._transcript.pending)
            calls = tuple(c for c in self._batch.calls if c.call_id in open_ids)
            gated = tuple(g for g in self._batch.gated if g in open_ids)
            approved = tuple(a for a in self._batch.approved if a in open_ids)
            return InvokeTools(iteration=self._batch.iteration, calls=calls, gated=gated, approved=approved)
        if self._phase is _FINISHING:
            return FinishRun(reason=self._finish_reason, text=self.last_text())
        return None

    # -- what a run produced ------------------------------------------------------------------

    def last_text(self) -> str:
        """The last assistant text of the run's messages."""
        return _last_text(self._transcript.messages)

    def response_messages(self) -> list[Message]:
        """The messages this run added to the conversation (its input left out)."""
        return self._transcript.messages[self._input_count :]

    def approval_requests(self) -> list[Content]:
        """One request per call the run paused on, for the caller to answer."""
        if not self._awaiting_approval:
            return []
        return approval_requests(self.response_messages(), self._awaiting_approval)

    # -- helpers ------------------------------------------------------------------------------

    def _refuse(self, message: str, event: Event) -> TransitionError:
        return TransitionError(message, run_id=self._run_id, seq=event.seq)

    def _check_call(self, event: _CallOutcome) -> None:
        """In a batch, a call's start or result must be one an open call awaits."""
        call_id = event.call_id
        if call_id is not None and not self._transcript.awaits(call_id):
            raise self._refuse(f"call {call_id!r} is not awaiting a result in this batch", event)

    def _check_claim(self, event: BatchClaimed) -> None:
        """A claim is on a run paused for approval, answers calls it awaits, and is the first,
        or takes over from the claim before it."""
        if self._finish_reason != "awaiting_approval":
            raise self._refuse(f"run {self._run_id!r} did not pause for approval: nothing to claim", event)
        stray = [a.call_id for a in event.answers if a.call_id not in self._awaiting_approval]
        if stray:
            raise self._refuse(f"calls {stray} do not wait for approval in this run", event)
        if self._claimed_by is not None and event.after_run_id != self._claimed_by:
            raise self._refuse(f"the batch is claimed by run {self._claimed_by!r} already", event)

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
        expected = None
        if self._expected:
            expected, self._expected = self._expected[0], self._expected[1:]
        if expected == event:
            return
        if not strict and type(expected) is type(event):
            if isinstance(event, ModelCalled):  # the transcript keeps what the log says was sent
                calls = self._transcript.calls
                calls[-1] = ModelCall.of(event)
            return
        self._expected = ()
        raise self._refuse(f"recorded {event!r} but the machine derives {expected!r}", event)

    def _call(self, call: Begin | Finish | Fail) -> Reaction:
        """Take one of the driver's own inputs (``begin``, ``finish``, ``fail``)."""
        edge = self._accepts.get(type(call))
        if edge is None:
            raise TransitionError(
                f"{call.verb} is not accepted in phase {self._phase.value}", run_id=self._run_id
            )
        self._out = []
        self._commands = []
        if call.at is not None:
            self._at = call.at
        edge.handler(self, call)
        phase = edge.moves_to
        if phase is not None:
            self._phase = phase
            self._accepts = BY_PHASE[phase]
        elif self._phase not in edge.leads_to:
            self._astray(edge, f"{call.verb}()")
        reaction = self._out, self._commands  # handed over, not kept (as in ``handle``)
        del self._out, self._commands
        return reaction

    def _astray(self, edge: Transition[Any], what: str) -> None:
        """The table says where a transition may lead; a handler that went elsewhere is a bug."""
        raise RuntimeError(f"{what} led to {self._phase.value}, which TRANSITIONS does not list")

    def _derive(self, cls: type[EventBase], **fields: Any) -> None:
        event: Any = cls(run_id=self._run_id, seq=self._next_seq, at=self._at, **fields)
        self._next_seq += 1
        if cls in _TOOL_EVENTS:  # folded as ``handle`` folds an input
            self._tools.apply(event)
        fold = TRANSCRIPT_FOLDS.get(cls)
        if fold is not None:
            fold(self._transcript, event)
        self._out.append(event)

    # -- decisions ----------------------------------------------------------------------------

    def _call_model(self, *, final: bool = False) -> None:
        self._iteration += 1
        self._model_calls += 1
        self._final_call = final
        choice = "none" if final else self._tool_choice
        count = self._transcript.history_length + len(self._transcript.messages)  # as RunStarted says
        names = self._tools.names
        conversation_id = self._conversation_id
        if conversation_id is None:
            self._derive(
                ModelCalled, iteration=self._iteration, tools=names, tool_choice=choice, message_count=count
            )
        else:
            self._derive(
                ModelCalled,
                iteration=self._iteration,
                tools=names,
                tool_choice=choice,
                message_count=count,
                conversation_id=conversation_id,
                held=self._held,
            )
        self._commands.append(
            CallModel(
                iteration=self._iteration,
                messages=self.request_messages(),
                tools=names,
                tool_choice=choice,
                conversation_id=conversation_id,
                final=final,
            )
        )
        self._phase = _AWAITING_MODEL
        self._accepts = BY_PHASE[_AWAITING_MODEL]

    def request_messages(self) -> MessageView:
        """What the next model call sends: the history and the run's messages, or in a
        service-side conversation only the run's messages the service does not hold yet (a
        view, made in O(1) however long the conversation)."""
        messages = self._transcript.messages
        if self._conversation_id is None:
            return MessageView(self._history, messages)
        return MessageView((), messages, self._held - self._transcript.history_length)

    def _continue_conversation(self, conversation_id: Any) -> None:
        """From here on the service keeps the conversation: it holds every message so far."""
        if isinstance(conversation_id, str) and conversation_id:
            self._conversation_id = conversation_id
            self._held = self._transcript.history_length + len(self._transcript.messages)
        else:
            self._conversation_id = None
            self._held = 0

    def _invoke(self, calls: tuple[Content, ...], *, approved: frozenset[str | None] = frozenset()) -> None:
        """Issue the batch; calls of tools that require approval are gated unless ``approved``."""
        specs = self._tools.specs
        gated: tuple[str, ...] = ()
        if self._tools.gated:
            gated = tuple(
                [
                    c.call_id or ""
                    for c in calls
                    if specs[c.name or ""].approval_mode == ALWAYS_REQUIRE and c.call_id not in approved
                ]
            )
        self._calls_made += len(calls)
        answered = tuple(c.call_id or "" for c in calls if c.call_id in approved) if approved else ()
        self._batch = InvokeTools(iteration=self._iteration, calls=calls, gated=gated, approved=answered)
        self._commands.append(self._batch)

    def _finish(self, reason: str) -> None:
        self._finish_reason = reason
        self._commands.append(FinishRun(reason=reason, text=self.last_text()))
        self._phase = _FINISHING
        self._accepts = BY_PHASE[_FINISHING]

    # -- transitions: the handlers of TRANSITIONS ----------------------------------------------

    def _on_begin(self, call: Begin) -> None:
        """Call the model with the tools offered, or settle approval responses."""
        self._input_count = len(self._transcript.messages)
        if self._approvals:
            self._resume_approvals(self._approvals)
        else:
            self._call_model()

    def _on_finish(self, call: Finish) -> None:
        """Record RunCompleted, or RunFailed after a failed model call."""
        if self._failure is not None:
            error_type, message = self._failure
            self._derive(RunFailed, error_type=error_type, message=message)
        else:
            own = self.response_messages() if call.messages is None else list(call.messages)
            final_text = call.text if call.text is not None else _response_text(own)
            self._derive(
                RunCompleted,
                messages=tuple(own),
                text=final_text,
                usage=self._usage if call.usage is None else call.usage,
                reason=self._finish_reason,
            )

    def _on_fail(self, call: Fail) -> None:
        """Record RunFailed: the run cannot go on."""
        self._derive(RunFailed, error_type=call.error_type, message=call.message)

    def _on_started(self, event: RunStarted) -> None:
        """Take the run id, limits and tool_choice; wait for agent middleware to hand over."""
        self._run_id = event.run_id
        self._config = event.config
        self._tool_choice = event.options.get("tool_choice")
        self._input_count = len(self._transcript.messages)  # the input as conversation
        if self._transcript.resuming:  # the transcript found approval responses in the input
            self._approvals = tuple(approval_responses(event.messages))
        conversation_id = event.options.get("conversation_id")
        if conversation_id:  # the service holds the history; the input is sent
            self._conversation_id = conversation_id
            self._held = self._transcript.history_length

    def _on_rewritten(self, event: RunInputRewritten) -> None:
        """Agent middleware replaced the input; a new tool_choice takes effect."""
        self._input_count = len(self._transcript.messages)
        # Answers are not conversation: middleware rewriting the messages does not withdraw them.
        self._approvals = tuple(approval_responses(event.messages)) or self._approvals
        if "tool_choice" in event.options:
            self._tool_choice = event.options["tool_choice"]
        if "conversation_id" in event.options:
            conversation_id = event.options["conversation_id"]
            usable = isinstance(conversation_id, str) and conversation_id
            self._conversation_id = conversation_id if usable else None
            self._held = self._transcript.history_length if self._conversation_id else 0

    def _on_provided(self, event: ContextProvided) -> None:
        """Offer the tools a context provider added; in a resume, send its messages before the history."""
        self._tools.apply(event)
        transcript = self._transcript
        if transcript.resuming and event.messages:
            at = transcript.provided - len(event.messages)
            history = self._history
            self._history = (*history[:at], *event.messages, *history[at:])
            if self._conversation_id is not None:  # the service holds the conversation: they
                self._held += len(event.messages)  # would have to go before it, so are not sent

    def _on_noop(self, event: Event) -> None:
        """Recorded facts (session writes, tool list changes, calls starting) the loop needn't act on."""

    def _on_agent_short_circuit(self, event: MiddlewareShortCircuit) -> None:
        """Agent middleware answered for the run (call_id None): finish; else just recorded."""
        if event.call_id is None:
            self._finish("short_circuit")

    def _on_model_responded(self, event: ModelResponded) -> None:
        """No calls: finish. Calls: reset a required tool_choice, refuse unknown tools, run the rest.

        Calls of tools that require approval are gated: when one of them has valid arguments the
        whole batch waits for the answer. On the final call after a limit, calls are dropped.
        With ``terminate_on_unknown_calls``, an unknown tool fails the run before any call runs."""
        if event.usage is not None:
            self._usage = self._usage + event.usage
        if event.cost is not None:
            self._cost += event.cost
        elif self._config.max_cost is not None and self._failure is None:
            # A limit on money with a call it cannot count would be no limit: the run ends here.
            self._failure = ("UnpricedCallError", _unpriced(event))
            self._finish("failed")
            return
        if event.conversation_id:
            self._continue_conversation(event.conversation_id)
        calls = event.message.function_calls
        if self._final_call:
            if calls:
                skipped = tuple(c.call_id or "" for c in calls)
                self._derive(
                    CallsSkipped, iteration=self._iteration, call_ids=skipped, reason=self._limit_reason
                )
            self._finish("limit_reached")
            return
        if not calls:
            self._finish("completed")
            return
        if self._model_calls == 1 and _is_required(self._tool_choice):
            previous = self._tool_choice
            self._tool_choice = None
            self._derive(ToolChoiceReset, iteration=self._iteration, previous=previous)
        self._batch_failed = False
        self._batch = None
        self._phase = _RUNNING_TOOLS
        self._accepts = BY_PHASE[_RUNNING_TOOLS]
        known = self._tools.specs
        runnable = []
        for call in calls:
            if call.name in known:
                runnable.append(call)
            else:
                self._batch_failed = True
                reason = "not in the tools offered" if known else "no tools are offered"
                self._derive(ToolNotFound, call_id=call.call_id, name=call.name, reason=reason)
                if self._config.terminate_on_unknown_calls and self._failure is None:
                    self._failure = (
                        "UnknownToolError",
                        f'Error: Requested function "{call.name}" not found.',
                    )
        if self._failure is not None:
            self._finish("failed")
            return
        if runnable:
            self._invoke(tuple(runnable))
        self._after_result()

    def _on_model_failed(self, event: ModelFailed) -> None:
        """Finish as failed: ``finish`` then records RunFailed."""
        kind = "ModelResponseError" if event.error_type == "ModelResponseError" else "ModelCallError"
        self._failure = (kind, event.message)
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
        self._terminated = True
        if self._phase is not _RUNNING_TOOLS:
            self._finish("terminated")
        else:
            self._after_result()

    def _on_approval_requested(self, event: ApprovalRequested) -> None:
        """The whole batch waits for the answer to these gated calls: pause the run for approval."""
        self._awaiting_approval = (*self._awaiting_approval, *event.call_ids)
        self._after_result()

    def _after_result(self) -> None:
        """When every call of the batch is answered, decide what the loop does next."""
        if self._phase is not _RUNNING_TOOLS or self._transcript.batch:
            return  # the batch is open until every call not held for approval has its result
        self._batch = None
        if self._awaiting_approval:
            self._finish("awaiting_approval")
            return
        self._error_streak = self._error_streak + 1 if self._batch_failed else 0
        if self._terminated:
            self._finish("terminated")
        elif self._limit_reached():
            self._call_model(final=True)
        else:
            self._call_model()

    def _limit_reached(self) -> bool:
        config = self._config  # checked in this order: the first limit reached is the reason
        if config.max_iterations is not None and self._iteration >= config.max_iterations:
            return self._stop_at("max_iterations", config.max_iterations)
        if config.max_consecutive_errors is not None and self._error_streak >= config.max_consecutive_errors:
            return self._stop_at("max_consecutive_errors", config.max_consecutive_errors)
        if config.max_function_calls is not None and self._calls_made >= config.max_function_calls:
            return self._stop_at("max_function_calls", config.max_function_calls)
        if config.max_input_tokens is not None and self._usage.input_tokens >= config.max_input_tokens:
            return self._stop_at("max_input_tokens", config.max_input_tokens)
        if config.max_cost is not None and self._cost >= config.max_cost:
            self._limit_reason = "max_cost"
            self._derive(
                IterationLimitReached,
                iteration=self._iteration,
                reason="max_cost",
                cost_limit=config.max_cost,
            )
            return True
        return False

    def _stop_at(self, reason: str, limit: int) -> bool:
        self._limit_reason = reason
        self._derive(IterationLimitReached, iteration=self._iteration, reason=reason, limit=limit)
        return True

    def _resume_approvals(self, approvals: Sequence[Content]) -> None:
        """A run that carries approval responses resumes the batch they answer: rejected calls
        get the rejection, the others run (approved ones without asking again)."""
        self._iteration = 1
        self._phase = _RUNNING_TOOLS
        self._accepts = BY_PHASE[_RUNNING_TOOLS]
        self._batch_failed = False
        responses = {c.call_id: bool(c.approved) for c in approvals}
        reasons = {c.call_id: c.reason for c in approvals if c.reason}
        batch = resumed_batch((*self._history, *self._transcript.messages), responses)
        if any(c.call_id not in responses for c in batch):
            self._derive(BatchResumed, call_ids=tuple(c.call_id or "" for c in batch))
        for call in batch:
            if call.call_id in responses:
                answer = responses[call.call_id]
                reason = reasons.get(call.call_id)
                self._derive(ApprovalResolved, call_id=call.call_id or "", approved=answer, reason=reason)
        offered = self._tools.specs
        runnable = []
        for call in batch:
            if not responses.get(call.call_id, True):
                continue  # rejected: answered with the rejection
            if call.name in offered:
                runnable.append(call)
            else:  # its tool is not offered in this run (it was added at run time)
                self._batch_failed = True
                reason = "not in the tools offered to this run"
                self._derive(ToolNotFound, call_id=call.call_id or "", name=call.name or "", reason=reason)
        if runnable:
            self._invoke(tuple(runnable), approved=frozenset(c for c, ok in responses.items() if ok))
        self._after_result()

    def _on_claimed(self, event: BatchClaimed) -> None:
        """A later run claimed the paused batch to resume it: the run stays done, now resumed."""
        self._claimed_by = event.by_run_id

    def _on_session_updated(self, event: SessionUpdated) -> None:
        """Session writes between the end of the loop and the end of the run: recorded."""


def _edge(
    phase: Phase,
    kind: type[In],
    handler: Callable[[RunMachine, In], None],
    *leads_to: Phase,
    guard: Callable[[RunMachine, In], None] | None = None,
) -> tuple[tuple[Phase, type], Transition[Any]]:
    moves_to = leads_to[0] if len(leads_to) == 1 and leads_to[0] is not phase else None
    return (phase, kind), Transition(handler, frozenset(leads_to), guard, moves_to)


def _table() -> dict[tuple[Phase, type], Transition[Any]]:
    m = RunMachine
    N, S, A = Phase.NEW, Phase.STARTED, Phase.AWAITING_MODEL
    R, F, D = Phase.RUNNING_TOOLS, Phase.FINISHING, Phase.DONE
    edges = [
        _edge(N, RunStarted, m._on_started, S),
        _edge(S, RunInputRewritten, m._on_rewritten, S),
        _edge(S, ContextProvided, m._on_provided, S),
        _edge(S, SessionUpdated, m._on_noop, S),
        _edge(S, MiddlewareShortCircuit, m._on_agent_short_circuit, S, F),
        _edge(S, RunTerminated, m._on_terminated, F),
        _edge(S, Begin, m._on_begin, A, R),
        _edge(A, ModelResponded, m._on_model_responded, A, R, F, guard=m._check_answer),
        _edge(A, ModelFailed, m._on_model_failed, F),
        _edge(A, SessionUpdated, m._on_noop, A),
        _edge(A, RunTerminated, m._on_terminated, F),
        _edge(A, MiddlewareShortCircuit, m._on_noop, A),
        _edge(A, ModelRequestRewritten, m._on_noop, A),
        _edge(R, ToolCalled, m._on_noop, R, guard=m._check_call),
        _edge(R, ToolReturned, m._on_call_done, R, A, F, guard=m._check_call),
        _edge(R, MiddlewareShortCircuit, m._on_call_done, R, A, F, guard=m._check_call),
        _edge(R, ToolFailed, m._on_call_failed, R, A, F, guard=m._check_call),
        _edge(R, ArgumentsRejected, m._on_call_failed, R, A, F, guard=m._check_call),
        _edge(R, ToolsAdded, m._on_noop, R),
        _edge(R, ToolsRemoved, m._on_noop, R),
        _edge(R, SessionUpdated, m._on_noop, R),
        _edge(R, ChildRunStarted, m._on_noop, R),
        _edge(R, RunTerminated, m._on_terminated, R),
        _edge(R, ApprovalRequested, m._on_approval_requested, F, guard=m._check_gated),
        _edge(F, SessionUpdated, m._on_session_updated, F),
        _edge(F, Finish, m._on_finish, D),
        *(_edge(phase, Fail, m._on_fail, D) for phase in (S, A, R, F)),
        _edge(D, BatchClaimed, m._on_claimed, D, guard=m._check_claim),
    ]
    return dict(edges)


TRANSITIONS = _table()
"""(phase, input) -> ``Transition``: its check, its handler, the phases it may lead to. An input
is an event type, or ``Begin``/``Finish``/``Fail`` (the driver's calls of the same names).
Anything not listed raises ``TransitionError``."""

BY_PHASE: dict[Phase, dict[type, Transition[Any]]] = {
    phase: {kind: edge for (p, kind), edge in TRANSITIONS.items() if p is phase} for phase in Phase
}
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


def transition_table() -> str:
    """``TRANSITIONS`` as Markdown (docs/events.md embeds this, a test keeps it current)."""
    order = list(Phase)
    rows = ["| phase | input | leads to | what the machine does |", "|---|---|---|---|"]
    for (phase, kind), edge in TRANSITIONS.items():
        verb = getattr(kind, "verb", None)
        label = f"{verb}()" if isinstance(verb, str) else kind.__name__
        leads = ", ".join(p.value for p in sorted(edge.leads_to, key=order.index))
        rows.append(f"| {phase.value} | {label} | {leads} | {edge.does} |")
    return "\n".join(rows)


def _unpriced(event: ModelResponded) -> str:
    """Why a call under ``max_cost`` has no price, as ``RunFailed`` says it."""
    if event.model is None:
        why = "its answer names no model"
    elif event.usage is None:
        why = "its answer reports no usage"
    else:
        why = f"the price table has no price for model {event.model!r}"
    return f"model call {event.iteration} cannot be priced ({why}): max_cost cannot be kept, so the run ends"

"""Projections: pure folds of the event log.

Each projection has ``apply(event)``, which updates it in place in O(size of the event), and
``rebuild(events)``, which folds a whole log. The run machine keeps one of each live, and the same
``apply`` rebuilds them from a stored log, so a live view and a rebuilt one cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, NamedTuple

import msgspec

from .approvals import approval_responses, conversation
from .collector import collector_paused
from .events import (
    ALWAYS_REQUIRE,
    ApprovalRequested,
    ApprovalResolved,
    ArgumentsRejected,
    BatchResumed,
    CallsSkipped,
    ContextProvided,
    Event,
    MiddlewareShortCircuit,
    ModelCalled,
    ModelRequestRewritten,
    ModelResponded,
    RunConfig,
    RunInputRewritten,
    RunStarted,
    SessionUpdated,
    StateChange,
    ToolFailed,
    ToolNotFound,
    ToolReturned,
    ToolsAdded,
    ToolSpec,
    ToolsRemoved,
)
from .messages import Content, Message, result_text

__all__ = (
    "LIMIT_REACHED",
    "NO_OUTCOME",
    "REJECTED_BY_USER",
    "ModelCall",
    "SessionProjection",
    "ToolsProjection",
    "TranscriptProjection",
    "Views",
    "apply_changes",
    "conversation_after",
    "error_text",
)

REJECTED_BY_USER = "Error: Tool call invocation was rejected by user."
NO_OUTCOME = "Error: no result: the run resuming this call failed before its outcome was recorded."
"""What the session's history answers a call of a resumed batch with when the resume failed
after another call of the batch ran, before this one had an outcome (``history_growth``)."""
LIMIT_REACHED = "Function invocation limit reached before a final answer could be produced."


def apply_changes(state: dict[str, Any], changes: Iterable[StateChange]) -> None:
    """Apply the key-level changes of one ``SessionUpdated`` to ``state``, in order."""
    for change in changes:
        if change.op == "set":
            state[change.key] = change.value
        else:
            state.pop(change.key, None)


def conversation_after(events: Iterable[Event]) -> str | None:
    """The service-side conversation a run's log ends in, or None: the last one a response of
    the run reported (``ModelResponded.conversation_id``). The ``options["conversation_id"]`` a
    run was given is where its model calls continue, not a conversation the service said it
    keeps: a service that reports none kept nothing to follow, as in the reference framework."""
    current: str | None = None
    for event in events:
        if isinstance(event, ModelResponded):
            current = event.conversation_id or current
    return current


class ToolsProjection:
    """The tools offered to the model: ``RunStarted.tools``, then ``ToolsAdded``/``ToolsRemoved``
    and the tools context providers added (``ContextProvided``)."""

    __slots__ = ("gated", "names", "specs")

    def __init__(self) -> None:
        self.specs: dict[str, ToolSpec] = {}
        self.names: tuple[str, ...] = ()
        """The tools' names in the order offered: made when they change, not per model call."""
        self.gated = 0
        """How many of the tools require approval (a batch with none needs no gating look-up)."""

    def apply(self, event: Event) -> None:
        if type(event) is RunStarted:
            self.specs = {spec.name: spec for spec in event.tools}
        elif type(event) is ToolsAdded or type(event) is ContextProvided:
            specs = self.specs
            for spec in event.tools:
                specs.setdefault(spec.name, spec)
        elif type(event) is ToolsRemoved:
            specs = self.specs
            for name in event.names:
                specs.pop(name, None)
        else:
            return
        self.names = tuple(self.specs)
        self.gated = [spec.approval_mode for spec in self.specs.values()].count(ALWAYS_REQUIRE)

    @classmethod
    def from_events(cls, events: Iterable[Event]) -> ToolsProjection:
        view = cls()
        for event in events:
            view.apply(event)
        return view


_TOOL_EVENTS = frozenset({RunStarted, ToolsAdded, ToolsRemoved, ContextProvided})
_NO_CALLS: frozenset[str] = frozenset()
"""The open calls of a transcript with no batch open."""


class SessionProjection:
    """Session state: every ``SessionUpdated`` of one session, across runs, in log order.

    A write copied into a caller's log (``origin_run_id``) and its original in the sub-agent's log
    are the same write: whichever is folded first is applied, the other is skipped.
    """

    __slots__ = ("_applied", "session_id", "state")

    def __init__(self, session_id: str | None = None) -> None:
        self.session_id = session_id
        self.state: dict[str, Any] = {}
        self._applied: set[tuple[str, int]] = set()

    def apply(self, event: Event) -> None:
        if type(event) is not SessionUpdated:
            return
        if self.session_id is None:
            self.session_id = event.session_id
        elif event.session_id != self.session_id:
            return
        if event.origin_run_id is not None and event.origin_seq is not None:
            key = (event.origin_run_id, event.origin_seq)
        else:
            key = (event.run_id, event.seq)
        if key in self._applied:
            return
        self._applied.add(key)
        apply_changes(self.state, event.changes)

    @classmethod
    def from_events(cls, events: Iterable[Event], session_id: str | None = None) -> SessionProjection:
        view = cls(session_id)
        for event in events:
            view.apply(event)
        return view


class ModelCall(msgspec.Struct, frozen=True, gc=False):
    """One model call as the transcript saw it (see ``ModelCalled``)."""

    iteration: int
    message_count: int
    tools: tuple[str, ...]
    tool_choice: Any
    conversation_id: str | None = None
    held: int = 0

    @classmethod
    def of(cls, event: ModelCalled) -> ModelCall:
        return cls(
            event.iteration,
            event.message_count,
            event.tools,
            event.tool_choice,
            event.conversation_id,
            event.held,
        )


def _exception_text(event: ToolFailed | ArgumentsRejected | ToolNotFound) -> str:
    """What a failed call's result carries as its ``exception``: why it failed."""
    if type(event) is ToolNotFound:
        return f'Function "{event.name}" not found.'
    if type(event) is ArgumentsRejected:
        return event.reason
    assert type(event) is ToolFailed
    return event.message or event.error_type


def error_text(event: ToolFailed | ArgumentsRejected | ToolNotFound, detailed: bool) -> str:
    """What the model sees for a failed call; details only when the run opted in."""
    if type(event) is ToolNotFound:
        return f'Error: Requested function "{event.name}" not found.'
    if type(event) is ArgumentsRejected:
        base = "Error: Argument parsing failed."
        return f"{base} Reason: {event.reason}" if detailed else base
    assert type(event) is ToolFailed
    base = "Error: Function failed."
    return f"{base} Exception: {event.error_type}: {event.message}" if detailed else base


class TranscriptProjection:
    """What the model saw: the run's own messages and, per model call, how many of them.

    History that a session brought into the run is counted (``history_length``) but lives in the
    logs of earlier runs. Messages context providers added (``ContextProvided``) come first among
    the run's messages, before its input; ``provided`` counts them. In a run that resumes a
    paused batch they go before the history instead (``context``), so the batch's calls stay
    right before their results. Function results are
    collected per batch and appended as one ``tool`` message, in the model's call order, once
    every call of the batch has a result.
    """

    __slots__ = (
        "_open", "_results", "batch", "calls", "config", "context", "history_length", "messages",
        "provided", "resuming", "rewritten",
    )  # fmt: skip

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.rewritten: dict[int, tuple[Message, ...]] = {}
        self.calls: list[ModelCall] = []
        self.history_length = 0
        self.provided = 0
        self.context: Sequence[Message] = ()  # messages providers added in a resume (rare)
        self.resuming = False
        self.config = RunConfig()
        self.batch: tuple[str, ...] = ()
        self._open: AbstractSet[str] = _NO_CALLS  # the batch's call ids, for O(1) membership
        self._results: dict[str, Content] = {}

    def _open_batch(self, call_ids: tuple[str, ...]) -> None:
        self.batch = call_ids
        # No batch open (a run waiting on its model): one set shared by every run, not one each.
        self._open = frozenset(call_ids) if call_ids else _NO_CALLS
        self._results = {}

    @property
    def pending(self) -> tuple[str, ...]:
        """Call ids of the open batch that have no result yet."""
        return tuple(call_id for call_id in self.batch if call_id not in self._results)

    def awaits(self, call_id: str) -> bool:
        """Whether ``call_id`` is a call of the open batch with no result yet (no copy made)."""
        return call_id in self._open and call_id not in self._results

    def apply(self, event: Event) -> None:
        handler = TRANSCRIPT_FOLDS.get(type(event))
        if handler is not None:
            handler(self, event)

    def _started(self, event: RunStarted) -> None:
        self.messages = conversation(event.messages)
        self.history_length = event.history_length
        self.provided = 0
        self.context = ()
        self.resuming = bool(approval_responses(event.messages))
        self.config = event.config

    def _rewritten(self, event: RunInputRewritten) -> None:
        self.messages = conversation(event.messages)
        self.provided = 0
        self.resuming = self.resuming or bool(approval_responses(event.messages))

    def _context_provided(self, event: ContextProvided) -> None:
        """A provider's messages go after those of the providers before it, before the input
        (before the history in a resume: counted with it, kept in ``context``)."""
        at = self.provided
        if self.resuming:
            self.context = (*self.context, *event.messages)
            self.history_length += len(event.messages)
        else:
            self.messages[at:at] = event.messages
        self.provided = at + len(event.messages)

    def _called(self, event: ModelCalled) -> None:
        self.calls.append(ModelCall.of(event))

    def _responded(self, event: ModelResponded) -> None:
        message = event.message
        self.messages.append(message)
        calls = [c.call_id or "" for c in message.contents if c.type == "function_call"]
        self.batch = call_ids = tuple(calls)
        self._open = frozenset(call_ids) if call_ids else _NO_CALLS
        self._results = {}

    def _returned(self, event: ToolReturned | MiddlewareShortCircuit) -> None:
        call_id = event.call_id
        if call_id is not None:
            result = event.result
            self.resolve(call_id, result if type(result) is str else result_text(result))

    def _failed(self, event: ToolFailed | ArgumentsRejected | ToolNotFound) -> None:
        self.resolve(event.call_id, error_text(event, self.config.detailed_errors), _exception_text(event))

    def _request_rewritten(self, event: ModelRequestRewritten) -> None:
        self.rewritten[event.iteration] = event.messages

    def _skipped(self, event: CallsSkipped) -> None:
        """The calls of the final call are dropped; with nothing else to say, the answer says so."""
        last = self.messages[-1]
        kept = tuple(c for c in last.contents if c.type != "function_call")
        if not any(c.type == "text" and c.text for c in kept):
            kept = (Content.from_text(LIMIT_REACHED),)
        self.messages[-1] = Message("assistant", kept)
        self._open_batch(())

    def _approval_requested(self, event: ApprovalRequested) -> None:
        """The whole batch waits for the answer: none of its calls has a result yet."""
        self._open_batch(())

    def _batch_resumed(self, event: BatchResumed) -> None:
        self._open_batch(event.call_ids)

    def _approval_resolved(self, event: ApprovalResolved) -> None:
        if event.call_id not in self._open:
            self.batch = (*self.batch, event.call_id)
            self._open = self._open | {event.call_id}
        if not event.approved:
            self.resolve(event.call_id, REJECTED_BY_USER)

    def close_batch(self, text: str) -> None:
        """Answer every call of the open batch still without a result with ``text`` (marked
        failed), which appends the batch's tool message."""
        for call_id in self.pending:
            self.resolve(call_id, text, "NoOutcome")

    def resolve(self, call_id: str, text: str, exception: str | None = None) -> None:
        """Give ``call_id`` its result (``exception`` marks a failed call); the batch's tool
        message is appended when it is whole."""
        if call_id not in self._open:
            return
        results, batch = self._results, self.batch
        results[call_id] = Content("function_result", call_id=call_id, result=text, exception=exception)
        if len(results) >= len(batch):  # whole: its results, in the model's order of the calls
            self.messages.append(Message("tool", tuple(map(results.__getitem__, batch))))
            self._open_batch(())

    def call_at(self, iteration: int) -> ModelCall:
        for call in self.calls:
            if call.iteration == iteration:
                return call
        raise KeyError(iteration)

    def seen_at(self, iteration: int) -> list[Message]:
        """The run's messages the model answered at ``iteration`` (history not included), sent
        or, in a service-side conversation, already held by the service."""
        return self.messages[: self.call_at(iteration).message_count - self.history_length]

    def sent_at(self, iteration: int, history: Iterable[Message] = ()) -> list[Message]:
        """Every message the model was sent at ``iteration``: chat middleware's version if it
        rewrote the request; else the history and the run's messages, or in a service-side
        conversation only those the service did not hold yet."""
        if iteration in self.rewritten:
            return list(self.rewritten[iteration])
        call = self.call_at(iteration)
        if call.conversation_id is not None:
            return self.messages[call.held - self.history_length : call.message_count - self.history_length]
        return [*self.context, *history, *self.seen_at(iteration)]

    @classmethod
    def from_events(cls, events: Iterable[Event]) -> TranscriptProjection:
        view = cls()
        for event in events:
            view.apply(event)
        return view


TRANSCRIPT_FOLDS: dict[type, Any] = {
    RunStarted: TranscriptProjection._started,
    RunInputRewritten: TranscriptProjection._rewritten,
    ContextProvided: TranscriptProjection._context_provided,
    ModelCalled: TranscriptProjection._called,
    ModelResponded: TranscriptProjection._responded,
    ToolReturned: TranscriptProjection._returned,
    MiddlewareShortCircuit: TranscriptProjection._returned,
    ToolFailed: TranscriptProjection._failed,
    ArgumentsRejected: TranscriptProjection._failed,
    ToolNotFound: TranscriptProjection._failed,
    ApprovalRequested: TranscriptProjection._approval_requested,
    ApprovalResolved: TranscriptProjection._approval_resolved,
    ModelRequestRewritten: TranscriptProjection._request_rewritten,
    CallsSkipped: TranscriptProjection._skipped,
    BatchResumed: TranscriptProjection._batch_resumed,
}


_TRANSCRIPT_ONLY = {kind: fold for kind, fold in TRANSCRIPT_FOLDS.items() if kind not in _TOOL_EVENTS}
"""The transcript's folds of the kinds that no other projection reads."""


class Views(NamedTuple):
    """The three projections of one log."""

    tools: ToolsProjection
    session: SessionProjection
    transcript: TranscriptProjection

    @classmethod
    def from_events(cls, events: Iterable[Event], session_id: str | None = None) -> Views:
        """Fold a log into all three projections in one pass (what a rebuild after a restart does).

        The same folds as each projection's ``apply``, dispatched once per event, with the cycle
        collector paused through the fold (``collector_paused``): a fold allocates in no cycle.
        """
        views = cls(ToolsProjection(), SessionProjection(session_id), TranscriptProjection())
        apply_tools, apply_session, transcript = views.tools.apply, views.session.apply, views.transcript
        tool_events, folds, transcript_only = _TOOL_EVENTS, TRANSCRIPT_FOLDS, _TRANSCRIPT_ONLY
        with collector_paused():
            for event in events:
                kind = type(event)
                fold = transcript_only.get(kind)  # most events: one look-up, one call
                if fold is not None:
                    fold(transcript, event)
                elif kind in tool_events:
                    apply_tools(event)
                    fold = folds.get(kind)  # RunStarted and ContextProvided fold into both
                    if fold is not None:
                        fold(transcript, event)
                elif kind is SessionUpdated:
                    apply_session(event)
        return views

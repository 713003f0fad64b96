"""Two rules every driver applies after (and before) a run: who may resume a paused batch, and
how a session's history grows once a run ended.

Theory of operation. A run that pauses for approval ends with ``RunCompleted`` (reason
``awaiting_approval``). The run that resumes it first *claims* the batch: ``decide_claim`` folds
the paused run's log (``paused_batch``) and, when the claim is allowed, gives the
``BatchClaimed`` event to append to that log under its current version. The store admits one
append per version, so of several resumers exactly one claim is stored; the others find it and
are refused. A claim is bound to the answers, and each answer to the call's id and the digest of
the call's arguments as the paused run recorded them (``arguments_digest``).

A claim already stored is final unless the run holding it ended before any call of the batch
started (approved or not: a call that needed no approval waits for the batch too): then a later
resume may take over (``BatchClaimed.after_run_id``). A holder that resumed the batch and
completed has used it, whatever ran; and a call the holder recorded as rejected is never
approved by a later resume. A call that the
holder started without recording an outcome is *unknown*: it may have taken effect, so it is
never run again by a resume (``ClaimDecision.kind == "unknown"``) unless the caller says so. A
call the holder ran to an outcome is done: an approval allows one execution.

A resuming run records each call as started (``ToolCalled``) in the store before its tool runs,
so its log always says how far it got. A holder that stopped without ending (its process was
killed) after some of its calls had run is *continued*: a later resume finishes that very run
from its log (``ClaimDecision.kind == "continue"``), answering every call it ran with the
recorded outcome, and its claim names the holder as the run it takes over from.

``history_growth`` is the one rule for how a session's history grows after a run, used by the
local driver, by ``AgentSession.from_events`` and by the Temporal runner.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

import msgspec

from .approvals import approval_responses
from .events import (
    ApprovalRequested,
    ApprovalResolved,
    ArgumentsRejected,
    BatchClaimed,
    BatchResumed,
    ClaimedAnswer,
    ContextProvided,
    Event,
    MiddlewareShortCircuit,
    ModelResponded,
    RunCompleted,
    RunFailed,
    RunInputRewritten,
    RunStarted,
    RunTerminated,
    ToolCalled,
    ToolFailed,
    ToolNotFound,
    ToolReturned,
)
from .messages import Content, Message
from .projections import NO_OUTCOME, TranscriptProjection, conversation_after
from .provided import provided_count

__all__ = (
    "ClaimDecision",
    "HistoryGrowth",
    "PausedBatch",
    "arguments_digest",
    "decide_claim",
    "history_growth",
    "paused_batch",
)

_AWAITING = "awaiting_approval"
_encode = msgspec.json.Encoder(order="deterministic").encode
_OUTCOMES = (ToolReturned, ToolFailed, ArgumentsRejected, MiddlewareShortCircuit, ToolNotFound)


def arguments_digest(arguments: Any) -> str:
    """A digest of a call's arguments: equal for equal JSON values, whatever the key order or
    spacing (raw argument text that is a JSON document counts as that document)."""
    value = arguments
    if isinstance(arguments, str | bytes):
        try:
            value = msgspec.json.decode(arguments)
        except msgspec.DecodeError:
            value = arguments if isinstance(arguments, str) else arguments.decode("utf-8", "replace")
    try:
        encoded = _encode(value)
    except (TypeError, msgspec.EncodeError):
        encoded = repr(value).encode("utf-8", "backslashreplace")
    return hashlib.sha256(encoded).hexdigest()


class PausedBatch(msgspec.Struct, frozen=True, kw_only=True):
    """What a paused run's log says about its batch: ``version`` is the stream's length."""

    run_id: str
    version: int
    paused: bool
    """The run ended with ``RunCompleted`` (reason ``awaiting_approval``)."""
    awaiting: tuple[str, ...] = ()
    digests: dict[str, str] = msgspec.field(default_factory=dict)
    """Each awaiting call's arguments digest, as the run recorded the call."""
    tools: dict[str, str] = msgspec.field(default_factory=dict)
    """Each awaiting call's tool name."""
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    """Each awaiting call's arguments, as the model sent them."""
    since: int = 0
    """When the run paused (``RunCompleted.at``)."""
    claim: BatchClaimed | None = None
    """The last claim stored, if any."""


def paused_batch(events: Sequence[Event]) -> PausedBatch:
    """Fold a run's log into what a claim needs to know (no code runs)."""
    run_id = events[0].run_id if events else ""
    awaiting: list[str] = []
    calls: dict[str, Content] = {}
    paused = False
    since = 0
    claim: BatchClaimed | None = None
    for event in events:
        kind = type(event)
        if kind is ModelResponded:
            assert isinstance(event, ModelResponded)
            for call in event.message.function_calls:
                calls[call.call_id or ""] = call
        elif kind is ApprovalRequested:
            assert isinstance(event, ApprovalRequested)
            awaiting.extend(event.call_ids)
        elif kind is RunCompleted:
            assert isinstance(event, RunCompleted)
            paused = event.reason == _AWAITING
            since = event.at
        elif kind is BatchClaimed:
            assert isinstance(event, BatchClaimed)
            claim = event
    if not paused:
        awaiting = []
    return PausedBatch(
        run_id=run_id,
        version=len(events),
        paused=paused,
        awaiting=tuple(awaiting),
        digests={c: arguments_digest(calls[c].arguments) for c in awaiting if c in calls},
        tools={c: calls[c].name or "" for c in awaiting if c in calls},
        arguments={c: calls[c].arguments for c in awaiting if c in calls},
        since=since,
        claim=claim,
    )


class _CallProgress(msgspec.Struct, frozen=True, kw_only=True):
    """How far a resuming run got, as its log shows."""

    ended: bool
    """The log ends with ``RunCompleted`` or ``RunFailed``."""
    resumed_to_end: bool = False
    """The run resumed the batch (``BatchResumed``) and completed."""
    done: tuple[str, ...] = ()
    """Calls with a recorded outcome (approved or not), in the order they were answered."""
    unknown: tuple[str, ...] = ()
    """Calls of any batch of the run started (``ToolCalled``) without a recorded outcome."""
    rejected: tuple[str, ...] = ()
    """Calls whose rejection the run recorded (``ApprovalResolved``, not approved)."""


def _call_progress(events: Sequence[Event]) -> _CallProgress:
    """Which calls the run whose log is ``events`` ran to an outcome, which it started and left
    without one, and which it recorded as rejected."""
    started: dict[str, None] = {}  # in the order the run started them
    done: dict[str, None] = {}
    rejected: dict[str, None] = {}
    resumed = False
    for event in events:
        kind = type(event)
        if kind is ToolCalled:
            assert isinstance(event, ToolCalled)
            started[event.call_id] = None
            done.pop(event.call_id, None)  # started again (the caller allowed it): open once more
        elif isinstance(event, _OUTCOMES) and event.call_id is not None:
            done[event.call_id] = None
        elif kind is ApprovalResolved:
            assert isinstance(event, ApprovalResolved)
            if not event.approved:
                rejected[event.call_id] = None
        elif kind is BatchResumed:
            resumed = True
    ended = bool(events) and type(events[-1]) in (RunCompleted, RunFailed)
    return _CallProgress(
        ended=ended,
        resumed_to_end=resumed and ended and type(events[-1]) is RunCompleted,
        done=tuple(done),
        unknown=tuple(c for c in started if c not in done),
        rejected=tuple(rejected),
    )


class ClaimDecision(msgspec.Struct, frozen=True, kw_only=True):
    """What a resume may do with a paused batch.

    ``kind``: ``claim`` (append ``claim``, then run), ``continue`` (append ``claim``, then
    finish the run ``holder`` from its log instead of starting a new one; ``call_ids`` are the
    calls it started without an outcome that the caller allowed to run again), ``held`` (this
    very run holds the claim already: go on), ``refused`` (another run holds or used it;
    ``reason`` says which), ``unknown`` (the holder started ``call_ids`` and recorded no
    outcome), ``mismatch`` (an answer's call has other arguments than the paused run recorded).
    """

    kind: Literal["claim", "continue", "held", "refused", "unknown", "mismatch"]
    reason: str = ""
    claim: BatchClaimed | None = None
    holder: str | None = None
    call_ids: tuple[str, ...] = ()


def decide_claim(
    paused: PausedBatch,
    answers: Mapping[str, bool],
    digests: Mapping[str, str],
    *,
    by_run_id: str,
    at: int,
    holder_log: Sequence[Event] | None = None,
    rerun: Collection[str] = (),
) -> ClaimDecision:
    """Whether ``by_run_id`` may resume ``paused`` with ``answers`` (call id -> approved), whose
    calls it holds with the arguments ``digests`` (call id -> ``arguments_digest``).

    ``holder_log`` is the log of the run holding the last claim, when there is one (``[]`` if
    nothing of it is stored yet). ``rerun`` names calls the caller explicitly allows to run
    again although that run may have run them: it never ended, or it started them and recorded
    no outcome. A call it ran to an outcome is never run again.
    """
    refused = _refuse_answers(paused, answers, digests)
    if refused is not None:
        return refused
    claim = paused.claim
    after: str | None = None
    again: tuple[str, ...] = ()
    if claim is not None:
        if claim.by_run_id == by_run_id:
            return ClaimDecision(kind="held", holder=by_run_id)
        taken = _take_over(paused, claim, holder_log or (), rerun, at, answers)
        if isinstance(taken, ClaimDecision):
            return taken
        after, again = claim.by_run_id, taken
    answered = tuple(
        ClaimedAnswer(call_id=c, approved=answers[c], digest=paused.digests.get(c, ""))
        for c in paused.awaiting
        if c in answers
    )
    event = BatchClaimed(
        run_id=paused.run_id,
        seq=paused.version,
        at=at,
        by_run_id=by_run_id,
        answers=answered,
        after_run_id=after,
        rerun=again,
    )
    return ClaimDecision(kind="claim", claim=event, holder=after)


def _refuse_answers(
    paused: PausedBatch, answers: Mapping[str, bool], digests: Mapping[str, str]
) -> ClaimDecision | None:
    """The refusal of ``answers`` before any claim is looked at: the run is not paused, an answer
    names a call that does not wait, or a call would run with other arguments; else None."""
    run = paused.run_id
    if not paused.paused:
        return ClaimDecision(kind="refused", reason=f"run {run!r} is not paused for approval")
    stray = sorted(c for c in answers if c not in paused.awaiting)
    if stray:
        reason = f"calls {stray} do not wait for approval in run {run!r}"
        return ClaimDecision(kind="refused", reason=reason, call_ids=tuple(stray))
    changed = sorted(
        c for c in answers if c in paused.digests and digests.get(c, paused.digests[c]) != paused.digests[c]
    )
    if changed:
        return ClaimDecision(
            kind="mismatch",
            reason=f"calls {changed} would run with other arguments than run {run!r} recorded for approval",
            call_ids=tuple(changed),
        )
    return None


def _take_over(
    paused: PausedBatch,
    claim: BatchClaimed,
    holder_log: Sequence[Event],
    rerun: Collection[str],
    at: int,
    answers: Mapping[str, bool],
) -> ClaimDecision | tuple[str, ...]:
    """What another run's claim on the batch leaves: a decision (refused, unknown, or continue the
    holder's own run), or the calls a new claim that takes the batch over runs again."""
    run, holder = paused.run_id, claim.by_run_id
    approved = [a.call_id for a in claim.answers if a.approved]
    progress = _call_progress(holder_log)
    unknown, done = progress.unknown, progress.done
    overruled = [c for c in progress.rejected if answers.get(c)]
    if overruled:
        return ClaimDecision(
            kind="refused",
            reason=(
                f"run {holder!r} recorded calls {overruled} of run {run!r} as rejected while "
                "resuming it: a rejected call never runs (ask the model again for a new call)"
            ),
            holder=holder,
            call_ids=tuple(overruled),
        )
    if progress.resumed_to_end and not done:
        return ClaimDecision(
            kind="refused",
            reason=(
                f"the batch of run {run!r} was resumed by run {holder!r}, which completed: a batch "
                "resumes once (ask the model again for a new call to run)"
            ),
            holder=holder,
        )
    if progress.ended:
        # The holder's log is final: what it ran is done, what it started is unknown.
        if done:
            left = f", and left calls {list(unknown)} with no outcome" if unknown else ""
            return ClaimDecision(
                kind="refused",
                reason=(
                    f"the batch of run {run!r} was resumed by run {holder!r}, which ran calls "
                    f"{list(done)}{left}: an approval allows one execution (what they returned is "
                    "in the session's history; ask the model again for a new call to run)"
                ),
                holder=holder,
                call_ids=done,
            )
        if unknown and not set(unknown) <= set(rerun):
            return _unknown(run, holder, unknown, unknown, ended=True)
        return unknown  # started and unknown, and the caller said so; else nothing started
    # The holder has not ended: it may still be running, or its process is gone. Only the
    # caller can tell, so it is taken over only on the caller's word (``rerun``).
    needed = tuple(dict.fromkeys((*approved, *unknown)))
    if unknown and not set(needed) <= set(rerun):
        return _unknown(run, holder, unknown, needed, ended=False)
    if not set(needed) <= set(rerun) or not needed:
        ran = f"which ran calls {list(done)}" if done else "which has not started any of its calls"
        return ClaimDecision(
            kind="refused",
            reason=(
                f"the batch of run {run!r} is being resumed by run {holder!r}, {ran}, and "
                "has not ended: a batch resumes once; if that run stopped for good, call "
                f"AgentSession.allow_rerun({_ids(needed)}) and resume again (a call it ran "
                "is answered from its log, never run again)"
            ),
            holder=holder,
            call_ids=needed,
        )
    if unknown or done:  # finish the holder's own run from what its log holds
        event = BatchClaimed(
            run_id=run,
            seq=paused.version,
            at=at,
            by_run_id=holder,
            answers=claim.answers,
            after_run_id=holder,
            rerun=unknown,
        )
        return ClaimDecision(kind="continue", claim=event, holder=holder, call_ids=unknown)
    return tuple(approved)  # it started nothing: a new run takes the batch over


def _ids(call_ids: Sequence[str]) -> str:
    return ", ".join(repr(c) for c in call_ids)


def _unknown(
    run: str, holder: str, unknown: tuple[str, ...], needed: tuple[str, ...], *, ended: bool
) -> ClaimDecision:
    how = "ended" if ended else "stopped, or is still running them,"
    return ClaimDecision(
        kind="unknown",
        reason=(
            f"run {holder!r} started calls {list(unknown)} while resuming run {run!r} and {how} "
            "without recording their outcome: they may have taken effect, so no resume runs them "
            f"again; if you know they did not, call AgentSession.allow_rerun({_ids(needed)}) and "
            "resume again"
        ),
        holder=holder,
        call_ids=unknown,
    )


class HistoryGrowth(msgspec.Struct, frozen=True, kw_only=True):
    """What a session takes from a run that ended: messages to add to its history, the
    service-side conversation it is now in (``None``: unchanged), and the calls left waiting for
    approval (call id -> the run that paused on them)."""

    messages: tuple[Message, ...] = ()
    conversation_id: str | None = None
    paused: dict[str, str] = msgspec.field(default_factory=dict)


def history_growth(
    events: Sequence[Event],
    *,
    transcript: Sequence[Message] | None = None,
    input_count: int | None = None,
) -> HistoryGrowth:
    """How a session's history grows after the run whose log is ``events`` (the one rule).

    A completed run adds its input as conversation and the messages it produced; a paused run's
    calls are noted as waiting. A run that agent middleware ended before its loop began (it
    answered, or terminated, without ``call_next()``) adds nothing, as in the reference
    framework (a log that says so with ``leaves_history``; older logs grew the history). A
    failed run adds nothing, except a run resuming an approved batch: the batch ran, so its
    results stay (an approval allows one execution, and a retry of
    the same answers is refused instead of running the calls again); a batch it ran only part
    of is closed with ``NO_OUTCOME`` for the calls left without an outcome (``_partly_run``).
    A driver that holds the live transcript passes it with ``input_count`` (how many of its
    messages are the input); otherwise the log is folded for it.
    """
    end = next((e for e in reversed(events) if type(e) in (RunCompleted, RunFailed)), None)
    if end is None or not events or type(events[0]) is not RunStarted:
        return HistoryGrowth()
    started = events[0]
    assert isinstance(started, RunStarted)
    if transcript is None or input_count is None:
        projection, input_count = _folded(events)
        transcript = projection.messages
    provided = provided_count(events)  # context for this run only, never the session's history
    if isinstance(end, RunCompleted):
        if end.reason in _BEFORE_LOOP and _left_history(events):
            return HistoryGrowth()  # agent middleware ended it before its loop: nothing to add
        paused: dict[str, str] = {}
        if end.reason == _AWAITING:
            for event in events:
                if type(event) is ApprovalRequested:
                    assert isinstance(event, ApprovalRequested)
                    paused.update(dict.fromkeys(event.call_ids, started.run_id))
        return HistoryGrowth(
            messages=(*transcript[provided:input_count], *end.messages),
            conversation_id=conversation_after(events),
            paused=paused,
        )
    if not _answers(events):
        return HistoryGrowth()
    for index in range(input_count, len(transcript)):
        if transcript[index].role == "tool":
            return HistoryGrowth(messages=tuple(transcript[provided : index + 1]))
    return _partly_run(events)


def _folded(events: Sequence[Event]) -> tuple[TranscriptProjection, int]:
    """The run's transcript folded from its log, with how many of its messages are the input."""
    projection = TranscriptProjection()
    count = 0
    for event in events:
        projection.apply(event)
        if type(event) in (RunStarted, RunInputRewritten, ContextProvided):
            count = len(projection.messages)
    return projection, count


def _partly_run(events: Sequence[Event]) -> HistoryGrowth:
    """A failed resume that ran some calls of its batch, not all: the batch is used (no later
    resume runs it, ``decide_claim``), so the history closes it, each call without an outcome
    answered ``NO_OUTCOME``, and the conversation can go on. One that ran none adds nothing: a
    later resume may still take the batch over."""
    resumed = next((e for e in events if type(e) is BatchResumed), None)
    if resumed is None:
        return HistoryGrowth()
    assert isinstance(resumed, BatchResumed)
    batch = set(resumed.call_ids)
    if not any(isinstance(e, _OUTCOMES) and e.call_id in batch for e in events):
        return HistoryGrowth()
    projection, count = _folded(events)
    projection.close_batch(NO_OUTCOME)
    messages = projection.messages
    for index in range(count, len(messages)):
        if messages[index].role == "tool":
            return HistoryGrowth(messages=tuple(messages[provided_count(events) : index + 1]))
    return HistoryGrowth()


_BEFORE_LOOP = frozenset({"short_circuit", "terminated"})


def _left_history(events: Sequence[Event]) -> bool:
    """Whether agent middleware ended the run before its loop began and the log says the history
    stays as it was (``leaves_history``; older logs grew it by the input and the answer)."""
    return any(isinstance(e, MiddlewareShortCircuit | RunTerminated) and e.leaves_history for e in events)


def _answers(events: Sequence[Event]) -> bool:
    """Whether the run carried approval answers (in its input, or as agent middleware left it)."""
    return any(
        approval_responses(e.messages) for e in events if isinstance(e, RunStarted | RunInputRewritten)
    )

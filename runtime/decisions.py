"""A person's decision about calls that wait for approval, carried out as the run's resume.

Theory of operation. A decision names a paused run and answers its waiting calls (approve or
reject, with a reason). It is checked against the paused run's log first (``paused_batch``): a
call the run does not wait on is ``CallNotWaitingError``, a batch another run already claimed is
``DecidedElsewhereError``, and arguments other than those the person saw (``expected``) are
``ApprovalMismatchError``. Then it is the same resume any program does: the session is rebuilt
from its runs in the store (``AgentSession.from_events``) and ``Agent.run`` is given a message of
approval answers on it, so the claim appended to the paused run's log under its version decides,
in the store, that this decision and any other resume never both run a call. A resume refused
because another run holds the claim is reported as ``DecidedElsewhereError``.

Every waiting call of a batch is answered in one decision: a batch resumes once, as a whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from .agent import Agent
from .core.claims import PausedBatch, arguments_digest, paused_batch
from .core.events import Event, RunStarted
from .core.messages import Content, Message
from .errors import (
    ApprovalError,
    ApprovalMismatchError,
    CallNotWaitingError,
    DecidedElsewhereError,
    LogCorruptError,
    RunNotFoundError,
)
from .listing import RunQuery, report_unreadable
from .session import AgentSession
from .store import EventStore, list_runs

__all__ = ("Answer", "DecisionResult", "WaitingCall", "decide", "session_from_store", "waiting_calls")


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    """One call's answer: approved or not, why, and (optionally) the arguments the person saw,
    as the model sent them (raw JSON text) or decoded."""

    call_id: str
    approved: bool
    reason: str | None = None
    expected_arguments: Any = None


class DecisionResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a decision did: the paused run, the run that resumed it, and how that run ended."""

    run_id: str
    resumed_by: str
    answers: tuple[Answer, ...]
    finish_reason: str
    text: str


class WaitingCall(msgspec.Struct, frozen=True, kw_only=True):
    """One call waiting for approval; ``since`` is when its run paused (ns since the epoch)."""

    run_id: str
    session_id: str | None
    call_id: str
    tool: str
    arguments: Any
    since: int


async def waiting_calls(
    store: EventStore, session: str | None = None, *, limit: int | None = None
) -> list[WaitingCall]:
    """The calls of ``store`` (of one ``session``) that wait for approval, newest run first:
    those of the ``limit`` newest paused runs (``None``: every one). A stream that does not
    decode is skipped and reported (``UnreadableStreamWarning``)."""
    runs = await list_runs(store, RunQuery(outcome="awaiting_approval", session=session, limit=limit))
    calls: list[WaitingCall] = []
    for run in runs:
        try:
            batch = paused_batch(await store.read(run.run_id))
        except LogCorruptError as exc:
            report_unreadable(run.run_id, exc)
            continue
        if not batch.paused or batch.claim is not None:
            continue  # resumed since it was listed
        calls.extend(
            WaitingCall(
                run_id=run.run_id,
                session_id=run.session_id,
                call_id=call_id,
                tool=batch.tools.get(call_id, ""),
                arguments=batch.arguments.get(call_id),
                since=batch.since,
            )
            for call_id in batch.awaiting
        )
    return calls


async def session_from_store(store: EventStore, session_id: str) -> AgentSession:
    """The session ``session_id`` as its runs in ``store`` left it (oldest run first)."""
    runs = await list_runs(store, RunQuery(session=session_id, limit=None))
    events: list[Event] = []
    for run in reversed(runs):
        events.extend(await store.read(run.run_id))
    return AgentSession.from_events(events, session_id)


def _check(batch: PausedBatch, answers: Sequence[Answer]) -> None:
    run_id = batch.run_id
    if batch.claim is not None:
        holder = batch.claim.by_run_id
        raise DecidedElsewhereError(
            f"run {run_id!r}: its batch was already taken by run {holder!r}", run_id=run_id, by_run_id=holder
        )
    if not batch.paused:
        raise CallNotWaitingError(f"run {run_id!r} does not wait for approval", run_id=run_id)
    for answer in answers:
        if answer.call_id not in batch.awaiting:
            waiting = ", ".join(batch.awaiting)
            raise CallNotWaitingError(
                f"run {run_id!r} does not wait on call {answer.call_id!r} (it waits on {waiting})",
                run_id=run_id,
                call_id=answer.call_id,
            )
    missing = [c for c in batch.awaiting if c not in {a.call_id for a in answers}]
    if missing:
        raise ApprovalError(
            f"run {run_id!r} also waits on {', '.join(missing)}: a batch is decided as a whole, "
            "answer every call of it"
        )
    for answer in answers:
        if answer.expected_arguments is None:
            continue
        if arguments_digest(answer.expected_arguments) != batch.digests.get(answer.call_id):
            raise ApprovalMismatchError(
                f"run {run_id!r} call {answer.call_id!r}: its arguments are not the ones decided on "
                f"(the run holds {batch.arguments.get(answer.call_id)!r})"
            )


def _check_agent(started: RunStarted, agent: Agent) -> None:
    """Only the agent that paused a run resumes it: another one would lack its tools, and the
    claim it appends would spend the decision on calls it cannot run."""
    paused_by = started.agent_name or started.agent_id
    given = agent.name or agent.id
    if paused_by != given:
        raise ApprovalError(
            f"run {started.run_id!r} was paused by agent {paused_by!r}, not {given!r}: "
            "decide with the agent that paused it (--agent module:factory)"
        )


async def decide(
    store: EventStore, agent: Agent, run_id: str, answers: Sequence[Answer] | Mapping[str, bool]
) -> DecisionResult:
    """Answer the calls ``run_id`` waits on and resume it with ``agent`` on ``store``.

    ``answers`` answers every waiting call of the batch (``Answer``s, or call id -> approved).
    The agent runs with ``store`` as its store, so its claim is appended where the paused run is.
    """
    given = (
        tuple(Answer(call_id=c, approved=ok) for c, ok in answers.items())
        if isinstance(answers, Mapping)
        else tuple(answers)
    )
    events = await store.read(run_id)
    if not events:
        raise RunNotFoundError(run_id)
    _check(paused_batch(events), given)
    started = events[0]
    session_id = started.session_id if isinstance(started, RunStarted) else None
    if isinstance(started, RunStarted):
        _check_agent(started, agent)
    if session_id is None:
        raise CallNotWaitingError(
            f"run {run_id!r} ran without a session: nothing can resume it", run_id=run_id
        )
    session = await session_from_store(store, session_id)
    contents = tuple(
        Content.from_approval_response(a.call_id, approved=a.approved, reason=a.reason) for a in given
    )
    agent.store = store
    try:
        response = await agent.run(Message("user", contents), session=session)
    except ApprovalMismatchError:
        raise
    except ApprovalError as exc:
        claim = paused_batch(await store.read(run_id)).claim
        if claim is None or type(exc) is not ApprovalError:
            raise
        raise DecidedElsewhereError(
            f"run {run_id!r}: its batch was taken by run {claim.by_run_id!r} first ({exc})",
            run_id=run_id,
            by_run_id=claim.by_run_id,
        ) from exc
    return DecisionResult(
        run_id=run_id,
        resumed_by=response.run_id or "",
        answers=given,
        finish_reason=response.finish_reason,
        text=response.text,
    )

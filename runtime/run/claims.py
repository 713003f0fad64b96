"""Claiming a paused batch in the store before a resume runs anything (every driver's one step).

``claim_batches`` reads the log of each paused run the answers belong to, lets the core decide
(``agentledger.core.claims.decide_claim``) and appends the ``BatchClaimed`` it gives under the
log's version. The store's optimistic concurrency makes the choice: of two resumers that read
the same version, one append succeeds and the other raises ``ConflictError``; the loser reads
the log again, finds the winner's claim and is refused with ``ApprovalError``. Nothing of the
losing run has been recorded or run by then.

A claim may also say to *continue* the run that holds the batch (it stopped part way, and the
caller said it stopped for good): the resume then finishes that run from its log
(``Claims.continues``) instead of starting a run of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from ..core.approvals import approval_responses
from ..core.claims import arguments_digest, decide_claim, paused_batch
from ..core.events import BatchClaimed, Event
from ..core.messages import Message
from ..errors import (
    ApprovalError,
    ApprovalMismatchError,
    CallOutcomeUnknownError,
    ConflictError,
    RunNotFoundError,
)
from ..session import AgentSession
from ..store import EventStore

__all__ = ("Claims", "claim_batches", "claim_resume")

_ATTEMPTS = 3


class Claims:
    """What ``claim_batches`` appended: the claims, and the run a resume finishes instead of
    starting its own (``continues``: it holds the batch and stopped part way), if any."""

    __slots__ = ("claims", "continues")

    def __init__(self, claims: list[BatchClaimed], continues: str | None = None) -> None:
        self.claims = claims
        self.continues = continues


_NONE = Claims([])


async def claim_resume(
    store: EventStore | None,
    session: AgentSession,
    history: Sequence[Message],
    inputs: Sequence[Message],
    *,
    run_id: str,
    at: int,
    sinks: Sequence[Callable[[Event], None]] = (),
) -> Claims:
    """A resume in this process on ``session``: ``claim_batches`` with the session's paused runs
    and permissions to run again, each permission a claim uses spent (it is used once; all of
    them, for a resume that continues the run holding the batch), and each claim shown to
    ``sinks`` (watchers see the paused run's log as stored). A refusal tells the session which
    run holds the batch (``AgentSession.held_by``): a permission is about one holder."""
    claims = await claim_batches(
        store, session.paused_runs, history, inputs, run_id=run_id, at=at,
        rerun=tuple(session.rerun_allowed), rerun_holders=session.rerun_holders, on_refusal=session.held_by,
    )  # fmt: skip
    for claim in claims.claims:
        session.spend_rerun(claim.rerun)
        if claims.continues is not None:
            session.spend_rerun(a.call_id for a in claim.answers)
    for sink in sinks:
        for claim in claims.claims:
            sink(claim)
    return claims


async def claim_batches(
    store: EventStore | None,
    paused_runs: Mapping[str, str],
    history: Sequence[Message],
    inputs: Sequence[Message],
    *,
    run_id: str,
    at: int,
    rerun: Collection[str] = (),
    rerun_holders: Mapping[str, str] | None = None,
    on_refusal: Callable[[Sequence[str], str], None] | None = None,
) -> Claims:
    """Claim, for ``run_id``, the paused batches the approval answers in ``inputs`` resume.

    ``paused_runs`` maps a call waiting for approval to the run that paused on it (the session
    keeps it); answers to calls it does not know, or whose run a bounded store dropped, are
    claimed in this process only (``AgentSession.claim``); a store that never held the paused
    run refuses the resume (``ApprovalError``). Returns the claims appended; raises
    ``ApprovalError`` (``CallOutcomeUnknownError``, ``ApprovalMismatchError``) when another run
    holds or used the batch. ``rerun`` names calls the caller allows to run again although the
    run holding the claim may have run them (``AgentSession.allow_rerun``); ``rerun_holders``
    binds a permission to the run it was given about (one another run holds is not used).
    ``on_refusal(call_ids, holder)`` hears which run a refusal names as holding the batch.
    """
    if store is None:
        return _NONE
    answers = {c.call_id: bool(c.approved) for c in approval_responses(inputs) if c.call_id}
    by_run: dict[str, dict[str, bool]] = {}
    for call_id, approved in answers.items():
        paused = paused_runs.get(call_id)
        if paused is not None:
            by_run.setdefault(paused, {})[call_id] = approved
    if not by_run:
        return _NONE
    digests = {
        c.call_id: arguments_digest(c.arguments)
        for m in history
        for c in m.function_calls
        if c.call_id in answers and c.call_id
    }
    claims: list[BatchClaimed] = []
    continues: set[str | None] = set()
    for paused_run, answered in by_run.items():
        claim = await _claim(
            store, paused_run, answered, digests, run_id=run_id, at=at,
            rerun=rerun, rerun_holders=rerun_holders or {}, on_refusal=on_refusal,
        )  # fmt: skip
        if claim is not None:
            claims.append(claim)
            continues.add(claim.by_run_id if claim.by_run_id != run_id else None)
    if len(continues) > 1:
        raise ApprovalError(
            f"these answers resume batches held by different runs ({sorted(map(str, continues))}): "
            "answer the calls of each paused run in a resume of its own"
        )
    return Claims(claims, next(iter(continues), None))


async def _claim(
    store: EventStore,
    paused_run: str,
    answers: Mapping[str, bool],
    digests: Mapping[str, str],
    *,
    run_id: str,
    at: int,
    rerun: Collection[str],
    rerun_holders: Mapping[str, str],
    on_refusal: Callable[[Sequence[str], str], None] | None,
) -> BatchClaimed | None:
    for _ in range(_ATTEMPTS):
        try:
            events = await store.read(paused_run)
        except RunNotFoundError:  # a bounded store dropped it: the process-local claim is all there is
            return None
        if not events:
            raise ApprovalError(
                f"run {paused_run!r}, which paused on the calls these answers approve, is not in "
                f"{store!r}: a store that does not hold it cannot make sure the batch runs once; "
                "resume with the agent's store the run was recorded to"
            )
        paused = paused_batch(events)
        holder_log: list[Event] | None = None
        holder = paused.claim.by_run_id if paused.claim is not None else None
        if holder is not None and holder != run_id:
            holder_log = await store.read(holder)
        # A permission given about another run than the one holding the batch now is not used.
        allowed = [c for c in rerun if rerun_holders.get(c, holder) == holder]
        decision = decide_claim(
            paused, answers, digests, by_run_id=run_id, at=at, holder_log=holder_log, rerun=allowed
        )
        if decision.kind in ("refused", "unknown") and decision.holder is not None and on_refusal:
            on_refusal(decision.call_ids or tuple(answers), decision.holder)
        if decision.kind == "held":
            return None  # this run's claim is stored already (a retried step)
        if decision.kind == "unknown":
            raise CallOutcomeUnknownError(decision.reason, call_ids=decision.call_ids, run_id=decision.holder)
        if decision.kind == "mismatch":
            raise ApprovalMismatchError(decision.reason)
        if decision.kind not in ("claim", "continue") or decision.claim is None:
            raise ApprovalError(decision.reason)
        try:
            await store.append(paused_run, [decision.claim], paused.version)
        except ConflictError:
            continue  # another resumer appended first: read its claim and decide again
        return decision.claim
    raise ApprovalError(
        f"the batch of run {paused_run!r} is being claimed by other runs: a batch resumes once"
    )

"""Run summaries: what a list of runs shows of each, read from its first and last event only.

A run's log starts with ``RunStarted`` (its agent, session, parent and start time) and, once it is
over, ends with ``RunCompleted`` or ``RunFailed`` (its outcome and answer); its length is the
last event's ``seq`` plus one. So a store can list runs by reading two records a stream, and
filter them (``RunQuery``) without decoding the rest. Stores that can do so offer
``list_runs`` (``agentledger.store.SupportsRunListing``); ``agentledger.store.list_runs`` falls
back to reading whole streams for the others.

A stream that does not decode is skipped and reported with an ``UnreadableStreamWarning`` (and a
log record under ``agentledger.stores``): one bad log never hides the others. Such a stream, and
one that does not begin with ``RunStarted``, is *damaged*: ``damaged_streams`` finds them among a
store's streams and says why each is, for a gate or a list that must not hide them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal, Protocol

import msgspec

from .core.events import BatchClaimed, Event, RunCompleted, RunFailed, RunStarted
from .errors import LogCorruptError, UnreadableStreamWarning
from .logs import warn
from .redaction import redact_value

__all__ = (
    "OUTCOMES",
    "DamagedStream",
    "Outcome",
    "RunQuery",
    "RunSummary",
    "damaged_streams",
    "report_unreadable",
    "select",
    "summarize",
)

Outcome = Literal["completed", "failed", "incomplete", "awaiting_approval"]
OUTCOMES: tuple[Outcome, ...] = ("completed", "failed", "incomplete", "awaiting_approval")
"""``completed`` ends with ``RunCompleted``, ``failed`` with ``RunFailed``; ``incomplete`` is a run
still going, or one interrupted before it ended; ``awaiting_approval`` paused for approval and
no run has claimed its batch yet. A paused run that another run resumed (its log ends with that
run's ``BatchClaimed``) is ``completed``, with ``resumed_by`` naming the run."""


class RunQuery(msgspec.Struct, frozen=True, kw_only=True):
    """Which runs to list, newest first: at most ``limit`` (``None``: all) of those matching.

    ``agent`` matches the agent's name (its id when it has no name); ``since`` is a time in
    nanoseconds since the epoch, matching runs started at or after it.
    """

    limit: int | None = 50
    agent: str | None = None
    session: str | None = None
    outcome: Outcome | None = None
    since: int | None = None

    def __post_init__(self) -> None:
        if self.limit is not None and self.limit < 0:
            raise ValueError(f"limit must be >= 0 or None, not {self.limit}")
        if self.outcome is not None and self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, not {self.outcome!r}")

    def matches(self, run: RunSummary) -> bool:
        """Whether ``run`` passes every filter (the limit aside)."""
        return (
            (self.agent is None or run.agent == self.agent)
            and (self.session is None or run.session_id == self.session)
            and (self.outcome is None or run.outcome == self.outcome)
            and (self.since is None or run.started_at >= self.since)
        )


class RunSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One run as a list shows it. ``reason`` is ``RunCompleted.reason`` or ``RunFailed.error_type``;
    ``answer`` the final text of a completed run (``redact_value``: without the credentials it
    quotes); ``started_at`` nanoseconds since the epoch."""

    run_id: str
    agent: str
    session_id: str | None
    started_at: int
    outcome: Outcome
    reason: str
    events: int
    parent_run_id: str | None
    answer: str
    resumed_by: str | None = None
    """The run that resumed this paused run's batch, if one did."""


def summarize(first: Event, last: Event) -> RunSummary | None:
    """The summary of the run whose log starts with ``first`` and ends with ``last``; ``None`` for
    a stream that is no run (it does not start with ``RunStarted``)."""
    if not isinstance(first, RunStarted):
        return None
    outcome: Outcome = "incomplete"
    reason = answer = ""
    resumed_by = None
    if isinstance(last, RunCompleted):
        outcome, reason, answer = "completed", last.reason, last.text
        if reason == "awaiting_approval":
            outcome = "awaiting_approval"
    elif isinstance(last, RunFailed):
        outcome, reason = "failed", last.error_type
    elif isinstance(last, BatchClaimed):  # paused, then resumed by another run
        outcome, reason, resumed_by = "completed", "awaiting_approval", last.by_run_id
    return RunSummary(
        run_id=first.run_id,
        agent=first.agent_name or first.agent_id,
        session_id=first.session_id,
        started_at=first.at,
        outcome=outcome,
        reason=reason,
        events=last.seq + 1,
        parent_run_id=first.parent_run_id,
        answer=redact_value(answer),  # what a list shows: no credential the answer quotes
        resumed_by=resumed_by,
    )


def select(runs: Iterable[RunSummary | None], query: RunQuery) -> list[RunSummary]:
    """The runs of ``runs`` (newest first) that match ``query``, up to its limit; stops reading
    ``runs`` once the limit is reached."""
    selected: list[RunSummary] = []
    if query.limit == 0:
        return selected
    for run in runs:
        if run is not None and query.matches(run):
            selected.append(run)
            if query.limit is not None and len(selected) >= query.limit:
                break
    return selected


def report_unreadable(stream: str, error: LogCorruptError, *, stacklevel: int = 2) -> None:
    """Say that ``stream`` was skipped because its log does not decode (``error`` says where)."""
    text = " ".join(str(error).split())
    warn(
        UnreadableStreamWarning(f"skipped stream {stream!r}: {text}"),
        part="stores",
        stacklevel=stacklevel + 1,
    )


class DamagedStream(msgspec.Struct, frozen=True, kw_only=True):
    """A stream of a store that is no readable run: its log does not decode, or it does not
    begin with ``RunStarted``; ``reason`` says which, and where."""

    stream: str
    reason: str


class _Readable(Protocol):
    async def streams(self) -> list[str]: ...
    async def read(self, stream: str) -> list[Event]: ...


async def damaged_streams(store: _Readable, runs: Sequence[RunSummary]) -> list[DamagedStream]:
    """The streams of ``store`` that are no readable run, newest first: those that ``runs`` (a
    listing of every run, unfiltered) does not hold, each read again to say why (a stream that
    reads as a run now, written after the listing, is none)."""
    listed = {run.run_id for run in runs}
    damaged = []
    for stream in reversed(await store.streams()):
        if stream in listed:
            continue
        reason = await _why_damaged(store, stream)
        if reason is not None:
            damaged.append(DamagedStream(stream=stream, reason=reason))
    return damaged


async def _why_damaged(store: _Readable, stream: str) -> str | None:
    try:
        log = await store.read(stream)
    except LogCorruptError as exc:
        return "its log does not decode: " + " ".join(str(exc).split())
    if not log:
        return None  # an empty stream holds nothing to hide
    first = log[0]
    if not isinstance(first, RunStarted):
        return f"it does not begin a run: its first event is {type(first).__name__} (seq {first.seq})"
    if first.run_id != stream:
        return f"its events are of another run, {first.run_id!r}"
    return None

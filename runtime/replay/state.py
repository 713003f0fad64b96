"""State at a point: a recorded run, its session's earlier runs, and the state after any event."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import msgspec

from ..context import replaying
from ..core.errors import TransitionError
from ..core.events import (
    ApprovalResolved,
    ChildRunStarted,
    ContextProvided,
    Event,
    MiddlewareShortCircuit,
    ModelFailed,
    ModelResponded,
    RunCompleted,
    RunFailed,
    RunStarted,
    SessionUpdated,
    ToolSpec,
)
from ..core.machine import RunMachine
from ..core.messages import Content, Message
from ..core.projections import SessionProjection
from ..core.provided import contributions, instructions_after
from ..errors import (
    AgentLedgerError,
    LogCorruptError,
    RunCycleError,
    RunEvictedError,
    RunNotFoundError,
    UnreadableStreamWarning,
)
from ..listing import RunQuery, RunSummary, report_unreadable
from ..session import AgentSession
from ..store import EventStore, SupportsEviction, SupportsRunListing, read_many

__all__ = ("RecordedRun", "RunState", "is_replaying", "load")


def is_replaying() -> bool:
    """Whether the calling code runs inside a rerun or fork: live exporters skip such events."""
    return replaying.get()


class RunState(msgspec.Struct, frozen=True, kw_only=True):
    """A run as it stood right after event ``seq``."""

    seq: int
    phase: str
    iteration: int
    tools: tuple[ToolSpec, ...]
    session: dict[str, Any]
    transcript: tuple[Message, ...]
    pending_calls: tuple[Content, ...]


class RecordedRun:
    """One run's log, with the logs of its session's earlier runs for context."""

    def __init__(
        self,
        events: Sequence[Event],
        *,
        prior: Sequence[Event] = (),
        children: Mapping[str, RecordedRun] | None = None,
        approved_above: bool = False,
    ) -> None:
        if not events or type(events[0]) is not RunStarted:
            raise AgentLedgerError("a recorded run starts with RunStarted")
        self.events = list(events)
        self.prior = list(prior)
        self.started: RunStarted = events[0]
        self.run_id = self.started.run_id
        self.children: dict[str, RecordedRun] = dict(children or {})
        """The sub-agent runs this run started, by the call id that started each (``load``
        reads them; a run built from its events alone has none)."""
        self.approved_above = approved_above
        """Whether this sub-agent run answers a call a human approved, in its caller's log or
        above it (``load`` reads them): its one execution was this run, so a replay of it, live
        tools or not, takes its tools' recorded outcomes."""

    @property
    def ended(self) -> bool:
        """Whether the log holds the run's end (``RunCompleted`` or ``RunFailed``; a paused
        run's log goes on after it with the claim of the run that resumed it)."""
        return any(isinstance(e, RunCompleted | RunFailed) for e in reversed(self.events))

    def child_links(self) -> list[ChildRunStarted]:
        """The sub-agent runs this run's calls started, in log order."""
        return [e for e in self.events if type(e) is ChildRunStarted]

    def walk(self) -> Iterator[tuple[tuple[str, ...], RecordedRun]]:
        """This run and every sub-agent run below it, each with its path in the tree."""
        yield (self.run_id,), self
        for link in self.child_links():
            child = self.children.get(link.call_id)
            if child is None:
                continue
            hop = f"{link.call_id} ({link.agent_name or 'sub-agent'})"
            for path, run in child.walk():
                yield (self.run_id, hop, *path), run

    @property
    def session_id(self) -> str | None:
        return self.started.session_id

    def history(self) -> list[Message]:
        """The conversation history this run started with."""
        if self.session_id is None or not self.started.session_history:
            return []
        return AgentSession.from_events(self.prior, self.session_id).history

    def state_at(self, seq: int) -> RunState:
        """Fold the log up to and including ``seq``; no code runs."""
        if not 0 <= seq < len(self.events):
            raise IndexError(f"run {self.run_id} has events 0..{len(self.events) - 1}, not {seq}")
        machine = RunMachine(self.history())
        session = SessionProjection(self.session_id)
        for event in self.prior:
            session.apply(event)
        try:
            for event in self.events[: seq + 1]:
                machine.observe(event, strict=False)
                session.apply(event)
        except TransitionError as exc:
            if self.started.history_length and not self.prior:
                raise AgentLedgerError(
                    f"run {self.run_id} continues a conversation of {self.started.history_length} "
                    "messages held by its session's earlier runs: load it with them "
                    f"(agentledger.replay.load(store, run_id)) to fold it: {exc}"
                ) from exc
            raise
        transcript = machine.transcript
        pending = {*transcript.pending, *machine.awaiting_approval}
        calls = tuple(c for m in transcript.messages for c in m.function_calls if c.call_id in pending)
        # Copies: what the fold hands out must not share a container with the events.
        return RunState(
            seq=seq,
            phase=machine.phase.value,
            iteration=machine.iteration,
            tools=copy.deepcopy(tuple(machine.tools.specs.values())),
            session=copy.deepcopy(session.state),
            transcript=copy.deepcopy((*machine.history, *transcript.messages)),
            pending_calls=copy.deepcopy(calls),
        )

    def instructions_at(self, seq: int) -> str | None:
        """The instructions in force right after ``seq``: the run's own, then what its context
        providers appended (``ContextProvided``); no code runs."""
        if not 0 <= seq < len(self.events):
            raise IndexError(f"run {self.run_id} has events 0..{len(self.events) - 1}, not {seq}")
        return instructions_after(self.events[: seq + 1])

    def provided(self) -> list[ContextProvided]:
        """What each context provider contributed to the run, as recorded, in order."""
        return contributions(self.events)

    def model_responses(self) -> list[ModelResponded]:
        return [e for e in self.events if type(e) is ModelResponded]

    def model_outcomes(self) -> list[ModelResponded | ModelFailed]:
        """What the chat client itself answered, call by call: responses and failures.

        A response that chat middleware gave instead of the client is left out: a rerun's
        middleware gives it again.
        """
        outcomes: list[ModelResponded | ModelFailed] = []
        answered_by_middleware = False
        for event in self.events:
            if isinstance(event, MiddlewareShortCircuit) and event.scope == "model":
                answered_by_middleware = True
            elif isinstance(event, ModelResponded | ModelFailed):
                if not answered_by_middleware:
                    outcomes.append(event)
                answered_by_middleware = False
        return outcomes


async def load(
    store: EventStore,
    run_id: str,
    *,
    with_session: bool = True,
    with_children: bool = True,
    listing: Sequence[RunSummary] | None = None,
) -> RecordedRun:
    """Read a run from ``store``; with its session's earlier runs when ``with_session``, and the
    whole tree of sub-agent runs below it when ``with_children`` (``RecordedRun.children``).

    ``RunNotFoundError`` if the store has no such run; ``RunEvictedError`` (one) if a bounded store
    evicted it, or evicted runs of its session while ``with_session`` asks for them. An earlier
    stream that does not decode is skipped and reported with ``UnreadableStreamWarning``. A
    sub-agent run the store does not hold is left out (a replay reports that it cannot replay
    it); links that lead back to a run already in the tree are ``RunCycleError`` (a
    ``LogCorruptError``).

    ``listing`` is the store's run listing (``list_runs`` with no limit) when the caller has
    one: loading many runs, it spares listing the store again for each run's session.
    """
    recorded = await _load(store, run_id, with_session, with_children, (), listing)
    if recorded.started.parent_run_id is not None:
        recorded.approved_above = await _approved_above(store, recorded.started)
    return recorded


async def _approved_above(store: EventStore, started: RunStarted) -> bool:
    """Whether a call a human approved started this run, or a run above it (the callers' logs,
    read up the tree as far as the store holds them)."""
    seen: set[str] = set()
    parent, call = started.parent_run_id, started.parent_call_id
    while parent is not None and parent not in seen:
        seen.add(parent)
        events = await store.read(parent)
        if any(type(e) is ApprovalResolved and e.approved and e.call_id == call for e in events):
            return True
        if not events or type(events[0]) is not RunStarted:
            return False
        parent, call = events[0].parent_run_id, events[0].parent_call_id
    return False


async def _load(
    store: EventStore,
    run_id: str,
    with_session: bool,
    with_children: bool,
    above: tuple[str, ...],
    listing: Sequence[RunSummary] | None = None,
) -> RecordedRun:
    events = await store.read(run_id)
    if not events:
        raise RunNotFoundError(run_id)
    recorded = await _with_prior(store, run_id, events, with_session, listing)
    if not with_children:
        return recorded
    lineage = (*above, run_id)
    for link in recorded.child_links():
        if link.child_run_id in lineage:
            start = lineage.index(link.child_run_id)
            raise RunCycleError((*lineage[start:], link.child_run_id))
        try:
            # The child's session state comes from its caller's rerun, so no earlier runs here.
            child = await _load(store, link.child_run_id, False, True, lineage)
        except RunNotFoundError:
            continue  # reported by a replay as a part it cannot replay
        if child.started.parent_run_id not in (None, run_id):
            continue  # a run of that id that is not this call's child (an id reused elsewhere)
        recorded.children[link.call_id] = child
    return recorded


async def _with_prior(
    store: EventStore,
    run_id: str,
    events: list[Event],
    with_session: bool,
    listing: Sequence[RunSummary] | None,
) -> RecordedRun:
    started = events[0]
    prior: list[Event] = []
    if with_session and isinstance(started, RunStarted) and started.session_id is not None:
        if isinstance(store, SupportsEviction) and store.session_evicted(started.session_id):
            raise RunEvictedError(run_id, session_id=started.session_id)
        streams = await store.streams()
        earlier = streams[: streams.index(run_id)] if run_id in streams else streams
        if listing is None and isinstance(store, SupportsRunListing):
            with warnings.catch_warnings():  # reading them below reports the unreadable ones
                warnings.simplefilter("ignore", UnreadableStreamWarning)
                listing = await store.list_runs(RunQuery(limit=None))
        if listing is not None:
            # Read whole only the runs of this session (and streams the listing could not
            # summarize, which reading reports), not every earlier stream: the store lists runs
            # from two records a stream.
            other = {run.run_id for run in listing if run.session_id != started.session_id}
            earlier = [stream for stream in earlier if stream not in other]
        for log in (await _read_earlier(store, earlier)).values():
            if _touches(log, started.session_id):
                prior.extend(_before_child(log, started))
    return RecordedRun(events, prior=prior)


def _before_child(log: list[Event], started: RunStarted) -> list[Event]:
    """A sub-agent run's caller's log up to the call that started it: what the session held
    when the child began (the caller's later writes came after it)."""
    if started.parent_run_id is None or not log or log[0].run_id != started.parent_run_id:
        return log
    for index, event in enumerate(log):
        if type(event) is ChildRunStarted and event.child_run_id == started.run_id:
            return log[:index]
    return log


async def _read_earlier(store: EventStore, streams: list[str]) -> dict[str, list[Event]]:
    """``streams``, whole, in one call if they all decode; else one by one, skipping bad ones."""
    try:
        return await read_many(store, streams)
    except LogCorruptError:
        pass
    logs: dict[str, list[Event]] = {}
    for stream in streams:
        try:
            logs[stream] = await store.read(stream)
        except LogCorruptError as exc:
            report_unreadable(stream, exc, stacklevel=5)  # the caller of load()
    return logs


def _touches(log: Sequence[Event], session_id: str) -> bool:
    first = log[0] if log else None
    if isinstance(first, RunStarted) and first.session_id == session_id:
        return True
    return any(type(e) is SessionUpdated and e.session_id == session_id for e in log)

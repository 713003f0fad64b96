"""Replaying recorded runs: state at a point, rerun against new code, fork.

Three meanings, never confused:

* **state at** ``seq``: fold the log up to ``seq``; no code runs.
* **rerun**: run the agent's current code against the recorded model output (a replay client
  answers each model call from the log) and, with ``tools="recorded"``, the recorded tool
  outcomes instead of running tools. The new events are compared with the recorded ones, and
  the first difference raises ``ReplayDivergence``. No model is called, and with recorded tools
  no side effect is repeated.
* **fork**: rerun up to ``seq`` from the log, then continue with a live client (another model,
  prompt or tool).

Events are compared without ``at`` (time differs between runs) and without the ids of sub-agent
runs (new runs get new ids). Tool calls of one batch run concurrently, so how their events
interleave is not part of the run's meaning: within a batch, events are compared call by call,
each call's own events in order, calls in the model's order. Everything else must be equal.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec

from .agent import Agent
from .clients import BaseChatClient, ChatOptions, ChatResponse
from .context import FunctionInvocationContext, RunContext, current_run_context, replaying
from .core.errors import TransitionError
from .core.events import (
    ArgumentsRejected,
    ChildRunStarted,
    Event,
    MiddlewareShortCircuit,
    ModelFailed,
    ModelResponded,
    RunStarted,
    RunTerminated,
    SessionUpdated,
    ToolCalled,
    ToolFailed,
    ToolNotFound,
    ToolReturned,
    ToolsAdded,
    ToolSpec,
    ToolsRemoved,
)
from .core.machine import RunMachine
from .core.messages import Content, Message
from .core.projections import SessionProjection
from .errors import AgentLedgerError, ReplayDivergence, RunError, RunNotFoundError
from .response import AgentResponse
from .run.lifecycle import AgentRun
from .session import AgentSession
from .store import EventStore, read_many
from .testing import capture_events
from .tools import FunctionTool

__all__ = (
    "RecordedRun",
    "ReplayClient",
    "ReplayExhausted",
    "RunState",
    "canonical",
    "compare",
    "fork",
    "is_replaying",
    "load",
    "rerun",
)

_IGNORED = frozenset({"at", "seq", "child_run_id", "origin_run_id", "origin_seq"})


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

    def __init__(self, events: Sequence[Event], *, prior: Sequence[Event] = ()) -> None:
        if not events or type(events[0]) is not RunStarted:
            raise AgentLedgerError("a recorded run starts with RunStarted")
        self.events = list(events)
        self.prior = list(prior)
        self.started: RunStarted = events[0]
        self.run_id = self.started.run_id

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
        for event in self.events[: seq + 1]:
            machine.observe(event)
            session.apply(event)
        transcript = machine.transcript
        pending = {*transcript.pending, *machine.awaiting_approval}
        calls = tuple(c for m in transcript.messages for c in m.function_calls if c.call_id in pending)
        return RunState(
            seq=seq,
            phase=machine.phase.value,
            iteration=machine.iteration,
            tools=tuple(machine.tools.specs.values()),
            session=dict(session.state),
            transcript=tuple(machine.history) + tuple(transcript.messages),
            pending_calls=calls,
        )

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


async def load(store: EventStore, run_id: str, *, with_session: bool = True) -> RecordedRun:
    """Read a run from ``store``; with its session's earlier runs when ``with_session``."""
    events = await store.read(run_id)
    if not events:
        raise RunNotFoundError(run_id)
    started = events[0]
    prior: list[Event] = []
    if with_session and isinstance(started, RunStarted) and started.session_id is not None:
        streams = await store.streams()
        earlier = streams[: streams.index(run_id)] if run_id in streams else streams
        for log in (await read_many(store, earlier)).values():
            if _touches(log, started.session_id):
                prior.extend(log)
    return RecordedRun(events, prior=prior)


def _touches(log: Sequence[Event], session_id: str) -> bool:
    first = log[0] if log else None
    if isinstance(first, RunStarted) and first.session_id == session_id:
        return True
    return any(type(e) is SessionUpdated and e.session_id == session_id for e in log)


class ReplayExhausted(AgentLedgerError):
    """The rerun asked the model more often than the recorded run did."""


class ReplayClient(BaseChatClient):
    """Answers each model call with the next recorded response; then defers to ``live``."""

    provider_name = "replay"

    def __init__(
        self,
        responses: Sequence[ModelResponded | ModelFailed],
        live: BaseChatClient | None = None,
        *,
        provider_name: str = "",
    ) -> None:
        self.responses = list(responses)
        self.live = live
        self.calls = 0
        # A rerun records the provider of the run it replays (a fork: of the client it goes on with).
        self.provider_name = live.provider_name if live is not None else (provider_name or "replay")

    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        options: ChatOptions | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ChatResponse:
        index, self.calls = self.calls, self.calls + 1
        if index < len(self.responses):
            recorded = self.responses[index]
            if isinstance(recorded, ModelFailed):  # the client failed here: fail the same way
                raise type(recorded.error_type, (_RecordedOutcome,), {})(recorded.message)
            return ChatResponse(
                recorded.message,
                model=recorded.model,
                usage=recorded.usage,
                response_id=recorded.response_id,
                finish_reason=recorded.finish_reason,
            )
        if self.live is None:
            raise ReplayExhausted(
                f"the recorded run made {len(self.responses)} model calls; this is call {index + 1}"
            )
        return await self.live.get_response(messages, options=options, client_kwargs=client_kwargs)


class _RecordedOutcome(Exception):
    """Re-raised in place of a tool's recorded failure."""


class _RecordedTools:
    """Stand-ins that replay each call's recorded effects and outcome instead of running the tool."""

    def __init__(
        self, recorded: RecordedRun, upto: int | None, live: Sequence[FunctionTool], *, run_live: bool
    ) -> None:
        self.run_live = run_live
        self.effects: dict[str, list[Event]] = {}
        self.outcome: dict[str, Event] = {}
        self.live = {t.name: t for t in live}
        self.upto = upto
        children = {e.child_run_id: e.call_id for e in recorded.events if type(e) is ChildRunStarted}
        for event in recorded.events:
            call_id = _call_of(event, children)
            if call_id is None:
                continue
            if type(event) in (ToolReturned, ToolFailed):
                self.outcome[call_id] = event
            elif type(event) is not ToolCalled:
                self.effects.setdefault(call_id, []).append(event)
        self.specs = {spec.name: spec for e in recorded.events for spec in _specs(e)}

    def stand_in(self, name: str) -> FunctionTool:
        spec = self.specs.get(name)
        live = self.live.get(name)

        async def replayed(ctx: FunctionInvocationContext, arguments: Mapping[str, Any]) -> Any:
            call_id = ctx.call_id or ""
            outcome = self.outcome.get(call_id)
            if outcome is None or (self.upto is not None and outcome.seq > self.upto):
                if live is None or not self.run_live:
                    raise ReplayExhausted(f"no recorded outcome for call {call_id} and no live tool {name!r}")
                value = live.bind_call(arguments, ctx)()
                return await value if hasattr(value, "__await__") else value
            self._effects(ctx, call_id)
            if type(outcome) is ToolFailed:
                raise type(outcome.error_type, (_RecordedOutcome,), {})(outcome.message)
            assert type(outcome) is ToolReturned
            return outcome.tool_result if outcome.overridden_by else outcome.result

        parameters = spec.parameters if spec is not None else (live.parameters if live else {})
        stand_in = _StandIn(
            replayed, name=name, description=spec.description if spec else "", schema=parameters
        )
        if live is not None:
            stand_in.approval_mode = live.approval_mode
            stand_in.spec = live.spec
            stand_in._args_type, stand_in._fields, stand_in._pydantic = (
                live._args_type,
                live._fields,
                live._pydantic,
            )
        elif spec is not None:
            stand_in.spec = spec
            stand_in.approval_mode = spec.approval_mode  # type: ignore[assignment]
        return stand_in

    def _effects(self, ctx: FunctionInvocationContext, call_id: str) -> None:
        caller = current_run_context()
        for event in self.effects.get(call_id, []):
            if type(event) is SessionUpdated and ctx.session is not None:
                _apply_session(ctx.session, event, caller)
            elif type(event) is ToolsAdded:
                ctx.add_tools([self.stand_in(spec.name) for spec in event.tools])
            elif type(event) is ToolsRemoved:
                ctx.remove_tools(list(event.names))
            elif type(event) is ChildRunStarted and caller is not None and caller.recorder is not None:
                fields = msgspec.structs.asdict(event)
                for key in ("run_id", "seq", "at"):
                    fields.pop(key)
                caller.record(ChildRunStarted, **fields)


class _StandIn(FunctionTool):
    def __init__(self, replayed: Any, *, name: str, description: str, schema: Mapping[str, Any]) -> None:
        async def signature(ctx: FunctionInvocationContext) -> None:
            """Placeholder: calls go through bind_call."""

        super().__init__(signature, name=name, description=description, schema=schema)
        self.context_param = None
        self.needs_context = True
        self._replayed = replayed

    def bind_call(self, arguments: Mapping[str, Any], context: Any) -> Any:
        return lambda: self._replayed(context, arguments)


def _apply_session(session: AgentSession, event: SessionUpdated, caller: RunContext | None) -> None:
    """Re-make a recorded session write: its own writes by value, sub-agent copies by record."""
    if event.origin_run_id is None:
        for change in event.changes:
            if change.op == "set":
                session.state[change.key] = change.value
            elif change.key in session.state:
                del session.state[change.key]
        return
    session.apply(event)
    if caller is not None and caller.recorder is not None:
        caller.record(
            SessionUpdated,
            session_id=event.session_id,
            by=event.by,
            changes=event.changes,
            origin_run_id=event.origin_run_id,
            origin_seq=event.origin_seq,
        )


def _call_of(event: Event, children: Mapping[str, str]) -> str | None:
    """The tool call of this run that an event belongs to, if any."""
    if type(event) is SessionUpdated:
        if event.origin_run_id is None:
            return event.by
        return children.get(event.by.split("/", 1)[0])  # a copy from a sub-agent: by = "<child run>/..."
    if isinstance(event, ToolsAdded | ToolsRemoved):
        return event.by_call_id
    if isinstance(event, ToolCalled | ToolReturned | ToolFailed | ChildRunStarted):
        return event.call_id
    return None


def _specs(event: Event) -> tuple[ToolSpec, ...]:
    if type(event) is RunStarted:
        return event.tools
    if type(event) is ToolsAdded:
        return event.tools
    return ()


_BLANK: dict[str, Any] = {"at": 0, "seq": 0, "child_run_id": "", "origin_run_id": None, "origin_seq": None}


def _normalized(event: Event) -> Event:
    """The event with the fields a rerun may change blanked, for comparing by value."""
    blank = {name: _BLANK[name] for name in _IGNORED if name in event.__struct_fields__}
    return msgspec.structs.replace(event, **blank)


def _comparable(event: Event) -> dict[str, Any]:
    """The event as JSON values for a readable diff (the ignored fields left out)."""
    data = msgspec.to_builtins(event)
    return {k: v for k, v in data.items() if k not in _IGNORED}


def _diff(expected: Event | None, actual: Event | None) -> str:
    def lines(event: Event | None) -> list[str]:
        if event is None:
            return ["<no event>"]
        return msgspec.json.format(msgspec.json.encode(_comparable(event)), indent=2).decode().splitlines()

    return "\n".join(difflib.unified_diff(lines(expected), lines(actual), "recorded", "rerun", lineterm=""))


def _lane(event: Event, children: Mapping[str, str]) -> str | None:
    if isinstance(event, RunTerminated):
        return event.by or None
    if isinstance(event, ArgumentsRejected | ToolNotFound | MiddlewareShortCircuit):
        return event.call_id
    return _call_of(event, children)


def canonical(events: Sequence[Event]) -> list[Event]:
    """The log with each batch's events grouped by call (model order), each call's kept in order."""
    children = {e.child_run_id: e.call_id for e in events if type(e) is ChildRunStarted}
    out: list[Event] = []
    batch: list[Event] = []
    order: dict[str | None, int] = {}
    for event in events:
        if type(event) is ModelResponded and event.message.function_calls:
            out.extend(_sorted(batch, order, children))
            out.append(event)
            batch = []
            order = {c.call_id: i for i, c in enumerate(event.message.function_calls)}
            continue
        lane = _lane(event, children) if order else None
        if order and lane in order:
            batch.append(event)
            continue
        if order and type(event).__name__ in ("ApprovalRequested",):
            batch.append(event)
            continue
        out.extend(_sorted(batch, order, children))
        batch, order = [], {}
        out.append(event)
    out.extend(_sorted(batch, order, children))
    return out


def _sorted(batch: list[Event], order: Mapping[str | None, int], children: Mapping[str, str]) -> list[Event]:
    return sorted(batch, key=lambda e: order.get(_lane(e, children), -1))


def compare(recorded: Sequence[Event], actual: Sequence[Event]) -> None:
    """Raise ``ReplayDivergence`` at the first event that differs (see the module docstring).

    ``seq`` of the error is the recorded event's seq (or the rerun's, past the recorded end).
    """
    left, right = canonical(recorded), canonical(actual)
    for index in range(max(len(left), len(right))):
        expected = left[index] if index < len(left) else None
        got = right[index] if index < len(right) else None
        if expected is None or got is None or _normalized(expected) != _normalized(got):
            seq = expected.seq if expected is not None else (got.seq if got is not None else index)
            raise ReplayDivergence(seq, expected, got, _diff(expected, got))


def _session_for(recorded: RecordedRun) -> AgentSession | None:
    if recorded.session_id is None:
        return None
    session = AgentSession.from_events(recorded.prior, recorded.session_id)
    if not recorded.started.session_history:
        session.history = []
    _pend_caller_writes(session, recorded.events[1:])
    return session


def _pend_caller_writes(session: AgentSession, events: Sequence[Event]) -> None:
    """Writes made between runs open the run's log (``by="caller"``): make them pending again.

    The state takes them without recording, and the rerun records them at its start, as the
    original run did.
    """
    for event in events:
        if type(event) is not SessionUpdated or event.by != "caller":
            break
        session.apply(event)
        session.add_pending(event.by, event.changes)


async def _drive(
    recorded: RecordedRun,
    agent: Agent,
    client: BaseChatClient,
    tools: Literal["recorded", "live"],
    upto: int | None,
    run_id: str | None,
    function_invocation_kwargs: Mapping[str, Any] | None,
) -> tuple[AgentResponse | None, list[Event]]:
    started = recorded.started
    spec = agent.run_spec(
        function_invocation_kwargs=started.function_invocation_kwargs
        if function_invocation_kwargs is None
        else function_invocation_kwargs,
        client_kwargs=dict.fromkeys(started.client_kwargs_keys),  # the values were never recorded
    )
    options = dict(started.options)
    if started.instructions is not None:
        options["instructions"] = started.instructions
    # A rerun is not a new run: no store, and live exporters must not see it.
    spec = spec.replace(client=client, options=options, store=None, sinks=())
    if tools == "recorded" or upto is not None:
        # The live tools always lend their argument types (defaults, coercion, rejection); their
        # bodies run only where the log has no outcome and the caller asked for live tools.
        helper = _RecordedTools(recorded, upto, agent.tools, run_live=tools == "live" or upto is not None)
        spec = spec.replace(tools=tuple(helper.stand_in(t.name) for t in agent.tools))
    run = AgentRun(spec, _session_for(recorded), run_id=run_id or agent.ids("run"))
    token = replaying.set(True)
    with capture_events() as events:
        try:
            response: AgentResponse | None = await run.execute(list(started.messages))
        except (RunError, TransitionError):
            response = None
        finally:
            replaying.reset(token)
    own = [e for e in events if e.run_id == run.run_id]
    return response, own


async def rerun(
    recorded: RecordedRun,
    agent: Agent,
    *,
    tools: Literal["recorded", "live"] = "recorded",
    function_invocation_kwargs: Mapping[str, Any] | None = None,
) -> AgentResponse | None:
    """Run ``agent``'s code against the recorded model output; raise at the first divergence.

    With ``tools="recorded"`` no tool runs: each call returns (or raises) what it recorded and
    repeats its recorded effects (session writes, tool list changes). With ``tools="live"`` the
    tools run for real; pass ``function_invocation_kwargs`` when the recorded ones were redacted.
    """
    client = ReplayClient(recorded.model_outcomes(), provider_name=recorded.started.provider_name)
    response, events = await _drive(
        recorded, agent, client, tools, None, recorded.run_id, function_invocation_kwargs
    )
    compare(recorded.events, events)
    return response


async def fork(
    recorded: RecordedRun,
    agent: Agent,
    *,
    at: int,
    client: BaseChatClient,
    function_invocation_kwargs: Mapping[str, Any] | None = None,
) -> AgentResponse:
    """Replay the run up to ``at`` from the log, then continue live with ``client`` as a new run.

    Model calls answered at or before ``at`` come from the log, so do tool calls whose outcome
    was recorded at or before ``at``; everything later is live (``agent``'s tools, ``client``).
    """
    if not 0 <= at < len(recorded.events):
        raise IndexError(f"run {recorded.run_id} has events 0..{len(recorded.events) - 1}, not {at}")
    responses = [e for e in recorded.model_outcomes() if e.seq <= at]
    replay = ReplayClient(responses, live=client)
    response, _ = await _drive(recorded, agent, replay, "live", at, None, function_invocation_kwargs)
    if response is None:
        raise AgentLedgerError(f"the fork of run {recorded.run_id} at seq {at} failed")
    return response

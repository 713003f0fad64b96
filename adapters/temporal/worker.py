"""Workers: the activities of agentledger runs, the agents they find by name, and call records.

Theory of operation. A worker builds each registered agent once (``AgentRegistry``: name ->
factory), points its sub-agents at the worker's event store, and serves the activities a run's
workflow schedules. Every activity heartbeats while it works, so a worker that dies is noticed
after ``Timeouts.heartbeat`` and its activity is retried on another worker.

Temporal runs an activity at least once, and that must not mean running a tool twice. Each
tool-call activity claims the call's idempotency key (run id, iteration, call id) in a
``CallLedger`` before running anything and records the outcome after. A retried activity finds
either the outcome, and returns it without running the tool; or a claim without an outcome: the
previous attempt died while the call was in progress, perhaps after the tool took effect. Such a
call is not run again: its outcome becomes ``ToolFailed`` (``ToolInterrupted``), which the model
sees like any tool error (``rerun_interrupted=True`` runs it again instead, for tools that are
safe to repeat). Appends are idempotent through ``expected_version``: a retried append that finds
its own events already stored succeeds, one that finds other events fails for good.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar, overload, runtime_checkable

import anyio
import msgspec
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentledger.agent import Agent
from agentledger.core.events import Event, RunCompleted, ToolFailed, ToolReturned
from agentledger.errors import AgentLedgerError, ApprovalError, ConflictError, MiddlewareFailure
from agentledger.run import claim_batches
from agentledger.store import EventStore
from agentledger.subagents import AgentTool
from agentledger.tools import FunctionTool, normalize_tools

from .steps import (
    StepError,
    ToolUnavailable,
    UnsupportedAgent,
    finish_events,
    model_step,
    started_events,
    tool_step,
)
from .types import (
    APPEND_EVENTS,
    CALL_MODEL,
    FINISH_RUN,
    INVOKE_TOOL,
    LOAD_EVENTS,
    RUN_SUBAGENT,
    START_RUN,
    AppendRequest,
    FinishOutcome,
    FinishRequest,
    LoadRequest,
    ModelRequest,
    StartOutcome,
    StartRequest,
    StepOutcome,
    ToolRequest,
)

__all__ = ("Activities", "AgentFactory", "AgentRegistry", "CallLedger", "MemoryCallLedger")

T = TypeVar("T")
AgentFactory = Callable[[], Agent]
_decode_outcome = msgspec.json.Decoder(StepOutcome).decode


class AgentRegistry:
    """Agents by name, each built by a factory on every worker that serves it.

    ``extra_tools`` are tools an agent's runs may add at run time (``ctx.add_tools``): a later
    call to one of them may run on another worker, which finds it here by name.
    """

    def __init__(self) -> None:
        self._entries: dict[str, tuple[AgentFactory, tuple[FunctionTool, ...]]] = {}

    @overload
    def register(self, name: str, factory: AgentFactory, *, extra_tools: Any = ()) -> AgentFactory: ...
    @overload
    def register(
        self, name: str, factory: None = None, *, extra_tools: Any = ()
    ) -> Callable[[AgentFactory], AgentFactory]: ...
    def register(
        self, name: str, factory: AgentFactory | None = None, *, extra_tools: Any = ()
    ) -> AgentFactory | Callable[[AgentFactory], AgentFactory]:
        """Register ``factory`` under ``name``; without a factory, a decorator."""

        def add(func: AgentFactory) -> AgentFactory:
            if name in self._entries:
                raise ValueError(f"an agent named {name!r} is already registered")
            self._entries[name] = (func, tuple(normalize_tools(extra_tools)))
            return func

        return add(factory) if factory is not None else add

    def names(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def build(self, name: str) -> Agent:
        """A new agent from the factory registered as ``name``."""
        if name not in self._entries:
            raise KeyError(f"no agent named {name!r} is registered (known: {', '.join(self._entries)})")
        agent = self._entries[name][0]()
        if not isinstance(agent, Agent):
            raise TypeError(f"the factory of {name!r} returned {type(agent).__name__}, not an Agent")
        return agent

    def extra_tools(self, name: str) -> tuple[FunctionTool, ...]:
        return self._entries[name][1]


@runtime_checkable
class CallLedger(Protocol):
    """Where tool-call outcomes are kept by idempotency key (``PostgresEventStore`` is one)."""

    async def claim_call(self, key: str) -> tuple[int, bytes | None]:
        """Count an attempt at ``key``; returns (attempts so far, the outcome if recorded)."""
        ...

    async def complete_call(self, key: str, outcome: bytes) -> bytes:
        """Record ``outcome`` unless one is; returns the recorded outcome."""
        ...


class MemoryCallLedger:
    """A ``CallLedger`` in this process: enough for one worker, not for several."""

    def __init__(self) -> None:
        self.calls: dict[str, tuple[int, bytes | None]] = {}

    async def claim_call(self, key: str) -> tuple[int, bytes | None]:
        attempts, outcome = self.calls.get(key, (0, None))
        self.calls[key] = (attempts + 1, outcome)
        return attempts + 1, outcome

    async def complete_call(self, key: str, outcome: bytes) -> bytes:
        attempts, recorded = self.calls[key]
        if recorded is None:
            self.calls[key] = (attempts, outcome)
        return recorded if recorded is not None else outcome


class _Built(NamedTuple):
    agent: Agent
    catalogue: dict[str, FunctionTool]
    subagents: tuple[str, ...]


def _final(exc: Exception) -> ApplicationError:
    """A failure no retry can mend: the workflow records it and fails."""
    return ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True)


class Activities:
    """The activities of agentledger runs, over one registry, event store and call ledger.

    Without ``ledger``, the store is the ledger when it is one (``PostgresEventStore``), else
    the calls are recorded in this process only (``MemoryCallLedger``: one worker at most).
    """

    def __init__(
        self,
        registry: AgentRegistry,
        store: EventStore,
        ledger: CallLedger | None = None,
        *,
        rerun_interrupted: bool = False,
    ) -> None:
        self.registry = registry
        self.store = store
        if ledger is None:
            ledger = store if isinstance(store, CallLedger) else MemoryCallLedger()
        self.ledger = ledger
        self.rerun_interrupted = rerun_interrupted
        self._built: dict[str, _Built] = {}

    def functions(self) -> list[Callable[..., Any]]:
        """The activity functions to give a ``temporalio.worker.Worker``."""
        return [
            self.start_run,
            self.call_model,
            self.invoke_tool,
            self.run_subagent,
            self.append_events,
            self.finish_run,
            self.load_events,
        ]

    # -- the activities ---------------------------------------------------------------------------

    @activity.defn(name=START_RUN)
    async def start_run(self, request: StartRequest) -> StartOutcome:
        """Record ``RunStarted`` (and the caller's session writes) at version 0."""
        return await _heartbeating(self._start_run(request))

    @activity.defn(name=CALL_MODEL)
    async def call_model(self, request: ModelRequest) -> StepOutcome:
        """Append the pending events, then make the model call from the stored transcript."""
        return await _heartbeating(self._call_model(request))

    @activity.defn(name=INVOKE_TOOL)
    async def invoke_tool(self, request: ToolRequest) -> StepOutcome:
        """Run one tool call through its middleware, at most once per idempotency key."""
        return await _heartbeating(self._call(request))

    @activity.defn(name=RUN_SUBAGENT)
    async def run_subagent(self, request: ToolRequest) -> StepOutcome:
        """Run one sub-agent call: the child's run, with its own log in the store."""
        return await _heartbeating(self._call(request))

    @activity.defn(name=APPEND_EVENTS)
    async def append_events(self, request: AppendRequest) -> int:
        """Append events at ``version``; returns the new version."""
        return await _heartbeating(self._append(request.run_id, request.events, request.version))

    @activity.defn(name=FINISH_RUN)
    async def finish_run(self, request: FinishRequest) -> FinishOutcome:
        """Append the pending events and ``RunCompleted``."""
        return await _heartbeating(self._finish_run(request))

    @activity.defn(name=LOAD_EVENTS)
    async def load_events(self, request: LoadRequest) -> list[Event]:
        """A page of a stored log, for a run that continues as new."""
        return await _heartbeating(self._load(request))

    # -- implementations --------------------------------------------------------------------------

    async def _start_run(self, request: StartRequest) -> StartOutcome:
        built = self._agent(request.view.agent)
        view = request.view
        try:
            events = started_events(built.agent, request)
            # Before anything of this run is recorded: the store decides who resumes a batch.
            await claim_batches(
                self.store,
                request.paused,
                view.history,
                request.messages,
                run_id=view.run_id,
                at=request.at,
                rerun=request.rerun,
                rerun_holders=request.rerun_holders,
            )
        except (UnsupportedAgent, ApprovalError) as exc:
            raise _final(exc) from exc
        await self._append(view.run_id, events, 0)
        sequential = built.agent.config.sequential_tools
        return StartOutcome(events=tuple(events), sequential=sequential, subagents=built.subagents)

    async def _call_model(self, request: ModelRequest) -> StepOutcome:
        view = request.view
        version = await self._append(view.run_id, request.pending, request.version)
        events = await self.store.read(view.run_id)
        try:
            if len(events) != version:
                raise StepError(f"run {view.run_id} holds {len(events)} events; the workflow wrote {version}")
            return await model_step(self._agent(view.agent).agent, view, events, request.iteration)
        except (StepError, MiddlewareFailure) as exc:  # a MiddlewareFailure fails closed, no retry
            raise _final(exc) from exc

    async def _call(self, request: ToolRequest) -> StepOutcome:
        view, call = request.view, request.call
        built = self._agent(view.agent)
        tools = self._tools(built, request.tools, call.name or "")
        if request.gated:  # only asks whether the call waits for approval: no effect to keep once
            return await tool_step(built.agent, view, request.iteration, call, tools, gated=True)
        key = f"{view.run_id}/{request.iteration}/{call.call_id}"
        attempts, recorded = await self.ledger.claim_call(key)
        if recorded is not None:
            return _decode_outcome(recorded)
        interrupted = attempts > 1 and not self.rerun_interrupted
        approved = request.approved
        try:
            outcome = await tool_step(
                built.agent, view, request.iteration, call, tools, interrupted=interrupted, approved=approved
            )
        except MiddlewareFailure as exc:  # fail closed: the workflow records RunFailed, no retry
            raise _final(exc) from exc
        outcome = _fit(outcome, view.limits.payload_bytes)
        return _decode_outcome(await self.ledger.complete_call(key, msgspec.json.encode(outcome)))

    async def _finish_run(self, request: FinishRequest) -> FinishOutcome:
        view = request.view
        version = await self._append(view.run_id, request.pending, request.version)
        events = await self.store.read(view.run_id)
        try:
            if len(events) != version:
                raise StepError(f"run {view.run_id} holds {len(events)} events; the workflow wrote {version}")
            ended = finish_events(events, view, request.at)
        except StepError as exc:
            raise _final(exc) from exc
        version = await self._append(view.run_id, ended, version)
        last = ended[-1]
        return FinishOutcome(version=version, text=last.text if isinstance(last, RunCompleted) else "")

    async def _load(self, request: LoadRequest) -> list[Event]:
        events = (await self.store.read(request.run_id, after=request.after))[
            : request.upto - request.after - 1
        ]
        page: list[Event] = []
        size = 0
        for event in events:
            size += len(msgspec.json.encode(event))
            if page and size > request.max_bytes:
                break
            page.append(event)
        if not page:
            missing = StepError(f"run {request.run_id} holds no events after seq {request.after}")
            raise _final(missing)
        return page

    async def _append(self, run_id: str, events: Sequence[Event], version: int) -> int:
        """Append at ``version``; a retry that finds these very events stored succeeds, and one
        that finds the first of them stored appends the rest."""
        if not events:
            return version
        try:
            return await self.store.append(run_id, events, version)
        except ConflictError as exc:
            stored = await self.store.read(run_id, after=version - 1)
            if stored[: len(events)] == list(events):
                return version + len(events)
            if stored and list(events[: len(stored)]) == stored:
                # A step the workflow did not see finish (a model call cancelled after it stored
                # the events before it) holds the first of these: append the rest after them.
                return await self._append(run_id, events[len(stored) :], version + len(stored))
            raise _final(exc) from exc

    # -- agents and tools -------------------------------------------------------------------------

    def _agent(self, name: str) -> _Built:
        built = self._built.get(name)
        if built is None:
            try:
                agent = self.registry.build(name)
            except KeyError as exc:
                raise _final(AgentLedgerError(str(exc.args[0]))) from exc
            extra = self.registry.extra_tools(name)
            catalogue: dict[str, FunctionTool] = {}
            for tool in (*agent.tools, *extra):
                catalogue.setdefault(tool.name, tool)
                self._adopt(tool)
            subagents = tuple(n for n, t in catalogue.items() if isinstance(t, AgentTool))
            built = self._built[name] = _Built(agent, catalogue, subagents)
        return built

    def _adopt(self, tool: FunctionTool) -> None:
        """Sub-agents (and theirs) record their runs in this worker's store."""
        if isinstance(tool, AgentTool) and tool.agent.store is not self.store:
            tool.agent.store = self.store
            for inner in tool.agent.tools:
                self._adopt(inner)

    def _tools(self, built: _Built, names: Sequence[str], needed: str) -> list[FunctionTool]:
        if needed not in built.catalogue:
            raise _final(
                ToolUnavailable(
                    f"tool {needed!r} of agent {built.agent.name!r} is not known to this worker: "
                    "register tools that runs add at run time as extra_tools"
                )
            )
        return [built.catalogue[name] for name in names if name in built.catalogue]


def _fit(outcome: StepOutcome, budget: int) -> StepOutcome:
    """A tool result over the payload budget is recorded as a failure the model can read."""
    size = len(msgspec.json.encode(outcome))
    last = outcome.events[-1] if outcome.events else None
    if size <= budget or not isinstance(last, ToolReturned):
        return outcome
    failed = ToolFailed(
        run_id=last.run_id,
        seq=last.seq,
        at=last.at,
        call_id=last.call_id,
        name=last.name,
        error_type="PayloadTooLarge",
        message=f"the result is {size} bytes, over the {budget}-byte payload budget of a distributed run",
    )
    return StepOutcome(events=(*outcome.events[:-1], failed))


async def _heartbeating(work: Awaitable[T]) -> T:
    """Await ``work`` while heartbeating a third of the heartbeat timeout apart."""
    timeout = activity.info().heartbeat_timeout
    if not timeout:
        return await work
    done: list[T] = []
    failed: list[Exception] = []

    async def run() -> None:
        try:
            done.append(await work)
        except Exception as exc:
            failed.append(exc)
        finally:
            group.cancel_scope.cancel()

    async with anyio.create_task_group() as group:
        group.start_soon(_beat, timeout.total_seconds() / 3)
        group.start_soon(run)
    if failed:
        raise failed[0]
    return done[0]


async def _beat(interval: float) -> None:
    while True:
        activity.heartbeat()
        await anyio.sleep(interval)

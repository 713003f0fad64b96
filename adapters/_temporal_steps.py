"""One step of a run, carried out on a worker with the runtime's own pieces.

Theory of operation. A local run keeps its ``RunMachine`` and ``RunDriver`` in one process. On
Temporal the workflow keeps the machine, and each activity carries out one of its commands. A step
rebuilds around a ``RunDriver`` what that command needs: the agent (from the worker's registry),
the session (from the state the workflow tracks), the run's live tools (by name), the run context
tools and sub-agents look up, and a recorder that keeps what the step emits instead of feeding a
machine. Then it runs the driver's own code for the command (``_call_model`` for a model call,
``_invoke_one`` for a tool call), so a step records exactly the events a local run would. The
workflow gives those events their ``seq`` and ``at`` when it feeds them to its machine.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from agentledger import __version__
from agentledger.agent import Agent, AgentResponse, _check_approvals, _options_record
from agentledger.context import RunContext, _current
from agentledger.core.events import (
    Event,
    EventBase,
    RunCompleted,
    RunStarted,
    SessionUpdated,
    StateChange,
    ToolSpec,
)
from agentledger.core.machine import CallModel, Phase, RunMachine, TransitionError, refold
from agentledger.core.messages import Content
from agentledger.driver import Recorder, RunDriver, ToolRegistry
from agentledger.errors import AgentLedgerError
from agentledger.middleware import split_middleware
from agentledger.session import AgentSession
from agentledger.tools import FunctionTool

from ._temporal_types import RunView, StartRequest, StepOutcome

__all__ = (
    "StepError",
    "ToolInterrupted",
    "ToolUnavailable",
    "UnsupportedAgent",
    "completion",
    "model_step",
    "started_events",
    "tool_step",
)


class StepError(AgentLedgerError):
    """The stored log does not match the step the workflow asks for."""


class UnsupportedAgent(AgentLedgerError):
    """The agent uses something a distributed run cannot carry out (agent middleware)."""


class ToolUnavailable(AgentLedgerError):
    """A run calls a tool the worker cannot find by name (see ``AgentRegistry`` extra_tools)."""


class ToolInterrupted(AgentLedgerError):
    """A tool call's worker stopped before its outcome was recorded; the call was not run again."""


INTERRUPTED = (
    "the worker running this call stopped before its outcome was recorded; "
    "the tool was not run again, so it may or may not have taken effect"
)


class _Capture(Recorder):
    """A recorder that keeps what one step emits; the workflow stamps ``seq`` and ``at``."""

    def __init__(self, run_id: str) -> None:
        super().__init__(RunMachine(), run_id, _no_clock, ())

    def emit(self, cls: type[EventBase], **fields: Any) -> Event:
        with self.lock:
            event: Any = cls(run_id=self.run_id, seq=len(self.log), at=0, **fields)
            self.log.append(event)
        return event  # type: ignore[no-any-return]


def _no_clock() -> int:
    return 0


def run_options(agent: Agent, view: RunView) -> dict[str, Any]:
    """The options of the run as ``Agent.run`` merges them."""
    options = {**agent.default_options, **view.options}
    if agent.instructions and "instructions" not in options:
        options["instructions"] = agent.instructions
    return options


def _session(view: RunView) -> AgentSession | None:
    if view.session_id is None:
        return None
    session = AgentSession(view.session_id)
    session.history = list(view.history)
    session.state._load(view.session_state)
    return session


class _Step:
    """A ``RunDriver`` for one command of the run ``view`` describes."""

    def __init__(self, agent: Agent, view: RunView, tools: Sequence[FunctionTool]) -> None:
        self.agent = agent
        self.view = view
        self.recorder = _Capture(view.run_id)
        self.registry = ToolRegistry(tools, self.recorder)
        self.session = _session(view)
        self.options = run_options(agent, view)
        layers = split_middleware(agent.middleware)
        self.driver = RunDriver(
            recorder=self.recorder,
            registry=self.registry,
            client=agent.client,
            session=self.session,
            options=self.options,
            function_invocation_kwargs=dict(view.function_invocation_kwargs),
            client_kwargs=dict(view.client_kwargs),
            function_layers=layers["function"],
            chat_layers=layers["chat"],
            store=None,
        )

    @contextlib.contextmanager
    def bound(self) -> Iterator[None]:
        """The session records into this step, and tools see the run as their current one."""
        session = self.session
        sink = self._sink(session.session_id) if session is not None else None
        unbind = session.bind(sink) if session is not None and sink is not None else None
        context = RunContext(
            agent=self.agent,
            run_id=self.view.run_id,
            session=session,
            options=self.options,
            kwargs=self.driver.fik,
        )
        context._recorder = self.recorder
        context._session_sink = sink
        token = _current.set(context)
        try:
            yield
        finally:
            _current.reset(token)
            if unbind is not None:
                unbind()

    def _sink(self, session_id: str) -> Callable[..., None]:
        recorder = self.recorder

        def sink(by: str, changes: tuple[StateChange, ...], origin: tuple[str, int] | None = None) -> None:
            fields = {"origin_run_id": origin[0], "origin_seq": origin[1]} if origin else {}
            recorder.emit(SessionUpdated, session_id=session_id, by=by, changes=changes, **fields)

        return sink

    def outcome(self) -> StepOutcome:
        error = self.driver.error
        if error is None:
            return StepOutcome(events=tuple(self.recorder.log))
        return StepOutcome(
            events=tuple(self.recorder.log),
            error_type=type(error).__name__,
            error_message=str(error.__cause__ or error),
        )


# -- the steps ------------------------------------------------------------------------------------


def started_events(agent: Agent, request: StartRequest) -> list[Event]:
    """``RunStarted``, then the caller's session writes made since the last run."""
    if split_middleware(agent.middleware)["agent"]:
        raise UnsupportedAgent(
            f"agent {request.view.agent!r} has agent middleware, which wraps a whole run in one "
            "process; on Temporal use function or chat middleware"
        )
    view = request.view
    _check_approvals(view.history, request.messages)
    options = run_options(agent, view)
    events: list[Event] = [
        RunStarted(
            run_id=view.run_id,
            seq=0,
            at=request.at,
            agent_id=agent.id,
            agent_name=agent.name,
            instructions=options.get("instructions"),
            messages=request.messages,
            tools=tuple(t.spec for t in agent.tools),
            options=_options_record(options),
            function_invocation_kwargs=agent.redact(view.function_invocation_kwargs),
            client_kwargs_keys=tuple(view.client_kwargs),
            session_id=view.session_id,
            history_length=len(view.history),
            config=agent.config,
            provider_name=agent.client.provider_name,
            library_version=__version__,
        )
    ]
    for by, changes in request.pending:
        events.append(
            SessionUpdated(
                run_id=view.run_id,
                seq=len(events),
                at=request.at,
                session_id=view.session_id or "",
                by=by,
                changes=changes,
            )
        )
    return events


def _refold(events: Sequence[Event], view: RunView) -> RunMachine:
    try:
        return refold(events, view.history)
    except TransitionError as exc:
        raise StepError(f"the stored log of run {view.run_id} does not refold: {exc}") from exc


async def model_step(agent: Agent, view: RunView, events: Sequence[Event], iteration: int) -> StepOutcome:
    """Make model call ``iteration``; the transcript comes from the stored log."""
    machine = _refold(events, view)
    if machine.phase is not Phase.AWAITING_MODEL or machine.iteration != iteration:
        raise StepError(
            f"run {view.run_id}: the stored log is at {machine.phase.value}, iteration {machine.iteration}; "
            f"the workflow asks for model call {iteration}"
        )
    call = machine.transcript.calls[-1]
    messages = (*machine.history, *machine.transcript.messages)
    command = CallModel(
        iteration=iteration, messages=messages, tools=call.tools, tool_choice=call.tool_choice
    )
    step = _Step(agent, view, [_offered(spec) for spec in machine.tools.specs.values()])
    with step.bound():
        await step.driver._call_model(command)
    return step.outcome()


async def tool_step(
    agent: Agent,
    view: RunView,
    iteration: int,
    call: Content,
    tools: Sequence[FunctionTool],
    *,
    interrupted: bool = False,
) -> StepOutcome:
    """Run one call through the function middleware and the tool (or its interrupted stand-in)."""
    name = call.name or ""
    if interrupted:
        tools = [_Interrupted(t) if t.name == name else t for t in tools]
    step = _Step(agent, view, tools)
    with step.bound():
        await step.driver._invoke_one(iteration, call, step.registry.by_name[name])
    return step.outcome()


def completion(events: Sequence[Event], view: RunView, reason: str, at: int) -> RunCompleted:
    """``RunCompleted`` for the stored log: the run's own messages, its text and usage."""
    machine = _refold(events, view)
    started = events[0]
    if machine.phase is not Phase.FINISHING or not isinstance(started, RunStarted):
        raise StepError(f"run {view.run_id}: the stored log is at {machine.phase.value}, not finishing")
    response = AgentResponse(messages=machine.transcript.messages[len(started.messages) :])
    return RunCompleted(
        run_id=view.run_id,
        seq=len(events),
        at=at,
        messages=tuple(response.messages),
        text=response.text,
        usage=machine.usage,
        reason=reason,
    )


# -- stand-in tools -------------------------------------------------------------------------------


def _unused() -> None:
    """A tool known by its spec only: a model call needs no more."""


def _offered(spec: ToolSpec) -> FunctionTool:
    tool = FunctionTool(_unused, name=spec.name, description=spec.description, schema=spec.parameters)
    tool.spec = spec
    return tool


class _Interrupted(FunctionTool):
    """Validates and is wrapped like the tool it stands for, and raises ``ToolInterrupted``."""

    def __init__(self, tool: FunctionTool) -> None:
        self.__dict__.update(tool.__dict__)
        self.is_async = True

    def bind_call(self, arguments: Any, context: Any) -> Callable[[], Any]:
        async def interrupted() -> None:
            raise ToolInterrupted(INTERRUPTED)

        return interrupted

"""One step of a run, carried out on a worker through the run seam every driver uses.

Theory of operation. A local run keeps its ``RunMachine`` and its loop in one process. On Temporal
the workflow keeps the machine, and each activity carries out one of its commands with the shared
steps of ``agentledger.run``: a ``RunSpec`` built by the agent (from the worker's registry), a
``RunBinding`` around a ``StepLog`` (the step's events are kept for the workflow, whose run
loop gives them their ``seq`` and ``at`` when it feeds them to its machine), the session rebuilt from the
state the workflow tracks, and then ``call_model`` or ``invoke_call``, the very functions the
local loop calls. A model step and the end of a run refold a machine from the stored log and ask
it: ``pending()`` is the model call to make, ``finish()`` records how the run ended.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentledger.agent import Agent
from agentledger.core.commands import CallModel, Phase
from agentledger.core.errors import TransitionError
from agentledger.core.events import Event, RunStarted, SessionUpdated, ToolSpec
from agentledger.core.loop import RunLoop, StepLog
from agentledger.core.machine import RunMachine
from agentledger.core.messages import Content
from agentledger.errors import AgentLedgerError
from agentledger.run import RunBinding, RunSpec, call_model, check_approvals, invoke_call
from agentledger.session import AgentSession
from agentledger.tools import FunctionTool

from .types import RunView, StartRequest, StepOutcome

__all__ = (
    "StepError",
    "ToolInterrupted",
    "ToolUnavailable",
    "UnsupportedAgent",
    "finish_events",
    "model_step",
    "started_events",
    "tool_step",
)


class StepError(AgentLedgerError):
    """The stored log does not match the step the workflow asks for."""


class UnsupportedAgent(AgentLedgerError):
    """The agent uses something a distributed run cannot carry out (agent middleware, context
    providers)."""


class ToolUnavailable(AgentLedgerError):
    """A run calls a tool the worker cannot find by name (see ``AgentRegistry`` extra_tools)."""


class ToolInterrupted(AgentLedgerError):
    """A tool call's worker stopped before its outcome was recorded; the call was not run again."""


INTERRUPTED = (
    "the worker running this call stopped before its outcome was recorded; "
    "the tool was not run again, so it may or may not have taken effect"
)


def run_spec(agent: Agent, view: RunView, tools: Sequence[FunctionTool] | None = None) -> RunSpec:
    """The run's spec as ``Agent.run`` builds it; ``tools`` are the run's live tools by name."""
    spec = agent.run_spec(
        options=view.options,
        function_invocation_kwargs=view.function_invocation_kwargs,
        client_kwargs=view.client_kwargs,
    )
    return (
        spec.replace(store=None, sinks=())
        if tools is None
        else spec.replace(tools=tuple(tools), store=None, sinks=())
    )


def _session(view: RunView) -> AgentSession | None:
    if view.session_id is None:
        return None
    session = AgentSession(view.session_id)
    session.history = list(view.history)
    session.state.reset(view.session_state)
    return session


def _outcome(binding: RunBinding, recorder: StepLog) -> StepOutcome:
    error = binding.error
    if error is None:
        return StepOutcome(events=tuple(recorder.events))
    return StepOutcome(
        events=tuple(recorder.events),
        error_type=type(error).__name__,
        error_message=str(error.__cause__ or error),
    )


def _no_time() -> int:
    """A step on a worker leaves time to the workflow, which stamps it when it feeds the events."""
    return 0


def _binding(spec: RunSpec, view: RunView) -> tuple[RunBinding, StepLog]:
    recorder = StepLog(view.run_id, _no_time)
    return RunBinding(spec, recorder, _session(view)), recorder


# -- the steps ------------------------------------------------------------------------------------


def started_events(agent: Agent, request: StartRequest) -> list[Event]:
    """``RunStarted``, then the caller's session writes made since the last run."""
    view = request.view
    spec = run_spec(agent, view)
    if spec.layers["agent"]:
        raise UnsupportedAgent(
            f"agent {view.agent!r} has agent middleware, which wraps a whole run in one "
            "process; on Temporal use function or chat middleware"
        )
    if spec.context_providers:
        raise UnsupportedAgent(
            f"agent {view.agent!r} has context providers, which run around a whole run in one "
            "process; on Temporal give the run its context as input messages and instructions"
        )
    check_approvals(view.history, request.messages, spec)
    # Numbered and checked by the run's owner, as every driver records: the workflow adopts them.
    owner = RunLoop(RunMachine(view.history), view.run_id, lambda: request.at)
    owner.record(
        RunStarted,
        **spec.started_fields(
            messages=request.messages, session_id=view.session_id, history_length=len(view.history)
        ),
    )
    for by, changes in request.pending:
        owner.record(SessionUpdated, session_id=view.session_id or "", by=by, changes=changes)
    return owner.log


def _refold(events: Sequence[Event], view: RunView) -> RunMachine:
    try:
        return RunMachine.from_events(events, view.history)
    except TransitionError as exc:
        raise StepError(f"the stored log of run {view.run_id} does not refold: {exc}") from exc


async def model_step(agent: Agent, view: RunView, events: Sequence[Event], iteration: int) -> StepOutcome:
    """Make model call ``iteration``: the call the machine refolded from the stored log waits on."""
    machine = _refold(events, view)
    command = machine.pending()
    if not isinstance(command, CallModel) or command.iteration != iteration:
        raise StepError(
            f"run {view.run_id}: the stored log is at {machine.phase.value}, iteration {machine.iteration}; "
            f"the workflow asks for model call {iteration}"
        )
    offered = [_offered(spec) for spec in machine.tools.specs.values()]
    binding, recorder = _binding(run_spec(agent, view, offered), view)
    with binding.bound():
        await call_model(binding, command)
    return _outcome(binding, recorder)


async def tool_step(
    agent: Agent,
    view: RunView,
    iteration: int,
    call: Content,
    tools: Sequence[FunctionTool],
    *,
    gated: bool = False,
    interrupted: bool = False,
    approved: bool = False,
) -> StepOutcome:
    """Run one call through the function middleware and the tool (or its interrupted stand-in).

    A ``gated`` call is not run: the outcome says whether it waits for approval (its arguments
    are valid); the workflow then holds the whole batch, or runs it, as a local run does.
    """
    name = call.name or ""
    if interrupted:
        tools = [t.with_body(_interrupted) if t.name == name else t for t in tools]
    binding, recorder = _binding(run_spec(agent, view, tools), view)
    function = binding.registry.by_name[name]
    if gated:  # only asked whether it waits for approval: nothing runs
        return StepOutcome(awaits_approval=binding.spec.awaits_approval(function, call))
    with binding.bound():
        await invoke_call(binding, iteration, call, function, approved=approved)
    return _outcome(binding, recorder)


def finish_events(events: Sequence[Event], view: RunView, at: int) -> list[Event]:
    """How the run ended, as the machine refolded from the stored log records it."""
    machine = _refold(events, view)
    started = events[0]
    if machine.phase is not Phase.FINISHING or not isinstance(started, RunStarted):
        raise StepError(f"run {view.run_id}: the stored log is at {machine.phase.value}, not finishing")
    return list(machine.finish(at)[0])


# -- stand-in tools -------------------------------------------------------------------------------


def _unused() -> None:
    """A tool known by its spec only: a model call needs no more."""


def _offered(spec: ToolSpec) -> FunctionTool:
    tool = FunctionTool(_unused, name=spec.name, description=spec.description, schema=spec.parameters)
    tool.spec = spec
    return tool


async def _interrupted(context: Any, arguments: Mapping[str, Any]) -> None:
    """Stands in for a call whose worker stopped before its outcome was recorded."""
    raise ToolInterrupted(INTERRUPTED)

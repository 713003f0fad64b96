"""Stand-ins for tools in a rerun: each call repeats its recorded effects and outcome."""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ..context import FunctionInvocationContext, RunContext, current_run_context
from ..core.events import (
    ApprovalResolved,
    ArgumentsRejected,
    ChildRunStarted,
    ContextProvided,
    Event,
    ModelCalled,
    ModelFailed,
    ModelResponded,
    RunStarted,
    RunTerminated,
    SessionUpdated,
    ToolCalled,
    ToolFailed,
    ToolReturned,
    ToolsAdded,
    ToolSpec,
    ToolsRemoved,
)
from ..errors import ApprovalError, ArgumentsError, MiddlewareTermination
from ..session import AgentSession
from ..subagents import AgentTool, running_children_with
from ..tools import FunctionTool
from .client import RecordedOutcome, ReplayExhausted
from .compare import call_of
from .findings import CallHow, ReplayedCall
from .state import RecordedRun

__all__ = ("RecordedTools", "apply_session", "approved_calls")


class RecordedTools:
    """Stand-ins that replay each call's recorded effects and outcome instead of running the tool."""

    def __init__(
        self,
        recorded: RecordedRun,
        upto: int | None,
        live: Sequence[FunctionTool],
        *,
        run_live: bool,
        run_approved: bool = False,
        ledger: list[ReplayedCall] | None = None,
    ) -> None:
        self.run_live = run_live
        self.live_rerun = run_live and upto is None
        """Every call runs its live tool (``tools="live"`` or ``"test"``), but for an approved one
        in ``"live"`` and a tool marked ``replay="recorded"``."""
        self.run_approved = run_approved and upto is None
        """``tools="test"``: an approved call runs the tool's current code too (a regression test
        of the gated tool); never in a fork."""
        self.ledger = ledger if ledger is not None else []
        """How each call was answered, in the order the calls started (``ReplayReport.calls``)."""
        self.effects: dict[str, list[Event]] = {}
        self.outcome: dict[str, Event] = {}
        self.terminations: dict[str, RunTerminated] = {}  # by the call that ended the run
        self.live = {t.name: t for t in live}
        self.upto = upto
        children = {e.child_run_id: e.call_id for e in recorded.events if type(e) is ChildRunStarted}
        for event in recorded.events:
            if type(event) is RunTerminated and event.by:
                self.terminations[event.by] = event
            call_id = call_of(event, children)
            if call_id is None:
                continue
            if type(event) in (ToolReturned, ToolFailed):
                self.outcome[call_id] = event
            elif type(event) is not ToolCalled:
                self.effects.setdefault(call_id, []).append(event)
        self.specs = {spec.name: spec for e in recorded.events for spec in _specs(e)}
        self.children = recorded.children
        self.refused = _refused(recorded.events)
        self.run_id = recorded.run_id
        self.approved = approved_calls(recorded.events)
        """Calls a human approved in the recorded run: an approval allows one execution, which
        the recorded run made, so a replay never runs them (a fork past them included)."""
        self.last_past = _last_past_iteration(recorded, upto) if upto is not None else 0
        """In a fork: the last model iteration answered from the log. A call of a later one was
        made by the fork's own model, whatever its id (a client that numbers its calls repeats
        the ids from before the point), so it runs live and never takes a recorded outcome."""

    def stand_in(self, name: str, *, live: FunctionTool | None = None) -> FunctionTool:
        """``name`` as the rerun calls it: the live tool's argument checks (the agent's tool of
        that name, or ``live``, one a provider offers now), the recorded outcome."""
        spec = self.specs.get(name)
        live = live if live is not None else self.live.get(name)

        async def replayed(ctx: FunctionInvocationContext, arguments: Mapping[str, Any]) -> Any:
            call_id = ctx.call_id or ""
            if self.upto is not None and ctx.iteration > self.last_past:
                # A call of the fork's own model: live, its sub-agents too (no child from the log).
                if live is None:
                    raise ReplayExhausted(_NO_BODY.format(name=name, call_id=call_id))
                self._note(ctx, name, _running(live))
                with running_children_with(None):
                    return await live.execute(arguments, ctx)
            if isinstance(live, AgentTool) and call_id in self.children:
                # A sub-agent whose run is in the log reruns (its tree answered from the log).
                self._note(ctx, name, "ran")
                return await live.execute(arguments, ctx)
            outcome = self.outcome.get(call_id)
            from_log = live is not None and live.replay == "recorded"
            if call_id in self.approved and not self.run_approved:  # its one execution was the recorded run's
                if outcome is None:
                    raise ApprovalError(
                        f"call {call_id} ({name}) was approved in run {self.run_id}, whose log holds "
                        "no outcome of it: it may have taken effect, so a replay or fork does not run "
                        "it again (a new approval, in a new run, can)"
                    )
            elif self.live_rerun and live is not None and not (from_log and outcome is not None):
                # Live tools: the body runs, as recorded or not (a double in its place, a tool
                # marked never to run refused when the log has nothing to answer with).
                self._note(ctx, name, _running(live))
                return await live.execute(arguments, ctx)
            elif outcome is None or (self.upto is not None and outcome.seq > self.upto):
                if live is None or not self.run_live:
                    raise ReplayExhausted(
                        f"no recorded outcome for call {call_id} and no live tool {name!r}"
                        + (_NO_BODY_HINT if live is None and self.run_live else "")
                    )
                self._note(ctx, name, _running(live))
                return await live.execute(arguments, ctx)
            self._note(ctx, name, "recorded")
            self._effects(ctx, call_id)
            if type(outcome) is ToolFailed:
                raise type(outcome.error_type, (RecordedOutcome,), {})(outcome.message)
            assert type(outcome) is ToolReturned
            value = outcome.tool_result if outcome.overridden_by else outcome.result
            if isinstance(value, dict | list | tuple):  # the rerun's own: the log's stays as it is
                value = copy.deepcopy(value)  # values kept as they are (tuples, NaN), unlike JSON
            ended = self.terminations.get(call_id)
            if ended is not None:  # the call ended the run: end it again, with the same answer
                raise MiddlewareTermination(ended.reason, result=value)
            return value

        if live is not None:
            return live.with_body(replayed)
        assert spec is not None, name
        stand_in = _LoggedTool(spec, self.refused.get(name, {}))
        return stand_in.with_body(replayed)

    def _note(self, ctx: FunctionInvocationContext, name: str, how: CallHow) -> None:
        call = ReplayedCall(run_id=ctx.run_id or self.run_id, call_id=ctx.call_id or "", tool=name, how=how)
        self.ledger.append(call)

    def _effects(self, ctx: FunctionInvocationContext, call_id: str) -> None:
        caller = current_run_context()
        for event in self.effects.get(call_id, []):
            if type(event) is SessionUpdated and ctx.session is not None:
                apply_session(ctx.session, event, caller)
            elif type(event) is ToolsAdded:
                ctx.add_tools([self.stand_in(spec.name) for spec in event.tools])
            elif type(event) is ToolsRemoved:
                ctx.remove_tools(list(event.names))
            elif type(event) is ChildRunStarted and caller is not None and caller.recorder is not None:
                fields = msgspec.structs.asdict(event)
                for key in ("run_id", "seq", "at"):
                    fields.pop(key)
                caller.record(ChildRunStarted, **fields)


def _running(live: FunctionTool) -> CallHow:
    """How a call that a replay runs is answered: by the tool's body, its double, or refused."""
    rule = live.replay
    return "double" if callable(rule) else ("refused" if rule == "recorded" else "ran")


_NO_BODY_HINT = (
    " (a tool added during the recorded run, by a tool, a provider or run(tools=...), is known "
    "to a replay by its spec only: give it to the agent's tools to run it)"
)
_NO_BODY = "call {call_id} of the fork's model: no live tool {name!r}" + _NO_BODY_HINT


def _last_past_iteration(recorded: RecordedRun, upto: int) -> int:
    """The last model iteration a fork at ``upto`` answers from the log (the client's answers,
    and chat middleware's, which the fork's middleware gives again); before the first answer,
    the iteration the run's first model call follows (a resumed batch's calls run at it), or
    every iteration when the log holds no model call (all of its calls are the past)."""
    past = recorded.events[: upto + 1]
    answered = [e.iteration for e in past if isinstance(e, ModelResponded | ModelFailed)]
    if answered:
        return max(answered)
    first = next((e.iteration for e in recorded.events if type(e) is ModelCalled), None)
    return first - 1 if first is not None else sys.maxsize


def approved_calls(events: Sequence[Event]) -> frozenset[str]:
    """The calls a human approved in a run's log (``ApprovalResolved`` with ``approved``)."""
    return frozenset(e.call_id for e in events if type(e) is ApprovalResolved and e.approved)


def _recorded(ctx: FunctionInvocationContext) -> None:
    """A tool known from the log only: its calls are answered from the log."""


class _LoggedTool(FunctionTool):
    """A tool known from the log only (added during the run, not among the agent's tools).

    Its recorded spec says little about what it accepted (a schema's ``required`` at most), so
    the arguments the log shows refused are refused again, with the recorded reason.
    """

    def __init__(self, spec: ToolSpec, refused: Mapping[bytes, str]) -> None:
        super().__init__(_recorded, name=spec.name, description=spec.description, schema=spec.parameters)
        self.spec = spec  # the recorded spec, its approval mode included
        self.refused = refused

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        reason = self.refused.get(_key(arguments))
        if reason is not None:
            raise ArgumentsError(reason)
        return super().validate(arguments)


def _key(arguments: Mapping[str, Any]) -> bytes:
    return msgspec.json.encode(arguments, order="sorted")


def _refused(events: Sequence[Event]) -> dict[str, dict[bytes, str]]:
    """By tool name: the arguments of each call the log shows refused, and the reason."""
    sent = {
        call.call_id: call.arguments
        for event in events
        if type(event) is ModelResponded
        for call in event.message.function_calls
    }
    refused: dict[str, dict[bytes, str]] = {}
    for event in events:
        if type(event) is not ArgumentsRejected:
            continue
        raw = sent.get(event.call_id)
        try:
            arguments = msgspec.json.decode(raw) if isinstance(raw, str | bytes) else raw
        except msgspec.DecodeError:
            continue  # not JSON: any stand-in refuses it as it is
        if isinstance(arguments, dict):
            refused.setdefault(event.name, {})[_key(arguments)] = event.reason
    return refused


def apply_session(session: AgentSession, event: SessionUpdated, caller: RunContext | None) -> None:
    """Re-make a recorded session write: its own writes by value, sub-agent copies by record."""
    if event.origin_run_id is None:
        for change in event.changes:
            if change.op == "set":  # a copy: the live value must not share containers with the log
                session.state[change.key] = copy.deepcopy(change.value)
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


def _specs(event: Event) -> tuple[ToolSpec, ...]:
    if type(event) is RunStarted:
        return event.tools
    if type(event) is ToolsAdded or type(event) is ContextProvided:
        return event.tools
    return ()

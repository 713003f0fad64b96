"""A short, readable timeline of a run's events (the demo, the CLI and tests use it)."""

from __future__ import annotations

from collections.abc import Iterable

from .core.events import (
    ApprovalRequested,
    ApprovalResolved,
    ArgumentsRejected,
    BatchClaimed,
    BatchResumed,
    CallsSkipped,
    ChildRunStarted,
    ContextProvided,
    Event,
    IterationLimitReached,
    MiddlewareShortCircuit,
    ModelCalled,
    ModelFailed,
    ModelRequestRewritten,
    ModelResponded,
    RunCompleted,
    RunFailed,
    RunInputRewritten,
    RunStarted,
    RunTerminated,
    SessionUpdated,
    ToolCalled,
    ToolChoiceReset,
    ToolFailed,
    ToolNotFound,
    ToolReturned,
    ToolsAdded,
    ToolsRemoved,
)
from .core.messages import result_text
from .runtree import check_run_tree, group_runs

__all__ = ("describe", "timeline")


def _provided(event: ContextProvided) -> str:
    parts = [
        f"{len(items)} {label}{'s' if len(items) != 1 else ''}"
        for label, items in (
            ("message", event.messages),
            ("instruction", event.instructions),
            ("tool", event.tools),
            ("middleware", event.middleware),
        )
        if items
    ]
    return ", ".join(parts) or "nothing"


def _short(value: object, limit: int = 60) -> str:
    text = value if isinstance(value, str) else result_text(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(event: Event) -> str:
    """One line saying what ``event`` records."""
    match event:
        case RunStarted():
            parent = (
                f" (child of {event.parent_run_id}/{event.parent_call_id})" if event.parent_run_id else ""
            )
            names = [t.name for t in event.tools]
            return f"run started: agent {event.agent_name or event.agent_id}, tools {names}{parent}"
        case RunInputRewritten():
            return f"input rewritten by {event.by}"
        case ContextProvided():
            return f"context from {event.provider}: {_provided(event)}"
        case ModelCalled():
            choice = f", tool_choice={event.tool_choice}" if event.tool_choice is not None else ""
            return f"model call {event.iteration}: offered {list(event.tools)}{choice}"
        case ModelResponded():
            calls = [f"{c.name}({c.arguments or ''})" for c in event.message.function_calls]
            return (
                f"model answered: {', '.join(calls)}"
                if calls
                else f"model answered: {_short(event.message.text)!r}"
            )
        case ModelRequestRewritten():
            sent = f"{len(event.messages)} messages, tools {list(event.tools)}"
            return f"model call {event.iteration} rewritten by {event.by}: {sent}"
        case CallsSkipped():
            return f"calls dropped at the {event.reason} limit: {list(event.call_ids)}"
        case ModelFailed():
            return f"model failed: {event.error_type}: {event.message}"
        case ToolCalled():
            return f"tool {event.name} called with {_short(event.arguments)}"
        case ToolReturned():
            by = f" (result replaced by {event.overridden_by})" if event.overridden_by else ""
            return f"tool {event.name} returned {_short(event.result)!r}{by}"
        case ToolFailed():
            return f"tool {event.name} failed: {event.error_type}: {event.message}"
        case ArgumentsRejected():
            return f"arguments for {event.name} rejected: {_short(event.reason, 80)}"
        case ToolNotFound():
            return f"unknown tool {event.name!r} ({event.reason})"
        case MiddlewareShortCircuit():
            target = {"call": f"call {event.call_id}", "model": "the model call", "run": "the run"}[
                event.scope
            ]
            return f"middleware {event.middleware} answered for {target}: {_short(event.result)!r}"
        case ToolsAdded():
            return f"tools added: {[t.name for t in event.tools]}"
        case ToolsRemoved():
            return f"tools removed: {list(event.names)}"
        case ToolChoiceReset():
            return f"tool_choice reset (was {event.previous})"
        case SessionUpdated():
            changes = ", ".join(
                f"{c.key}={_short(c.value, 30)}" if c.op == "set" else f"-{c.key}" for c in event.changes
            )
            return f"session updated by {event.by}: {changes}"
        case ChildRunStarted():
            shared = ", sharing the session" if event.propagate_session else ""
            return f"call {event.call_id} started sub-agent run {event.child_run_id}{shared}"
        case ApprovalRequested():
            return f"approval requested for {list(event.call_ids)}"
        case BatchResumed():
            return f"paused batch resumed: {list(event.call_ids)}"
        case BatchClaimed():
            return f"paused batch claimed by run {event.by_run_id}"
        case ApprovalResolved():
            said = f": {event.reason}" if event.reason else ""
            return f"call {event.call_id} {'approved' if event.approved else 'rejected'}{said}"
        case IterationLimitReached():
            return f"limit reached: {event.reason} = {event.limit}"
        case RunTerminated():
            return f"run terminated by {event.by or 'middleware'}: {event.reason}"
        case RunCompleted():
            return f"run completed ({event.reason}): {_short(event.text)!r}"
        case RunFailed():
            return f"run failed: {event.error_type}: {event.message}"
    return type(event).__name__  # type: ignore[unreachable]  # every event type is matched


def timeline(events: Iterable[Event]) -> str:
    """The events as numbered lines; sub-agent runs are nested under the call that started them
    (runs linked into a cycle raise ``RunCycleError``)."""
    runs = group_runs(events)
    check_run_tree(runs)
    roots = [run_id for run_id, log in runs.items() if _parent(log) not in runs]
    lines: list[str] = []
    for run_id in roots:
        _render(run_id, runs, lines, depth=0, many=len(runs) > 1)
    return "\n".join(lines)


def _parent(log: list[Event]) -> str | None:
    first = log[0]
    return first.parent_run_id if type(first) is RunStarted else None


def _render(run_id: str, runs: dict[str, list[Event]], lines: list[str], depth: int, many: bool) -> None:
    indent = "    " * depth
    if many:
        lines.append(f"{indent}run {run_id}")
    for event in runs[run_id]:
        lines.append(f"{indent}{event.seq:>3}  {describe(event)}")
        if type(event) is ChildRunStarted and event.child_run_id in runs:
            _render(event.child_run_id, runs, lines, depth + 1, many)

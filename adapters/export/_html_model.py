"""What the viewer page embeds: the runs' events, their links, and the state after each event.

Events are written as the log holds them (``msgspec.to_builtins``), except that without
``include_content`` the content they carry (message texts, call arguments, results, error
messages, instructions, session values, the recorded ``function_invocation_kwargs`` values) is
replaced by ``HIDDEN``. Content is recognised by field name in every event type, so an event
type added later is covered when its fields follow the catalogue's names. Keys, names, ids, tool
specs and counts stay.

Each run's states come from a ``RecordedRun`` of that run. A sub-agent's run gets, as its prior
log, its caller's prior log and the caller's events up to the ``ChildRunStarted`` that started it,
so a child that shares its caller's session sees the state the caller had written so far.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentledger import __version__
from agentledger.core.events import ChildRunStarted, Event, RunStarted, to_plain
from agentledger.replay import RecordedRun
from agentledger.runtree import check_run_tree, group_runs

from ._html_states import Scrub, compact_states

__all__ = ("HIDDEN", "build_payload", "recorded_runs")

HIDDEN = "[hidden]"
_CONTENT_KEYS = ("text", "arguments", "result", "exception")


def _hide(value: Any) -> Any:
    return None if value is None else HIDDEN


def _hide_content(content: dict[str, Any]) -> dict[str, Any]:
    return {k: _hide(v) if k in _CONTENT_KEYS else v for k, v in content.items()}


def _hide_message(message: dict[str, Any]) -> dict[str, Any]:
    return {**message, "contents": [_hide_content(c) for c in message.get("contents", [])]}


def _hide_values(mapping: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if mapping is None else {k: _hide(v) for k, v in mapping.items()}


def _hide_options(options: dict[str, Any]) -> dict[str, Any]:
    return {k: _hide(v) if "instructions" in k else v for k, v in options.items()}


def _hide_changes(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**c, "value": _hide(c.get("value"))} if c.get("op") == "set" else c for c in changes]


def _hide_said(value: Any) -> Any:
    """A ``message`` field: a whole chat message, or an error message."""
    return _hide_message(value) if isinstance(value, dict) else _hide(value)


_HIDE_FIELDS: dict[str, Any] = {
    "instructions": _hide,
    "messages": lambda ms: [_hide_message(m) for m in ms],
    "message": _hide_said,
    "text": _hide,
    "options": _hide_options,
    "function_invocation_kwargs": _hide_values,
    "arguments": _hide_values,
    "result": _hide,
    "tool_result": _hide,
    "changes": _hide_changes,
}
"""Fields that carry what was said, by name, in any event type (new event types included)."""

_HIDE_BY_TYPE: dict[str, dict[str, Any]] = {"ArgumentsRejected": {"reason": _hide}}
"""Fields whose name alone does not say they carry content."""


def _hide_event(data: dict[str, Any]) -> dict[str, Any]:
    hiders = {**_HIDE_FIELDS, **_HIDE_BY_TYPE.get(data["type"], {})}
    return {k: hiders[k](v) if k in hiders else v for k, v in data.items()}


def _hide_pooled(kind: str, value: Any) -> Any:
    if kind == "message":
        return _hide_message(value)
    if kind == "content":
        return _hide_content(value)
    if kind == "value":
        return _hide(value)
    return value


def _keep_pooled(kind: str, value: Any) -> Any:
    return value


def _group(events: Sequence[Event]) -> dict[str, list[Event]]:
    runs = group_runs(events)
    for log in runs.values():
        log.sort(key=lambda e: e.seq)
    check_run_tree(runs)  # the page walks parent links and children: a cycle is refused here
    return runs


def _parent(log: Sequence[Event]) -> tuple[str | None, str | None]:
    first = log[0]
    if type(first) is RunStarted:
        return first.parent_run_id, first.parent_call_id
    return None, None


def recorded_runs(events: Sequence[Event], prior: Sequence[Event] = ()) -> dict[str, RecordedRun | None]:
    """A ``RecordedRun`` per run in ``events`` (None for a log that does not start with RunStarted)."""
    runs = _group(events)
    recorded: dict[str, RecordedRun | None] = {}

    def prior_of(run_id: str) -> list[Event]:
        parent_id, _ = _parent(runs[run_id])
        if parent_id is None or parent_id not in runs:
            return list(prior)
        parent_log = runs[parent_id]
        cut = next(
            (i for i, e in enumerate(parent_log) if type(e) is ChildRunStarted and e.child_run_id == run_id),
            len(parent_log) - 1,
        )
        return prior_of(parent_id) + parent_log[: cut + 1]

    for run_id, log in runs.items():
        starts = type(log[0]) is RunStarted and log[0].seq == 0
        recorded[run_id] = RecordedRun(log, prior=prior_of(run_id)) if starts else None
    return recorded


def _run_payload(log: list[Event], recorded: RecordedRun | None, include_content: bool) -> dict[str, Any]:
    first = log[0]
    started = first if type(first) is RunStarted else None
    scrub: Scrub = _keep_pooled if include_content else _hide_pooled
    events = [to_plain(e) for e in log]
    return {
        "id": first.run_id,
        "agent": (started.agent_name or started.agent_id) if started else None,
        "parent_run_id": started.parent_run_id if started else None,
        "parent_call_id": started.parent_call_id if started else None,
        "events": events if include_content else [_hide_event(e) for e in events],
        "states": compact_states(recorded, scrub) if recorded is not None else None,
    }


def build_payload(
    events: Sequence[Event], *, prior: Sequence[Event], title: str | None, include_content: bool
) -> dict[str, Any]:
    """The JSON document the page embeds."""
    if not events:
        raise ValueError("render_html needs the events of at least one run")
    runs = _group(events)
    recorded = recorded_runs(events, prior)
    roots = [rid for rid, log in runs.items() if _parent(log)[0] not in runs]
    root = runs[roots[0]]
    if title is None:
        agent = root[0].agent_name or root[0].agent_id if type(root[0]) is RunStarted else None
        title = f"{agent} · {roots[0]}" if agent else f"run {roots[0]}"
    return {
        "title": title,
        "generator": f"agentledger {__version__}",
        "content": include_content,
        "hidden": HIDDEN,
        "roots": roots,
        "runs": {rid: _run_payload(log, recorded[rid], include_content) for rid, log in runs.items()},
    }

"""Rendering of runs for ``agentledger show``: a rich tree, plain text, or a JSON document.

A run is drawn as a tree: one branch per model call (iteration) with the tools offered and the
tool_choice, under it the model's answer, each call with its outcome, short-circuits, tool list
and session changes; a sub-agent's run hangs under the call that started it. Plain text (for a
pipe or a file) is the same tree indented by two spaces a level, without colour or guide lines.
The JSON document holds each run with its events described, sub-agent runs under ``children``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .core.events import (
    ChildRunStarted,
    Event,
    ModelCalled,
    RunCompleted,
    RunFailed,
    RunStarted,
    SessionUpdated,
    ToolFailed,
    ToolReturned,
    ToolsAdded,
    ToolsRemoved,
)
from .runtree import check_run_tree, group_runs
from .timeline import describe

__all__ = ("plain_run", "render_run", "run_document")

_STYLE: dict[type, str] = {
    ModelCalled: "bold cyan",
    ToolReturned: "green",
    ToolFailed: "red",
    RunFailed: "bold red",
    RunCompleted: "bold green",
    SessionUpdated: "magenta",
    ToolsAdded: "yellow",
    ToolsRemoved: "yellow",
}


def render_run(events: Sequence[Event]) -> Any:
    """A ``rich`` renderable of the runs in ``events`` (sub-agent runs nested)."""
    from rich.text import Text
    from rich.tree import Tree

    return _tree(events, Tree, Text)


def plain_run(events: Sequence[Event]) -> str:
    """The tree of ``render_run`` as plain text: two spaces of indent a level, no colour."""
    lines: list[str] = []
    _PlainNode.write(_tree(events, _PlainNode, _plain_text), 0, lines)
    return "\n".join(lines)


def run_document(events: Sequence[Event]) -> list[dict[str, Any]]:
    """The runs in ``events`` as JSON-ready dicts: top-level runs, each with ``children``."""
    from .listing import summarize

    runs = _by_run(events)

    def document(run_id: str) -> dict[str, Any]:
        log = runs[run_id]
        summary = summarize(log[0], log[-1])
        children = [e.child_run_id for e in log if isinstance(e, ChildRunStarted) and e.child_run_id in runs]
        return {
            "run_id": run_id,
            "agent": summary.agent if summary else None,
            "session_id": summary.session_id if summary else None,
            "parent_run_id": summary.parent_run_id if summary else None,
            "outcome": summary.outcome if summary else None,
            "resumed_by": summary.resumed_by if summary else None,
            "events": [
                {"seq": e.seq, "type": type(e).__name__, "at": e.at, "description": describe(e)} for e in log
            ],
            "children": [document(child) for child in children],
        }

    return [document(run_id) for run_id in _roots(runs)]


def _by_run(events: Sequence[Event]) -> dict[str, list[Event]]:
    runs = group_runs(events)
    check_run_tree(runs)
    return runs


def _roots(runs: dict[str, list[Event]]) -> list[str]:
    return [rid for rid, log in runs.items() if not _parent(log) or _parent(log) not in runs]


def _tree(events: Sequence[Event], tree_type: Any, text_type: Any) -> Any:
    runs = _by_run(events)
    roots = _roots(runs)
    top = tree_type(text_type("runs", style="bold")) if len(roots) != 1 else None
    trees = [_run_tree(rid, runs, tree_type, text_type) for rid in roots]
    if top is None:
        return trees[0]
    for tree in trees:
        top.add(tree)
    return top


def _plain_text(text: str, style: str = "") -> str:
    return text


class _PlainNode:
    """A node of a plain-text tree, with the part of ``rich.tree.Tree`` that ``_run_tree`` uses."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.children: list[_PlainNode] = []

    def add(self, label: str | _PlainNode) -> _PlainNode:
        node = label if isinstance(label, _PlainNode) else _PlainNode(label)
        self.children.append(node)
        return node

    def write(self, depth: int, lines: list[str]) -> None:
        lines.append("  " * depth + self.label)
        for child in self.children:
            child.write(depth + 1, lines)


def _parent(log: list[Event]) -> str | None:
    first = log[0]
    return first.parent_run_id if isinstance(first, RunStarted) else None


def _line(event: Event, text_type: Any) -> Any:
    return text_type(f"{event.seq:>3}  {describe(event)}", style=_STYLE.get(type(event), ""))


def _run_tree(run_id: str, runs: dict[str, list[Event]], tree_type: Any, text_type: Any) -> Any:
    log = runs[run_id]
    first = log[0]
    label = f"run {run_id}"
    if isinstance(first, RunStarted):
        label += f" · agent {first.agent_name or first.agent_id}"
        if first.session_id:
            label += f" · session {first.session_id}"
    tree = tree_type(text_type(label, style="bold"))
    branch = tree
    for event in log:
        if isinstance(event, ModelCalled):
            branch = tree.add(_line(event, text_type))
            continue
        node = branch.add(_line(event, text_type))
        if isinstance(event, ChildRunStarted) and event.child_run_id in runs:
            node.add(_run_tree(event.child_run_id, runs, tree_type, text_type))
        if isinstance(event, RunCompleted | RunFailed):
            branch = tree
    return tree

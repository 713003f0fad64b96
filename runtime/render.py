"""Rich rendering of runs for the terminal (``agentledger show``).

A run is drawn as a tree: one branch per model call (iteration) with the tools offered and the
tool_choice, under it the model's answer, each call with its outcome, short-circuits, tool list
and session changes; a sub-agent's run hangs under the call that started it.
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
from .timeline import describe

__all__ = ("render_run",)

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

    runs: dict[str, list[Event]] = {}
    for event in events:
        runs.setdefault(event.run_id, []).append(event)
    roots = [rid for rid, log in runs.items() if not _parent(log) or _parent(log) not in runs]
    top = Tree(Text("runs", style="bold")) if len(roots) != 1 else None
    trees = [_run_tree(rid, runs, Tree, Text) for rid in roots]
    if top is None:
        return trees[0]
    for tree in trees:
        top.add(tree)
    return top


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

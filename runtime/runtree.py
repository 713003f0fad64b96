"""Run trees: runs linked to the sub-agent runs they started, checked before anything walks them.

A run names a sub-agent run twice: the caller's ``ChildRunStarted`` names the child, and the
child's ``RunStarted`` names its parent. Logs are untrusted input: two id sources that both count
from 1 can make a run name itself as its own sub-agent, and a damaged or hand-edited store can
link runs into a ring. Every reader that walks a tree (``timeline``, ``show``, ``view``, the
exports) checks the links first, and refuses a cycle with ``RunCycleError`` instead of walking
it for ever.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from .core.events import ChildRunStarted, Event, RunStarted
from .errors import RunCycleError

__all__ = ("check_run_tree", "group_runs")


def group_runs(events: Iterable[Event]) -> dict[str, list[Event]]:
    """The events by run id, each run's in the order given, runs in the order first seen."""
    runs: dict[str, list[Event]] = {}
    for event in events:
        runs.setdefault(event.run_id, []).append(event)
    return runs


def check_run_tree(runs: Mapping[str, Sequence[Event]]) -> None:
    """Raise ``RunCycleError`` if the runs (grouped by run id) link into a cycle.

    A link goes from a run to each run its ``ChildRunStarted`` events name, and from the run its
    ``RunStarted`` names as parent to that run; links to runs not among ``runs`` are ignored.
    """
    links: dict[str, list[str]] = {run_id: [] for run_id in runs}
    for run_id, log in runs.items():
        for event in log:
            if type(event) is ChildRunStarted and event.child_run_id in runs:
                links[run_id].append(event.child_run_id)
        first = log[0] if log else None
        if type(first) is RunStarted and first.parent_run_id is not None and first.parent_run_id in runs:
            links[first.parent_run_id].append(run_id)
    done: set[str] = set()
    for root in links:
        if root in done:
            continue
        path = [root]  # the runs being walked, root first
        on_path = {root}
        pending = [iter(links[root])]
        while pending:
            child = next(pending[-1], None)
            if child is None:
                pending.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                continue
            if child in on_path:
                raise RunCycleError((*path[path.index(child) :], child))
            if child in done:
                continue
            path.append(child)
            on_path.add(child)
            pending.append(iter(links[child]))

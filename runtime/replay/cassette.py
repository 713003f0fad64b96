"""Cassettes: a recorded run tree in one file, to replay in a test.

A cassette is a JSON Lines file, one event a line, as ``agentledger export`` writes them: the
lead run's events, then each sub-agent run's, depth first in the order the lead called them,
then (when the lead continued a session) the session's earlier runs, which a replay rebuilds
the session from (``RecordedRun.prior``).
It holds what a log holds, redacted as every artefact is (``redact_events``: credentials by
their shape, values under secret-named keys), so it can be read in a pull request and checked in
beside the test. A replay against a cassette compares both sides as redacted (see
``agentledger.replay.compare.differences``): a value the cassette holds as ``[redacted]``
matches a rerun's value that redacts to it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import msgspec

from ..core.events import ChildRunStarted, Event, RunStarted, SessionUpdated, decode_event, encode_event
from ..errors import LogCorruptError, RunCycleError
from ..redaction import redact_event
from .state import RecordedRun

__all__ = ("read_cassette", "tree_events", "tree_of", "write_cassette")


def tree_events(recorded: RecordedRun, *, with_prior: bool = False) -> list[Event]:
    """The events of ``recorded`` and of every sub-agent run below it, lead first, depth first;
    with ``with_prior``, then the session's earlier runs (``recorded.prior``)."""
    events = [event for _, run in recorded.walk() for event in run.events]
    return [*events, *recorded.prior] if with_prior else events


def tree_of(events: Iterable[Event], run_id: str) -> RecordedRun:
    """The run tree of ``run_id`` among ``events`` (those of several runs, in any interleaving,
    as ``capture_events`` collects them)."""
    logs: dict[str, list[Event]] = {}
    for event in events:
        logs.setdefault(event.run_id, []).append(event)
    if run_id not in logs:
        raise LogCorruptError(f"no events of run {run_id!r}", where="the events given")
    return _tree(logs, run_id, (), "the events given")


def write_cassette(path: str | os.PathLike[str], events: Iterable[Event]) -> Path:
    """Write ``events`` (a run tree's) to ``path`` as a cassette, atomically, each as
    ``redact_event`` gives it; return the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    with partial.open("wb") as out:
        for event in events:
            out.write(encode_event(redact_event(event)) + b"\n")
    partial.replace(target)
    return target


def read_cassette(path: str | os.PathLike[str]) -> RecordedRun:
    """The run tree a cassette holds: its lead run (the first line's), with every sub-agent run
    as its children and the session's earlier runs it holds as ``prior``.

    ``LogCorruptError`` (naming the file and line) for a line that is no event, a run whose
    events are out of order, a file with no run, a tree that loops, or a run besides the tree
    that is not of the lead's session.
    """
    source = Path(path)
    logs: dict[str, list[Event]] = {}
    with source.open("rb") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                event = decode_event(line)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise LogCorruptError(f"not an event: {exc}", where=f"{source}:{number}") from exc
            log = logs.setdefault(event.run_id, [])
            if event.seq != len(log):
                what = f"run {event.run_id!r}: seq {event.seq} where {len(log)} was due"
                raise LogCorruptError(what, where=f"{source}:{number}")
            log.append(event)
    if not logs:
        raise LogCorruptError("a cassette holds one run tree, not 0", where=str(source))
    lead = next(iter(logs))
    tree = _tree(logs, lead, (), str(source))
    in_tree = {run.run_id for _, run in tree.walk()}
    rest = [run_id for run_id in logs if run_id not in in_tree]
    session_id = tree.started.session_id
    for run_id in rest:
        first = logs[run_id][0]
        if session_id is None or not _of_session(logs[run_id], session_id):
            starts = [logs[r][0] for r in rest]
            tops = 1 + sum(1 for e in starts if isinstance(e, RunStarted) and e.parent_run_id is None)
            what = f"a cassette holds one run tree (and its session's earlier runs), not {tops}"
            raise LogCorruptError(what, where=f"{source}: run {first.run_id!r}")
    if rest:
        prior = [event for run_id in rest for event in logs[run_id]]
        tree = RecordedRun(tree.events, prior=prior, children=tree.children)
    return tree


def _of_session(log: Sequence[Event], session_id: str) -> bool:
    """Whether a run's log is one of the session's: started in it, or writing its state."""
    first = log[0]
    if isinstance(first, RunStarted) and first.session_id == session_id:
        return True
    return any(type(e) is SessionUpdated and e.session_id == session_id for e in log)


def _tree(logs: dict[str, list[Event]], run_id: str, above: Sequence[str], where: str) -> RecordedRun:
    log = logs[run_id]
    if not isinstance(log[0], RunStarted):
        raise LogCorruptError(f"run {run_id!r} does not start with RunStarted", where=where)
    children: dict[str, RecordedRun] = {}
    for event in log:
        if type(event) is not ChildRunStarted or event.child_run_id not in logs:
            continue
        lineage = (*above, run_id)
        if event.child_run_id in lineage:
            raise RunCycleError((*lineage[lineage.index(event.child_run_id) :], event.child_run_id))
        children[event.call_id] = _tree(logs, event.child_run_id, (*above, run_id), where)
    return RecordedRun(log, children=children)

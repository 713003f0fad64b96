"""Cassettes: a recorded run tree in one file, to replay in a test.

A cassette is a JSON Lines file, one event a line, as ``agentledger export`` writes them: the
lead run's events, then each sub-agent run's, depth first in the order the lead called them.
It holds what a log holds, redacted as the log is (``client_kwargs`` values are never recorded,
``function_invocation_kwargs`` pass the agent's redaction policy), so it can be read in a pull
request and checked in beside the test.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import msgspec

from ..core.events import ChildRunStarted, Event, RunStarted, decode_event, encode_event
from ..errors import LogCorruptError, RunCycleError
from .state import RecordedRun

__all__ = ("read_cassette", "tree_events", "tree_of", "write_cassette")


def tree_events(recorded: RecordedRun) -> list[Event]:
    """The events of ``recorded`` and of every sub-agent run below it, lead first, depth first."""
    return [event for _, run in recorded.walk() for event in run.events]


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
    """Write ``events`` (a run tree's) to ``path`` as a cassette, atomically; return the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    with partial.open("wb") as out:
        for event in events:
            out.write(encode_event(event) + b"\n")
    partial.replace(target)
    return target


def read_cassette(path: str | os.PathLike[str]) -> RecordedRun:
    """The run tree a cassette holds: its lead run, with every sub-agent run as its children.

    ``LogCorruptError`` (naming the file and line) for a line that is no event, a run whose
    events are out of order, a file with no run or a tree that loops.
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
    leads = [
        run_id
        for run_id, log in logs.items()
        if isinstance(log[0], RunStarted) and log[0].parent_run_id not in logs
    ]
    if len(leads) != 1:
        raise LogCorruptError(f"a cassette holds one run tree, not {len(leads)}", where=str(source))
    return _tree(logs, leads[0], (), str(source))


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

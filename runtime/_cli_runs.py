"""The parts of the ``agentledger`` command that find runs: ``runs``, and run ids given by prefix.

``runs`` asks the store for summaries (``agentledger.store.list_runs``: two records a stream in
the stores that offer it) of every stream, newest first, and filters and limits them; a stream
that is no readable run (its log does not decode, or it does not begin with ``RunStarted``) is
listed in its place as damaged, with why, whatever the filters (what it holds cannot be
filtered), rather than hidden. It prints a table on a terminal, aligned plain text on a pipe or
a file, and one JSON object per line with ``--json``.
A run id on the command line may be any unique prefix of one; an ambiguous prefix is an error
that lists a few of the runs it matches.
"""

from __future__ import annotations

import datetime
import re
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import msgspec

from ._cli_checks import UsageError
from .errors import RunNotFoundError, UnreadableStreamWarning
from .listing import DamagedStream, RunQuery, RunSummary, damaged_streams, select
from .store import EventStore, list_runs

__all__ = ("list_entries", "parse_since", "print_runs", "print_table", "resolve_run")

Entry = RunSummary | DamagedStream


async def list_entries(store: EventStore, query: RunQuery) -> list[Entry]:
    """The runs ``query`` selects, and among them, in their places (newest first), the damaged
    streams as new as the oldest of them (any, when the limit did not cut the list short)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnreadableStreamWarning)  # each is a row of its own
        every = await list_runs(store, RunQuery(limit=None))
    runs = select(every, query)
    damaged = await damaged_streams(store, every)
    if not damaged:
        return list(runs)
    order = {name: index for index, name in enumerate(reversed(await store.streams()))}
    cut = query.limit is not None and len(runs) >= query.limit
    last = order.get(runs[-1].run_id, len(order)) if cut and runs else len(order)
    entries: list[Entry] = [*runs, *(d for d in damaged if order.get(d.stream, 0) <= last)]
    return sorted(
        entries, key=lambda e: order.get(e.stream if isinstance(e, DamagedStream) else e.run_id, -1)
    )


_SHOWN = 5
_DURATION = re.compile(r"^(\d+)\s*([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_COLUMNS = ("run", "started (UTC)", "agent", "session", "events", "outcome", "answer")


async def resolve_run(store: EventStore, given: str) -> str:
    """The run ``given`` names: itself if the store has it, else the one run it is a prefix of.

    An empty id names no run (as a prefix it would name any run of a store holding one)."""
    if not given:
        raise UsageError("the run id is empty: give a run id (or a prefix of one), as `runs` lists them")
    names = await store.streams()
    if given in names:
        return given
    matches = [name for name in names if name.startswith(given)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise RunNotFoundError(given)
    shown = ", ".join(matches[:_SHOWN]) + (", ..." if len(matches) > _SHOWN else "")
    raise UsageError(f"run id prefix {given!r} matches {len(matches)} runs: {shown}; give more of the id")


def parse_since(text: str, now: datetime.datetime | None = None) -> int:
    """``--since``: a duration back from now (``90s``, ``15m``, ``2h``, ``7d``, ``1w``) or a UTC date
    or time (``2025-05-01``, ``2025-05-01T12:00``, with an offset if not UTC); nanoseconds."""
    now = now or datetime.datetime.now(datetime.UTC)
    match = _DURATION.match(text.strip())
    if match:
        moment = now - datetime.timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])
    else:
        try:
            moment = datetime.datetime.fromisoformat(text.strip())
        except ValueError:
            raise UsageError(
                f"--since must be a duration such as 2h or 7d, or a date such as 2025-05-01, not {text!r}"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def _utc(ns: int) -> datetime.datetime | None:
    """The moment ``ns`` nanoseconds after the epoch; ``None`` for a time no date can hold."""
    try:
        when = datetime.datetime.fromtimestamp(ns // 1_000_000_000, datetime.UTC)
        return when.replace(microsecond=ns % 1_000_000_000 // 1000)
    except (OverflowError, OSError, ValueError):
        return None


def _started(run: RunSummary) -> str:
    when = _utc(run.started_at)
    return when.strftime("%Y-%m-%d %H:%M:%S") if when else "?"


def _outcome(run: RunSummary) -> str:
    if run.resumed_by is not None:
        return f"resumed by {run.resumed_by}"
    if run.outcome in ("completed", "awaiting_approval"):
        return run.reason
    if run.outcome == "failed":
        return f"failed: {run.reason}"
    return "running or interrupted"


def _row(run: Entry) -> list[str]:
    if isinstance(run, DamagedStream):
        return [run.stream, "?", "?", "", "?", f"damaged: {run.reason}", ""]
    answer = " ".join(run.answer.split())
    return [
        run.run_id + (f" <- {run.parent_run_id}" if run.parent_run_id else ""),
        _started(run),
        run.agent,
        run.session_id or "",
        str(run.events),
        _outcome(run),
        answer if len(answer) <= 50 else answer[:49] + "…",
    ]


def print_runs(runs: Sequence[Entry], *, as_json: bool, console: Any) -> None:
    """Print ``runs``: JSON lines, a table on a terminal, or aligned plain text; a damaged stream
    with the outcome ``damaged`` and why."""
    out = sys.stdout
    if as_json:
        for run in runs:
            document = (
                {"run_id": run.stream, "outcome": "damaged", "reason": run.reason}
                if isinstance(run, DamagedStream)
                else msgspec.to_builtins(run) | {"started": _iso(run)}
            )
            out.write(msgspec.json.encode(document).decode() + "\n")
        return
    print_table(_COLUMNS, [_row(run) for run in runs], console=console)


def print_table(columns: Sequence[str], rows: Sequence[Sequence[str]], *, console: Any) -> None:
    """A table on a terminal (rich), aligned plain text on a pipe; the first column unwrapped."""
    if console.is_terminal:
        from rich.table import Table

        table = Table(*columns)
        table.columns[0].no_wrap = True
        for row in rows:
            table.add_row(*row)
        console.print(table)
        return
    widths = [max([len(c), *(len(row[i]) for row in rows)]) for i, c in enumerate(columns)]
    for row in [list(columns), *rows]:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        sys.stdout.write("  ".join(cells).rstrip() + "\n")


def _iso(run: RunSummary) -> str | None:
    when = _utc(run.started_at)
    return when.isoformat() if when else None

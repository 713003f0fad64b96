"""``agentledger approvals``: the calls that wait for a person's answer, across a store's runs.

A run that paused for approval ends with ``RunCompleted`` (reason ``awaiting_approval``) and no
later ``BatchClaimed``: the store lists such runs (``RunQuery(outcome="awaiting_approval")``), and
each one's log gives its waiting calls (``agentledger.core.paused_batch``): the call id, the tool,
the arguments the model sent and when the run paused. A table on a terminal, aligned plain text
on a pipe, one JSON object per call with ``--json``.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Callable
from typing import Any

import anyio
import msgspec

from ._cli_runs import print_table
from .core.claims import paused_batch
from .errors import LogCorruptError
from .listing import RunQuery, report_unreadable
from .store import EventStore, list_runs

__all__ = ("WaitingCall", "add_approvals", "waiting_calls")

_COLUMNS = ("run", "session", "call", "tool", "arguments", "since (UTC)")
_encode = msgspec.json.Encoder(order="deterministic").encode


class WaitingCall(msgspec.Struct, frozen=True, kw_only=True):
    """One call waiting for approval; ``since`` is when its run paused (ns since the epoch)."""

    run_id: str
    session_id: str | None
    call_id: str
    tool: str
    arguments: Any
    since: int


async def waiting_calls(store: EventStore, session: str | None = None) -> list[WaitingCall]:
    """The calls of ``store`` (of one ``session``) that wait for approval, newest run first."""
    runs = await list_runs(store, RunQuery(outcome="awaiting_approval", session=session, limit=None))
    calls: list[WaitingCall] = []
    for run in runs:
        try:
            batch = paused_batch(await store.read(run.run_id))
        except LogCorruptError as exc:
            report_unreadable(run.run_id, exc)
            continue
        if not batch.paused or batch.claim is not None:
            continue  # resumed since it was listed
        calls.extend(
            WaitingCall(
                run_id=run.run_id,
                session_id=run.session_id,
                call_id=call_id,
                tool=batch.tools.get(call_id, ""),
                arguments=batch.arguments.get(call_id),
                since=batch.since,
            )
            for call_id in batch.awaiting
        )
    return calls


def _when(ns: int) -> datetime.datetime | None:
    try:
        when = datetime.datetime.fromtimestamp(ns // 1_000_000_000, datetime.UTC)
        return when.replace(microsecond=ns % 1_000_000_000 // 1000)
    except (OverflowError, OSError, ValueError):
        return None


def _arguments(value: Any) -> str:
    text = value if isinstance(value, str) else _encode(value).decode()
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:59] + "…"


def _print(calls: list[WaitingCall], *, as_json: bool, console: Any) -> None:
    out = sys.stdout
    if as_json:
        for call in calls:
            when = _when(call.since)
            document = msgspec.to_builtins(call) | {"since_utc": when.isoformat() if when else None}
            out.write(_encode(document).decode() + "\n")
        return
    rows = []
    for call in calls:
        when = _when(call.since)
        since = when.strftime("%Y-%m-%d %H:%M:%S") if when else "?"
        arguments = _arguments(call.arguments)
        rows.append([call.run_id, call.session_id or "", call.call_id, call.tool, arguments, since])
    print_table(_COLUMNS, rows, console=console)


def add_approvals(
    command: Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser],
    open_store: Callable[[argparse.Namespace], EventStore],
    console: Callable[[], Any],
) -> None:
    """Register ``approvals`` with the command line's ``command`` helper."""

    def handler(args: argparse.Namespace) -> int:
        store = open_store(args)

        async def collect() -> list[WaitingCall]:
            return await waiting_calls(store, args.session)

        _print(anyio.run(collect), as_json=args.json, console=console())
        return 0

    help = "list the calls that wait for approval: run, session, call, tool, arguments, since when"
    sub = command("approvals", handler, help)
    sub.add_argument("--session", help="only calls of this session")
    sub.add_argument("--json", action="store_true", help="one JSON object per waiting call, one per line")

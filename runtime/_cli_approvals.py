"""``agentledger approvals``: the calls that wait for a person's answer, across a store's runs.

A run that paused for approval ends with ``RunCompleted`` (reason ``awaiting_approval``) and no
later ``BatchClaimed``: the store lists such runs (``RunQuery(outcome="awaiting_approval")``), and
each one's log gives its waiting calls (``agentledger.decisions.waiting_calls``): the call id, the tool,
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
from .decisions import WaitingCall, waiting_calls
from .store import EventStore

__all__ = ("WaitingCall", "add_approvals", "waiting_calls")

_COLUMNS = ("run", "session", "call", "tool", "arguments", "since (UTC)")
_encode = msgspec.json.Encoder(order="deterministic").encode


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

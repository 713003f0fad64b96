"""``agentledger cost``: what a run tree, or a selection of runs, cost, from the store's logs.

``cost RUN`` reads the run and its sub-agent runs; ``cost`` with the ``runs`` filters reads every
matching run with its sub-agents (a matching run whose caller matches too is counted once, in
its caller's tree). The report (``agentledger.cost``) is printed as plain text, or as one JSON
document with ``--json``; ``--tools`` adds, per tool, how often it was offered and called and
what its schema cost. Prices come from ``genai-prices`` when it is installed (the ``prices``
extra), unless ``--no-prices``; without it the report shows tokens only.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import msgspec

from ._cli_checks import UsageError, check_schema
from ._cli_runs import parse_since, resolve_run
from .core.events import ChildRunStarted, Event
from .core.messages import Usage
from .cost import CostReport, CostTotals, Price, ToolOffers, cost_report, tool_offers
from .errors import RunNotFoundError
from .listing import OUTCOMES, RunQuery
from .runtree import check_run_tree
from .store import EventStore, list_runs

__all__ = ("add_cost", "format_report")


async def _tree(store: EventStore, run_id: str, seen: set[str]) -> list[Event]:
    """A run's events followed by those of its sub-agent runs, at any depth (each run read once)."""
    events = await store.read(run_id)
    if not events:
        raise RunNotFoundError(run_id)
    events = check_schema(events, run_id)
    read = {run_id: list(events)}
    seen.add(run_id)
    for event in events:  # grows as children are read
        if isinstance(event, ChildRunStarted) and event.child_run_id not in read:
            child = await store.read(event.child_run_id)
            read[event.child_run_id] = list(child)
            seen.add(event.child_run_id)
            events.extend(child)
    check_run_tree(read)
    return events


async def _selected(store: EventStore, query: RunQuery) -> list[Event]:
    runs = await list_runs(store, query)
    chosen = {run.run_id for run in runs}
    events: list[Event] = []
    seen: set[str] = set()
    for run in reversed(runs):  # oldest first
        if run.run_id in seen or (run.parent_run_id is not None and run.parent_run_id in chosen):
            continue
        events.extend(await _tree(store, run.run_id, seen))
    return events


def _price(args: argparse.Namespace) -> Price | None:
    if args.no_prices:
        return None
    from agentledger.adapters import prices

    return prices.genai_price if prices.available() else None


def add_cost(
    command: Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser],
    open_store: Callable[[argparse.Namespace], EventStore],
) -> None:
    """Register ``cost`` with the command line's ``command`` helper."""

    def handler(args: argparse.Namespace) -> int:
        store = open_store(args)
        if args.limit < 0:
            raise UsageError(f"--limit must be 0 (every run) or more, not {args.limit}")
        if args.run is not None:
            filters = [
                f"--{name}" for name in ("agent", "session", "outcome", "since") if getattr(args, name)
            ]
            if filters:
                raise UsageError(f"give a run or the filters {', '.join(filters)}, not both")

        async def collect() -> list[Event]:
            if args.run is not None:
                return await _tree(store, await resolve_run(store, args.run), set())
            query = RunQuery(
                limit=args.limit or None,
                agent=args.agent,
                session=args.session,
                outcome=args.outcome,
                since=parse_since(args.since) if args.since is not None else None,
            )
            return await _selected(store, query)

        events = anyio.run(collect)
        price = _price(args)
        report = cost_report(events, price=price)
        offers = tool_offers(events) if args.tools else None
        if args.json:
            document: dict[str, Any] = {"priced": price is not None, **msgspec.to_builtins(report)}
            if offers is not None:
                document["tools"] = msgspec.to_builtins(offers)
            sys.stdout.write(msgspec.json.encode(document).decode() + "\n")
        else:
            sys.stdout.write(format_report(report, offers, priced=price is not None))
        return 0

    help = "what a run tree, or the runs the filters select, cost: per run, model call, agent, model, tool"
    sub = command("cost", handler, help)
    sub.add_argument("run", nargs="?", help="a run id or a unique prefix of one (default: the filters)")
    sub.add_argument("--limit", type=int, default=50, help="without RUN: at most this many runs (0: all)")
    sub.add_argument("--agent", help="without RUN: only runs of the agent with this name")
    sub.add_argument("--session", help="without RUN: only runs of this session")
    sub.add_argument("--outcome", choices=OUTCOMES, help="without RUN: only runs that ended so")
    sub.add_argument(
        "--since", help="without RUN: only runs started since: a duration (2h, 7d) or a UTC date"
    )
    sub.add_argument("--tools", action="store_true", help="per tool: offered, called, schema tokens")
    sub.add_argument(
        "--no-prices", action="store_true", help="tokens only, even if genai-prices is installed"
    )
    sub.add_argument("--json", action="store_true", help="one JSON document")


# -- text ----------------------------------------------------------------------------------------


def _n(count: int | None) -> str:
    return "-" if count is None else f"{count:,}"


def _money(cost: float | None) -> str:
    return "-" if cost is None else f"${cost:,.6f}"


def _usage_cells(usage: Usage | None) -> list[str]:
    if usage is None:
        return ["-"] * 5
    return [
        _n(usage.input_tokens),
        _n(usage.cache_read_tokens),
        _n(usage.output_tokens),
        _n(usage.reasoning_tokens),
        _n(usage.total_tokens),
    ]


def _totals_cells(totals: CostTotals) -> list[str]:
    return [str(totals.calls), *_usage_cells(totals.usage), _money(totals.cost)]


_USAGE = ["input", "cached", "output", "reasoning", "total"]


def _table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    lines = [title]
    for row in [list(header), *rows]:
        cells = [
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  " + "  ".join(cells).rstrip())
    return [*lines, ""]


def _when(at: int) -> str:
    moment = datetime.datetime.fromtimestamp(at / 1e9, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def format_report(report: CostReport, offers: Sequence[ToolOffers] | None = None, *, priced: bool) -> str:
    """The report as plain text: totals, the run tree, model calls, agents, models, tool shares."""
    total = report.total
    lines = [
        f"{len(report.runs)} runs, {total.calls} model calls: {_n(total.usage.input_tokens)} input tokens "
        f"({_n(total.usage.cache_read_tokens)} cached), {_n(total.usage.output_tokens)} output "
        f"({_n(total.usage.reasoning_tokens)} reasoning), cost {_money(total.cost)}",
    ]
    if not priced:
        lines.append("no price table (install agentledger[prices]): the costs the runs recorded, if any")
    elif total.unpriced:
        lines.append(f"{total.unpriced} model calls have no price (a model the price table does not know)")
    lines.append("")
    header = ["run", "calls", *_USAGE, "cost"]
    rows = [["  " * r.depth + f"{r.run_id} ({r.agent})", *_totals_cells(r.tree)] for r in report.runs]
    lines += _table("runs (each with its sub-agents)", header, rows)
    rows = [
        [c.run_id, str(c.iteration), _when(c.at), c.model or "-", *_usage_cells(c.usage), _money(c.cost)]
        for c in report.calls
    ]
    lines += _table("model calls", ["run", "call", "at (UTC)", "model", *_USAGE, "cost"], rows)
    rows = [[name, *_totals_cells(t)] for name, t in report.by_agent.items()]
    lines += _table("by agent", ["agent", "calls", *_USAGE, "cost"], rows)
    rows = [[name, *_totals_cells(t)] for name, t in report.by_model.items()]
    lines += _table("by model", ["model", "calls", *_USAGE, "cost"], rows)
    if report.tool_shares:
        shares = sorted(report.tool_shares, key=lambda s: -(s.tokens or 0))
        rows = [
            [s.name, s.call_id, s.run_id, _n(s.chars), _n(s.tokens), str(s.seen_by), _money(s.cost)]
            for s in shares
        ]
        header = ["tool", "call", "run", "result chars", "~tokens added", "seen by calls", "cost"]
        lines += _table("tool results (estimated share of the next call's input)", header, rows)
    if offers is not None:
        rows = [
            [o.name, str(o.offered), str(o.called), _n(o.schema_tokens), _n(o.offered_tokens)] for o in offers
        ]
        header = ["tool", "offered", "called", "~schema tokens", "~tokens offered"]
        lines += _table("tools offered against used", header, rows)
    return "\n".join(lines)

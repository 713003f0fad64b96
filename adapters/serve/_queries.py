"""The runs page's question to the store: filters, newest first, one page at a time.

Filters the store's listing can answer from a run's first and last event (agent, outcome, start
time) go to ``list_runs`` as a ``RunQuery``, which every store answers without reading whole logs
(SQLite and PostgreSQL in SQL, a page at a time). A page is the listing's first ``offset + size
+ 1`` runs, cut: the first page costs one listing of 51 runs, whatever the store holds.

Filters that need a run's whole log (a tool it called, an error it met, what it cost) read the
logs of listed runs one by one, newest first, and stop as soon as the page is full; at most
``SCAN_LIMIT`` runs are looked at per request, and the page says when that bound cut the search.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

import msgspec

from agentledger.adapters.prices import available, genai_price
from agentledger.core.events import (
    ArgumentsRejected,
    Event,
    ModelFailed,
    RunFailed,
    ToolCalled,
    ToolFailed,
    ToolNotFound,
)
from agentledger.cost import cost_report
from agentledger.listing import OUTCOMES, Outcome, RunQuery, RunSummary
from agentledger.store import EventStore, list_runs

__all__ = ("SCAN_LIMIT", "FilterError", "Filters", "RunsPage", "runs_page")

SCAN_LIMIT = 2000
"""How many runs one request reads whole logs of, at most, for the log filters."""


class FilterError(ValueError):
    """A filter's value cannot be understood (shown on the page, next to the form)."""


class Filters(msgspec.Struct, frozen=True, kw_only=True):
    """The runs page's filters; ``None`` leaves one out. Times are ns since the epoch."""

    agent: str | None = None
    outcome: Outcome | None = None
    tool: str | None = None
    error: str | None = None
    """``any``: a run that failed or met any error; else an error type (part of its name)."""
    min_cost: float | None = None
    """USD, as the price table (``genai-prices``) or the run's own prices give it."""
    min_tokens: int | None = None
    since: int | None = None
    until: int | None = None

    @property
    def reads_logs(self) -> bool:
        return any(v is not None for v in (self.tool, self.error, self.min_cost, self.min_tokens))

    @classmethod
    def parse(cls, params: dict[str, str]) -> Filters:
        """From the page's query string (empty values leave a filter out)."""

        def text(name: str) -> str | None:
            value = params.get(name, "").strip()
            return value or None

        outcome = text("outcome")
        if outcome is not None and outcome not in OUTCOMES:
            raise FilterError(f"outcome must be one of {', '.join(OUTCOMES)}")
        return cls(
            agent=text("agent"),
            outcome=outcome,
            tool=text("tool"),
            error=text("error"),
            min_cost=_number(text("min_cost"), "min_cost"),
            min_tokens=_whole(text("min_tokens"), "min_tokens"),
            since=_time(text("since"), "since"),
            until=_time(text("until"), "until"),
        )


def _number(value: str | None, name: str) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        raise FilterError(f"{name} must be a number, not {value!r}") from None
    if not number >= 0:  # NaN too
        raise FilterError(f"{name} must be 0 or more")
    return number


def _whole(value: str | None, name: str) -> int | None:
    number = _number(value, name)
    if number is None:
        return None
    if number != int(number) or number > 2**62:
        raise FilterError(f"{name} must be a whole number")
    return int(number)


def _time(value: str | None, name: str) -> int | None:
    """A date or a date and time (UTC unless it carries an offset), as ns since the epoch."""
    if value is None:
        return None
    try:
        when = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise FilterError(
            f"{name} must be a date or a date and time (2026-05-01T12:00), not {value!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1_000_000) * 1000


class RunsPage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of runs, newest first; ``more`` when a next page has runs; ``scanned`` the logs
    read for the log filters, ``cut`` when ``SCAN_LIMIT`` stopped the search."""

    runs: list[RunSummary]
    more: bool
    scanned: int = 0
    cut: bool = False


def _query(filters: Filters, limit: int | None) -> RunQuery:
    return RunQuery(limit=limit, agent=filters.agent, outcome=filters.outcome, since=filters.since)


def _until(runs: Sequence[RunSummary], until: int | None) -> list[RunSummary]:
    return [r for r in runs if until is None or r.started_at <= until]


async def runs_page(store: EventStore, filters: Filters, *, offset: int = 0, size: int = 50) -> RunsPage:
    """The runs of page ``offset // size`` that ``filters`` select."""
    if not filters.reads_logs and filters.until is None:
        listed = await list_runs(store, _query(filters, offset + size + 1))
        return RunsPage(runs=listed[offset : offset + size], more=len(listed) > offset + size)
    listed = _until(await list_runs(store, _query(filters, SCAN_LIMIT)), filters.until)
    if not filters.reads_logs:
        return RunsPage(runs=listed[offset : offset + size], more=len(listed) > offset + size)
    wanted, found, scanned = offset + size + 1, [], 0
    for run in listed:
        scanned += 1
        if _matches(await store.read(run.run_id), filters):
            found.append(run)
            if len(found) >= wanted:
                break
    cut = len(found) < wanted and len(listed) >= SCAN_LIMIT
    return RunsPage(
        runs=found[offset : offset + size], more=len(found) > offset + size, scanned=scanned, cut=cut
    )


_ERRORS = (ToolFailed, ModelFailed, RunFailed)


def _matches(events: Sequence[Event], filters: Filters) -> bool:
    if filters.tool is not None and not any(type(e) is ToolCalled and e.name == filters.tool for e in events):
        return False
    if filters.error is not None and not _met_error(events, filters.error):
        return False
    if filters.min_cost is None and filters.min_tokens is None:
        return True
    total = cost_report(events, price=genai_price if available() else None).total
    if filters.min_tokens is not None and total.usage.total_tokens < filters.min_tokens:
        return False
    return filters.min_cost is None or (total.cost is not None and total.cost >= filters.min_cost)


def _met_error(events: Sequence[Event], wanted: str) -> bool:
    if wanted.lower() == "any":
        return any(isinstance(e, (*_ERRORS, ArgumentsRejected, ToolNotFound)) for e in events)
    wanted = wanted.lower()
    return any(isinstance(e, _ERRORS) and wanted in e.error_type.lower() for e in events)

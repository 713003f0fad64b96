"""Listing runs in a durable store: a summary from each stream's first and last records.

A store hands ``summaries`` the streams to consider, newest first, each with its first and last
stored records (one record when the stream holds one) and a function naming where record ``i``
is. The records are decoded and checked to be the start and end of that stream; a stream that
does not decode is set aside and reported by ``report`` (back in the caller's thread, so the
warning reaches the code that asked).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from agentledger.errors import LogCorruptError
from agentledger.listing import RunQuery, RunSummary, report_unreadable, select, summarize

from ._codec import decode_records

__all__ = ("Edges", "Listing", "Unreadable", "report", "summaries")


class Edges(NamedTuple):
    """A stream's first and last records (one when it holds one event), and where each is."""

    stream: str
    records: Sequence[bytes]
    where: Callable[[int], str]


class Unreadable(NamedTuple):
    """A stream whose records could not even be found (a gap where its first record should be)."""

    stream: str
    error: LogCorruptError


class Listing(NamedTuple):
    """The runs listed, and the streams skipped because they do not decode."""

    runs: list[RunSummary]
    skipped: list[tuple[str, LogCorruptError]]


def summaries(candidates: Iterable[Edges | Unreadable | None], query: RunQuery) -> Listing:
    """The runs among ``candidates`` (newest first) matching ``query``, up to its limit.

    A candidate may be ``None`` (an empty stream) or ``Unreadable``; ``candidates`` is read no
    further than the limit needs.
    """
    skipped: list[tuple[str, LogCorruptError]] = []

    def decoded() -> Iterable[RunSummary | None]:
        for edges in candidates:
            if edges is None:
                continue
            if isinstance(edges, Unreadable):
                skipped.append((edges.stream, edges.error))
                continue
            try:
                yield _summary(edges)
            except LogCorruptError as exc:
                skipped.append((edges.stream, exc))

    return Listing(select(decoded(), query), skipped)


def report(listing: Listing) -> list[RunSummary]:
    """Report the skipped streams with ``UnreadableStreamWarning``; return the runs."""
    for stream, error in listing.skipped:
        report_unreadable(stream, error, stacklevel=3)
    return listing.runs


def _summary(edges: Edges) -> RunSummary | None:
    stream, where = edges.stream, edges.where
    events = decode_records(edges.records, where)
    for index, event in enumerate(events):
        if event.run_id != stream:
            raise LogCorruptError(
                f"expected an event of {stream!r}, found one of {event.run_id!r}", where=where(index)
            )
    if events[0].seq != 0:
        raise LogCorruptError(f"expected seq 0, found {events[0].seq}", where=where(0))
    if events[-1].seq < 0:
        raise LogCorruptError(f"expected a seq >= 0, found {events[-1].seq}", where=where(len(events) - 1))
    return summarize(events[0], events[-1])

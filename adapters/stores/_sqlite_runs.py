"""Listing runs in a SQLite event store: the first and last row of each stream, newest first.

One query a page: streams in reverse creation order, each joined with its first row (seq 0, a
lookup in the ``(stream, seq)`` index) and its last row (the greatest seq, the same index),
filtered on the first event's JSON (agent, session, start time) with SQLite's JSON functions. A
first record that is not JSON passes the filters, so that decoding reports it rather than hiding
it. The outcome is read from the last record once decoded; asked for one outcome, the query
first keeps only streams whose last row holds the name that outcome's last event must carry
(``RunFailed``, ``awaiting_approval``, ``RunCompleted`` or ``BatchClaimed``), so a store of many
runs is not decoded run by run to find a few. Pages follow one another until the limit is
reached.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from agentledger.errors import LogCorruptError
from agentledger.listing import RunQuery

from ._listing import Edges, Listing, Unreadable, summaries

__all__ = ("list_runs",)

_PAGE = """
WITH heads AS (
    SELECT s.id AS id, s.name AS name, f.data AS first_row,
        CAST(CASE WHEN instr(f.data, X'0A') > 0 THEN substr(f.data, 1, instr(f.data, X'0A') - 1)
            ELSE f.data END AS TEXT) AS head,
        (SELECT max(e.seq) FROM events AS e WHERE e.stream = s.id) AS last_seq
    FROM streams AS s LEFT JOIN events AS f ON f.stream = s.id AND f.seq = 0
    WHERE s.id < :before
)
SELECT h.id, h.name, h.first_row, l.seq, l.last, l.data
FROM heads AS h LEFT JOIN events AS l ON l.stream = h.id AND l.seq = h.last_seq
WHERE h.first_row IS NULL OR NOT json_valid(h.head) OR (
    (:agent IS NULL
        OR coalesce(json_extract(h.head, '$.agent_name'), json_extract(h.head, '$.agent_id')) = :agent)
    AND (:session IS NULL OR json_extract(h.head, '$.session_id') = :session)
    AND (:since IS NULL OR json_extract(h.head, '$.at') >= :since)
    AND (:outcome IS NULL OR typeof(l.data) NOT IN ('blob', 'text') OR CASE :outcome
        WHEN 'completed' THEN instr(l.data, 'RunCompleted') > 0 OR instr(l.data, 'BatchClaimed') > 0
        WHEN 'awaiting_approval' THEN instr(l.data, 'awaiting_approval') > 0
        WHEN 'failed' THEN instr(l.data, 'RunFailed') > 0
        ELSE 1 END))
ORDER BY h.id DESC
LIMIT :page
"""
_MIN_PAGE = 64

Fetch = Callable[[str, dict[str, Any]], list[tuple[Any, ...]]]


def list_runs(fetch: Fetch, path: Path, query: RunQuery) -> Listing:
    """The runs ``query`` asks for; ``fetch`` runs a query on the store's connection."""
    return summaries(_candidates(fetch, path, query), query)


def _candidates(fetch: Fetch, path: Path, query: RunQuery) -> Iterator[Edges | Unreadable | None]:
    page = max(query.limit or 0, _MIN_PAGE)
    params: dict[str, Any] = {
        "before": 1 << 62,
        "agent": query.agent,
        "session": query.session,
        "since": query.since,
        "outcome": query.outcome,
        "page": page,
    }
    while True:
        rows = fetch(_PAGE, params)
        for row in rows:
            yield _edges(path, row)
        if len(rows) < page:
            return
        params["before"] = rows[-1][0]


def _edges(path: Path, row: tuple[Any, ...]) -> Edges | Unreadable | None:
    _, name, first_row, last_seq, last, last_row = row
    if not isinstance(name, str):
        return Unreadable(
            repr(name), LogCorruptError(f"expected a stream name as text, found {name!r}", where=str(path))
        )

    def where(index: int) -> str:
        return f"{path}: stream {name!r} seq {0 if index == 0 else last}"

    if first_row is None:
        if last_seq is None:
            return None  # a stream without events
        return Unreadable(name, LogCorruptError("expected seq 0, found none", where=where(0)))
    if type(last) is not int or type(last_seq) is not int:
        return Unreadable(
            name,
            LogCorruptError(
                f"expected integer seq and last, found {last_seq!r} and {last!r}", where=where(1)
            ),
        )
    head = _lines(first_row)[0]
    tail = _lines(last_row)[-1]
    records = [head] if last == 0 else [head, tail]
    return Edges(name, records, where)


def _lines(data: object) -> list[bytes]:
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    return data.split(b"\n") if isinstance(data, bytes) else [b""]

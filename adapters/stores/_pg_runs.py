"""Listing runs in a PostgreSQL event store: the first and last event of each stream, in SQL.

One query a page: streams in reverse creation order, each joined with its event at seq 0 and its
event at the greatest seq (both primary key lookups), filtered in SQL on the first event's JSON
(agent, session, start time) and the last event's type (outcome). A stream without an event at
seq 0 passes the filters, so that it is reported rather than hidden. Pages follow one another
until the limit is reached (a page can hold streams that do not decode).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from agentledger.errors import LogCorruptError
from agentledger.listing import RunQuery

from ._listing import Edges, Listing, Unreadable, summaries

__all__ = ("list_runs",)

_PAGE = """
SELECT s.position, s.name, f.data::text, l.seq, l.data::text
FROM {schema}.streams AS s
LEFT JOIN {schema}.events AS f ON f.stream = s.name AND f.seq = 0
LEFT JOIN LATERAL (
    SELECT e.seq, e.type, e.data FROM {schema}.events AS e
    WHERE e.stream = s.name ORDER BY e.seq DESC LIMIT 1
) AS l ON true
WHERE s.position < %(before)s AND (f.data IS NULL OR (
    (%(agent)s::text IS NULL OR coalesce(f.data->>'agent_name', f.data->>'agent_id') = %(agent)s)
    AND (%(session)s::text IS NULL OR f.data->>'session_id' = %(session)s)
    AND (%(since)s::bigint IS NULL OR CASE WHEN json_typeof(f.data->'at') = 'number'
        THEN (f.data->>'at')::numeric >= %(since)s END)
    AND (%(outcome)s::text IS NULL OR CASE %(outcome)s::text
        WHEN 'completed' THEN l.type IN ('RunCompleted', 'BatchClaimed')
        WHEN 'awaiting_approval' THEN l.type = 'RunCompleted'
        WHEN 'failed' THEN l.type = 'RunFailed'
        ELSE l.type NOT IN ('RunCompleted', 'RunFailed', 'BatchClaimed') END)))
ORDER BY s.position DESC
LIMIT %(page)s
"""
_MIN_PAGE = 64


class PostgresEventStore(Protocol):
    """What listing needs of the store: its connections, queries and positions."""

    def connection(self) -> AbstractAsyncContextManager[Any]: ...

    async def fetch(self, connection: Any, query: Any, params: Any, *, rows: bool = True) -> Any: ...

    def query(self, template: str) -> Any: ...

    def where(self, stream: str, seq: int) -> str: ...


async def list_runs(store: PostgresEventStore, query: RunQuery) -> Listing:
    """The runs ``query`` asks for, a page of streams at a time."""
    page = max(query.limit or 0, _MIN_PAGE)
    params: dict[str, Any] = {
        "before": 1 << 62,
        "agent": query.agent,
        "session": query.session,
        "since": query.since,
        "outcome": query.outcome,
        "page": page,
    }
    statement = store.query(_PAGE)
    listing = Listing([], [])
    while True:
        async with store.connection() as connection:
            rows: list[tuple[Any, ...]] = await store.fetch(connection, statement, params)
        found = [_edges(store, row) for row in rows]
        more = summaries(found, query)
        listing.runs.extend(more.runs)
        listing.skipped.extend(more.skipped)
        if query.limit is not None and len(listing.runs) >= query.limit:
            del listing.runs[query.limit :]
            return listing
        if len(rows) < page:
            return listing
        params["before"] = rows[-1][0]


def _edges(store: PostgresEventStore, row: Sequence[Any]) -> Edges | Unreadable | None:
    _, name, first, last_seq, last = row

    def where(index: int) -> str:
        return store.where(name, 0 if index == 0 else last_seq)

    if first is None:
        if last_seq is None:
            return None
        return Unreadable(name, LogCorruptError("expected seq 0, found none", where=where(0)))
    records = [first.encode()] if last_seq == 0 else [first.encode(), last.encode()]
    return Edges(name, records, where)

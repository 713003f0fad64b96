"""Reading a PostgreSQL event store: a stream, or many at once, as blocks of lines the server joins.

The server joins each run of up to ``BLOCK`` rows of a stream into one value of newline-ended
JSON lines (``string_agg``, fetched in binary as ``bytes``), with the run's count and first and
last seq, so the client decodes a few values rather than a text row per event. The seqs are
unique (the table's key), so a block whose count spans its bounds, each block starting right
after the one before, holds every seq between: ``whole`` checks that much, and every decoded
event's own seq and run id is checked against its place (``check_sequence``). A read whose
blocks do not pass is read again a row per event, which names the first missing or misplaced
row; a block that outgrows what the server makes of one value is read so too.

One stream (``READ``) is read a block at a time: a range scan of the key per block, so the
server sorts at most ``BLOCK`` rows at a time in memory (grouping the whole stream by block had it
sort every row twice, on disk past ``work_mem``). Each block is decoded as it arrives, while the
server makes the next (one ``decode_lines`` call each, no copy joining them), under one pause of
the cycle collector from the first block to the last. Nothing in SQL promises the blocks' order
(they come in seq order, as the server makes them): blocks out of order fail the same check as
a gap and are read again as rows.

Many whole streams (``READ_MANY``) are read in one query, each stream grouped into blocks on its
own, in name order; each stream is decoded and checked on its own, as ``read`` does (a call per
stream costs less than the copy that would join all their blocks for one call). Rows that do not
come grouped by stream, each stream's blocks in seq order, fail ``whole`` and are read again row
by row.

The planner estimates both queries far above ``jit_above_cost`` (it cannot tell that a block's
range holds at most ``BLOCK`` rows), and compiling them took longer than running them: the
store's connections run without JIT (``_pg_pool``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import psycopg
from psycopg import errors as pg_errors

from agentledger.core.collector import collector_paused
from agentledger.core.events import Event
from agentledger.errors import LogCorruptError, StoreError

from ._codec import check_sequence, decode_block, decode_records

__all__ = ("BLOCK", "read", "read_many")

BLOCK = 1024
"""Rows joined into one block of lines by a read (the server's limit on a value is 1 GB)."""
_LINES = r"convert_to(string_agg(data::text || E'\n', '' ORDER BY seq), 'UTF8')"
READ = f"""SELECT x.count, x.low, x.high, x.lines
FROM generate_series(
    greatest(%(after)s + 1, 0) / {BLOCK},
    (SELECT max(seq) FROM {{schema}}.events WHERE stream = %(stream)s) / {BLOCK}
) AS b(block),
LATERAL (
    SELECT count(*), min(seq), max(seq), {_LINES} FROM {{schema}}.events
    WHERE stream = %(stream)s AND seq > %(after)s
        AND seq >= b.block * {BLOCK} AND seq < b.block * {BLOCK} + {BLOCK}
) AS x(count, low, high, lines)
WHERE x.count > 0"""
"""One stream's blocks after a seq: ``(count, first seq, last seq, lines)``, one range of the key
each (the blocks of a stream whose seqs are whole are ``seq // BLOCK``)."""
READ_MANY = f"""SELECT s.name, x.count, x.low, x.high, x.lines
FROM unnest(%s::text[]) AS s(name),
LATERAL (
    SELECT count(*), min(seq), max(seq), {_LINES} FROM {{schema}}.events
    WHERE stream = s.name GROUP BY seq / {BLOCK}
) AS x(count, low, high, lines)
ORDER BY s.name, x.low"""
"""Several whole streams' blocks: ``(stream, count, first seq, last seq, lines)``, in name and
seq order, each stream grouped on its own (a range scan of the key, then a sort of that stream's
rows only: grouping every stream at once sorted all their rows together, on disk past
``work_mem``). The final sort is of the blocks, a few per stream; it also makes the server send
them at once, not a stream at a time (each trickle of rows is one more wake-up of the client)."""
_ROWS = "SELECT seq, data::text FROM {schema}.events WHERE stream = %s AND seq > %s ORDER BY seq"
_MANY_ROWS = "SELECT stream, seq, data::text FROM {schema}.events WHERE stream = ANY(%s) ORDER BY stream, seq"


class PostgresEventStore(Protocol):
    """What reading needs of the store: its connections, queries and names for error messages."""

    def connection(self) -> AbstractAsyncContextManager[Any]: ...

    async def fetch(self, connection: Any, query: Any, params: Any, *, rows: bool = True) -> Any: ...

    async def blocks(self, connection: Any, query: Any, params: Any) -> Any: ...

    def query(self, template: str) -> Any: ...

    def where(self, stream: str, seq: int) -> str: ...


def whole(blocks: Sequence[Sequence[Any]], first: int) -> bool:
    """Whether blocks of ``(count, min seq, max seq, ...)`` hold seqs ``first``, ``first + 1``,
    ... with none missing: each block's count spans its bounds (a seq is unique per stream, the
    table's key) and each block starts right after the one before."""
    expected = first
    for count, low, high, *_ in blocks:
        if low != expected or high - low + 1 != count:
            return False
        expected = high + 1
    return True


def _decode(blocks: Sequence[Sequence[Any]], where: Callable[[int], str]) -> list[Event]:
    """The events of blocks ``(count, ..., lines)``, in order, each block decoded on its own."""
    if len(blocks) == 1:
        return decode_block(blocks[0][-1], blocks[0][0], where)
    events: list[Event] = []
    with collector_paused():  # many small containers in no cycle: see ``decode_block``
        for block in blocks:
            begin = len(events)

            def within(index: int, begin: int = begin) -> str:
                return where(begin + index)

            events += decode_block(block[-1], block[0], within)
    return events


async def read(store: PostgresEventStore, stream: str, after: int) -> list[Event]:
    """The events of ``stream`` with ``seq > after``, in order: see the module docstring."""
    first = max(after + 1, 0)

    def where(index: int) -> str:
        return store.where(stream, first + index)

    async with store.connection() as connection:
        events = await _streamed(store, connection, {"stream": stream, "after": after}, first, where)
    if events is None:
        return await _read_rows(store, stream, after)
    return check_sequence(events, stream, first, where)


async def _streamed(
    store: PostgresEventStore,
    connection: Any,
    params: dict[str, Any],
    first: int,
    where: Callable[[int], str],
) -> list[Event] | None:
    """The events of ``READ``'s blocks, each decoded as it arrives while the server makes the
    next; ``None`` for blocks that are not whole, in seq order (read the rows instead), or one
    the server could not make. The cycle collector is paused from the first block to the last
    (the pause spans the waits for the next block, as a worker thread's read spans the event
    loop's work; a pause per block would leave every block's containers to a young
    collection's walk)."""
    events: list[Event] = []
    expected = first
    cursor = connection.cursor(binary=True)
    try:
        async with contextlib.aclosing(cursor.stream(store.query(READ), params)) as blocks:
            with contextlib.ExitStack() as pause:
                async for count, low, high, lines in blocks:
                    if low != expected or high - low + 1 != count:
                        return None
                    if expected == first:
                        pause.enter_context(collector_paused())
                    begin = len(events)

                    def within(index: int, begin: int = begin) -> str:
                        return where(begin + index)

                    events += decode_block(lines, count, within)
                    expected = high + 1
    except (pg_errors.ProgramLimitExceeded, pg_errors.OutOfMemory):
        return None
    except psycopg.Error as exc:
        raise StoreError(f"{store}: {exc}") from exc
    return events


async def _read_rows(store: PostgresEventStore, stream: str, after: int) -> list[Event]:
    """``read``, a row per event: the gap or misplaced record named where it is."""
    async with store.connection() as connection:
        rows: list[tuple[int, str]] = await store.fetch(connection, store.query(_ROWS), (stream, after))
    first = max(after + 1, 0)
    for expected, (seq, _) in enumerate(rows, first):
        if seq != expected:
            raise LogCorruptError(f"expected seq {expected}, found {seq}", where=store.where(stream, seq))

    def where(index: int) -> str:
        return store.where(stream, rows[index][0])

    return check_sequence(decode_records([row[1].encode() for row in rows], where), stream, first, where)


async def read_many(
    store: PostgresEventStore, streams: Sequence[str], asked: list[str]
) -> dict[str, list[Event]]:
    """The whole streams ``asked`` (each once), in one query; each decoded and checked as
    ``read`` decodes and checks one."""
    async with store.connection() as connection:
        rows: list[tuple[str, int, int, int, bytes]] | None = await store.blocks(
            connection, store.query(READ_MANY), (asked,)
        )
    if rows is None:
        return await _read_many_rows(store, streams, asked)
    spans: list[tuple[str, int, int]] = []  # each stream found, and its blocks as a range of ``rows``
    start = 0
    for index in range(1, len(rows) + 1):
        if index == len(rows) or rows[index][0] != rows[start][0]:
            if index - start == 1:  # a short run: one block, seqs 0 to its count less one
                _, count, low, high, _ = rows[start]
                if low != 0 or high + 1 != count:
                    return await _read_many_rows(store, streams, asked)
            elif not whole([row[1:] for row in rows[start:index]], 0):  # split blocks fail too
                return await _read_many_rows(store, streams, asked)
            spans.append((rows[start][0], start, index))
            start = index
    found: dict[str, list[Event]] = {}
    with collector_paused():  # many small containers in no cycle: see ``read_many_sync``
        for name, begin, end in spans:

            def where(index: int, name: str = name) -> str:
                return store.where(name, index)

            if end - begin == 1:  # a short run: its one block
                _, count, _, _, lines = rows[begin]
                events = decode_block(lines, count, where)
            else:
                events = _decode([row[1:] for row in rows[begin:end]], where)
            found[name] = check_sequence(events, name, 0, where)
    return {stream: found.get(stream, []) for stream in streams}


async def _read_many_rows(
    store: PostgresEventStore, streams: Sequence[str], asked: list[str]
) -> dict[str, list[Event]]:
    """``read_many``, a row per event: the gap or misplaced record named where it is."""
    async with store.connection() as connection:
        rows: list[tuple[str, int, str]] = await store.fetch(connection, store.query(_MANY_ROWS), (asked,))
    spans: dict[str, tuple[int, int]] = {}  # each stream's rows, as a range of ``rows``
    start = 0
    for index in range(1, len(rows) + 1):
        if index == len(rows) or rows[index][0] != rows[start][0]:
            stream = rows[start][0]
            for expected, (_, seq, _) in enumerate(rows[start:index]):
                if seq != expected:
                    place = store.where(stream, seq)
                    raise LogCorruptError(f"expected seq {expected}, found {seq}", where=place)
            spans[stream] = (start, index)
            start = index

    def where(index: int) -> str:
        return store.where(rows[index][0], rows[index][1])

    with collector_paused():  # many small containers in no cycle: see ``read_many_sync``
        events = decode_records([row[2].encode() for row in rows], where)
        found: dict[str, list[Event]] = {}
        for stream, (begin, end) in spans.items():

            def within(index: int, begin: int = begin) -> str:
                return where(begin + index)

            found[stream] = check_sequence(events[begin:end], stream, 0, within)
    return {stream: found.get(stream, []) for stream in streams}

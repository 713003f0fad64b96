"""Events to stored records and back: each encoded once, decoded typed, bad records named.

A log read back is untrusted input. Records are decoded with one typed event decoder; a record
that does not decode raises ``LogCorruptError`` naming where it is (a file and line, or a stream
and seq) and what was expected, followed by msgspec's own account of what it found.

Records are decoded in one call per read (``decode_lines`` over newline-terminated JSON), which
is faster than a call per record; only when that fails are the records decoded one by one, to
find the first bad one. A record nested deeper than ``MAX_DEPTH`` is refused as corrupt before
it is decoded (the check is one pass in C over the block), so no reader recurses into it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from agentledger.core.collector import collector_paused
from agentledger.core.depth import too_deep
from agentledger.core.events import Event, decode_event, encode_event
from agentledger.core.limits import checked_bytes, keep_checked_bytes
from agentledger.errors import LogCorruptError

__all__ = ("EXPECTED", "check_sequence", "decode_block", "decode_records", "encode_records")

EXPECTED = 'expected one event: a JSON object tagged with its "type"'

_decoder: msgspec.json.Decoder[Event] = msgspec.json.Decoder(Event)


def encode_records(events: Sequence[Event]) -> list[bytes]:
    """The records of ``events``, each encoded once: an input event a recorder checked hands on
    the bytes its check made (``checked_bytes``, kept from the first call on); only the others
    are encoded here."""
    keep_checked_bytes()
    return [checked_bytes(event) or encode_event(event) for event in events]


def decode_block(
    data: bytes, count: int, where: Callable[[int], str], *, shallow: bool = False
) -> list[Event]:
    """Decode ``count`` records stored in ``data``, each ending with a line end. ``shallow``: the
    caller has already found that no line of ``data`` nests deeper than ``MAX_DEPTH`` (a file
    store counting the lines it just read, in the same pass as ``too_deep``'s).

    The cycle collector is paused meanwhile: decoding allocates many small containers, none of
    them in a cycle, and collections triggered by that growth would scan the whole heap again
    and again (a large read then costs more per event than a small one).
    """
    if not shallow and too_deep(data):
        return _one_by_one(data.split(b"\n")[:count], where)
    try:
        if count > 1000:
            with collector_paused():
                events = _decoder.decode_lines(data)
        else:
            events = _decoder.decode_lines(data)
    except (msgspec.DecodeError, RecursionError, ValueError):  # ValueError: text that is not UTF-8
        events = []
    if len(events) == count:
        return events
    return _one_by_one(data.split(b"\n")[:count], where)


def decode_records(records: Sequence[bytes], where: Callable[[int], str]) -> list[Event]:
    """Decode ``records`` (without line ends); ``where(i)`` names the position of record ``i``."""
    try:
        data = b"\n".join([*records, b""])  # each record ends with a line end; one copy, not two
    except TypeError:  # a value that is not bytes
        return _one_by_one(records, where)
    return decode_block(data, len(records), where)


def _one_by_one(records: Sequence[bytes], where: Callable[[int], str]) -> list[Event]:
    events: list[Event] = []
    append = events.append
    try:
        for record in records:
            append(decode_event(record))
    except (msgspec.DecodeError, TypeError, ValueError) as exc:  # TypeError: not bytes or str
        raise LogCorruptError(f"{EXPECTED}; {exc}", where=where(len(events))) from exc
    return events


def check_sequence(events: list[Event], stream: str, first: int, where: Callable[[int], str]) -> list[Event]:
    """Refuse a stream whose events are not ``first``, ``first + 1``, ... of ``stream``.

    A line lost, repeated or moved in a file (an edit, a bad copy) is corruption, never a shorter
    or reordered run.
    """
    expected = first
    for event in events:  # the common case: one plain loop, no lists built (cheaper than maps)
        if event.seq != expected or event.run_id != stream:
            break
        expected += 1
    else:
        return events
    for index, event in enumerate(events):
        if event.seq != first + index or event.run_id != stream:
            raise LogCorruptError(
                f"expected seq {first + index} of {stream!r}, found seq {event.seq} of {event.run_id!r}",
                where=where(index),
            )
    return events

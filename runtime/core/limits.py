"""What a log can hold, checked before an event is appended and again when one is read back.

A value the run accepts must come back from the log as it went in. ``check_event`` is the gate:
it encodes an event exactly as a store does, makes sure it would decode with the typed event
decoder (decoding it where that is not certain, see below), and refuses what would not survive
that round trip, with ``UnrecordableError`` naming why:

- text that is not UTF-8 (a lone surrogate such as ``"\\ud800"``);
- a value nested deeper than ``MAX_DEPTH`` containers (arguments, results, session values);
- an integer outside the signed 64-bit range (what OpenTelemetry and most readers take);
- a value of the wrong type for its field (``Usage(1.5, 1, 2)``), or of a type JSON lacks.

Readers use ``too_deep`` on stored bytes before decoding them, so no record sends a reader into
Python's recursion limit. Nothing here recurses: depth is measured on the JSON text.

What can fail is checked, and only that. Every event is encoded (which refuses lone surrogates
and values JSON lacks). An event of flat fields only (text, numbers, flags, tuples of text, free
JSON values such as a tool's result or a middleware's answer) is not decoded: its typed fields are
the run's own (ids and names taken from events already checked, counters, reasons), so what can
go wrong is the clock's ``at`` and ``seq`` (checked in place) and its free values, which decode into anything
JSON holds: a small one (a call's arguments, a schema: up to ``shapes.IN_PLACE`` values) is
walked in place (``shapes.free_value_fits``); a larger one has the encoded text measured for
depth and scanned for integers past 64 bits, and a doubt sends the event the long way. An event
that holds structs (messages, usage, tool specs, session changes, the run's config, claims) takes
typed values from outside: it is checked by its shape (``shapes.compile_shape``: each value has
exactly its field's type, integers fit, free containers are walked in place or measured on the
text), and decoded with the typed decoder only where the shape is not certain or the type has
none.

The bytes a check made are not thrown away once a store that writes events has asked for them
(``keep_checked_bytes``; the durable stores do when they first write): ``check_event`` keeps
them for the event (a bounded side cache, the most recent one to two thousand events), and the
store takes them with ``checked_bytes`` instead of encoding the event again. A process whose
runs only go to the memory store keeps nothing.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any, get_args

import msgspec
import msgspec.inspect as mi

from .depth import MAX_DEPTH, too_deep
from .errors import UnrecordableError
from .events import Event
from .events import _encoder as _event_encoder
from .shapes import compile_shape, free_value_fits

__all__ = (
    "INT64_MAX",
    "INT64_MIN",
    "check_event",
    "checked_bytes",
    "keep_checked_bytes",
    "may_overflow",
    "safe_text",
)

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_decoder: msgspec.json.Decoder[Event] = msgspec.json.Decoder(Event)
_encode = _event_encoder.encode  # encode_event's own encoder, called without a frame between
_STARTS = frozenset(b":,[ -\t\n\r")  # what may come right before a JSON number's digits


def _table() -> bytes:
    """Digits become ``0``, what may precede a number becomes a space, anything else an ``x``:
    so digits inside strings ("run_9f...") rarely look like numbers."""
    return bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 if b in _STARTS else 0x78 for b in range(256))


_ZEROS = _table()
_START_19 = b" " + b"0" * 19


def may_overflow(data: bytes) -> bool:
    """Whether JSON text holds a number that could be an integer past 64 bits: 20 digits or more,
    or 19 starting with a 9 (a time in nanoseconds has 19 starting with 1 until 2255).

    One translation and one substring search in C; digits inside strings can give a false alarm,
    never a miss. The caller then checks the values themselves.
    """
    digits = b" " + data.translate(_ZEROS)  # digits[i + 1] stands for data[i]
    # Each match starts a number of 19 digits or more (a time, mostly); one of exactly 19 that
    # fits is followed by a character that is no digit, where the search goes on.
    start = digits.find(_START_19)
    while start >= 0:
        if data[start] == 0x39 or digits.startswith(b"0", start + 20):  # a 9 first, or a 20th digit
            return True
        start = digits.find(_START_19, start + 20)
    return False


def check_event(event: Event) -> bytes:
    """The event as a store writes it, if it reads back; ``UnrecordableError`` naming why not."""
    try:
        data = _encode(event)  # exactly what encode_event gives a store
    except UnicodeEncodeError as exc:
        raise UnrecordableError(
            f"{type(event).__name__} holds text that is not UTF-8 (a lone surrogate): {exc}"
        ) from exc
    except RecursionError as exc:
        raise UnrecordableError(f"{type(event).__name__} is nested deeper than {MAX_DEPTH} levels") from exc
    except (TypeError, ValueError, msgspec.EncodeError) as exc:
        raise UnrecordableError(f"{type(event).__name__} holds a value JSON cannot hold: {exc}") from exc
    flat = _FLAT.get(type(event))
    if flat is None or not flat(event, data):
        _read_back(event, data)
    if _keeping[0]:
        _keep(event, data)
    return data


def keep_checked_bytes() -> None:
    """From now on, ``check_event`` keeps the bytes it makes for ``checked_bytes`` (a store that
    writes events calls this when it first writes; until then, nothing is kept)."""
    _keeping[0] = True


def checked_bytes(event: Event) -> bytes | None:
    """The bytes ``check_event`` made for this very event (taken: a second call gives None), or
    None when it was not checked or too long ago; a store writes them instead of encoding again."""
    if not _keeping[0]:  # no store takes bytes in this process: nothing was kept
        return None
    key = id(event)
    kept = _kept_now.pop(key, None) or _kept_before.pop(key, None)
    return kept[1] if kept is not None and kept[0] is event else None


def _read_back(event: Event, data: bytes) -> None:
    """The long way: depth on the text, the typed decoder, then integers on the decoded values."""
    kind = type(event).__name__
    if too_deep(data):
        raise UnrecordableError(f"{kind} is nested deeper than {MAX_DEPTH} levels")
    try:
        decoded = _decoder.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise UnrecordableError(f"{kind} would not read back from the log: {exc}") from exc
    if may_overflow(data):
        _check_ints(decoded, kind)


# -- the flat path: per event type, which fields hold free JSON values ------------------------------

_LEAVES = frozenset({str, bool, float, type(None)})
_SCALARS = (mi.StrType, mi.IntType, mi.BoolType, mi.NoneType, mi.LiteralType)


def _free_json(info: Any) -> bool:
    """Whether a field of this type holds a free JSON value (``Any``, or an object of them)."""
    if isinstance(info, mi.UnionType):
        return any(map(_free_json, info.types))
    if isinstance(info, mi.DictType):
        return isinstance(info.key_type, mi.StrType) and isinstance(info.value_type, mi.AnyType)
    return isinstance(info, mi.AnyType)


def _flat(info: Any) -> bool:
    """Whether a field of this type holds no struct: scalars, tuples of text, free JSON values."""
    if isinstance(info, mi.UnionType):  # a float only if optional: NaN and infinity are null
        optional = any(isinstance(m, mi.NoneType) for m in info.types)
        return all(optional if isinstance(m, mi.FloatType) else _flat(m) for m in info.types)
    if isinstance(info, mi.VarTupleType):
        return isinstance(info.item_type, mi.StrType)
    return isinstance(info, _SCALARS) or _free_json(info)


def _plan(cls: type[Any]) -> tuple[tuple[str, bool], ...] | None:
    """The free fields of a flat event type, each with whether it must be a JSON object; None
    for a type holding structs or a union with a free value (``ToolChoice``: the long way)."""
    fields = mi.type_info(cls).fields  # type: ignore[attr-defined]
    union_of_free = any(isinstance(f.type, mi.UnionType) and _free_json(f.type) for f in fields)
    if union_of_free or not all(_flat(f.type) for f in fields):
        return None
    return tuple((f.name, isinstance(f.type, mi.DictType)) for f in fields if _free_json(f.type))


def _flat_reads_back(event: Event, data: bytes, free: tuple[tuple[str, bool], ...]) -> bool:
    """Whether an event of flat fields certainly reads back; False sends it the long way.

    Its typed fields are the run's own (ids and names from events already checked, counters,
    reasons), and encoding has refused text that is not UTF-8; what comes from elsewhere is the
    clock's ``at`` (``seq`` is checked alike) and the free values (a tool's result, arguments,
    a middleware's answer).
    """
    at, seq = event.at, event.seq
    if type(at) is not int or type(seq) is not int or not INT64_MIN <= at <= INT64_MAX >= seq >= 0:
        return False
    containers = False
    for name, must_be_object in free:
        value = getattr(event, name)
        if must_be_object and type(value) is not dict:
            return False
        if not containers:  # once the text decides, it decides for every value
            fits = free_value_fits(value)  # leaves, integers, small containers: in place
            if fits is None:
                containers = True
            elif not fits:
                return False
    return not containers or (not too_deep(data) and not may_overflow(data))


_SMALL = 8
"""The most values of a call's arguments checked inline before ``free_value_fits`` is asked."""


def _stamp_reads_back(event: Event, data: bytes) -> bool:
    """``_flat_reads_back`` for an event with no free field: its stamp is all that can fail."""
    at, seq = event.at, event.seq
    return type(at) is int and type(seq) is int and INT64_MIN <= at <= INT64_MAX >= seq >= 0


FlatCheck = Callable[[Event, bytes], bool]


def _flat_check(free: tuple[tuple[str, bool], ...]) -> FlatCheck:
    """``_flat_reads_back`` specialised to one event type's free fields: the same answer, without
    walking the plan for every event (the gate runs for each tool call and each result)."""
    if not free:
        return _stamp_reads_back
    if len(free) == 1 and free[0][1]:
        get = operator.attrgetter(free[0][0])

        def one_object(event: Event, data: bytes) -> bool:  # a call's arguments
            at, seq = event.at, event.seq
            if type(at) is not int or type(seq) is not int or not INT64_MIN <= at <= INT64_MAX >= seq >= 0:
                return False
            value = get(event)
            if type(value) is not dict:
                return False
            if len(value) <= _SMALL:  # plain values inline: this runs for every tool call
                for item in value.values():
                    kind = type(item)
                    if kind is int:
                        if not INT64_MIN <= item <= INT64_MAX:
                            return False
                    elif kind not in _LEAVES:
                        break  # a container among them: walked in place if small
                else:
                    return True
            fits = free_value_fits(value)
            if fits is not None:
                return fits
            return not too_deep(data) and not may_overflow(data)

        return one_object
    if not any(must_be_object for _, must_be_object in free):
        names = [name for name, _ in free]
        get_all = operator.attrgetter(*names) if len(names) > 1 else _one_of(names[0])

        def values_only(event: Event, data: bytes) -> bool:
            at, seq = event.at, event.seq
            if type(at) is not int or type(seq) is not int or not INT64_MIN <= at <= INT64_MAX >= seq >= 0:
                return False
            for value in get_all(event):
                kind = type(value)
                if kind in _LEAVES:  # a tool's text result, mostly, or no value at all
                    continue
                if kind is int:
                    if not INT64_MIN <= value <= INT64_MAX:
                        return False
                    continue
                # A container: the general check decides (a small one in place, a large one on
                # the text).
                return _flat_reads_back(event, data, free)
            return True

        return values_only
    return functools.partial(_flat_reads_back, free=free)


def _one_of(name: str) -> Callable[[Any], tuple[Any]]:
    get = operator.attrgetter(name)
    return lambda event: (get(event),)


_FLAT: dict[type[Any], FlatCheck] = {
    cls: _flat_check(plan) for cls in get_args(Event) if (plan := _plan(cls)) is not None
}
"""Per flat event type, its check (``_flat_reads_back``, specialised); per event type holding
structs, its shape (``shapes.compile_shape``) where the compiler follows every field."""
_FLAT.update(
    (cls, shape)
    for cls in get_args(Event)
    if cls not in _FLAT and (shape := compile_shape(cls, may_overflow)) is not None
)


# -- the bytes a check made, for the store that writes the event ----------------------------------

_KEEP = 1024
_keeping = [False]  # whether a store that takes the bytes exists in this process
_kept_now: dict[int, tuple[Event, bytes]] = {}
_kept_before: dict[int, tuple[Event, bytes]] = {}


def _keep(event: Event, data: bytes) -> None:
    """Keep the bytes of the last ``_KEEP`` to ``2 * _KEEP`` checked events (two generations: no
    scan, no order to keep; an entry holds its event, so its id is not reused while it is kept)."""
    global _kept_now, _kept_before
    _kept_now[id(event)] = (event, data)
    if len(_kept_now) >= _KEEP:
        _kept_before, _kept_now = _kept_now, {}


def _check_ints(event: Event, kind: str) -> None:
    stack: list[Any] = [event]
    while stack:
        value = stack.pop()
        if type(value) is int:
            if not INT64_MIN <= value <= INT64_MAX:
                raise UnrecordableError(f"{kind} holds an integer outside the 64-bit range: {value}")
        elif isinstance(value, msgspec.Struct):
            stack.extend(getattr(value, name) for name in value.__struct_fields__)
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)


def safe_text(text: str) -> str:
    """``text`` with anything UTF-8 cannot hold (lone surrogates) escaped as ``\\udXXX``."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()
    return text

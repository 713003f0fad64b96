"""What a log can hold, checked before an event is appended and again when one is read back.

A value the run accepts must come back from the log as it went in. ``check_event`` is the gate:
it encodes an event exactly as a store does and decodes it with the typed event decoder, and
refuses what would not survive that round trip, with ``UnrecordableError`` naming why:

- text that is not UTF-8 (a lone surrogate such as ``"\\ud800"``);
- a value nested deeper than ``MAX_DEPTH`` containers (arguments, results, session values);
- an integer outside the signed 64-bit range (what OpenTelemetry and most readers take);
- a value of the wrong type for its field (``Usage(1.5, 1, 2)``), or of a type JSON lacks.

Readers use ``too_deep`` on stored bytes before decoding them, so no record sends a reader into
Python's recursion limit. Nothing here recurses: depth is measured on the JSON text.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .depth import MAX_DEPTH, too_deep
from .errors import UnrecordableError
from .events import Event, encode_event

__all__ = (
    "INT64_MAX",
    "INT64_MIN",
    "check_event",
    "may_overflow",
    "safe_text",
)

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_decoder: msgspec.json.Decoder[Event] = msgspec.json.Decoder(Event)
_STARTS = frozenset(b":,[ -\t\n\r")  # what may come right before a JSON number's digits


def _table(keep_nine: bool) -> bytes:
    """Digits become ``0`` (a ``9`` stays, if asked), what may precede a number becomes a space,
    anything else an ``x``: so digits inside strings ("run_9f...") rarely look like numbers."""
    out = bytearray()
    for b in range(256):
        if 0x30 <= b <= 0x39:
            out.append(b if keep_nine and b == 0x39 else 0x30)
        else:
            out.append(0x20 if b in _STARTS else 0x78)
    return bytes(out)


_ZEROS, _NINES = _table(False), _table(True)
_RUN_20 = b" " + b"0" * 20
_RUN_19 = b"0" * 19


def may_overflow(data: bytes) -> bool:
    """Whether JSON text holds a number that could be an integer past 64 bits: 20 digits or more,
    or 19 starting with a 9 (a time in nanoseconds has 19 starting with 1 until 2255).

    Two translations and substring searches in C; digits inside strings can give a false alarm,
    never a miss. The caller then checks the values themselves.
    """
    digits = b" " + data.translate(_ZEROS)
    if _RUN_20 in digits:
        return True
    nines = b" " + data.translate(_NINES)
    start = nines.find(b" 9")
    while start >= 0:  # only where a number starts with 9: rare
        if digits[start + 1 : start + 20] == _RUN_19 and digits[start + 20 : start + 21] != b"0":
            return True
        start = nines.find(b" 9", start + 1)
    return False


def _check_json(data: bytes, what: str = "the value") -> None:
    """Refuse JSON text nested deeper than ``MAX_DEPTH`` (``UnrecordableError``)."""
    if too_deep(data):
        raise UnrecordableError(f"{what} is nested deeper than {MAX_DEPTH} levels")


def check_event(event: Event) -> bytes:
    """The event as a store writes it, if it reads back; ``UnrecordableError`` naming why not."""
    kind = type(event).__name__
    try:
        data = encode_event(event)
    except UnicodeEncodeError as exc:
        raise UnrecordableError(f"{kind} holds text that is not UTF-8 (a lone surrogate): {exc}") from exc
    except RecursionError as exc:
        raise UnrecordableError(f"{kind} is nested deeper than {MAX_DEPTH} levels") from exc
    except (TypeError, ValueError, msgspec.EncodeError) as exc:
        raise UnrecordableError(f"{kind} holds a value JSON cannot hold: {exc}") from exc
    _check_json(data, kind)
    try:
        decoded = _decoder.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise UnrecordableError(f"{kind} would not read back from the log: {exc}") from exc
    if may_overflow(data):
        _check_ints(decoded, kind)
    return data


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

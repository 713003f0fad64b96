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
    "check_json",
    "may_overflow",
    "safe_text",
)

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_decoder: msgspec.json.Decoder[Event] = msgspec.json.Decoder(Event)
_DIGITS = bytes(b if 0x30 <= b <= 0x39 else 0x20 for b in range(256))  # the rest becomes spaces


def may_overflow(data: bytes) -> bool:
    """Whether JSON text holds a run of digits that could be an integer past 64 bits: 20 digits or
    more, or 19 starting with a 9 (a time in nanoseconds has 19 starting with 1 until 2255).

    Two passes in C for most input; the caller then checks the values themselves.
    """
    digits = data.translate(_DIGITS)
    runs = digits.split()
    if not runs:
        return False
    longest = max(map(len, runs))
    if longest != 19:
        return longest > 19
    digits = b" " + digits + b" "
    start = digits.find(b" 9")
    while start >= 0:  # a few times at most: where a run of digits starts with 9
        if digits[start + 20 : start + 21] == b" " and digits[start + 1 : start + 20].isdigit():
            return True
        start = digits.find(b" 9", start + 1)
    return False


def check_json(data: bytes, what: str = "the value") -> None:
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
    check_json(data, kind)
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

"""The one conversion of a value into what a log records."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ("to_recorded",)

_PLAIN = frozenset({str, int, float, bool, type(None)})


def to_recorded(value: Any) -> Any:
    """A value as the log records it: JSON-ready builtins (not JSON text), the one rule for every
    recorded value: msgspec's rules (structs, dataclasses, attrs classes, enums, dates...) with
    mapping keys as strings, and a pydantic model as its JSON mode dump, at any depth. A value
    with no JSON form (too deep, or of a type neither knows) becomes its ``str``. Bytes that are
    UTF-8 text (a tool returning a file's contents, say) are that text; other bytes are base64."""
    if type(value) in _PLAIN:  # already what msgspec would give back
        return value
    if isinstance(value, bytes | bytearray):  # UTF-8 text a model can read, as text
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            pass  # other bytes: base64, as msgspec writes them
    try:
        return msgspec.to_builtins(value, str_keys=True, enc_hook=_json_form)
    except (TypeError, ValueError, RecursionError):
        try:
            return str(value)
        except RecursionError:
            return f"<{type(value).__name__}>"


def _json_form(value: Any) -> Any:
    """What msgspec does not know itself: a pydantic model (its ``model_dump(mode="json")``)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and hasattr(type(value), "model_fields"):
        return dump(mode="json")
    raise TypeError(f"{type(value).__name__} has no JSON form")

"""The one conversion of a value into what a log records."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ("to_json",)


def to_json(value: Any) -> Any:
    """A value as JSON-ready builtins (msgspec's rules, mapping keys as strings), or its ``str``
    when it has none (too deep, or of a type msgspec does not know)."""
    try:
        return msgspec.to_builtins(value, str_keys=True)
    except (TypeError, ValueError, RecursionError):
        try:
            return str(value)
        except RecursionError:
            return f"<{type(value).__name__}>"

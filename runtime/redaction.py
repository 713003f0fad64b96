"""What of ``function_invocation_kwargs`` a log may keep.

Runtime values for tools often include credentials. ``RunStarted`` records them only after a
redaction policy: a callable from the kwargs to the dict that is written. The default keeps JSON
scalars, lists and dicts, replaces the value of any key that looks like a secret, and records
only the type name of values that are not JSON. ``client_kwargs`` values are never recorded.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ("REDACTED", "Redactor", "default_redactor", "redact_all", "redact_keys")

REDACTED = "[redacted]"
Redactor = Callable[[Mapping[str, Any]], dict[str, Any]]
_SECRET = re.compile(r"(pass(word)?|secret|token|api[_-]?key|auth|credential|cookie|private)", re.I)
_JSON = (str, int, float, bool, type(None))


def _scrub(key: str, value: Any, secret: Callable[[str], bool]) -> Any:
    if secret(key):
        return REDACTED
    if isinstance(value, _JSON):
        return value
    if isinstance(value, Mapping):
        return {str(k): _scrub(str(k), v, secret) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(key, v, secret) for v in value]
    return f"<{type(value).__name__}>"


def redact_keys(*patterns: str) -> Redactor:
    """A policy that also redacts keys matching any of ``patterns`` (regular expressions)."""
    extra = re.compile("|".join(f"(?:{p})" for p in patterns), re.I) if patterns else None

    def secret(key: str) -> bool:
        return bool(_SECRET.search(key) or (extra is not None and extra.search(key)))

    def redactor(kwargs: Mapping[str, Any]) -> dict[str, Any]:
        return {key: _scrub(key, value, secret) for key, value in kwargs.items()}

    return redactor


default_redactor: Redactor = redact_keys()
"""Keys like password, secret, token, api_key, auth, credential, cookie, private are redacted."""


def redact_all(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A policy that records the keys only."""
    return dict.fromkeys(kwargs, REDACTED)

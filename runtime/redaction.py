"""What of ``function_invocation_kwargs`` a log may keep.

Runtime values for tools often include credentials. ``RunStarted`` records them only after a
redaction policy: a callable from the kwargs to the dict that is written. The default keeps JSON
scalars, lists and dicts, replaces the value of any key that looks like a secret, and records
only the type name of values that are not JSON. ``client_kwargs`` values are never recorded.

Credentials also hide in values: a connection string ``postgresql://user:secret@host/db`` keeps
its password in any string value, whatever the key. The default policy replaces the password of
every ``scheme://user:password@`` form, and ``scrub_text`` does the same (and hides a bearer
token and a URL's query string) in the error messages a run records.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ("REDACTED", "Redactor", "default_redactor", "redact_all", "redact_keys", "scrub_text")

REDACTED = "[redacted]"
Redactor = Callable[[Mapping[str, Any]], dict[str, Any]]
_SECRET_WORDS = frozenset(
    {"password", "passwd", "pass", "passphrase", "pwd", "secret", "secrets", "token", "tokens", "apikey",
     "auth", "authorization", "credential", "credentials", "cookie", "cookies", "private", "signature",
     "key", "keys", "sk", "bearer", "creds", "cred", "jwt", "dsn"}
)  # fmt: skip
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_MAX_DEPTH = 64  # deeper values are recorded as a marker, not walked
# scheme://user:password@ (also with an empty user): the password goes.
_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s:/@?#]*:)[^\s@/?#]+@")
_BEARER = re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=\-]{4,}")
_QUERY = re.compile(r"(?i)\b((?:https?|wss?)://[^\s?#\"'<>]+)\?[^\s#\"'<>]*")


def scrub_text(text: str) -> str:
    """``text`` with credentials hidden: the password of ``scheme://user:password@``, a bearer or
    basic token, and the query string of a URL (where API keys travel) become ``[redacted]``."""
    if "://" not in text and not _BEARER.search(text):
        return text
    text = _URL_CREDENTIALS.sub(rf"\1{REDACTED}@", text)
    text = _QUERY.sub(rf"\1?{REDACTED}", text)
    return _BEARER.sub(rf"\1\2{REDACTED}", text)


def _looks_secret(key: str) -> bool:
    """A key is secret when one of its words is (``api_key``, ``X-Auth-Token``, ``sessionToken``)."""
    words = [w.lower() for w in _WORDS.findall(key)]
    joined = {a + b for a, b in itertools.pairwise(words)}
    return bool(_SECRET_WORDS.intersection(words) or _SECRET_WORDS.intersection(joined))


_JSON = (str, int, float, bool, type(None))


def _scrub(key: str, value: Any, secret: Callable[[str], bool], depth: int = 0) -> Any:
    if secret(key):
        return REDACTED
    if isinstance(value, str):
        return _URL_CREDENTIALS.sub(rf"\1{REDACTED}@", value) if "://" in value else value
    if isinstance(value, _JSON):
        return value
    if depth >= _MAX_DEPTH:
        return f"<{type(value).__name__} nested too deep>"
    if isinstance(value, Mapping):
        return {str(k): _scrub(str(k), v, secret, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(key, v, secret, depth + 1) for v in value]
    return f"<{type(value).__name__}>"


def redact_keys(*patterns: str) -> Redactor:
    """A policy that also redacts keys matching any of ``patterns`` (regular expressions)."""
    extra = re.compile("|".join(f"(?:{p})" for p in patterns), re.I) if patterns else None

    def secret(key: str) -> bool:
        return _looks_secret(key) or (extra is not None and extra.search(key) is not None)

    def redactor(kwargs: Mapping[str, Any]) -> dict[str, Any]:
        return {key: _scrub(key, value, secret) for key, value in kwargs.items()}

    return redactor


default_redactor: Redactor = redact_keys()
"""Keys with a word like password, secret, token, key, auth, credential, cookie, private, bearer,
jwt or dsn are redacted (``passenger_count`` and ``author`` are not: words, not substrings), and
so is the password of every ``scheme://user:password@`` in a string value."""


def redact_all(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A policy that records the keys only."""
    return dict.fromkeys(kwargs, REDACTED)

"""What of ``function_invocation_kwargs`` a log may keep.

Runtime values for tools often include credentials. ``RunStarted`` records them only after a
redaction policy: a callable from the kwargs to the dict that is written. The default keeps JSON
scalars, lists and dicts, replaces the value of any key that looks like a secret, and records
only the type name of values that are not JSON. ``client_kwargs`` values are never recorded.

Credentials also hide in values: a connection string ``postgresql://user:secret@host/db`` keeps
its password in any string value, whatever the key. The default policy replaces the password of
every ``scheme://user:password@`` form, and ``scrub_text`` does the same (and hides a bearer
token and a URL's query string) in the error messages a run records.

What is made from a log (``show``, ``state``, ``diff``, cassettes, the viewer, OTLP, the
structlog sink, the OpenTelemetry bridge, ``agentledger serve``) passes ``redact_value`` (and
``redact_event`` for whole events): every string scrubbed (``scrub_text``), the value of every
key named like a credential replaced. The log itself keeps what the run recorded, so a replay is
exact. ``mark_secret_keys`` and ``mark_secret_values`` (or ``AGENTLEDGER_SECRET_KEYS``) mark more.
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, quote_plus

import msgspec

from .core.events import Event, decode_event, encode_event

__all__ = (
    "REDACTED",
    "SECRET_KEYS_ENV",
    "Redactor",
    "default_redactor",
    "hidden_values",
    "holds_redactions",
    "mark_secret_keys",
    "mark_secret_values",
    "mask_values",
    "redact_all",
    "redact_event",
    "redact_events",
    "redact_keys",
    "redact_value",
    "scrub_shapes",
    "scrub_text",
    "wire_forms",
)

REDACTED = "[redacted]"
Redactor = Callable[[Mapping[str, Any]], dict[str, Any]]
_SECRET_WORDS = frozenset(
    {"password", "passwd", "pass", "passphrase", "pwd", "secret", "secrets", "token", "tokens", "apikey",
     "auth", "authorization", "credential", "credentials", "cookie", "cookies", "private", "signature",
     "key", "keys", "sk", "bearer", "creds", "cred", "jwt", "dsn", "passcode", "otp", "totp", "mfa",
     "connectionstring", "connstr", "sas", "pem", "hmac", "accesstoken", "authtoken", "apitoken",
     "bearertoken", "refreshtoken", "idtoken"}
)  # fmt: skip
_TOKEN_WORDS = frozenset({"token", "tokens"})
_COUNT_WORDS = frozenset(
    {"max", "min", "num", "n", "total", "input", "output", "prompt", "completion", "reasoning", "cached",
     "cache", "count", "counts", "used", "limit", "limits", "budget", "remaining"}
)  # fmt: skip
"""Words beside ``token(s)`` that make the key a count of model tokens (``max_tokens``,
``total_token_count``, ``tokens_used``), not a credential."""
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_MAX_DEPTH = 64  # deeper values are recorded as a marker, not walked
# scheme://user:password@ (also with an empty user): the password goes.
_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s:/@?#]*:)[^\s@/?#]+@")
_BEARER = re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=\-]{4,}")
_QUERY = re.compile(r"(?i)\b((?:https?|wss?)://[^\s?#\"'<>]+)\?[^\s#\"'<>]*")
# A secret-named key and its value, as code prints them: password=x, "api_key": "x", 'token': 'x'.
_KEYED = re.compile(
    r"(?i)(?<![A-Za-z0-9])([\"']?[A-Za-z0-9_\-]*(?:password|passwd|passphrase|pwd|secret|token|api[_\-]?key"
    r"|access[_\-]?key|private[_\-]?key|credentials?|bearer|jwt|dsn)[\"']?\s*[=:]\s*)"
    r"(\"[^\"]*\"|'[^']*'|[^\s\"',;&})\]]+)"
)


# Credentials recognisable by their shape alone, wherever they appear: OpenAI and Anthropic API
# keys (sk-..., sk-proj-..., sk-ant-...), JSON Web Tokens (three base64url parts, the first two
# JSON objects: eyJ...), GitHub tokens (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_), AWS access key
# ids (AKIA...), Slack tokens (xox?-), and the key of an Azure connection string or SAS URL.
_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:sk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
    r"|(?:gh[pousr]_|github_pat_)[A-Za-z0-9_]{30,}"
    r"|AKIA[0-9A-Z]{16}"
    r"|xox[abposr]-[A-Za-z0-9\-]{10,})"
    r"|(?<=AccountKey=)[^;\s\"']+|(?<=SharedAccessKey=)[^;\s\"']+|(?<=[?&]sig=)[^&\s\"'#]+"
)


def scrub_shapes(text: str) -> str:
    """``text`` with every credential recognisable by its shape (see ``scrub_text``) replaced."""
    return _SHAPES.sub(REDACTED, text) if _SHAPES.search(text) else text


def scrub_text(text: str) -> str:
    """``text`` with credentials hidden: the password of ``scheme://user:password@``, a bearer or
    basic token, the query string of a URL (where API keys travel), the value of a secret-named
    key (``password=...``, ``"api_key": "..."``) and any credential of a known shape (OpenAI and
    Anthropic keys, JWTs, GitHub, AWS and Slack tokens, Azure account keys and SAS signatures)
    become ``[redacted]``."""
    text = scrub_shapes(text)
    keyed = _KEYED.search(text) is not None
    if not keyed and "://" not in text and not _BEARER.search(text):
        return text
    text = _URL_CREDENTIALS.sub(rf"\1{REDACTED}@", text)
    text = _QUERY.sub(rf"\1?{REDACTED}", text)
    text = _BEARER.sub(rf"\1\2{REDACTED}", text)
    return _KEYED.sub(_keyed_value, text) if keyed else text


def _keyed_value(match: re.Match[str]) -> str:
    value = match.group(2)
    if value == REDACTED or value[1:-1] == REDACTED:
        return match.group(0)
    quote = value[0] if value[:1] in ("'", '"') and len(value) > 1 and value[-1] == value[0] else ""
    return f"{match.group(1)}{quote}{REDACTED}{quote}"


def wire_forms(secret: str) -> set[str]:
    """The forms ``secret`` takes on the wire: as it is, percent-encoded (in a URL's path or
    query, ``+`` for spaces or not), escaped in JSON text, and, for ``user:password``, its base64
    (what HTTP basic authentication sends) with the password alone in each of those forms."""
    forms = {secret, quote(secret, safe=""), quote(secret, safe="/:@"), quote_plus(secret)}
    forms.add(json.dumps(secret)[1:-1])
    _, colon, password = secret.partition(":")
    if colon and password:
        forms.add(base64.b64encode(secret.encode()).decode())
        forms.update({password, quote(password, safe=""), quote_plus(password)})
    return forms


def mask_values(text: str, secrets: Iterable[str], *, mask: str = REDACTED, shortest: int = 3) -> str:
    """``text`` with every wire form of every secret (at least ``shortest`` characters) replaced
    by ``mask``, longest first (so a secret inside a longer one goes with it)."""
    forms: set[str] = set()
    for secret in secrets:
        forms.update(wire_forms(secret))
    for form in sorted((f for f in forms if len(f) >= shortest), key=len, reverse=True):
        if form in text:
            text = text.replace(form, mask)
    return text


def hidden_values(kwargs: Mapping[str, Any], recorded: Mapping[str, Any]) -> list[str]:
    """The values of ``kwargs`` that its recorded form (a redaction policy's output) hides:
    those to cut out of texts the run records, such as a tool's error message."""
    found: list[str] = []

    def walk(value: Any, kept: Any, depth: int) -> None:
        if depth > _MAX_DEPTH:
            return
        if kept == REDACTED and value != REDACTED:
            if isinstance(value, str | int | float) and not isinstance(value, bool):
                found.append(str(value))
            elif isinstance(value, Mapping):
                for v in value.values():
                    walk(v, REDACTED, depth + 1)
            elif isinstance(value, list | tuple):
                for v in value:
                    walk(v, REDACTED, depth + 1)
            return
        if isinstance(value, Mapping) and isinstance(kept, Mapping):
            for k, v in value.items():
                walk(v, kept.get(str(k)), depth + 1)
        elif isinstance(value, list | tuple) and isinstance(kept, list | tuple) and len(value) == len(kept):
            for v, w in zip(value, kept, strict=True):
                walk(v, w, depth + 1)

    walk(dict(kwargs), dict(recorded), 0)
    return [value for value in found if len(value) >= 4]


@functools.lru_cache(maxsize=4096)
def _looks_secret(key: str) -> bool:
    """A key is secret when one of its words is (``api_key``, ``X-Auth-Token``, ``sessionToken``),
    except ``token(s)`` beside a word that makes it a count (``max_tokens``, ``tokens_used``).

    Memoised: a run's keys are the same run after run, and splitting a key into words is a
    regular expression."""
    words = [w.lower() for w in _WORDS.findall(key)]
    joined = {a + b for a, b in itertools.pairwise(words)}
    if _SECRET_WORDS.intersection(joined):
        return True
    for index, word in enumerate(words):
        if word not in _SECRET_WORDS:
            continue
        if word in _TOKEN_WORDS and _COUNT_WORDS.intersection(words[max(index - 1, 0) : index + 2]):
            continue  # a count of model tokens: max_tokens, tokens_used
        return True
    return False


_JSON = (str, int, float, bool, type(None))


def _scrub(key: str, value: Any, secret: Callable[[str], bool], depth: int = 0) -> Any:
    if secret(key):
        return REDACTED
    if isinstance(value, str):
        value = scrub_shapes(value)
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

    @functools.lru_cache(maxsize=4096)
    def secret(key: str) -> bool:
        return _looks_secret(key) or (extra is not None and extra.search(key) is not None)

    def redactor(kwargs: Mapping[str, Any]) -> dict[str, Any]:
        return {key: _scrub(key, value, secret) for key, value in kwargs.items()}

    return redactor


default_redactor: Redactor = redact_keys()
"""Keys with a word like password, secret, token, key, auth, credential, cookie, private, bearer,
jwt, dsn, passcode, otp or connection string are redacted (``passenger_count`` and ``author`` are
not: words, not substrings), and so are the password of every ``scheme://user:password@`` and
every credential of a known shape (``scrub_shapes``) in a string value."""


def redact_all(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A policy that records the keys only."""
    return dict.fromkeys(kwargs, REDACTED)


# -- artefacts ------------------------------------------------------------------------------------

SECRET_KEYS_ENV = "AGENTLEDGER_SECRET_KEYS"
"""An environment variable of more secret key patterns (regular expressions, comma-separated)
that every artefact writer honours, for processes such as ``agentledger show`` and
``agentledger serve`` that a program cannot call ``mark_secret_keys`` in."""

_marked_keys: list[str] = []
_marked_values: list[Callable[[str], bool]] = []


def mark_secret_keys(*patterns: str) -> None:
    """Mark the keys matching any of ``patterns`` (regular expressions, searched without case)
    as secret in every artefact this process writes, besides the usual credential names."""
    for pattern in patterns:
        re.compile(pattern)  # a bad pattern fails here, not in the middle of a write
    _marked_keys.extend(patterns)
    _key_rule.cache_clear()


def mark_secret_values(*predicates: Callable[[str], bool]) -> None:
    """Mark the strings for which any of ``predicates`` is true as secret in every artefact this
    process writes: each such string value is replaced by ``[redacted]`` whole."""
    _marked_values.extend(predicates)


@functools.lru_cache(maxsize=64)
def _key_rule(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    extra = re.compile("|".join(f"(?:{p})" for p in patterns), re.I) if patterns else None

    @functools.lru_cache(maxsize=4096)
    def secret(key: str) -> bool:
        return _looks_secret(key) or (extra is not None and extra.search(key) is not None)

    return secret


def _rules(extra: Iterable[str]) -> Callable[[str], bool]:
    from_env = [p.strip() for p in os.environ.get(SECRET_KEYS_ENV, "").split(",") if p.strip()]
    return _key_rule((*_marked_keys, *from_env, *extra))


def _hide(value: Any, secret: Callable[[str], bool], keyed: bool, depth: int) -> Any:
    if isinstance(value, str):
        if _marked_values and any(marked(value) for marked in _marked_values):
            return REDACTED
        return scrub_text(value)
    if isinstance(value, _JSON):
        return value
    if depth >= _MAX_DEPTH:
        return f"<{type(value).__name__} nested too deep>"
    if isinstance(value, Mapping):
        return {
            scrub_shapes(str(k)): REDACTED
            if keyed and secret(str(k)) and v is not None
            else _hide(v, secret, keyed, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_hide(v, secret, keyed, depth + 1) for v in value]
    return f"<{type(value).__name__}>"


def redact_value(value: Any, *, extra: Iterable[str] = ()) -> Any:
    """``value`` as an artefact may show it: every string scrubbed (``scrub_text``: credentials of
    a known shape, ``scheme://user:password@``, bearer tokens, URL query strings, ``password=``),
    the value of every key named like a credential (``api_key``, ``password``, ``client_secret``,
    ``X-Auth-Token``, ...; ``passenger_count`` and ``author`` are not: words, not substrings) or
    matching a pattern of ``extra``, ``mark_secret_keys`` or ``AGENTLEDGER_SECRET_KEYS`` replaced
    by ``[redacted]``, and so is every string a ``mark_secret_values`` predicate holds. Dicts and
    lists are walked 64 levels deep; deeper containers become a marker. ``redact_value`` of its
    own result is that result."""
    return _hide(value, _rules(extra), True, 0)


# Fields of an event that hold what a run was given or made (kwargs, arguments, results, messages,
# session values): their keys are the program's, and a key named like a credential loses its
# value. The other fields (options, usage, config, tool schemas) have the library's or the
# service's keys (``max_tokens``, ``input_tokens``): only their strings are scrubbed.
_KEYED_FIELDS = frozenset({"function_invocation_kwargs", "arguments", "result", "tool_result", "messages"})
_PLAIN_FIELDS = frozenset({"type", "run_id", "seq", "at"})


def redact_event(event: Event, *, extra: Iterable[str] = ()) -> Event:
    """``event`` as an artefact may show it (``redact_value`` of its fields): a session value
    under a secret key, a secret-named kwarg, argument or result key, and every credential in its
    text become ``[redacted]``. The event's shape, ids and numbers stay, so what reads events
    (a tree, a viewer, a span) reads the copy as it reads the log."""
    return _redact_event(event, _rules(extra))


def redact_events(events: Iterable[Event], *, extra: Iterable[str] = ()) -> list[Event]:
    """``redact_event`` of each of ``events``: what every artefact writer applies to the log."""
    secret = _rules(extra)
    return [_redact_event(event, secret) for event in events]


def _redact_event(event: Event, secret: Callable[[str], bool]) -> Event:
    data: dict[str, Any] = msgspec.json.decode(encode_event(event))
    out: dict[str, Any] = {}
    for name, value in data.items():
        if name in _PLAIN_FIELDS:
            out[name] = value
        elif name == "changes" and isinstance(value, list):
            out[name] = [_change(change, secret) for change in value]
        else:
            out[name] = _hide(value, secret, name in _KEYED_FIELDS, 1)
    return decode_event(msgspec.json.encode(out))


def _change(change: Any, secret: Callable[[str], bool]) -> Any:
    """A session change: the value of a secret key goes whole, any other is walked by key."""
    if not isinstance(change, dict) or not isinstance(change.get("key"), str):
        return _hide(change, secret, True, 2)
    key = change["key"]
    shown = {**change, "key": scrub_shapes(key)}
    if "value" in change:
        shown["value"] = REDACTED if secret(key) else _hide(change["value"], secret, True, 3)
    return shown


def holds_redactions(events: Sequence[Event]) -> bool:
    """Whether any of ``events`` holds the redaction marker (a cassette does, and so does a log
    whose kwargs its policy redacted)."""
    marker = REDACTED.encode()
    return any(marker in encode_event(event) for event in events)

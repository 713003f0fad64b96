"""How deep JSON text nests, measured on the bytes: no recursion, one pass in C for most input.

Python code that walks a value recurses once per level, and so does msgspec; a record nested a
thousand levels deep would reach the interpreter's recursion limit in whatever reads it. The log
therefore holds nothing nested deeper than ``MAX_DEPTH``, and readers check stored bytes with
``too_deep`` before decoding them.
"""

from __future__ import annotations

import re

__all__ = ("MAX_DEPTH", "too_deep")

MAX_DEPTH = 256
"""The deepest nesting of containers (JSON arrays and objects) a recorded event may hold."""

# Every byte that cannot open a container goes; "{" becomes "[": a run of MAX_DEPTH + 1 "[" in
# what is left is a line with that many openers, which any line nested that deep has.
_OPENERS_ONLY = bytes.maketrans(b"{", b"[")
_NOT_OPENERS = bytes(b for b in range(256) if b not in b"[{\n")
_TOO_MANY = b"[" * (MAX_DEPTH + 1)
_COUNTED = 4096  # up to this size, counting openers is cheaper than translating the bytes
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*+"|[\[\]{}]', re.S)


def _json_depth(data: bytes) -> int:
    """How deep containers nest in the JSON text ``data`` (0 for a scalar), without recursion."""
    depth = deepest = 0
    for match in _TOKENS.finditer(data):
        char = data[match.start()]
        if char == 0x22:  # a string: its brackets do not count
            continue
        if char in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def too_deep(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether a line of the JSON lines in ``data`` nests deeper than ``limit``.

    Counting openers per line is one pass in C; only a line with more than ``limit`` of them
    (rare: a large schema, a hostile record) is measured exactly.
    """
    if len(data) <= 2 * limit:  # a container needs two bytes
        return False
    # A short record: two counts, no copy. A longer block holds more openers than any limit, so
    # counting them would decide nothing; one translate keeps them and the line ends instead.
    if len(data) <= _COUNTED and data.count(b"[") + data.count(b"{") <= limit:
        return False
    run = _TOO_MANY if limit == MAX_DEPTH else b"[" * (limit + 1)
    if data.translate(_OPENERS_ONLY, _NOT_OPENERS).find(run) < 0:
        return False
    return any(
        line.count(b"[") + line.count(b"{") > limit and _json_depth(line) > limit
        for line in data.split(b"\n")
    )

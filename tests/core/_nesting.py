"""How deeply a JSON value nests, by the obvious definition: what ``core/depth.py``'s byte scan and
``core/limits.py``'s gate are compared with."""

from __future__ import annotations


def depth_of(value: object) -> int:
    """How deeply ``value`` nests (walked with a stack: the values go deeper than Python's
    recursion limit allows under a tracer, as Python 3.12's monitoring is)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, above = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            deepest = max(deepest, above)
            continue
        deepest = max(deepest, above + 1)
        stack.extend((child, above + 1) for child in children)
    return deepest


def nested(depth: int, wide: int, text: str) -> object:
    """A value ``depth`` containers deep (lists and objects in turn), beside ``wide`` shallow
    lists; ``text`` (brackets in a string count for nothing) sits at the bottom."""
    value: object = text
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return {"deep": value, "wide": [[i] for i in range(wide)]}

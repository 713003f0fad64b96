"""Read back by shape: whether an event holding structs decodes from the log, without decoding it.

The gate (``limits.check_event``) must know that an event's JSON decodes with the typed event
decoder. Decoding proves it, at the price of building every struct of the event again (a model's
answer, a run's input, its tool specs). Where each value of the event has exactly the type its
field declares, the answer is known without that: msgspec writes a ``str`` as a JSON string, an
``int`` as a number, a ``bool`` as ``true`` or ``false``, ``None`` as ``null``, a struct as an
object of its fields and a tuple as an array, and reads each back into the type declared. What
can still fail is an integer past 64 bits, a float JSON cannot hold (NaN and infinity are written
as ``null``, which only an optional float takes) and, in a free value (a field typed ``Any`` or
``dict[str, Any]``), nesting deeper than ``MAX_DEPTH``.

``compile_shape(cls)`` writes, once per event type, a function of the event and its encoded bytes
that walks the fields as the type declares them and answers:

- True: the event reads back. Typed values have their exact types (a subclass, a ``bool`` in an
  ``int`` field or an ``int`` in a ``float`` field is not taken for certain), integers are in the
  64-bit range, required floats are finite. A free value that is a container (a tool's result, a
  schema) is walked in place where it is small (``free_value_fits``); a large one, or one holding
  a type JSON has no name for, has the encoded text measured for depth and scanned for long
  integers instead (``too_deep``, ``may_overflow``), as for the flat events.
- False: not certain; the gate then decodes the bytes (the long way), which names the problem.

A type the compiler does not know (a constrained field, a union of structs, a fixed-length tuple)
gets no shape: its events always go the long way. ``compile_shape`` returns None for it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import msgspec.inspect as mi

from .depth import too_deep

__all__ = ("IN_PLACE", "Shape", "compile_shape", "free_value_fits")

Shape = Callable[[Any, bytes], bool]
"""What ``compile_shape`` makes: ``shape(event, data)`` is True when ``event`` (encoded as
``data``) certainly reads back; False when only decoding can tell."""

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_NESTING = 8  # the deepest struct nesting a shape follows (events nest three or four)
_LEAVES = frozenset({str, bool, float, type(None)})

IN_PLACE = 128
"""The most values of one free value (its containers' items, all levels) ``free_value_fits``
walks; past it, the encoded text decides. So few values cannot nest deeper than ``MAX_DEPTH``,
even inside the deepest event a shape follows: the walk needs no depth count of its own."""


def free_value_fits(value: Any) -> bool | None:
    """Whether a free JSON value (a tool's result or arguments, a schema, an option) certainly
    reads back, checked value by value: True when it holds only dicts, lists, tuples, text,
    numbers, flags and None, with every integer within 64 bits; False for an integer past 64
    bits; None when it holds more than ``IN_PLACE`` values or a type of another kind (a
    subclass, a struct, a date): the encoded text decides then (``too_deep``, ``may_overflow``).

    Floats are taken as they are: NaN and infinity are written as ``null``, which a free value
    reads back (as ``None``). The keys of a mapping are not looked at: encoding has refused those
    JSON cannot hold.
    """
    kind = type(value)
    items: Any
    if kind is dict:
        items = value.values()
    elif kind is list or kind is tuple:
        items = value
    elif kind in _LEAVES:
        return True
    elif kind is int:
        fits: bool = INT64_MIN <= value <= INT64_MAX
        return fits
    else:
        return None
    budget = IN_PLACE
    inner: list[Any] | None = None  # the containers met so far, walked after the one at hand
    while True:
        budget -= len(items)
        if budget < 0:
            return None
        for item in items:
            kind = type(item)
            if kind in _LEAVES:
                continue
            if kind is int:
                if not INT64_MIN <= item <= INT64_MAX:
                    return False
            elif kind is dict:
                if inner is None:
                    inner = []
                inner.append(item.values())
            elif kind is list or kind is tuple:
                if inner is None:
                    inner = []
                inner.append(item)
            else:
                return None
        if not inner:
            return True
        items = inner.pop()


class _Unknown(Exception):
    """A type the compiler does not follow: the event type gets no shape."""


def compile_shape(cls: type[Any], may_overflow: Callable[[bytes], bool]) -> Shape | None:
    """The shape check of the struct type ``cls`` (None where a field's type is one the compiler
    does not follow). ``may_overflow`` scans encoded text for integers past 64 bits."""
    writer = _Writer()
    try:
        writer.struct("event", mi.type_info(cls), 1, 0)
    except _Unknown:
        return None
    source = "\n".join(
        [
            "def shape(event, data):",
            "    free = False",
            *writer.lines,
            "    return not free or (not too_deep(data) and not may_overflow(data))",
        ]
    )
    namespace: dict[str, Any] = {
        **writer.constants,
        "too_deep": too_deep,
        "may_overflow": may_overflow,
        "fits": free_value_fits,
        "LEAVES": _LEAVES,
        "LOW": INT64_MIN,
        "HIGH": INT64_MAX,
        "isfinite": math.isfinite,
    }
    exec(compile(source, f"<shape of {cls.__name__}>", "exec"), namespace)
    shape: Shape = namespace["shape"]
    shape.__doc__ = f"Whether a {cls.__name__} certainly reads back (see ``compile_shape``).\n\n{source}"
    return shape


class _Writer:
    """Writes the body of a shape function: one ``if ...: return False`` per typed value."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.constants: dict[str, Any] = {}
        self._names = itertools.count()

    def _name(self, prefix: str) -> str:
        return f"{prefix}{next(self._names)}"

    def _emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def struct(self, value: str, info: Any, indent: int, nesting: int) -> None:
        if not isinstance(info, mi.StructType) or nesting > _NESTING:
            raise _Unknown(info)
        if nesting:  # the event itself is of its own type: the gate looked it up by it
            cls = self._name("S")
            self.constants[cls] = info.cls
            self._emit(indent, f"if type({value}) is not {cls}:")
            self._emit(indent + 1, "return False")
        for field in info.fields:
            name = self._name("v")
            self._emit(indent, f"{name} = {value}.{field.name}")
            self.value(name, field.type, indent, nesting + 1)

    def value(self, value: str, info: Any, indent: int, nesting: int) -> None:
        """Lines that return False unless ``value`` certainly reads back as ``info``."""
        scalar = self._scalar(value, info, optional=False)
        if scalar is not None:
            self._emit(indent, f"if {scalar}:")
            self._emit(indent + 1, "return False")
        elif isinstance(info, mi.UnionType):
            self._union(value, info, indent, nesting)
        elif isinstance(info, mi.StructType):
            self.struct(value, info, indent, nesting)
        elif isinstance(info, mi.VarTupleType) and info.min_length is None and info.max_length is None:
            self._emit(indent, f"if type({value}) is not tuple:")
            self._emit(indent + 1, "return False")
            item = self._name("i")
            self._emit(indent, f"for {item} in {value}:")
            self.value(item, info.item_type, indent + 1, nesting)
        elif isinstance(info, mi.DictType) and _free_object(info):
            self._emit(indent, f"if type({value}) is not dict:")
            self._emit(indent + 1, "return False")
            self._free_values(value, indent)
        elif isinstance(info, mi.AnyType):
            self._free(value, indent)
        else:
            raise _Unknown(info)

    def _scalar(self, value: str, info: Any, *, optional: bool) -> str | None:
        """The condition under which a scalar ``value`` does not certainly read back as
        ``info`` (None: ``info`` is no scalar the compiler knows)."""
        if isinstance(info, mi.StrType) and _plain(info, "min_length", "max_length", "pattern"):
            return f"type({value}) is not str"
        if isinstance(info, mi.IntType) and _plain(info, "gt", "ge", "lt", "le", "multiple_of"):
            return f"type({value}) is not int or not LOW <= {value} <= HIGH"
        if isinstance(info, mi.BoolType):
            return f"type({value}) is not bool"
        if isinstance(info, mi.FloatType) and _plain(info, "gt", "ge", "lt", "le", "multiple_of"):
            # NaN and infinity are written as null: only an optional float takes that back.
            finite = "" if optional else f" or not isfinite({value})"
            return f"type({value}) is not float{finite}"
        if isinstance(info, mi.NoneType):
            return f"{value} is not None"
        if isinstance(info, mi.LiteralType) and all(type(v) is str for v in info.values):
            choices = self._name("L")
            self.constants[choices] = frozenset(info.values)
            return f"type({value}) is not str or {value} not in {choices}"
        return None

    def _union(self, value: str, info: Any, indent: int, nesting: int) -> None:
        """An optional value (``X | None``), or a union of scalars."""
        others = [t for t in info.types if not isinstance(t, mi.NoneType)]
        optional = len(others) < len(info.types)
        if optional and len(others) == 1:
            scalar = self._scalar(value, others[0], optional=True)
            if scalar is not None:
                self._emit(indent, f"if {value} is not None and ({scalar}):")
                self._emit(indent + 1, "return False")
                return
            self._emit(indent, f"if {value} is not None:")
            self.value(value, others[0], indent + 1, nesting)
            return
        conditions = [self._scalar(value, t, optional=optional) for t in others]
        if not conditions or any(c is None for c in conditions):
            raise _Unknown(info)  # a union of structs, or with a free value: decoded
        # Not certain unless the value is one of the members for certain.
        failing = " and ".join(f"({c})" for c in conditions)
        self._emit(indent, f"if {value} is not None and {failing}:" if optional else f"if {failing}:")
        self._emit(indent + 1, "return False")

    def _free(self, value: str, indent: int) -> None:
        """A free value: a leaf or a small container in place, a large one on the text."""
        kind, fits = self._name("t"), self._name("f")
        self._emit(indent, f"{kind} = type({value})")
        self._emit(indent, f"if {kind} is int:")
        self._emit(indent + 1, f"if not LOW <= {value} <= HIGH:")
        self._emit(indent + 2, "return False")
        self._emit(indent, f"elif {kind} not in LEAVES:")
        self._fits(value, fits, indent + 1)

    def _free_values(self, mapping: str, indent: int) -> None:
        """A free mapping (known to be a dict): its values in place if few, else on the text;
        an empty one (the options of most runs) is done with at once."""
        self._emit(indent, f"if {mapping}:")
        self._fits(mapping, self._name("f"), indent + 1)

    def _fits(self, value: str, fits: str, indent: int) -> None:
        self._emit(indent, f"{fits} = fits({value})")
        self._emit(indent, f"if {fits} is None:")
        self._emit(indent + 1, "free = True")
        self._emit(indent, f"elif not {fits}:")
        self._emit(indent + 1, "return False")


def _plain(info: Any, *constraints: str) -> bool:
    """Whether a scalar type carries none of the constraints msgspec checks on decoding."""
    return all(getattr(info, name) is None for name in constraints)


def _free_object(info: Any) -> bool:
    return isinstance(info.key_type, mi.StrType) and isinstance(info.value_type, mi.AnyType)

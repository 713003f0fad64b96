"""The span model shared by the OTLP export and the live OpenTelemetry bridge.

``Span`` is a finished span as OTLP carries it (hex ids, nanosecond times, integer enums). The
fold in ``_otlp_fold`` does not build spans directly: it returns operations (``Opened``,
``Noted``, ``Closed``) keyed by ``SpanKey``, so the export can assemble ``Span`` values from a
stored log while the bridge turns the same operations into live OpenTelemetry API calls.

Ids are derived from run ids, never drawn at random: a span's id is a hash of its key (run id,
kind, key within the run), and a trace's id a hash of the root run's id, so exporting the same
log twice yields the same ids and a receiver that deduplicates by id keeps one copy.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import msgspec

__all__ = (
    "SPAN_KIND_CLIENT",
    "SPAN_KIND_INTERNAL",
    "STATUS_ERROR",
    "STATUS_OK",
    "STATUS_UNSET",
    "AttrValue",
    "Attributes",
    "Closed",
    "Noted",
    "Op",
    "Opened",
    "Span",
    "SpanEvent",
    "SpanKey",
    "span_id",
    "trace_id",
)

SPAN_KIND_INTERNAL = 1
SPAN_KIND_CLIENT = 3
STATUS_UNSET = 0
STATUS_OK = 1
STATUS_ERROR = 2

Scalar = str | bool | int | float
AttrValue = Scalar | tuple[str, ...] | tuple[int, ...] | tuple[float, ...] | tuple[bool, ...]
"""What an OTLP attribute holds here: a scalar or a homogeneous tuple of scalars."""
Attributes = dict[str, AttrValue]


class SpanKey(NamedTuple):
    """Which span of which run: ``kind`` is ``agent``, ``chat`` or ``tool``."""

    run_id: str
    kind: str
    key: str = ""


class SpanEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A timestamped fact recorded on a span."""

    name: str
    time_unix_nano: int
    attributes: Attributes = msgspec.field(default_factory=dict)


class Span(msgspec.Struct, frozen=True, kw_only=True):
    """A finished span: ids in lowercase hex, times in nanoseconds since the epoch."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: int
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: Attributes = msgspec.field(default_factory=dict)
    events: tuple[SpanEvent, ...] = ()
    status_code: int = STATUS_UNSET
    status_message: str = ""


class Opened(msgspec.Struct, frozen=True, kw_only=True):
    """A span begins; ``root_run_id`` names the run whose trace it belongs to."""

    key: SpanKey
    parent: SpanKey | None
    root_run_id: str
    name: str
    kind: int
    at: int
    attributes: Attributes


class Noted(msgspec.Struct, frozen=True, kw_only=True):
    """A span event on an open span."""

    key: SpanKey
    name: str
    at: int
    attributes: Attributes


class Closed(msgspec.Struct, frozen=True, kw_only=True):
    """A span ends; ``name`` renames it when what it was about became known only now."""

    key: SpanKey
    at: int
    attributes: Attributes
    status_code: int = STATUS_UNSET
    status_message: str = ""
    name: str | None = None


Op = Opened | Noted | Closed


def _digest(*parts: str, size: int) -> bytes:
    raw = hashlib.sha256("\x00".join(("agentledger", *parts)).encode()).digest()[:size]
    return raw if any(raw) else b"\x01".rjust(size, b"\x00")  # an all-zero id is invalid in OTLP


def span_id(key: SpanKey) -> str:
    """The span's 8-byte id, in hex, derived from its key."""
    return _digest("span", *key, size=8).hex()


def trace_id(root_run_id: str) -> str:
    """The 16-byte trace id, in hex, shared by a root run and all its sub-agent runs."""
    return _digest("trace", root_run_id, size=16).hex()

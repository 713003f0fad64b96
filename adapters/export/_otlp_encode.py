"""Spans from operations, and spans as an ``ExportTraceServiceRequest``: OTLP JSON and protobuf.

OTLP/HTTP JSON differs from the protobuf JSON mapping in three ways a receiver checks: trace and
span ids are lowercase hex (not base64), enum fields (span kind, status code) are integers, and
64-bit integers (times, ``intValue``) are decimal strings. Field names are lowerCamelCase.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentledger import __version__

from ._otlp_model import AttrValue, Closed, Noted, Op, Opened, Span, SpanEvent, SpanKey, span_id, trace_id

__all__ = ("INSTALL_HINT", "assemble", "request_json", "request_protobuf")

_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1

INSTALL_HINT = "the protobuf encoding needs opentelemetry-proto: pip install 'agentledger[otlp]'"
SCOPE = "agentledger"


class _Builder:
    """A span being assembled from its operations."""

    def __init__(self, opened: Opened) -> None:
        self.opened = opened
        self.events: list[SpanEvent] = []
        self.closed: Closed | None = None

    def span(self) -> Span:
        opened, closed = self.opened, self.closed
        assert closed is not None
        return Span(
            trace_id=trace_id(opened.root_run_id),
            span_id=span_id(opened.key),
            parent_span_id=span_id(opened.parent) if opened.parent is not None else None,
            name=closed.name or opened.name,
            kind=opened.kind,
            start_time_unix_nano=_nanos(opened.at),
            end_time_unix_nano=_nanos(max(opened.at, closed.at)),
            attributes={**opened.attributes, **closed.attributes},
            events=tuple(self.events),
            status_code=closed.status_code,
            status_message=closed.status_message,
        )


def assemble(ops: Iterable[Op]) -> list[Span]:
    """Finished spans, in the order they were opened; every span must have been closed."""
    builders: dict[SpanKey, _Builder] = {}
    for op in ops:
        if type(op) is Opened:
            builders[op.key] = _Builder(op)
        elif type(op) is Noted:
            event = SpanEvent(name=op.name, time_unix_nano=_nanos(op.at), attributes=op.attributes)
            builders[op.key].events.append(event)
        else:
            assert type(op) is Closed
            builders[op.key].closed = op
    return [builder.span() for builder in builders.values()]


def _nanos(at: int) -> int:
    """A time as OTLP holds it (an unsigned 64-bit count of nanoseconds)."""
    return min(max(at, 0), _UINT64_MAX)


def _fits(value: int) -> bool:
    """Whether an integer attribute fits OTLP's ``intValue`` (signed 64 bits); else it is sent as
    its decimal text rather than failing the whole export."""
    return _INT64_MIN <= value <= _INT64_MAX


# -- JSON ----------------------------------------------------------------------------------------


def _json_value(value: AttrValue) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)} if _fits(value) else {"stringValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    return {"arrayValue": {"values": [_json_value(item) for item in value]}}


def _json_attributes(attributes: Mapping[str, AttrValue]) -> list[dict[str, Any]]:
    return [{"key": key, "value": _json_value(value)} for key, value in attributes.items()]


def _json_event(event: SpanEvent) -> dict[str, Any]:
    attributes = _json_attributes(event.attributes)
    return {"timeUnixNano": str(event.time_unix_nano), "name": event.name, "attributes": attributes}


def _json_span(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {"traceId": span.trace_id, "spanId": span.span_id}
    if span.parent_span_id is not None:
        out["parentSpanId"] = span.parent_span_id
    out.update(
        name=span.name,
        kind=span.kind,
        startTimeUnixNano=str(span.start_time_unix_nano),
        endTimeUnixNano=str(span.end_time_unix_nano),
        attributes=_json_attributes(span.attributes),
    )
    if span.events:
        out["events"] = [_json_event(e) for e in span.events]
    status: dict[str, Any] = {"code": span.status_code}
    if span.status_message:
        status["message"] = span.status_message
    out["status"] = status
    return out


def request_json(spans: Sequence[Span], resource: Mapping[str, AttrValue]) -> dict[str, Any]:
    """The ``ExportTraceServiceRequest`` as OTLP/HTTP JSON, ready for a JSON encoder."""
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _json_attributes(resource)},
                "scopeSpans": [
                    {
                        "scope": {"name": SCOPE, "version": __version__},
                        "spans": [_json_span(span) for span in spans],
                    }
                ],
            }
        ]
    }


# -- protobuf ------------------------------------------------------------------------------------


def request_protobuf(spans: Sequence[Span], resource: Mapping[str, AttrValue]) -> bytes:
    """The ``ExportTraceServiceRequest`` in the protobuf wire format."""
    try:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
        from opentelemetry.proto.common.v1 import common_pb2
        from opentelemetry.proto.resource.v1 import resource_pb2
        from opentelemetry.proto.trace.v1 import trace_pb2
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc

    def value(item: AttrValue) -> common_pb2.AnyValue:
        if isinstance(item, bool):
            return common_pb2.AnyValue(bool_value=item)
        if isinstance(item, int):
            if not _fits(item):
                return common_pb2.AnyValue(string_value=str(item))
            return common_pb2.AnyValue(int_value=item)
        if isinstance(item, float):
            return common_pb2.AnyValue(double_value=item)
        if isinstance(item, str):
            return common_pb2.AnyValue(string_value=item)
        return common_pb2.AnyValue(array_value=common_pb2.ArrayValue(values=[value(v) for v in item]))

    def attributes(items: Mapping[str, AttrValue]) -> list[common_pb2.KeyValue]:
        return [common_pb2.KeyValue(key=key, value=value(item)) for key, item in items.items()]

    def event(e: SpanEvent) -> trace_pb2.Span.Event:
        return trace_pb2.Span.Event(
            name=e.name, time_unix_nano=e.time_unix_nano, attributes=attributes(e.attributes)
        )

    def span(s: Span) -> trace_pb2.Span:
        events = [event(e) for e in s.events]
        return trace_pb2.Span(
            trace_id=bytes.fromhex(s.trace_id),
            span_id=bytes.fromhex(s.span_id),
            parent_span_id=bytes.fromhex(s.parent_span_id) if s.parent_span_id else b"",
            name=s.name,
            kind=s.kind,  # type: ignore[arg-type]  # the enum's values are the wire integers
            start_time_unix_nano=s.start_time_unix_nano,
            end_time_unix_nano=s.end_time_unix_nano,
            attributes=attributes(s.attributes),
            events=events,
            status=trace_pb2.Status(code=s.status_code, message=s.status_message),  # type: ignore[arg-type]
        )

    request = trace_service_pb2.ExportTraceServiceRequest(
        resource_spans=[
            trace_pb2.ResourceSpans(
                resource=resource_pb2.Resource(attributes=attributes(resource)),
                scope_spans=[
                    trace_pb2.ScopeSpans(
                        scope=common_pb2.InstrumentationScope(name=SCOPE, version=__version__),
                        spans=[span(s) for s in spans],
                    )
                ],
            )
        ]
    )
    return request.SerializeToString(deterministic=True)

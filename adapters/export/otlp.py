"""OTLP traces from event logs, following the OpenTelemetry GenAI semantic conventions.

::

    spans = spans_from_events(events)                     # pure: the same log, the same spans
    body = encode_protobuf(spans)                         # or encode_json(spans)
    result = await export_otlp(events, "http://127.0.0.1:4318")
    write_otlp_json_file(events, "traces.jsonl")          # the Collector's OTLP JSON file format

A run is an ``invoke_agent {agent}`` span, its model calls ``chat {model}`` spans and its tool
calls ``execute_tool {tool}`` spans; sub-agent runs nest under the tool call that started them,
in one trace per root run. Ids are hashes of run ids, so exporting is a function of the stored
log: exporting it again sends the same ids, and replaying a run exports nothing (a rerun's events
are compared with the log, not stored). See docs/observability.md for the attribute mapping.

Message, argument and result content is exported only with ``include_content=True``; secrets
never are, because the log never holds ``client_kwargs`` values and holds
``function_invocation_kwargs`` only as redacted.

The protobuf encoding needs ``opentelemetry-proto`` (``pip install 'agentledger[otlp]'``).
"""

from __future__ import annotations

import email.utils
import gzip
import os
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import anyio
import httpx
import msgspec

from agentledger.core.events import Event, RunStarted
from agentledger.errors import AgentLedgerError
from agentledger.logs import logger
from agentledger.redaction import redact_events

from ._otlp_encode import INSTALL_HINT, assemble, request_json, request_protobuf
from ._otlp_fold import SpanFold
from ._otlp_model import AttrValue, Span, SpanEvent

__all__ = (
    "INSTALL_HINT",
    "RETRY_STATUSES",
    "ExportError",
    "ExportResult",
    "OtlpSettings",
    "Span",
    "SpanEvent",
    "encode_json",
    "encode_protobuf",
    "export_otlp",
    "retry_delay",
    "settings_from_env",
    "spans_from_events",
    "traces_url",
    "write_otlp_json_file",
)

_log = logger("export")

RETRY_STATUSES = frozenset({429, 502, 503, 504})
"""The responses worth another attempt (the OTLP/HTTP specification's retryable statuses)."""

_CONTENT_TYPES = {"protobuf": "application/x-protobuf", "json": "application/json"}
_DEFAULT_RESOURCE: Mapping[str, AttrValue] = {"service.name": "agentledger"}
_json = msgspec.json.Encoder()

Sleep = Callable[[float], Awaitable[object]]


class ExportError(AgentLedgerError):
    """The receiver refused the export, or could not be reached (``status_code`` None)."""

    def __init__(self, message: str, *, status_code: int | None = None, attempts: int = 0) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.attempts = attempts


class ExportResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one export sent: ``rejected_spans`` is the receiver's partial-success count."""

    spans: int
    attempts: int
    status_code: int
    rejected_spans: int = 0


# -- from a log to spans -------------------------------------------------------------------------


def _ordered(events: Iterable[Event]) -> list[Event]:
    """Each run's events in seq order, runs in order of first appearance, duplicates dropped."""
    runs: dict[str, dict[int, Event]] = {}
    for event in events:
        runs.setdefault(event.run_id, {}).setdefault(event.seq, event)
    return [run[seq] for run in runs.values() for seq in sorted(run)]


def _roots(events: Sequence[Event]) -> dict[str, str]:
    """Each run's root run: the top of its parent chain, or the missing parent it names."""
    parents = {e.run_id: e.parent_run_id for e in events if type(e) is RunStarted}
    roots: dict[str, str] = {}
    for run_id in parents:
        current, seen = run_id, {run_id}
        while (parent := parents.get(current)) is not None and parent not in seen:
            current = parent
            seen.add(parent)
        roots[run_id] = current
    return roots


def spans_from_events(
    events: Iterable[Event], *, include_content: bool = False, provider_name: str | None = None
) -> list[Span]:
    """The spans of every run in ``events`` (one log or several, sub-agent runs included).

    Runs whose ``RunStarted`` is missing are skipped; spans still open where a log ends are closed
    at the run's last event and marked ``agentledger.incomplete``. ``provider_name``
    names the model provider (``gen_ai.provider.name``), which the log does not record. Spans
    are made from the events as ``redact_events`` gives them: no credential reaches a span.
    """
    ordered = _ordered(redact_events(events))
    fold = SpanFold(include_content=include_content, provider_name=provider_name, roots=_roots(ordered))
    ops = [op for event in ordered for op in fold.apply(event)]
    return assemble([*ops, *fold.finish()])


# -- encodings -----------------------------------------------------------------------------------


def _resource(resource: Mapping[str, AttrValue] | None) -> Mapping[str, AttrValue]:
    return {**_DEFAULT_RESOURCE, **(resource or {})}


def encode_json(spans: Sequence[Span], *, resource: Mapping[str, AttrValue] | None = None) -> bytes:
    """An ``ExportTraceServiceRequest`` as OTLP/HTTP JSON (``application/json``).

    ``resource`` adds resource attributes to ``service.name=agentledger`` (for Phoenix, say,
    ``{"openinference.project.name": "my-project"}``).
    """
    return _json.encode(request_json(spans, _resource(resource)))


def encode_protobuf(spans: Sequence[Span], *, resource: Mapping[str, AttrValue] | None = None) -> bytes:
    """An ``ExportTraceServiceRequest`` as protobuf (``application/x-protobuf``)."""
    return request_protobuf(spans, _resource(resource))


def _traces(spans: Sequence[Span]) -> list[list[Span]]:
    by_trace: dict[str, list[Span]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    return list(by_trace.values())


def write_otlp_json_file(
    events: Iterable[Event],
    path: str | Path,
    *,
    include_content: bool = False,
    provider_name: str | None = None,
    resource: Mapping[str, AttrValue] | None = None,
    append: bool = False,
) -> int:
    """Write the Collector's OTLP JSON file format: one ``ExportTraceServiceRequest`` per line.

    One line per trace (a root run with its sub-agent runs). The file is replaced unless
    ``append``. Returns the number of spans written.
    """
    spans = spans_from_events(events, include_content=include_content, provider_name=provider_name)
    lines = [encode_json(trace, resource=resource) + b"\n" for trace in _traces(spans)]
    with open(path, "ab" if append else "wb") as file:
        file.writelines(lines)
    return len(spans)


# -- configuration from the environment -----------------------------------------------------------


class OtlpSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Where and how to send traces, as the standard ``OTEL_*`` variables say."""

    endpoint: str | None = None
    """The full ``.../v1/traces`` URL, or None when no variable names one."""
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    timeout: float = 10.0
    """Seconds (the variables give milliseconds)."""
    compression: Literal["gzip", "none"] = "none"
    encoding: Literal["protobuf", "json"] = "protobuf"
    resource: dict[str, AttrValue] = msgspec.field(default_factory=dict)


_PROTOCOLS: dict[str, Literal["protobuf", "json"]] = {"http/protobuf": "protobuf", "http/json": "json"}


def settings_from_env(environ: Mapping[str, str] | None = None) -> OtlpSettings:
    """The OTLP exporter settings of the OpenTelemetry specification's environment variables.

    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (used as it is) or ``OTEL_EXPORTER_OTLP_ENDPOINT``
    (``/v1/traces`` appended); ``..._HEADERS`` (``name=value`` pairs, comma separated, values
    percent-decoded); ``..._TIMEOUT`` (milliseconds); ``..._COMPRESSION`` (``gzip`` or ``none``);
    ``..._PROTOCOL`` (``http/protobuf`` or ``http/json``; ``grpc`` is refused); each ``TRACES_``
    variable before the general one. ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME`` (which
    wins for ``service.name``) give the resource. A malformed value raises ``ExportError``.
    """
    env = os.environ if environ is None else environ

    def read(name: str) -> str | None:
        value = env.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}") or env.get(f"OTEL_EXPORTER_OTLP_{name}")
        return value.strip() if value and value.strip() else None

    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip() or None
    if endpoint is None and (base := env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()):
        endpoint = traces_url(base)
    timeout = 10.0
    if (raw_timeout := read("TIMEOUT")) is not None:
        try:
            timeout = float(raw_timeout) / 1000
        except ValueError:
            message = f"OTEL_EXPORTER_OTLP_TIMEOUT must be milliseconds, not {raw_timeout!r}"
            raise ExportError(message) from None
        if not timeout > 0:
            raise ExportError(f"OTEL_EXPORTER_OTLP_TIMEOUT must be positive, not {raw_timeout!r}")
    compression = (read("COMPRESSION") or "none").lower()
    if compression not in ("gzip", "none"):
        raise ExportError(f"OTEL_EXPORTER_OTLP_COMPRESSION must be gzip or none, not {compression!r}")
    protocol = (read("PROTOCOL") or "http/protobuf").lower()
    if protocol not in _PROTOCOLS:
        raise ExportError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL {protocol!r}: traces go over OTLP/HTTP (http/protobuf or http/json)"
        )
    attributes = _pairs(env.get("OTEL_RESOURCE_ATTRIBUTES"), "OTEL_RESOURCE_ATTRIBUTES")
    resource: dict[str, AttrValue] = dict(attributes)
    if service := env.get("OTEL_SERVICE_NAME", "").strip():
        resource["service.name"] = service
    return OtlpSettings(
        endpoint=endpoint,
        headers=_pairs(read("HEADERS"), "OTEL_EXPORTER_OTLP_HEADERS"),
        timeout=timeout,
        compression="gzip" if compression == "gzip" else "none",
        encoding=_PROTOCOLS[protocol],
        resource=resource,
    )


def _pairs(text: str | None, variable: str) -> dict[str, str]:
    """``name=value,name2=value2`` with percent-encoded values, as the OTel variables write them."""
    pairs: dict[str, str] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ExportError(f"{variable}: {item.strip()!r} is not name=value")
        pairs[urllib.parse.unquote(name.strip())] = urllib.parse.unquote(value.strip())
    return pairs


# -- over HTTP -----------------------------------------------------------------------------------


def traces_url(endpoint: str) -> str:
    """``endpoint`` itself when it ends in ``/v1/traces``, else with ``/v1/traces`` appended."""
    url = httpx.URL(endpoint)
    path = url.path.rstrip("/")
    if path.endswith("/v1/traces"):
        return str(url)
    return str(url.copy_with(path=f"{path}/v1/traces"))


def retry_delay(response: httpx.Response, attempt: int, backoff: float, max_delay: float) -> float:
    """Seconds to wait before the next attempt: ``Retry-After`` if given, else exponential."""
    raw = response.headers.get("retry-after", "").strip()
    delay: float | None = None
    if raw.isdigit():
        delay = float(raw)
    elif raw:
        delay = _seconds_until(raw, response.headers.get("date"))
    if delay is None:
        delay = backoff * 2 ** (attempt - 1)
    return min(max(delay, 0.0), max_delay)


def _seconds_until(http_date: str, server_date: str | None) -> float | None:
    """From the response's own ``Date`` when it has one, so the wait does not depend on our clock."""
    try:
        when = email.utils.parsedate_to_datetime(http_date)
        now = email.utils.parsedate_to_datetime(server_date) if server_date else datetime.now(UTC)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    return (when - now).total_seconds()


def _rejected(response: httpx.Response, encoding: str) -> int:
    """The partial-success count of a 2xx response (0 when it has none or does not decode)."""
    if not response.content:
        return 0
    try:
        if encoding == "json":
            partial = msgspec.json.decode(response.content).get("partialSuccess") or {}
            return int(partial.get("rejectedSpans", 0))
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        message = trace_service_pb2.ExportTraceServiceResponse.FromString(response.content)
        return int(message.partial_success.rejected_spans)
    except Exception:  # a receiver's odd success body is not our failure
        return 0


async def _post(
    client: httpx.AsyncClient,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    max_attempts: int,
    sleep: Sleep,
    backoff: float,
    max_delay: float,
) -> tuple[httpx.Response, int]:
    attempt = 0
    while True:
        attempt += 1
        try:
            response = await client.post(url, content=body, headers=dict(headers))
        except httpx.HTTPError as exc:
            raise ExportError(f"cannot reach {url}: {type(exc).__name__}", attempts=attempt) from exc
        if response.status_code not in RETRY_STATUSES or attempt >= max_attempts:
            return response, attempt
        delay = retry_delay(response, attempt, backoff, max_delay)
        _log.warning(
            "OTLP export to %s answered %s; attempt %d of %d, next in %.1f s",
            url, response.status_code, attempt + 1, max_attempts, delay,
        )  # fmt: skip
        await sleep(delay)


async def export_otlp(
    events: Iterable[Event],
    endpoint: str | None = None,
    *,
    encoding: Literal["protobuf", "json"] | None = None,
    headers: Mapping[str, str] | None = None,
    client: httpx.AsyncClient | None = None,
    include_content: bool = False,
    provider_name: str | None = None,
    resource: Mapping[str, AttrValue] | None = None,
    max_attempts: int = 5,
    backoff: float = 0.5,
    max_delay: float = 30.0,
    http_timeout: float | None = None,
    compression: Literal["gzip", "none"] | None = None,
    environ: Mapping[str, str] | None = None,
    sleep: Sleep = anyio.sleep,
) -> ExportResult:
    """Send the spans of ``events`` to an OTLP/HTTP receiver in one request.

    ``endpoint`` is the receiver's base URL or its ``.../v1/traces`` URL. What is not given comes
    from the standard ``OTEL_*`` variables (``settings_from_env``; ``environ`` replaces
    ``os.environ``): the endpoint, headers (given ones win), timeout, ``compression`` (``gzip``
    compresses the body), encoding and resource attributes. Only 429, 502, 503 and
    504 are retried, at most ``max_attempts`` attempts in all, waiting ``Retry-After`` when the
    receiver sends it (else ``backoff`` doubling per attempt), never more than ``max_delay``.
    ``sleep`` does the waiting (tests pass a recorder). Raises ``ExportError`` when no endpoint is
    given or configured, the last response is not a success or the receiver cannot be reached.
    """
    env = settings_from_env(environ)
    encoding = encoding or env.encoding
    if encoding not in _CONTENT_TYPES:
        raise ValueError(f"encoding must be 'protobuf' or 'json', not {encoding!r}")
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    if endpoint is None and env.endpoint is None:
        raise ExportError("no OTLP endpoint: pass one or set OTEL_EXPORTER_OTLP_ENDPOINT")
    url = traces_url(endpoint) if endpoint is not None else str(env.endpoint)
    spans = spans_from_events(events, include_content=include_content, provider_name=provider_name)
    encode = encode_protobuf if encoding == "protobuf" else encode_json
    body = encode(spans, resource={**env.resource, **(resource or {})})
    given = {**env.headers, **(headers or {})}
    sent_headers = {k: v for k, v in given.items() if k.lower() not in ("content-type", "content-encoding")}
    sent_headers["Content-Type"] = _CONTENT_TYPES[encoding]
    if (compression or env.compression) == "gzip":
        body = gzip.compress(body, mtime=0)
        sent_headers["Content-Encoding"] = "gzip"
    owned = client is None
    timeout = http_timeout if http_timeout is not None else env.timeout
    http = client if client is not None else httpx.AsyncClient(timeout=timeout)
    try:
        response, attempts = await _post(
            http, url, body, sent_headers, max_attempts=max_attempts, sleep=sleep, backoff=backoff,
            max_delay=max_delay,
        )  # fmt: skip
    finally:
        if owned:
            await http.aclose()
    if not response.is_success:
        raise ExportError(
            f"{url} answered {response.status_code} after {attempts} attempt(s): {response.text[:200]}",
            status_code=response.status_code,
            attempts=attempts,
        )
    return ExportResult(
        spans=len(spans), attempts=attempts, status_code=response.status_code,
        rejected_spans=_rejected(response, encoding),
    )  # fmt: skip

"""A live bridge to the OpenTelemetry API: spans opened and closed as a run's events arrive.

::

    bridge = OtelBridge()                 # the global tracer provider, or tracer_provider=...
    with bridge.attached():
        await agent.run("...")

The spans, their attributes and span events are those of ``agentledger.adapters.export.otlp``
(the same fold of events into span operations), with start and end times taken from the events'
``at``. Ids come from the OpenTelemetry SDK, so they differ from the ids of an export of the
stored log: use one or the other for a run, not both. A root run's span is a child of the span
current where the run started; a sub-agent run's span is a child of the tool call that started
it. Replays (``rerun``, ``fork``) are not bridged: see ``LiveRuns``.

Needs ``opentelemetry-api`` (``pip install 'agentledger[otel]'``) and, to send spans anywhere, an
SDK with an exporter configured by the application.
"""

from __future__ import annotations

import contextlib
import threading

from agentledger import __version__
from agentledger.core.events import Event
from agentledger.redaction import redact_event
from agentledger.run.recorder import watching

from ._otel_live import LiveRuns
from ._otlp_fold import SpanFold
from ._otlp_model import SPAN_KIND_CLIENT, STATUS_ERROR, Closed, Noted, Op, Opened, SpanKey

try:
    from opentelemetry import trace
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("the bridge needs opentelemetry-api: pip install 'agentledger[otel]'") from exc

__all__ = ("OtelBridge",)

_KINDS = {SPAN_KIND_CLIENT: trace.SpanKind.CLIENT}


class OtelBridge:
    """A sink (``bridge(event)``) that emits the runs it sees as OpenTelemetry spans."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        *,
        include_content: bool = False,
        provider_name: str | None = None,
    ) -> None:
        self.tracer = trace.get_tracer("agentledger", __version__, tracer_provider=tracer_provider)
        self.fold = SpanFold(include_content=include_content, provider_name=provider_name)
        self.live = LiveRuns()
        self.spans: dict[SpanKey, trace.Span] = {}
        self.lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        with self.lock:
            for live in self.live(event):
                for op in self.fold.apply(redact_event(live)):  # spans are artefacts: redacted
                    self._apply(op)

    def attached(self) -> contextlib.AbstractContextManager[None]:
        """Bridge every run started inside the block, sub-agents included."""
        return watching(self)

    def _apply(self, op: Op) -> None:
        if type(op) is Opened:
            self._open(op)
        elif type(op) is Noted:
            if (span := self.spans.get(op.key)) is not None:
                span.add_event(op.name, op.attributes, timestamp=op.at)
        else:
            assert type(op) is Closed
            self._close(op)

    def _open(self, op: Opened) -> None:
        parent = self.spans.get(op.parent) if op.parent is not None else None
        context = trace.set_span_in_context(parent) if parent is not None else None
        self.spans[op.key] = self.tracer.start_span(
            op.name,
            context=context,
            kind=_KINDS.get(op.kind, trace.SpanKind.INTERNAL),
            attributes=op.attributes,
            start_time=op.at,
        )

    def _close(self, op: Closed) -> None:
        span = self.spans.pop(op.key, None)
        if span is None:
            return
        span.set_attributes(op.attributes)
        if op.name is not None:
            span.update_name(op.name)
        if op.status_code == STATUS_ERROR:
            span.set_status(trace.Status(trace.StatusCode.ERROR, op.status_message or None))
        span.end(end_time=op.at)

"""Exporters: OTLP traces, a live structlog sink, an HTML run viewer.

The main entry points are also importable from here, each module imported on first use (the
OpenTelemetry bridge needs ``opentelemetry-api``)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .html import render_html, write_html
    from .otel import OtelBridge
    from .otlp import export_otlp, spans_from_events
    from .structlog import StructlogSink

__all__ = (
    "OtelBridge",
    "StructlogSink",
    "export_otlp",
    "render_html",
    "spans_from_events",
    "write_html",
)

_HOMES = {
    "OtelBridge": "otel",
    "StructlogSink": "structlog",
    "export_otlp": "otlp",
    "render_html": "html",
    "spans_from_events": "otlp",
    "write_html": "html",
}
"""Where each name lives: its module is imported on first use, so an optional dependency
is needed only by the adapter that uses it."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)

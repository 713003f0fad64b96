"""Exporters: OTLP traces, a live structlog sink, an HTML run viewer."""

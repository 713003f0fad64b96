"""What agentledger does on its own, as log records of the standard library's ``logging``.

Events of a run go to event sinks (``agentledger.adapters.export.structlog`` writes them as log
lines). This module is for the rest: what the library does that no event records, under the
``agentledger`` logger and its children:

- ``agentledger.clients``: a model request retried (the status, the attempt, the wait);
- ``agentledger.export``: an OTLP export retried;
- ``agentledger.stores``: a store recovering (a torn last record cut off), a stream that does not
  decode skipped while reading many;
- ``agentledger.deprecations``: a deprecated way of doing something was used;
- ``agentledger.options``: an option name no client knows.

Nothing is printed unless the application configures logging (the ``agentledger`` logger has a
``NullHandler``). Records never hold secrets: URLs are logged without their query string, and
no header, argument or message content is logged.

httpx logs each request at ``INFO`` on its own ``httpx`` logger (``HTTP Request: POST <url>
"HTTP/1.1 200 OK"``), with the URL whole: an Azure URL's ``api-key=`` or SAS ``sig=`` in its
query, a base URL's ``user:password@``. Every chat client, when constructed, installs
``HttpxCredentialFilter`` on that logger (``guard_httpx_log``), which scrubs those records'
arguments with ``agentledger.redaction.scrub_text``.
"""

from __future__ import annotations

import logging
import warnings

import httpx

from .redaction import scrub_text

__all__ = ("ROOT", "HttpxCredentialFilter", "guard_httpx_log", "logger", "warn")

ROOT = "agentledger"
"""The name of the logger everything here logs under."""

logging.getLogger(ROOT).addHandler(logging.NullHandler())


def logger(part: str) -> logging.Logger:
    """The logger of one part of the library: ``agentledger.{part}``."""
    return logging.getLogger(f"{ROOT}.{part}")


def warn(
    message: Warning | str, category: type[Warning] | None = None, *, part: str, stacklevel: int = 2
) -> None:
    """Issue a Python warning (``stacklevel`` as for ``warnings.warn``, counted from the caller)
    and log the same text at ``WARNING`` under ``agentledger.{part}``."""
    if isinstance(message, Warning):
        warnings.warn(message, stacklevel=stacklevel + 1)
    else:
        warnings.warn(message, category or UserWarning, stacklevel=stacklevel + 1)
    logger(part).warning("%s", message)


class HttpxCredentialFilter(logging.Filter):
    """A filter that scrubs credentials (``scrub_text``: a URL's query string and
    ``user:password@``, bearer tokens, keys of a known shape) out of a record's message and its
    arguments; it drops no record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = scrub_text(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_scrubbed(arg) for arg in record.args)
        elif isinstance(record.args, dict):
            record.args = {key: _scrubbed(arg) for key, arg in record.args.items()}
        return True


def _scrubbed(arg: object) -> object:
    if isinstance(arg, str):
        return scrub_text(arg)
    if isinstance(arg, httpx.URL):
        return scrub_text(str(arg))
    return arg


def guard_httpx_log() -> None:
    """Install ``HttpxCredentialFilter`` on the ``httpx`` logger, once however often it is called."""
    httpx_logger = logging.getLogger("httpx")
    if not any(isinstance(f, HttpxCredentialFilter) for f in httpx_logger.filters):
        httpx_logger.addFilter(HttpxCredentialFilter())

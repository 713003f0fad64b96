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
"""

from __future__ import annotations

import logging
import warnings

__all__ = ("ROOT", "logger", "warn")

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

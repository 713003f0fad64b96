"""Pausing the cycle collector around work that allocates many objects in no cycle.

Decoding and folding a log allocate many small containers (messages, arguments, results) that
hold no reference cycle. Collections triggered by their number would walk the whole heap again
and again, so a large rebuild would cost more per event than a small one. ``collector_paused``
turns the collector off for a block and back on after it, and only if it was on: nested blocks,
and blocks in several threads at once, share one pause (a count under a lock), which ends when
the last of them does. A collector the application turned off stays off.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ("collector_paused",)

_lock = threading.Lock()
_holders = 0  # blocks inside the current pause
_paused = False  # whether this module turned the collector off (and so turns it back on)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cycle collector paused (see the module docstring)."""
    global _holders, _paused
    with _lock:
        if _holders == 0 and gc.isenabled():
            gc.disable()
            _paused = True
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _paused:
                _paused = False
                gc.enable()

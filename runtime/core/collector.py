"""Pausing the cycle collector around work that allocates many objects in no cycle.

Decoding and folding a log allocate many small containers (messages, arguments, results) that
hold no reference cycle. Collections triggered by their number would walk the whole heap again
and again, so a large rebuild would cost more per event than a small one. ``collector_paused``
turns the collector off for a block and back on after it, and only if it was on: nested blocks,
and blocks in several threads at once, share one pause, which ends when the last of them does.
A collector the application turned off stays off.

The core takes no threads or locks: the blocks are counted in a list, whose ``append`` and
``pop`` are atomic. Two blocks that start at the same moment may both leave the collector on
(the pause is an optimisation), and the collector is never left off after the last block.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ("collector_paused",)

_holders: list[None] = []  # one entry per block inside the current pause
_paused: list[bool] = [False]  # whether a block here turned the collector off


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cycle collector paused (see the module docstring)."""
    _holders.append(None)
    if len(_holders) == 1 and gc.isenabled():
        gc.disable()
        _paused[0] = True
    try:
        yield
    finally:
        _holders.pop()
        if not _holders and _paused[0]:
            _paused[0] = False
            gc.enable()

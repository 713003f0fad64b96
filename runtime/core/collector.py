"""Pausing the cycle collector around work that allocates many objects in no cycle.

Decoding and folding a log allocate many small containers (messages, arguments, results) that
hold no reference cycle. Collections triggered by their number would walk the whole heap again
and again, so a large rebuild would cost more per event than a small one. ``collector_paused``
turns the collector off for a block and back on after it, and only if it was on: nested blocks,
and blocks in several threads at once, share one pause, which ends when the last of them does.
A collector the application turned off stays off.

When a pause ends with more than ``PROMOTE_AT`` new containers in the young generation (the
block decoded or folded a large log), they are moved to the oldest generation as they are,
with ``gc.freeze()`` and ``gc.unfreeze()`` (two list splices, whatever their number) instead of
being walked by the next young collection, which would find no cycle among them: that walk cost
about as much as a third of decoding them. The move takes every object young at that moment,
the application's own too, so a cycle among those is collected by the next full collection
rather than by a young one; nothing that is garbage is kept past a full collection. Moved objects
do not count towards the next full collection (CPython counts only the objects its middle
generation promotes), so at most ``PROMOTE_BUDGET`` containers are moved between two full
collections: past that, pauses end as they did before the move, until the next one. It is done
only on the CPython builds where it is two splices (3.11 to 3.13 with the GIL), and only when
no object is frozen (``gc.get_freeze_count() == 0``), so an application's own ``gc.freeze()``
is never undone (nor CPython 3.12's, which keeps its static types' tuples frozen: there the
pause ends as it did before). No threshold or setting of the collector is changed.

The core takes no threads or locks: the blocks are counted in a list, whose ``append`` and
``pop`` are atomic. Two blocks that start at the same moment may both leave the collector on
(the pause is an optimisation), and the collector is never left off after the last block.
"""

from __future__ import annotations

import gc
import sys
from contextlib import AbstractContextManager
from types import TracebackType

__all__ = ("PROMOTE_AT", "PROMOTE_BUDGET", "collector_paused")

PROMOTE_AT = 10_000
"""New containers in the young generation above which the end of a pause moves them to the
oldest generation instead of leaving them to the next young collection's walk."""
PROMOTE_BUDGET = 1_000_000
"""At most this many containers are moved so between two full collections."""

_holders: list[None] = []  # one entry per block inside the current pause
_paused: list[bool] = [False]  # whether a block here turned the collector off
_moved = [0, -1]  # containers moved since the full collection numbered [1], that number
# gc.freeze() and gc.unfreeze() splice the generations' lists here; a free-threaded build ("t" in
# its ABI flags; sysconfig would import threading on 3.12+) walks the heap instead, and later
# versions' collectors are not measured.
_SPLICES = sys.version_info < (3, 14) and "t" not in getattr(sys, "abiflags", "")


class _Pause:
    """The pause's context manager: one object shared by every block (the state is global), with
    plain ``__enter__`` and ``__exit__`` (a generator-based one cost more than a short fold's
    pause saves)."""

    __slots__ = ()

    def __enter__(self) -> None:
        _holders.append(None)
        if len(_holders) == 1 and gc.isenabled():
            gc.disable()
            _paused[0] = True

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        _holders.pop()
        if not _holders and _paused[0]:
            _paused[0] = False
            young = gc.get_count()[0]
            if _SPLICES and young > PROMOTE_AT and gc.get_freeze_count() == 0:
                _promote(young)
            gc.enable()


_PAUSE = _Pause()


def collector_paused() -> AbstractContextManager[None]:
    """Run the block with the cycle collector paused (see the module docstring)."""
    return _PAUSE


def _promote(young: int) -> None:
    """Move the young generation to the oldest (see the module docstring), within the budget."""
    full = gc.get_stats()[2]["collections"]
    if _moved[1] != full:
        _moved[0], _moved[1] = 0, full
    if _moved[0] < PROMOTE_BUDGET:
        _moved[0] += young
        gc.freeze()  # every generation onto the permanent one, the young count to 0
        gc.unfreeze()  # the permanent generation onto the oldest

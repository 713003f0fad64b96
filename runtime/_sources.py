"""Injected sources of time and ids: the only nondeterminism a run has, and it is recorded."""

from __future__ import annotations

import itertools
import os
import time
from typing import Protocol

__all__ = ("Clock", "IdSource", "RandomIds", "SystemClock")


class Clock(Protocol):
    """Nanoseconds since the epoch; every event's ``at`` comes from here."""

    def __call__(self) -> int: ...


class IdSource(Protocol):
    """New unique ids (runs, sessions) with a readable prefix."""

    def __call__(self, prefix: str) -> str: ...


class SystemClock:
    """The wall clock."""

    __call__ = staticmethod(time.time_ns)


class RandomIds:
    """Random ids from the operating system: a 64-bit prefix per source, then a counter."""

    def __init__(self) -> None:
        self._base = os.urandom(6).hex()
        self._counter = itertools.count(1)

    def __call__(self, prefix: str) -> str:
        return f"{prefix}_{self._base}{next(self._counter):06x}"

"""Helpers for testing your own agents: capture their events, fix their clock and ids.

::

    with capture_events() as events:
        await agent.run("hi")
    assert [type(e).__name__ for e in events][-1] == "RunCompleted"

Two submodules hold the contract suites our own adapters pass, for yours to pass too:
``agentledger.testing.stores`` (``StoreContract``, ``DurableStoreContract``) and
``agentledger.testing.clients`` (``ChatClientContract``). They need pytest; this module does not.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Sequence
from typing import TypeVar

from ..core.events import Event, EventBase
from ..run.recorder import watching

__all__ = ("FixedClock", "SequentialIds", "capture_events", "event_types", "events_of")


@contextlib.contextmanager
def capture_events() -> Iterator[list[Event]]:
    """Collect every event of every run started inside the block, sub-agents included."""
    events: list[Event] = []
    with watching(events.append):
        yield events


class FixedClock:
    """A clock that starts at ``start`` and advances ``step`` nanoseconds per reading."""

    def __init__(self, start: int = 1_700_000_000_000_000_000, step: int = 1_000_000) -> None:
        self.now = start
        self.step = step

    def __call__(self) -> int:
        value = self.now
        self.now += self.step
        return value

    def advance(self, nanoseconds: int) -> None:
        self.now += nanoseconds


class SequentialIds:
    """Ids ``run_1``, ``run_2``, ``session_1``...: one counter per prefix."""

    def __init__(self) -> None:
        self._counters: dict[str, Iterator[int]] = {}

    def __call__(self, prefix: str) -> str:
        counter = self._counters.setdefault(prefix, itertools.count(1))
        return f"{prefix}_{next(counter)}"


def event_types(events: list[Event]) -> list[str]:
    """The class names of ``events``, for compact assertions."""
    return [type(event).__name__ for event in events]


E = TypeVar("E", bound=EventBase)


def events_of(events: Sequence[Event], cls: type[E]) -> list[E]:
    """The events of one type, in log order: ``events_of(response.events, ToolCalled)``."""
    return [event for event in events if isinstance(event, cls)]

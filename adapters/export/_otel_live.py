"""What live sinks share: telling live runs from replays, and attaching a sink to runs.

A replay (``agentledger.replay.rerun`` or ``fork``) runs the agent's code again; its events reach
every sink attached to the ambient context, like a live run's. Exporting them would send a run
twice, so live sinks pass events through ``LiveRuns``, which drops whatever is emitted while
``agentledger.replay.is_replaying()`` is true (the replay sets it for the run and its sub-agents).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from agentledger.core.events import Event
from agentledger.driver import capture_sinks
from agentledger.replay import is_replaying

__all__ = ("LiveRuns", "attached")


class LiveRuns:
    """Passes on the events of live runs; drops those of replays."""

    def __call__(self, event: Event) -> list[Event]:
        return [] if is_replaying() else [event]


@contextlib.contextmanager
def attached(sink: Callable[[Event], None]) -> Iterator[None]:
    """Give ``sink`` every event of every run started inside the block, sub-agents included."""
    token = capture_sinks.set((*capture_sinks.get(), sink))
    try:
        yield
    finally:
        capture_sinks.reset(token)

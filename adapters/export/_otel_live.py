"""What live sinks share: telling live runs from replays.

A replay (``agentledger.replay.rerun`` or ``fork``) runs the agent's code again; its events reach
every sink attached to the ambient context, like a live run's. Exporting them would send a run
twice, so live sinks pass events through ``LiveRuns``, which drops whatever is emitted while
``agentledger.replay.is_replaying()`` is true (the replay sets it for the run and its sub-agents).
"""

from __future__ import annotations

from agentledger.core.events import Event
from agentledger.replay import is_replaying

__all__ = ("LiveRuns",)


class LiveRuns:
    """Passes on the events of live runs; drops those of replays."""

    def __call__(self, event: Event) -> list[Event]:
        return [] if is_replaying() else [event]

"""What context providers contributed to a run, folded from its log (pure).

A provider's contribution is one ``ContextProvided`` event, recorded after the provider's
``before_run`` and before the loop begins. The run machine folds it like any input: its
messages into the transcript (before the run's input, see ``TranscriptProjection``), its tools
into the tools projection. The helpers here answer the other questions a log is asked about
contributions: the instructions in force, and how many of a run's leading messages were
provided rather than given (they are context for this run, never the session's history).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .approvals import approval_responses
from .events import (
    ApprovalResolved,
    BatchResumed,
    ContextProvided,
    Event,
    ModelCalled,
    RunCompleted,
    RunFailed,
    RunInputRewritten,
    RunStarted,
)

__all__ = (
    "PROVIDER_WRITER",
    "append_instructions",
    "contributions",
    "instructions_after",
    "provided_count",
)

PROVIDER_WRITER = "context_provider:"
"""``SessionUpdated.by`` of a provider's state writes: this prefix and its ``source_id``."""

_LOOP = (ModelCalled, ApprovalResolved, BatchResumed, RunCompleted, RunFailed)
"""The events that end a run's preamble: contributions come before any of them."""


def append_instructions(base: Any, lines: Sequence[str]) -> Any:
    """``base`` with ``lines`` appended, one per line (the agent's own come first)."""
    addition = "\n".join(lines)
    if not addition:
        return base
    if not base:
        return addition
    return f"{base}\n{addition}"


def contributions(events: Iterable[Event]) -> list[ContextProvided]:
    """The run's contributions, in the order they were recorded."""
    found: list[ContextProvided] = []
    for event in events:
        if type(event) is ContextProvided:
            found.append(event)
        elif type(event) in _LOOP:
            break
    return found


def provided_count(events: Sequence[Event]) -> int:
    """How many of the run's leading transcript messages context providers added (none in a
    run resuming a paused batch: there they go before the history, see ``RunMachine``)."""
    if events and type(events[0]) is RunStarted and approval_responses(events[0].messages):
        return 0
    return sum(len(event.messages) for event in contributions(events))


def instructions_after(events: Iterable[Event]) -> str | None:
    """The instructions the run's model calls were given: the run's own (as agent middleware
    left them), then each provider's lines."""
    current: Any = None
    for event in events:
        if type(event) is RunStarted:
            current = event.instructions
        elif type(event) is RunInputRewritten and "instructions" in event.options:
            current = event.options["instructions"]
        elif type(event) is ContextProvided:
            current = append_instructions(current, event.instructions)
        elif type(event) in _LOOP:
            break
    return current if isinstance(current, str) or current is None else str(current)

"""Schema evolution: reading logs written by older versions of the event catalogue.

The rules (docs/events.md): a field's type never changes and a new field always has a default,
so a log written by an older version decodes as it is. A change that cannot follow those rules
bumps ``SCHEMA_VERSION`` and registers an *upcaster*: a pure function from one event, as the
JSON object version ``n`` wrote, to the same event as version ``n + 1`` writes it (or ``None`` to
drop it). Reading an older log decodes it to plain objects, runs each event through every
upcaster from its run's ``schema_version`` up to the current one, then decodes the result with
the typed decoder, so everything downstream only ever sees current events.

Logs that say they come from a newer version than this code knows are refused, never guessed at.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from .errors import AgentLedgerError
from .events import SCHEMA_VERSION, Event

__all__ = (
    "UPCASTERS",
    "SchemaVersionError",
    "Upcaster",
    "decode_upcasted",
    "register_upcaster",
    "schema_version_of",
    "upcast",
)

Upcaster = Callable[[dict[str, Any]], dict[str, Any] | None]
UPCASTERS: dict[int, Upcaster] = {}
"""``UPCASTERS[n]`` turns an event of schema version ``n`` into version ``n + 1``."""


class SchemaVersionError(AgentLedgerError, ValueError):
    """A log from a newer schema version than this code knows, or with no upcaster for a step."""


def register_upcaster(from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register the upcaster from ``from_version`` to ``from_version + 1`` (a decorator)."""

    def register(function: Upcaster) -> Upcaster:
        if from_version in UPCASTERS:
            raise ValueError(f"an upcaster from schema version {from_version} is already registered")
        UPCASTERS[from_version] = function
        return function

    return register


def upcast(raw: Iterable[dict[str, Any]], version: int) -> list[dict[str, Any]]:
    """Events of schema ``version`` as the current version writes them."""
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"the log was written with schema version {version}; this code reads up to {SCHEMA_VERSION}"
        )
    events = list(raw)
    for step in range(version, SCHEMA_VERSION):
        upcaster = UPCASTERS.get(step)
        if upcaster is None:
            raise SchemaVersionError(f"no upcaster from schema version {step} to {step + 1}")
        events = [new for new in map(upcaster, events) if new is not None]
    return events


def decode_upcasted(raw: Iterable[dict[str, Any]], version: int) -> list[Event]:
    """Upcast plain decoded events of schema ``version`` and decode them as current events.

    Sequence numbers are renumbered when an upcaster drops events, so a run stays gapless.
    """
    events = upcast(raw, version)
    seq: dict[str, int] = {}
    for event in events:
        run = str(event.get("run_id", ""))
        if "seq" in event:
            event["seq"] = seq[run] = seq.get(run, -1) + 1
    return msgspec.convert(events, list[Event])


def schema_version_of(first: dict[str, Any]) -> int:
    """The schema version a run's first event (its ``RunStarted``) declares (1 if none)."""
    version = first.get("schema_version", 1)
    return version if isinstance(version, int) else 1

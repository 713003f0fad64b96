"""Schema evolution: golden logs of every released version keep decoding, upcasters bridge changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentledger.core import RunStarted, ToolReturned, decode_event
from agentledger.core.events import SCHEMA_VERSION, Event
from agentledger.core.upcasting import (
    UPCASTERS,
    SchemaVersionError,
    decode_upcasted,
    schema_version_of,
    upcast,
)
from agentledger.replay import RecordedRun
from agentledger.session import AgentSession

GOLDEN = sorted((Path(__file__).parent.parent / "golden").glob("v*/*.jsonl"))


def _runs(events: list[Event]) -> dict[str, list[Event]]:
    runs: dict[str, list[Event]] = {}
    for event in events:
        runs.setdefault(event.run_id, []).append(event)
    return runs


def test_there_are_golden_logs_for_the_current_version() -> None:
    """The current schema version has golden logs, so a later change cannot forget it."""
    assert any(path.parent.name == f"v{SCHEMA_VERSION}" for path in GOLDEN)


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_golden_log_decodes_and_folds(path: Path) -> None:
    """Every golden log decodes into current events, and every run refolds to its end (with the
    runs before it in the file as its session's history)."""
    lines = path.read_bytes().splitlines()
    raw: list[dict[str, Any]] = [msgspec.json.decode(line) for line in lines]
    version = schema_version_of(raw[0])
    assert f"v{version}" == path.parent.name
    events = decode_upcasted(raw, version)
    assert len(events) == len(lines)
    if version == SCHEMA_VERSION:
        assert [decode_event(line) for line in lines] == events
    prior: list[Event] = []
    for log in _runs(events).values():
        assert [e.seq for e in log] == list(range(len(log)))
        if isinstance(log[0], RunStarted):
            state = RecordedRun(log, prior=prior).state_at(len(log) - 1)
            assert state.phase == "done"
        prior.extend(log)
    for started in (e for e in events if isinstance(e, RunStarted) and e.session_id):
        AgentSession.from_events(events, started.session_id or "")


def _old_log() -> list[dict[str, Any]]:
    """A run as a hypothetical version 0 wrote it: ToolReturned said "value", not "result"."""
    return [
        {"type": "RunStarted", "run_id": "r", "seq": 0, "at": 1, "agent_id": "a", "schema_version": 0},
        {"type": "Heartbeat", "run_id": "r", "seq": 1, "at": 2},
        {"type": "ToolReturned", "run_id": "r", "seq": 2, "at": 3, "call_id": "c", "name": "t", "value": 7},
    ]


def _v0_to_v1(event: dict[str, Any]) -> dict[str, Any] | None:
    if event["type"] == "Heartbeat":
        return None
    if event["type"] == "ToolReturned":
        event = {**event, "result": event.pop("value")}
    if event["type"] == "RunStarted":
        event = {**event, "schema_version": 1}
    return event


def test_upcaster_bridges_an_old_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """A registered upcaster turns old events into current ones; dropped events leave no gap."""
    monkeypatch.setitem(UPCASTERS, 0, _v0_to_v1)
    events = decode_upcasted(_old_log(), 0)
    assert [type(e).__name__ for e in events] == ["RunStarted", "ToolReturned"]
    returned = events[1]
    assert isinstance(returned, ToolReturned)
    assert (returned.seq, returned.result) == (1, 7)


def test_missing_upcaster_is_an_error() -> None:
    """An old log with no upcaster for a step is refused with the step named."""
    with pytest.raises(SchemaVersionError, match="no upcaster from schema version 0"):
        upcast(_old_log(), 0)


def test_newer_log_is_refused() -> None:
    """A log from a newer schema version than the code knows is never guessed at."""
    with pytest.raises(SchemaVersionError, match=f"reads up to {SCHEMA_VERSION}"):
        upcast([], SCHEMA_VERSION + 1)

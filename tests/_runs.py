"""Small recorded runs for the listing tests: each a RunStarted, a model call and an ending."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from agentledger.core.events import Event, ModelCalled, ModelResponded, RunCompleted, RunFailed, RunStarted
from agentledger.core.messages import Message
from agentledger.store import EventStore

T0 = 1_700_000_000_000_000_000
Ending = Literal["completed", "failed", "incomplete"]


def run_events(
    run_id: str,
    *,
    agent: str = "Planner",
    session: str | None = None,
    ending: Ending = "completed",
    at: int = T0,
    parent: str | None = None,
) -> list[Event]:
    """A run of four events when it completes, three when it fails, two when it is incomplete."""
    started = RunStarted(
        run_id=run_id, seq=0, at=at, agent_id=agent.lower(), agent_name=agent, session_id=session,
        parent_run_id=parent,
    )  # fmt: skip
    events: list[Event] = [
        started,
        ModelCalled(run_id=run_id, seq=1, at=at + 1, iteration=1, message_count=1),
    ]
    if ending == "completed":
        answer = Message(role="assistant", contents=[f"answer of {run_id}"])
        events.append(ModelResponded(run_id=run_id, seq=2, at=at + 2, iteration=1, message=answer))
        events.append(RunCompleted(run_id=run_id, seq=3, at=at + 3, text=f"answer of {run_id}"))
    elif ending == "failed":
        events.append(RunFailed(run_id=run_id, seq=2, at=at + 2, error_type="ModelCallError", message="x"))
    return events


async def record(store: EventStore, events: Sequence[Event]) -> None:
    """Append ``events`` as a run appends them: its start, then the rest."""
    stream = events[0].run_id
    await store.append(stream, events[:1], 0)
    await store.append(stream, events[1:], 1)


def bad_record(run_id: str) -> bytes:
    """A record of ``run_id`` that does not decode as an event (its seq is no number)."""
    return b'{"type":"RunStarted","run_id":"%s","seq":"zero","at":0,"agent_id":"x"}' % run_id.encode()


def corrupt_line(path: Path, run_id: str, seq: int) -> None:
    """Replace the record of ``run_id`` at ``seq`` in a JSONL file with one that does not decode."""
    lines = path.read_bytes().split(b"\n")
    needle = b'"run_id":"%s","seq":%d,' % (run_id.encode(), seq)
    index = next(i for i, line in enumerate(lines) if needle in line)
    lines[index] = bad_record(run_id)
    path.write_bytes(b"\n".join(lines))

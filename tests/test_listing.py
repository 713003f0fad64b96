"""Listing runs: every store lists summaries newest first, filtered and limited, from the first
and last record of each stream, and skips (and reports) a stream that does not decode."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import anyio
import pytest

from agentledger.adapters.stores.jsonl import JsonlEventStore
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.core.events import Event
from agentledger.errors import UnreadableStreamWarning
from agentledger.store import (
    EventStore,
    MemoryEventStore,
    RunQuery,
    RunSummary,
    SupportsAclose,
    SupportsRunListing,
    list_runs,
)

from ._runs import T0, bad_record, corrupt_line, record, run_events

Factory = Callable[[Path], EventStore]
STORES: dict[str, Factory] = {
    "memory": lambda _: MemoryEventStore(),
    "sqlite": lambda d: SqliteEventStore(d / "events.sqlite"),
    "directory": lambda d: JsonlEventStore(d / "runs"),
    "journal": lambda d: JsonlEventStore(d / "runs.jsonl"),
}


class PlainStore:
    """An EventStore without the listing capability: list_runs falls back to reading streams."""

    def __init__(self) -> None:
        self.inner = MemoryEventStore()
        self.reads: list[str] = []

    async def append(self, stream: str, events: Sequence[Event], expected_version: int) -> int:
        return await self.inner.append(stream, events, expected_version)

    async def read(self, stream: str, after: int = -1) -> list[Event]:
        self.reads.append(stream)
        return await self.inner.read(stream, after)

    async def streams(self) -> list[str]:
        return await self.inner.streams()


RUNS = [
    run_events("run_a", agent="Planner", session="s1", at=T0),
    run_events("run_b", agent="Booker", session="s1", at=T0 + 10**9, ending="failed"),
    run_events("run_c", agent="Planner", session="s2", at=T0 + 2 * 10**9, ending="incomplete"),
    run_events("run_d", agent="Planner", session="s2", at=T0 + 3 * 10**9, parent="run_c"),
]


async def _filled(store: EventStore) -> EventStore:
    for events in RUNS:
        await record(store, events)
    return store


def _close(store: EventStore) -> None:
    if isinstance(store, SupportsAclose):
        anyio.run(store.aclose)


def _ids(runs: list[RunSummary]) -> list[str]:
    return [run.run_id for run in runs]


@pytest.fixture(params=[*STORES, "plain"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EventStore]:
    if request.param == "plain":
        yield anyio.run(_filled, PlainStore())
        return
    filled = anyio.run(_filled, STORES[request.param](tmp_path))
    yield filled
    _close(filled)


def test_durable_and_memory_stores_offer_listing(tmp_path: Path) -> None:
    """Every store agentledger ships lists runs itself; a store without list_runs is no listing store."""
    assert all(isinstance(factory(tmp_path), SupportsRunListing) for factory in STORES.values())
    assert not isinstance(PlainStore(), SupportsRunListing)


def test_runs_newest_first_with_their_summary(store: EventStore) -> None:
    """Runs come newest first, each with its agent, session, start, outcome, length, parent, answer."""
    runs = anyio.run(list_runs, store)
    assert _ids(runs) == ["run_d", "run_c", "run_b", "run_a"]
    d, c, b, a = runs
    assert d == RunSummary(
        run_id="run_d", agent="Planner", session_id="s2", started_at=T0 + 3 * 10**9, outcome="completed",
        reason="completed", events=4, parent_run_id="run_c", answer="answer of run_d",
    )  # fmt: skip
    assert (c.outcome, c.events, c.reason, c.answer) == ("incomplete", 2, "", "")
    assert (b.outcome, b.reason, b.agent) == ("failed", "ModelCallError", "Booker")
    assert a.parent_run_id is None


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (RunQuery(limit=2), ["run_d", "run_c"]),
        (RunQuery(limit=None), ["run_d", "run_c", "run_b", "run_a"]),
        (RunQuery(limit=0), []),
        (RunQuery(agent="Planner"), ["run_d", "run_c", "run_a"]),
        (RunQuery(agent="Planner", limit=1), ["run_d"]),
        (RunQuery(session="s1"), ["run_b", "run_a"]),
        (RunQuery(outcome="completed"), ["run_d", "run_a"]),
        (RunQuery(outcome="failed"), ["run_b"]),
        (RunQuery(outcome="incomplete"), ["run_c"]),
        (RunQuery(since=T0 + 10**9), ["run_d", "run_c", "run_b"]),
        (RunQuery(agent="Planner", session="s2", outcome="completed"), ["run_d"]),
        (RunQuery(agent="Nobody"), []),
    ],
)
def test_filters_and_limit(store: EventStore, query: RunQuery, expected: list[str]) -> None:
    """Each filter, alone and together, and the limit, applied by the store."""
    assert _ids(anyio.run(list_runs, store, query)) == expected


def test_a_query_is_checked() -> None:
    """A negative limit or an unknown outcome is refused when the query is made."""
    with pytest.raises(ValueError, match="limit"):
        RunQuery(limit=-1)
    with pytest.raises(ValueError, match="outcome"):
        RunQuery(outcome="done")  # type: ignore[arg-type]


def test_the_fallback_reads_no_more_streams_than_the_limit_needs() -> None:
    """Without list_runs, streams are read newest first only until the limit is reached."""
    plain = anyio.run(_filled, PlainStore())
    assert isinstance(plain, PlainStore)
    assert _ids(anyio.run(list_runs, plain, RunQuery(limit=1))) == ["run_d"]
    assert plain.reads == ["run_d"]


@pytest.mark.parametrize("name", ["sqlite", "directory", "journal"])
def test_durable_stores_list_without_reading_whole_streams(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite and JSONL stores list runs without their read path (which decodes whole streams)."""
    store = anyio.run(_filled, STORES[name](tmp_path))

    def refuse(*args: object) -> list[Event]:
        raise AssertionError("list_runs read a whole stream")

    monkeypatch.setattr(type(store), "read_sync", refuse)
    monkeypatch.setattr(type(store), "read_many_sync", refuse)
    assert _ids(anyio.run(list_runs, store, RunQuery(limit=None))) == ["run_d", "run_c", "run_b", "run_a"]
    _close(store)


def corrupt(name: str, path: Path, run_id: str) -> None:
    """Make the first record of ``run_id`` in the store at ``path`` one that does not decode."""
    if name == "sqlite":
        with sqlite3.connect(path / "events.sqlite") as db:
            db.execute(
                "UPDATE events SET data = ? WHERE seq = 0"
                " AND stream = (SELECT id FROM streams WHERE name = ?)",
                (bad_record(run_id), run_id),
            )
        db.close()
    elif name == "directory":
        corrupt_line(path / "runs" / f"{run_id}.jsonl", run_id, 0)
    else:
        corrupt_line(path / "runs.jsonl", run_id, 0)


@pytest.mark.parametrize("name", ["sqlite", "directory", "journal"])
def test_a_stream_that_does_not_decode_is_skipped_and_reported(name: str, tmp_path: Path) -> None:
    """The other runs are listed; the bad one is named in one warning, with where it is corrupt."""
    _close(anyio.run(_filled, STORES[name](tmp_path)))
    corrupt(name, tmp_path, "run_b")
    reopened = STORES[name](tmp_path)
    with pytest.warns(UnreadableStreamWarning) as warned:
        runs = anyio.run(list_runs, reopened, RunQuery(limit=None))
    _close(reopened)
    assert _ids(runs) == ["run_d", "run_c", "run_a"]
    assert len(warned) == 1
    message = str(warned[0].message)
    assert message.startswith("skipped stream 'run_b': ")
    assert "\n" not in message


@pytest.mark.parametrize("name", ["sqlite", "directory", "journal"])
def test_a_skipped_stream_does_not_count_against_the_limit(name: str, tmp_path: Path) -> None:
    """With a limit, the runs after a bad one fill its place."""
    _close(anyio.run(_filled, STORES[name](tmp_path)))
    corrupt(name, tmp_path, "run_d")
    reopened = STORES[name](tmp_path)
    with pytest.warns(UnreadableStreamWarning):
        runs = anyio.run(list_runs, reopened, RunQuery(limit=2))
    _close(reopened)
    assert _ids(runs) == ["run_c", "run_b"]


def test_sqlite_lists_many_runs_in_pages(tmp_path: Path) -> None:
    """More runs than a page: every one is listed once, newest first."""
    store = SqliteEventStore(tmp_path / "events.sqlite")

    async def fill() -> None:
        for number in range(150):
            await record(
                store, run_events(f"run_{number:03d}", ending="failed" if number % 3 else "completed")
            )

    anyio.run(fill)
    runs = anyio.run(list_runs, store, RunQuery(limit=None, outcome="completed"))
    store.close()
    assert _ids(runs) == [f"run_{n:03d}" for n in range(147, -1, -3)]


def test_a_torn_last_record_is_left_out_of_a_directory_listing(tmp_path: Path) -> None:
    """A record cut short at the end of a file is not the run's last event: the whole one before is."""
    anyio.run(_filled, STORES["directory"](tmp_path))
    with open(tmp_path / "runs" / "run_c.jsonl", "ab") as file:
        file.write(b'{"type":"RunCompleted","run_id":"run_c","seq":2,')
    runs = anyio.run(list_runs, JsonlEventStore(tmp_path / "runs", read_only=True), RunQuery(limit=None))
    c = next(run for run in runs if run.run_id == "run_c")
    assert (c.outcome, c.events) == ("incomplete", 2)


def _paused_and_resumed() -> dict[str, list[Event]]:
    """Logs of real runs: one paused for approval, one paused and then claimed by the run that
    resumed it, that resuming run, and a completed run whose answer names other outcomes."""
    from agentledger import AgentSession, Message
    from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
    from tests import cli_agents

    async def go() -> dict[str, list[Event]]:
        memory = MemoryEventStore()
        agent = cli_agents.bank_agent()
        agent.client = ScriptedChatClient([Call("wire", {"amount": 1}), Call("wire", {"amount": 2}), "Sent."])
        agent.store = memory
        waiting = await agent.run("Send 1.", session=AgentSession("s-wait"))
        session = AgentSession("s-claim")
        paused = await agent.run("Send 2.", session=session)
        answers = [request.to_approval_response(True) for request in paused.user_input_requests]
        await agent.run(Message("user", answers), session=session)
        talker = cli_agents.bank_agent()
        talker.client = ScriptedChatClient(["RunFailed? awaiting_approval? BatchClaimed? No: done."])
        talker.store = memory
        await talker.run("Say the outcome names.", session=AgentSession("s-talk"))
        assert waiting.run_id != paused.run_id
        return {stream: await memory.read(stream) for stream in await memory.streams()}

    return anyio.run(go)


@pytest.mark.parametrize("name", list(STORES))
def test_an_outcome_filter_agrees_with_the_summaries(name: str, tmp_path: Path) -> None:
    """For each outcome, the store's filtered listing is exactly the unfiltered listing's runs of
    that outcome: a paused run, a run claimed by its resume, and a run whose answer merely names
    other outcomes are each listed under their own outcome only."""
    store = STORES[name](tmp_path)
    logs = _paused_and_resumed()

    async def go() -> None:
        for stream, events in logs.items():
            for event in events:  # one record each: a store sees the last event's own record
                await store.append(stream, [event], event.seq)
        for events in RUNS:
            await record(store, events)
        everything = await list_runs(store, RunQuery(limit=None))
        outcomes = {run.outcome for run in everything}
        assert outcomes == {"completed", "failed", "incomplete", "awaiting_approval"}
        for outcome in ("completed", "failed", "incomplete", "awaiting_approval"):
            filtered = await list_runs(store, RunQuery(limit=None, outcome=outcome))
            assert filtered == [run for run in everything if run.outcome == outcome], outcome

    try:
        anyio.run(go)
    finally:
        _close(store)

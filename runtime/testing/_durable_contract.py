"""``DurableStoreContract``: what a store outside the process adds (see ``agentledger.testing.stores``)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar, NamedTuple

try:
    import pytest
except ImportError:  # pragma: no cover - exercised only without pytest
    raise ImportError("agentledger.testing.stores needs pytest: pip install pytest") from None

from agentledger.errors import ConflictError, LogCorruptError, StoreError
from agentledger.store import EventStore, SupportsAclose

from ._store_child import BATCH, batch, make_events
from ._store_contract import StoreContract
from ._store_process import Child

__all__ = ("CrashOutcome", "DurableStoreContract")


class CrashOutcome(NamedTuple):
    """What a crash at one point leaves of the interrupted batch."""

    survivors: int
    """How many of the batch's events are stored."""
    repaired: bool
    """Whether the next read repairs a torn record (and warns with ``repair_warning``)."""


class DurableStoreContract(StoreContract):
    """What a store outside the process adds: reopening, closing, damage, other processes, crashes.

    The other processes open the store with ``reopen(reopen_args())``, so the subclass must be
    importable by its module name there (pytest's default import mode does that).
    """

    atomic_batches: ClassVar[bool]
    """Whether a batch survives a crash whole or not at all (else a prefix of it may)."""
    repair_warning: ClassVar[type[Warning] | None] = None
    """The warning a read gives when it cuts off a record torn by a crash, if the store can tear."""
    crash_outcomes: ClassVar[Mapping[str, CrashOutcome]] = {"idle": CrashOutcome(0, repaired=False)}
    """The exact outcome of each crash point; ``loop`` (killed while appending) has none."""

    async def corrupt(self, stream: str, seq: int, data: bytes) -> str:
        """Overwrite the stored record of ``stream`` at ``seq``; returns the position to report."""
        raise NotImplementedError

    def reopen_args(self) -> list[str]:
        """What another process needs to open this test's store (JSON); by default the location."""
        return [str(self.location)]

    @classmethod
    def reopen(cls, args: list[str]) -> EventStore:
        """In another process: the store ``reopen_args()`` describes."""
        contract = cls()
        contract.location = Path(args[0])
        return contract.open_store(contract.location)

    @classmethod
    def install_fault(cls, store: EventStore, point: str, hang: Callable[[], None]) -> None:
        """In another process: make the next append of ``store`` call ``hang`` at ``point``.

        ``hang`` never returns (the test kills the process). Override to add crash points beyond
        ``idle`` and ``loop``, listing them in a ``crash_point`` fixture and ``crash_outcomes``.
        """
        raise NotImplementedError(f"{cls.__name__} has no crash point {point!r}")

    @pytest.fixture(params=["idle", "loop"])
    def crash_point(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    async def spawn(self, stream: str, *args: str) -> Child:
        contract = f"{type(self).__module__}:{type(self).__qualname__}"
        return await Child.start(contract, json.dumps(self.reopen_args()), stream, *args)

    @pytest.mark.anyio
    async def test_reopened_store_continues(self, store: EventStore) -> None:
        """A store closed and opened again reads every event and appends at the stored version."""
        stream = "run_reopen"
        await store.append(stream, make_events(stream, 0, 3, "a"), 0)
        reopened = self.another()
        assert await reopened.read(stream) == make_events(stream, 0, 3, "a")
        assert await reopened.append(stream, make_events(stream, 3, 2, "b"), 3) == 5
        assert isinstance(reopened, SupportsAclose)
        await reopened.aclose()
        with pytest.raises(ConflictError):
            await store.append(stream, make_events(stream, 3, 1, "c"), 3)
        expected = make_events(stream, 0, 3, "a") + make_events(stream, 3, 2, "b")
        assert await self.another().read(stream) == expected

    @pytest.mark.anyio
    async def test_closed_store_refuses_work(self, store: EventStore) -> None:
        """After aclose() every call raises StoreError; other handles go on working."""
        stream, closing = "run_closed", self.another()
        assert isinstance(closing, SupportsAclose), "a durable store closes with aclose()"
        await closing.append(stream, make_events(stream, 0, 2, "a"), 0)
        await closing.aclose()
        with pytest.raises(StoreError):
            await closing.read(stream)
        with pytest.raises(StoreError):
            await closing.streams()
        with pytest.raises(StoreError):
            await closing.append(stream, make_events(stream, 2, 1, "b"), 2)
        assert await store.read(stream) == make_events(stream, 0, 2, "a")

    @pytest.mark.anyio
    async def test_corrupt_record_names_its_position(self, store: EventStore) -> None:
        """A stored record that does not decode raises LogCorruptError saying where and what."""
        stream = "run_bad"
        await store.append(stream, make_events(stream, 0, 5, "x"), 0)
        where = await self.corrupt(stream, 2, b'{"type": "ToolCalled", "run_id": "run_bad", "seq": 2}')
        with pytest.raises(LogCorruptError) as info:
            await self.another().read(stream)
        assert info.value.where == where
        assert "expected one event" in str(info.value)
        assert "missing required field `at`" in str(info.value)

    @pytest.mark.anyio
    async def test_two_processes_race_one_conflicts(self, store: EventStore) -> None:
        """Two processes appending at the same version: exactly one ConflictError, nothing lost."""
        stream = "run_procs"
        base = make_events(stream, 0, 2, "base")
        await store.append(stream, base, 0)
        children = {tag: await self.spawn(stream, "race", tag) for tag in "ab"}
        for child in children.values():
            await child.expect("ready")
        for child in children.values():
            await child.send("go")
        outcome = {tag: await child.finish() for tag, child in children.items()}
        assert sorted(outcome.values()) == ["conflict 4", "ok 4"]
        winner = next(tag for tag, result in outcome.items() if result == "ok 4")
        assert await self.another().read(stream) == base + make_events(stream, 2, 2, winner)

    @pytest.mark.anyio
    async def test_contending_processes_lose_and_duplicate_nothing(self, store: EventStore) -> None:
        """Processes retrying on ConflictError append every batch exactly once, in their order."""
        stream, batches = "run_procs_busy", 12
        children = {tag: await self.spawn(stream, "contend", tag, str(batches)) for tag in "pq"}
        for child in children.values():
            await child.expect("ready")
        for child in children.values():
            await child.send("go")
        for child in children.values():
            assert (await child.finish()).startswith("done ")
        events = await self.another().read(stream)
        assert [e.seq for e in events] == list(range(2 * batches * 2))
        tags = [getattr(e, "call_id", "") for e in events]
        for tag in children:
            assert [t for t in tags if t.startswith(tag)] == [
                f"{tag}{k}-{i}" for k in range(batches) for i in range(2)
            ]

    @pytest.mark.anyio
    async def test_kill_9_mid_append_leaves_whole_records(self, store: EventStore, crash_point: str) -> None:
        """After kill -9 mid-append the log holds whole records only, and appending goes on."""
        stream, before = "run_crash", 2
        child = await self.spawn(stream, "crash", crash_point, str(before))
        await child.expect("ready")
        await child.finish(kill=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            events = await self.another().read(stream)
        repair = self.repair_warning
        repaired = [w for w in caught if repair is not None and issubclass(w.category, repair)]
        assert [w for w in caught if w not in repaired] == []
        intended = [e for k in range(len(events) // BATCH + 1) for e in batch(stream, k)]
        assert events == intended[: len(events)]
        if crash_point in self.crash_outcomes:
            survivors, was_repaired = self.crash_outcomes[crash_point]
            assert (len(events), bool(repaired)) == (before * BATCH + survivors, was_repaired)
        assert len(events) >= before * BATCH
        assert not self.atomic_batches or len(events) % BATCH == 0
        more = make_events(stream, len(events), 2, "after")
        assert await self.another().append(stream, more, len(events)) == len(events) + 2
        assert await self.another().read(stream) == events + more

    @pytest.mark.anyio
    async def test_kill_9_among_many_appenders_keeps_every_acknowledged_append(
        self, store: EventStore
    ) -> None:
        """Killed while many tasks append at once: every acknowledged batch is there, whole records only."""
        prefix, writers = "run_many", 24
        child = await self.spawn(prefix, "many", str(writers))
        await child.expect("ready")
        acked: dict[str, int] = {}
        for _ in range(writers * 4):  # killed in full flow: appends are in flight in every task
            _, stream, version = (await child.expect("ack")).split()
            acked[stream] = int(version)
        for line in (await child.finish(kill=True)).splitlines():  # said before it died: acknowledged
            word, stream, version = [*line.split(), "", "", ""][:3]
            if word == "ack" and version.isdigit():
                acked[stream] = max(acked.get(stream, 0), int(version))
        reopened = self.another()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            logs = {f"{prefix}_{i}": await reopened.read(f"{prefix}_{i}") for i in range(writers)}
        repair = self.repair_warning
        assert [w for w in caught if repair is None or not issubclass(w.category, repair)] == []
        for stream, events in logs.items():
            intended = [e for k in range(len(events) // BATCH + 1) for e in batch(stream, k)]
            assert events == intended[: len(events)], f"{stream} holds other events than its batches"
            assert len(events) >= acked.get(stream, 0), f"{stream} lost an acknowledged batch"
            assert not self.atomic_batches or len(events) % BATCH == 0, f"{stream} holds half a batch"
        assert sum(acked.values()) >= writers * 4 * BATCH
        first = f"{prefix}_0"
        more = make_events(first, len(logs[first]), 2, "after")
        assert await reopened.append(first, more, len(logs[first])) == len(logs[first]) + 2

"""A second process for the store tests: it races, contends, or dies in the middle of an append.

Run as ``python store_crash_child.py KIND PATH STREAM MODE [ARGS]`` (KIND: jsonl or sqlite). It
talks to the test through its standard streams, never through timing: it prints ``ready`` when
it has reached the agreed point and waits for a line on stdin when told to.

Modes:
    race TAG           read the version, print ``ready``, wait for ``go``, append one batch at that
                       version; print ``ok VERSION`` or ``conflict ACTUAL``.
    contend TAG N      print ``ready``, wait for ``go``, append N batches of two events, retrying
                       each on ``ConflictError`` with the version it reports; print ``done CONFLICTS``.
    crash POINT K      append K batches (``batch(stream, k)``), then start batch K with a fault at
                       POINT (see ``POINTS``) that prints ``ready`` and blocks until the process is
                       killed; ``loop`` keeps appending batches and prints ``ready`` after batch K.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Sequence
from typing import Any

from agentledger.adapters.stores import _lines
from agentledger.adapters.stores._threaded import ThreadedStore
from agentledger.adapters.stores.jsonl import JsonlEventStore
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.core.events import Event, ToolCalled
from agentledger.errors import ConflictError

BATCH = 3
"""Events per batch in ``crash`` mode."""

POINTS: dict[str, tuple[int, bool]] = {
    "idle": (0, False),
    "torn-record": (0, True),
    "mid-batch": (1, True),
    "before-fsync": (BATCH, False),
    "before-commit": (0, False),
}
"""Crash points: how many events of the interrupted batch survive, and whether the log is torn."""


def make_events(stream: str, start: int, count: int, tag: str) -> list[Event]:
    """``count`` events for ``stream`` from seq ``start``; call ids ``{tag}-0``, ``{tag}-1``..."""
    return [
        ToolCalled(
            run_id=stream,
            seq=start + i,
            at=1_700_000_000_000_000_000 + start + i,
            call_id=f"{tag}-{i}",
            name="step",
            arguments={"tag": tag, "i": i, "note": "é" * i},
        )
        for i in range(count)
    ]


def batch(stream: str, k: int) -> list[Event]:
    """Batch ``k`` of ``crash`` mode (it starts at seq ``k * BATCH``)."""
    return make_events(stream, k * BATCH, BATCH, f"b{k}")


def open_store(kind: str, path: str) -> ThreadedStore:
    """The store a test names: ``jsonl`` (layout from the path) or ``sqlite``."""
    if kind == "jsonl":
        return JsonlEventStore(path)
    if kind == "sqlite":
        return SqliteEventStore(path)
    raise ValueError(kind)


def _ready() -> None:
    print("ready", flush=True)


def _hang() -> None:
    """Signal the agreed point and wait to be killed."""
    _ready()
    sys.stdin.readline()
    raise SystemExit("the test should have killed this process")


def _fault(point: str, store: ThreadedStore) -> None:
    """Install the fault for ``point``: the next event write stops there."""
    write_all: Callable[[int, bytes], None] = _lines.write_all

    def partial_write(fd: int, data: bytes) -> None:
        if not data.startswith(b"{"):
            write_all(fd, data)  # not an event record (the catalog of stream names)
            return
        first = data.index(b"\n") + 1
        write_all(fd, data[: first // 2] if point == "torn-record" else data[: first + 10])
        _hang()

    def hang(*args: Any) -> None:
        _hang()

    def hang_commit(connection: sqlite3.Connection) -> None:
        _hang()

    if point in ("torn-record", "mid-batch"):
        _lines.write_all = partial_write
    elif point == "before-fsync":
        _lines._sync = hang
    elif point == "before-commit" and isinstance(store, SqliteEventStore):
        store._commit = hang_commit  # type: ignore[method-assign]
    elif point != "idle":
        raise ValueError(point)


def crash(store: ThreadedStore, stream: str, point: str, before: int) -> None:
    for k in range(before):
        store.append_sync(stream, batch(stream, k), k * BATCH)
    if point == "loop":
        k = before
        _ready()
        while True:
            store.append_sync(stream, batch(stream, k), k * BATCH)
            k += 1
    if point == "idle":
        _hang()
    _fault(point, store)
    store.append_sync(stream, batch(stream, before), before * BATCH)


def race(store: ThreadedStore, stream: str, tag: str) -> None:
    version = len(store.read_sync(stream))
    _ready()
    sys.stdin.readline()
    try:
        print(f"ok {store.append_sync(stream, make_events(stream, version, 2, tag), version)}", flush=True)
    except ConflictError as exc:
        print(f"conflict {exc.actual}", flush=True)


def contend(store: ThreadedStore, stream: str, tag: str, batches: int) -> None:
    _ready()
    sys.stdin.readline()
    version = len(store.read_sync(stream))
    conflicts = 0
    for k in range(batches):
        while True:
            try:
                version = store.append_sync(stream, make_events(stream, version, 2, f"{tag}{k}"), version)
                break
            except ConflictError as exc:
                conflicts += 1
                version = exc.actual
    print(f"done {conflicts}", flush=True)


def main(argv: Sequence[str]) -> None:
    kind, path, stream, mode, *args = argv
    store = open_store(kind, path)
    if mode == "race":
        race(store, stream, args[0])
    elif mode == "contend":
        contend(store, stream, args[0], int(args[1]))
    elif mode == "crash":
        crash(store, stream, args[0], int(args[1]))
    else:
        raise ValueError(mode)
    store.close()


if __name__ == "__main__":
    main(sys.argv[1:])

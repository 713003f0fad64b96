"""The second process of the durable store contract: it races, contends, or dies mid-append.

Run as ``python -m agentledger.testing._store_child CONTRACT ARGS STREAM MODE [MODE_ARGS]``.
``CONTRACT`` is the ``module:QualName`` of a ``DurableStoreContract`` subclass and ``ARGS`` the
JSON list its ``reopen_args()`` gave; the child opens the store with ``reopen(args)``. It talks
to the test through its standard streams, never through timing: it prints ``ready`` when it has
reached the agreed point and waits for a line on stdin when told to.

Modes:
    race TAG           read the version, print ``ready``, wait for ``go``, append one batch at that
                       version; print ``ok VERSION`` or ``conflict ACTUAL``.
    contend TAG N      print ``ready``, wait for ``go``, append N batches of two events, retrying
                       each on ``ConflictError`` with the version it reports; print ``done CONFLICTS``.
    crash POINT K      append K batches (``batch(stream, k)``), then: ``idle`` prints ``ready`` and
                       waits to be killed; ``loop`` prints ``ready`` and keeps appending batches;
                       any other point is the contract's ``install_fault``, which makes the next
                       append stop there, print ``ready`` and wait to be killed.
    many N             N tasks append batches (``batch``) to streams ``STREAM_0`` ... ``STREAM_{N-1}``
                       at once, without end; after each append returns, print ``ack STREAM VERSION``.

This module needs neither pytest nor a test folder, so it runs from an installed package.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any

import anyio

from agentledger.core.events import Event, ToolCalled
from agentledger.errors import ConflictError
from agentledger.store import EventStore, SupportsAclose

__all__ = ("BATCH", "batch", "hang", "make_events")

BATCH = 3
"""Events per batch in ``crash`` mode."""


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


def _ready() -> None:
    print("ready", flush=True)


def hang() -> None:
    """Say ``ready`` and block until the test kills this process (what a fault calls)."""
    _ready()
    sys.stdin.readline()
    raise SystemExit("the test should have killed this process")


async def _go() -> None:
    _ready()
    await anyio.to_thread.run_sync(sys.stdin.readline)


async def crash(contract: Any, store: EventStore, stream: str, point: str, before: int) -> None:
    for k in range(before):
        await store.append(stream, batch(stream, k), k * BATCH)
    if point == "loop":
        _ready()
        k = before
        while True:
            await store.append(stream, batch(stream, k), k * BATCH)
            k += 1
    if point == "idle":
        hang()
    contract.install_fault(store, point, hang)
    await store.append(stream, batch(stream, before), before * BATCH)
    raise SystemExit(f"the fault at {point!r} did not stop the append")


async def many(store: EventStore, prefix: str, writers: int) -> None:
    async def writer(stream: str) -> None:
        k = 0
        while True:
            version = await store.append(stream, batch(stream, k), k * BATCH)
            k += 1
            print(f"ack {stream} {version}", flush=True)

    _ready()
    async with anyio.create_task_group() as group:
        for index in range(writers):
            group.start_soon(writer, f"{prefix}_{index}")


async def race(store: EventStore, stream: str, tag: str) -> None:
    version = len(await store.read(stream))
    await _go()
    try:
        print(f"ok {await store.append(stream, make_events(stream, version, 2, tag), version)}", flush=True)
    except ConflictError as exc:
        print(f"conflict {exc.actual}", flush=True)


async def contend(store: EventStore, stream: str, tag: str, batches: int) -> None:
    await _go()
    version = len(await store.read(stream))
    conflicts = 0
    for k in range(batches):
        while True:
            try:
                version = await store.append(stream, make_events(stream, version, 2, f"{tag}{k}"), version)
                break
            except ConflictError as exc:
                conflicts += 1
                version = exc.actual
    print(f"done {conflicts}", flush=True)


def _contract(name: str) -> Any:
    module, _, qualname = name.partition(":")
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


async def main(argv: Sequence[str]) -> None:
    contract_name, args, stream, mode, *rest = argv
    contract = _contract(contract_name)
    store: EventStore = contract.reopen(json.loads(args))
    if mode == "race":
        await race(store, stream, rest[0])
    elif mode == "contend":
        await contend(store, stream, rest[0], int(rest[1]))
    elif mode == "many":
        await many(store, stream, int(rest[0]))
    elif mode == "crash":
        await crash(contract, store, stream, rest[0], int(rest[1]))
    else:
        raise ValueError(mode)
    if isinstance(store, SupportsAclose):
        await store.aclose()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])

"""How ``agentledger serve`` answers over a store of many runs, and what its memory does while
runs keep arriving.

Theory of operation. The demo agent runs once; its 24 events are copied, with a new run id (and
one of ten session ids), into ``--runs`` runs of a SQLite store, each appended as the agent
appends it (a batch per step). Then
``agentledger serve --store ... --port 0`` starts in a fresh process, as a user starts it, and
the benchmark reads the address it prints. Over loopback HTTP (httpx, one connection):

- the first page of runs, cold: the first request the server answers after it printed its address;
- then, warm, the best and the median of ``--repeat`` requests each of: the first page (``/``),
  page 2, the JSON listing (``/api/runs``), a filter the listing answers (``?agent=``), and the
  approvals inbox; beside them, the same listing asked of the store directly in this process
  (``list_runs`` of 51 runs), the floor any page of runs stands on, and each page's ratio to it.

Memory: a client holds ``/events`` (server-sent events) open while this process appends
``--append`` more runs through its own connection, in bursts of ``--burst``, waiting after each
burst for the server to push ``changed`` (so each burst is seen, listed and summarised). The
server's resident set size (``VmRSS`` of ``/proc/PID/status``) is read after each burst; the
report gives the first, the highest and the last reading, and the growth over the second half of
the bursts (flat memory: about zero).

Run ``python -m benchmarks.bench_serve`` (``--help`` for options). Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
import httpx

from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.core.events import Event
from agentledger.listing import RunQuery

from .bench_runs import batches, copy_run, demo_events


def fill(path: Path, events: Sequence[Event], first: int, count: int) -> None:
    """Append ``count`` copies of ``events`` as runs ``first`` .. ``first + count - 1``."""
    store = SqliteEventStore(path, synchronous="OFF")
    try:
        for number in range(first, first + count):
            version, run_id = 0, f"run_{number:07d}"
            for batch in batches(copy_run(events, run_id, f"s{number % 10}")):
                version = store.append_sync(run_id, batch, version)
    finally:
        store.close()


def rss_kib(pid: int) -> int:
    """The resident set size of process ``pid``, in KiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    return int(found.group(1)) if found else 0


def timed(call: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Best and median seconds of ``repeat`` calls."""
    took = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        took.append(time.perf_counter() - start)
    return min(took), statistics.median(took)


def start_server(path: Path, poll: float) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "agentledger", "serve", "--store", str(path), "--port", "0",
         "--poll-interval", str(poll)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert process.stdout is not None
    for line in process.stdout:
        found = re.match(r"open (http://[^/]+)/", line)
        if found:
            return process, found.group(1)
    raise RuntimeError(f"agentledger serve did not start: {process.stderr.read() if process.stderr else ''}")


class Listener:
    """Holds ``/events`` open and counts the ``changed`` events it receives."""

    def __init__(self, url: str) -> None:
        self.changes = 0
        self.condition = threading.Condition()
        self.connected = threading.Event()
        self.thread = threading.Thread(target=self._listen, args=(url,), daemon=True)
        self.thread.start()

    def _listen(self, url: str) -> None:
        with httpx.stream("GET", url + "/events", timeout=None) as stream:
            for line in stream.iter_lines():
                if line == "event: hello":
                    self.connected.set()
                if line == "event: changed":
                    with self.condition:
                        self.changes += 1
                        self.condition.notify_all()

    def wait_past(self, seen: int, timeout: float = 60.0) -> int:
        with self.condition:
            self.condition.wait_for(lambda: self.changes > seen, timeout=timeout)
            return self.changes


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=100_000, help="runs in the store (default 100000)")
    parser.add_argument("--repeat", type=int, default=20, help="warm requests per page (default 20)")
    parser.add_argument("--append", type=int, default=5_000, help="runs appended while served (5000)")
    parser.add_argument("--burst", type=int, default=250, help="runs per burst of appends (default 250)")
    parser.add_argument("--poll", type=float, default=0.2, help="the server's --poll-interval (default 0.2)")
    parser.add_argument("--keep", type=Path, help="build the store here and keep it (reused if it exists)")
    args = parser.parse_args(argv)

    folder = Path(tempfile.mkdtemp(prefix="bench_serve_")) if args.keep is None else args.keep
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "events.sqlite"
    events = demo_events()
    if not path.exists():
        start = time.perf_counter()
        fill(path, events, 0, args.runs)
        print(f"filled {args.runs} runs ({len(events)} events each) in {time.perf_counter() - start:.1f} s")

    direct = SqliteEventStore(path, read_only=True)
    floor = timed(lambda: anyio.run(direct.list_runs, RunQuery(limit=51)), args.repeat)
    direct.close()

    process, url = start_server(path, args.poll)
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            start = time.perf_counter()
            client.get("/").raise_for_status()
            cold = time.perf_counter() - start
            python = sys.version.split()[0]
            print(f"agentledger serve over {args.runs} runs, Python {python}, {os.cpu_count()} CPUs")
            print(f"{'request':34} {'best ms':>8} {'median ms':>10} {'x listing':>10}")
            cold_ratio = cold / floor[0]
            print(f"{'first page, cold (first request)':34} {cold * 1e3:8.1f} {'':>10} {cold_ratio:10.1f}")
            for label, target in (
                ("first page /", "/"),
                ("page 2 /?page=2", "/?page=2"),
                ("JSON /api/runs", "/api/runs"),
                ("filter /?agent=TripPlanner", "/?agent=TripPlanner"),
                ("approvals inbox /approvals", "/approvals"),
            ):
                best, median = timed(lambda t=target: client.get(t).raise_for_status(), args.repeat)  # type: ignore[misc]
                print(f"{label:34} {best * 1e3:8.1f} {median * 1e3:10.1f} {best / floor[0]:10.1f}")
            best, median = floor
            print(f"{'store list_runs(51), here':34} {best * 1e3:8.1f} {median * 1e3:10.1f} {'1.0':>10}")

        listener = Listener(url)
        listener.connected.wait(timeout=60)
        seen = 0
        readings = [rss_kib(process.pid)]
        appended = args.runs
        for _ in range(max(args.append // args.burst, 1)):
            fill(path, events, appended, args.burst)
            appended += args.burst
            seen = listener.wait_past(seen)
            readings.append(rss_kib(process.pid))
        half = readings[len(readings) // 2 :]
        print(
            f"memory while {appended - args.runs} runs arrived in bursts of {args.burst}"
            f" ({listener.changes} changes pushed): RSS first {readings[0] / 1024:.1f} MiB,"
            f" highest {max(readings) / 1024:.1f} MiB, last {readings[-1] / 1024:.1f} MiB;"
            f" second half grew {(half[-1] - half[0]) / 1024:+.1f} MiB"
        )
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


if __name__ == "__main__":
    main()

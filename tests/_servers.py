"""What the tests say when a server they start cannot start: the machine's part, then the server's.

A server that dies or never answers may be at fault, or the machine may be: a binary built for
processor features this machine cannot use (illegal instruction), a process killed for memory,
a full disk, a machine too loaded to answer in time. ``startup_failure`` puts those facts beside
the server's own last lines, so a failing test says which it was.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

__all__ = ("describe_exit", "machine_state", "startup_failure", "tail")

LOW_DISK = 512 * 1024 * 1024
LOW_MEMORY = 512 * 1024 * 1024


def describe_exit(code: int) -> str:
    """How a process ended, in words, naming the causes that lie with the machine."""
    if code in (132, -signal.SIGILL):
        return (
            f"exited with {code}: illegal instruction (the binary uses processor features this machine "
            "cannot use; build it for a portable baseline)"
        )
    if code in (137, -signal.SIGKILL):
        return f"exited with {code}: killed (SIGKILL; the kernel does this when memory runs out)"
    if code < 0:
        return f"was killed by signal {signal.Signals(-code).name}"
    return f"exited with {code}"


def machine_state() -> str:
    """Load, free memory and free disk, with a warning for what is short."""
    facts = []
    try:
        one, five, _ = os.getloadavg()
        busy = " (busy: more runnable work than cores)" if one > (os.cpu_count() or 1) else ""
        facts.append(f"load {one:.1f}/{five:.1f} on {os.cpu_count()} cores{busy}")
    except OSError:
        pass
    available = _available_memory()
    if available is not None:
        low = " (LOW)" if available < LOW_MEMORY else ""
        facts.append(f"{available / 2**30:.1f} GiB memory available{low}")
    free = shutil.disk_usage(tempfile.gettempdir()).free
    low_disk = " (LOW)" if free < LOW_DISK else ""
    facts.append(f"{free / 2**30:.1f} GiB free in {tempfile.gettempdir()}{low_disk}")
    return "machine: " + ", ".join(facts)


def _available_memory() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def tail(log: Path, lines: int = 40) -> str:
    """The last ``lines`` lines a server wrote to ``log``."""
    if not log.is_file():
        return "<no output>"
    text = log.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:]) if text else "<no output>"


def startup_failure(server: str, what: str, log: Path) -> str:
    """A failure message: what happened, the machine's state, the server's last lines."""
    return f"{server} {what}\n{machine_state()}\n--- {server}'s last lines ({log}) ---\n{tail(log)}"

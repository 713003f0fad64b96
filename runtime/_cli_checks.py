"""What the ``agentledger`` command checks before it acts on a store's contents or the user's words.

A stored log is untrusted input, and so are its run ids: an id that holds ``../`` or starts with
``/`` must not decide where a file is written, so a default output name is made from the id with
anything but letters, digits, ``-``, ``_`` and ``.`` replaced. A run whose ``RunStarted`` says a
newer schema version is refused, never guessed at; a run whose log stops before it ended is
reported as incomplete rather than compared. Paths and URLs the user gives are checked here, so
that every problem is one line on stderr.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from .core.events import SCHEMA_VERSION, BatchClaimed, Event, RunCompleted, RunFailed, RunStarted
from .errors import AgentLedgerError

__all__ = (
    "UsageError",
    "check_agent",
    "check_complete",
    "check_path",
    "check_schema",
    "check_url",
    "output_name",
)

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_NAME = 120


class UsageError(AgentLedgerError):
    """The command line asks for something that cannot be done (exit code 2)."""


def output_name(run_id: str, suffix: str) -> str:
    """A file name in the current directory for ``run_id``'s output: never a path, never hidden."""
    name = _UNSAFE.sub("_", run_id).lstrip(".")[:_MAX_NAME] or "run"
    return name + suffix


def check_path(path: str, what: str) -> str:
    """``path`` if a file can have it (no NUL byte, not empty)."""
    if not path or "\0" in path:
        raise UsageError(f"{what} {path!r} is not a usable file name")
    return path


def check_url(url: str) -> str:
    """An OTLP receiver's base URL: ``http`` or ``https`` with a host."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a port that is no number
    except ValueError as exc:
        raise UsageError(f"--otlp {url!r} is not a URL: {exc}") from exc
    if parts.scheme not in ("http", "https") or not host:
        raise UsageError(f"--otlp must be an http:// or https:// URL with a host, not {url!r}")
    return url


def check_schema(events: list[Event], run_id: str) -> list[Event]:
    """Refuse a run written by a newer schema version than this agentledger reads."""
    first = events[0] if events else None
    if isinstance(first, RunStarted) and first.schema_version > SCHEMA_VERSION:
        raise AgentLedgerError(
            f"run {run_id!r} was written with event schema version {first.schema_version}; this "
            f"agentledger reads up to version {SCHEMA_VERSION}: upgrade agentledger to read it"
        )
    return events


def check_complete(events: list[Event], run_id: str) -> None:
    """Refuse to replay a run whose log stops before ``RunCompleted`` or ``RunFailed`` (a paused
    run's log may go on after it with the claim of the run that resumed it)."""
    last = events[-1] if events else None
    while isinstance(last, BatchClaimed) and last.seq > 0:
        last = events[last.seq - 1]
    if not isinstance(last, RunCompleted | RunFailed):
        where = f"seq {last.seq} ({type(last).__name__})" if last is not None else "its start"
        raise AgentLedgerError(
            f"run {run_id!r} is incomplete: its log stops at {where} without RunCompleted or "
            "RunFailed (interrupted, or still running), so there is no outcome to compare a rerun with"
        )


def check_agent(started: RunStarted, agent: Any, given: str | None) -> None:
    """Refuse to replay a run against an agent of another name than the one that recorded it."""
    recorded = started.agent_name or started.agent_id
    name = agent.name or agent.id
    if recorded != name:
        which = f"--agent {given}" if given else "the demo agent (no --agent given)"
        raise UsageError(
            f"run {started.run_id!r} was recorded by agent {recorded!r}, but {which} is {name!r}: "
            "pass --agent module:name of the agent that recorded it, or --force to replay it anyway"
        )

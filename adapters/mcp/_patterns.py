"""Regular expressions from a server, matched against strings from a model, within a budget.

An input schema's ``pattern`` is a server's regular expression and the string it checks is the
model's: ``^(a+)+$`` against 29 characters backtracks for many seconds, and Python's ``re``
holds the interpreter all that time (a thread would not let the event loop run either). A
pattern that cannot backtrack far (no quantified group, no backreference, at most one unbounded
quantifier) against a string of at most ``INLINE_LENGTH`` characters is matched here. Any other
is matched in a worker process, given ``PATTERN_TIMEOUT`` seconds; past that the worker is
killed (a new one starts for the next check) and the check fails with ``PatternTimeout``,
which the tool reports as arguments it cannot accept.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import re
import threading
from typing import Any

__all__ = ("INLINE_LENGTH", "PATTERN_TIMEOUT", "PatternTimeout", "search")

PATTERN_TIMEOUT = 1.0
"""Seconds a pattern check may take in the worker process."""
INLINE_LENGTH = 10_000
"""The longest string a simple pattern is matched against in this process."""

_START_TIMEOUT = 60.0
_ESCAPE = re.compile(r"\\.")
_QUANTIFIED_GROUP = re.compile(r"\)(?:[*+?]|\{\d)")
_UNBOUNDED = re.compile(r"[*+]|\{\d*,\}")
_BACKREFERENCE = re.compile(r"\\[1-9]|\(\?P=")


class PatternTimeout(Exception):
    """A pattern check took longer than ``PATTERN_TIMEOUT``: it was stopped."""


def simple(pattern: str) -> bool:
    """Whether ``pattern`` cannot backtrack far: no quantified group, no backreference, at most
    one unbounded quantifier."""
    if _BACKREFERENCE.search(pattern):
        return False
    bare = _ESCAPE.sub("", pattern)
    return not _QUANTIFIED_GROUP.search(bare) and len(_UNBOUNDED.findall(bare)) <= 1


def search(pattern: str, string: str, timeout: float | None = None) -> bool:
    """``re.search(pattern, string) is not None``, in bounded time (``PatternTimeout`` past
    ``timeout``, by default ``PATTERN_TIMEOUT``)."""
    if len(string) <= INLINE_LENGTH and simple(pattern):
        return re.search(pattern, string) is not None
    return _worker.search(pattern, string, PATTERN_TIMEOUT if timeout is None else timeout)


def _serve(connection: multiprocessing.connection.Connection) -> None:
    """The worker process: say it is ready, then answer each ``(pattern, string)`` with whether
    it matches."""
    connection.send("ready")
    while True:
        try:
            pattern, string = connection.recv()
        except EOFError:
            return
        try:
            connection.send(re.search(pattern, string) is not None)
        except re.error as exc:
            connection.send(exc)


class _Worker:
    """One worker process, started on first use and replaced when a check overran."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.process: Any = None
        self.connection: multiprocessing.connection.Connection | None = None

    def search(self, pattern: str, string: str, timeout: float) -> bool:
        with self.lock:
            connection = self._connection()
            connection.send((pattern, string))
            if not connection.poll(timeout):
                self._stop()
                raise PatternTimeout(f"matching the pattern {pattern!r} took longer than {timeout:g} s")
            answer = connection.recv()
        if isinstance(answer, re.error):
            raise answer
        return bool(answer)

    def _connection(self) -> multiprocessing.connection.Connection:
        if self.connection is None or self.process is None or not self.process.is_alive():
            self._stop()
            context = multiprocessing.get_context("spawn")
            mine, theirs = context.Pipe()
            self.process = context.Process(
                target=_serve, args=(theirs,), daemon=True, name="agentledger-patterns"
            )
            self.process.start()
            theirs.close()
            self.connection = mine
            # Starting a process (and its imports) is not the pattern's time: wait for it apart.
            if not mine.poll(_START_TIMEOUT) or mine.recv() != "ready":
                self._stop()
                raise PatternTimeout("the pattern checker's process did not start")
        return self.connection

    def _stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.join()
        if self.connection is not None:
            self.connection.close()
        self.process = self.connection = None


_worker = _Worker()

"""A store contract's second process, driven through its standard streams.

The test and the child never coordinate through timing: the test waits for a line the child
prints (``ready``, an outcome), and the child waits for a line on stdin. Every wait is bounded, so a
child that hangs fails the test with what it wrote to stderr instead of stalling the suite.
"""

from __future__ import annotations

import os
import sys

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

__all__ = ("Child",)

TIMEOUT = 60.0
"""Seconds any one exchange with a child may take."""


class Child:
    """``python -m agentledger.testing._store_child ARGS...``; see that module for the modes."""

    def __init__(self, process: Process) -> None:
        self.process = process
        assert process.stdout is not None
        self._lines = BufferedByteReceiveStream(process.stdout)

    @classmethod
    async def start(cls, *args: str) -> Child:
        """Start a child that imports what this process can (its ``sys.path``)."""
        path = os.pathsep.join(entry for entry in sys.path if entry)
        env = {**os.environ, "PYTHONPATH": path}
        command = [sys.executable, "-m", "agentledger.testing._store_child", *args]
        return cls(await anyio.open_process(command, env=env))

    async def expect(self, word: str) -> str:
        """The child's next line, which must start with ``word``."""
        with anyio.fail_after(TIMEOUT):
            try:
                line = (await self._lines.receive_until(b"\n", 1 << 16)).decode()
            except (anyio.IncompleteRead, anyio.EndOfStream):
                line = ""
        if not line.startswith(word):
            self.process.kill()
            pytest.fail(f"the child said {line!r}, not {word!r}:\n{await self._stderr()}")
        return line.strip()

    async def send(self, line: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(f"{line}\n".encode())

    async def finish(self, *, kill: bool = False) -> str:
        """Wait for the child to end (kill it first with ``kill``); the rest of its output."""
        if kill:
            self.process.kill()
        with anyio.fail_after(TIMEOUT):
            out = (await _read_all(self._lines)).decode()
            code = await self.process.wait()
        if not kill and code != 0:
            pytest.fail(f"the child exited with {code}:\n{await self._stderr()}")
        await self.process.aclose()
        return out.strip()

    async def _stderr(self) -> str:
        assert self.process.stderr is not None
        with anyio.fail_after(TIMEOUT):
            await self.process.wait()
            return (await _read_all(self.process.stderr)).decode(errors="replace")


async def _read_all(stream: BufferedByteReceiveStream | anyio.abc.ByteReceiveStream) -> bytes:
    chunks = []
    try:
        while True:
            chunks.append(await stream.receive())
    except (anyio.EndOfStream, anyio.ClosedResourceError):
        return b"".join(chunks)

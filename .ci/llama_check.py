"""Check that a llama-server binary really works on this machine: start it on loopback with the
model, wait until it is healthy, complete a few tokens, stop it.

A binary built for another processor can print its version and still die with SIGILL (exit 132)
as soon as it touches the weights, so nothing less than a completion proves it runs here.

Usage: python3 .ci/llama_check.py BINARY MODEL

Exit 0 and one line naming the completion when it works; otherwise exit 1 with what the server
printed last. Standard library only: it runs before any virtualenv exists.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

STARTUP_SECONDS = 180.0
COMPLETION_SECONDS = 120.0
TOKENS = 8


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def describe_exit(code: int) -> str:
    if code == 132 or code == -4:
        return f"exit {code}: illegal instruction (built for a processor feature this machine cannot use)"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit {code}"


def wait_healthy(process: subprocess.Popen[bytes], port: int, log: Path) -> str | None:
    """None once /health answers 200, else why not."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            return f"llama-server ended while loading the model ({describe_exit(code)})"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
                if answer.status == 200:
                    return None
        except (urllib.error.URLError, OSError):
            pass  # not listening yet, or 503 while the model loads
        time.sleep(0.25)
    return f"llama-server was not healthy within {STARTUP_SECONDS:.0f} s"


def complete(process: subprocess.Popen[bytes], port: int) -> tuple[str | None, str]:
    """(why it failed or None, the completed text)."""
    body = json.dumps({"prompt": "The capital of France is", "n_predict": TOKENS, "temperature": 0}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/completion", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=COMPLETION_SECONDS) as answer:
            payload = json.loads(answer.read())
    except (urllib.error.URLError, OSError, ValueError) as error:
        code = process.poll()
        ended = f" ({describe_exit(code)})" if code is not None else ""
        return f"the completion request failed: {error}{ended}", ""
    predicted = int(payload.get("tokens_predicted") or 0)
    text = str(payload.get("content", ""))
    if predicted <= 0:
        return f"the server answered without completing a token: {payload!r}", text
    return None, text


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    binary, model = Path(argv[1]), Path(argv[2])
    if not model.is_file():
        print(f"llama-server check: no model at {model}", file=sys.stderr)
        return 1
    port = free_port()
    with tempfile.TemporaryDirectory() as work:
        log = Path(work) / "server.log"
        command = [
            str(binary), "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--ctx-size", "512", "--parallel", "1", "--threads", "1", "--seed", "7", "--no-webui",
        ]  # fmt: skip
        with log.open("wb") as sink:
            try:
                process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
            except OSError as error:
                print(f"llama-server check: cannot start {binary}: {error}", file=sys.stderr)
                return 1
            try:
                failure = wait_healthy(process, port, log)
                text = ""
                if failure is None:
                    failure, text = complete(process, port)
            finally:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if failure is not None:
            print(f"llama-server check: {failure}\n--- its last lines ---\n{tail(log)}", file=sys.stderr)
            return 1
    print(f"llama-server check: {binary} completed {TOKENS} tokens: {text.strip()!r}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

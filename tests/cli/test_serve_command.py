"""``agentledger serve`` as a user starts it: the address with the token on stdout, pages over
HTTP, a decision with the token, a clean stop on SIGINT, and one-line usage errors."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from agentledger.cli import main
from agentledger.core.events import ToolReturned
from tests.serve._support import pause

ROOT = Path(__file__).resolve().parents[2]


def _start(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "agentledger", "serve", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def test_serve_prints_where_to_open_it_decides_with_the_token_and_stops_on_sigint(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    run = pause(path, amount=3)
    process = _start("--store", str(path), "--allow-decisions", "--agent", "tests.cli_agents:bank_agent")
    try:
        assert process.stdout is not None
        header = process.stdout.readline()
        assert "decisions allowed (agent tests.cli_agents:bank_agent)" in header
        opened = re.fullmatch(
            r"open (http://127\.0\.0\.1:(\d+))/#token=([A-Za-z0-9_-]+)\n", process.stdout.readline()
        )
        assert opened is not None
        url, token = opened.group(1), opened.group(3)
        assert process.stdout.readline() == f"write token: {token}\n"
        assert run in httpx.get(url + "/approvals").text
        body = {"run_id": run, "answers": [{"call_id": "call_1", "approved": True}], "reason": "fine"}
        headers = {"content-type": "application/json"}
        refused = httpx.post(url + "/api/decisions", content=json.dumps(body), headers=headers)
        assert refused.status_code == 403
        decided = httpx.post(
            url + "/api/decisions",
            content=json.dumps(body),
            headers={**headers, "x-agentledger-token": token},
        )
        assert decided.status_code == 200, decided.text
    finally:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "Traceback" not in err
    assert "agentledger serve: stopped" in out
    returned = [e.result for e in _all_events(path) if isinstance(e, ToolReturned)]
    assert returned == ["sent 3"]  # the approved call ran once, in the run that resumed the paused one


def _all_events(path: Path) -> list[object]:
    import anyio

    from agentledger.adapters.stores.sqlite import SqliteEventStore

    async def go() -> list[object]:
        store = SqliteEventStore(path, read_only=True)
        try:
            return [e for s in await store.streams() for e in await store.read(s)]
        finally:
            await store.aclose()

    return anyio.run(go)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "70000"], "--port must be 0 to 65535"),
        (["--poll-interval", "0"], "--poll-interval must be more than 0"),
    ],
)
def test_serve_usage_errors_are_one_line(
    tmp_path: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "runs.db"
    pause(path)
    assert main(["serve", "--store", str(path), *args]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_serve_refuses_a_store_that_is_not_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.db"
    assert main(["serve", "--store", str(missing)]) == 2
    assert "nope.db" in capsys.readouterr().err
    assert not missing.exists()

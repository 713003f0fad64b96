"""Every store a command opens is closed when the command is over: its database connections
and files are released, whether the command succeeded or failed."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from agentledger.adapters.stores.jsonl import JsonlEventStore
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.cli import main
from tests._runs import record, run_events


def _open_files_under(folder: Path) -> list[str]:
    """The files of ``folder`` this process holds open (Linux: its descriptors in /proc)."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed between the listing and the look
            continue
        if target.startswith(str(folder)):
            held.append(target)
    return held


def _filled(store: SqliteEventStore | JsonlEventStore) -> None:
    async def go() -> None:
        async with store:
            await record(store, run_events("run_01"))

    anyio.run(go)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads the open files from /proc")
@pytest.mark.parametrize("name", ["events.sqlite", "runs", "runs.jsonl"])
@pytest.mark.parametrize(
    "argv",
    [["runs"], ["show", "run_01"], ["show", "no_such_run"], ["state", "run_01"], ["runs", "--limit", "-1"]],
)
def test_a_command_leaves_no_file_of_its_store_open(
    tmp_path: Path, name: str, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / name
    _filled(SqliteEventStore(path) if name.endswith(".sqlite") else JsonlEventStore(path))
    assert _open_files_under(tmp_path) == []
    code = main([*argv, "--store", str(path)])
    assert code == (0 if "no_such_run" not in argv and "-1" not in argv else 2)
    assert _open_files_under(tmp_path) == []


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads the open files from /proc")
def test_the_demo_closes_the_store_it_records_into(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "demo.db"
    assert main(["demo", "--store", str(path)]) == 0
    assert _open_files_under(tmp_path) == []
    run_id = capsys.readouterr().out.split("recorded in")[1].split("agentledger show ")[1].split("`")[0]
    assert main(["show", run_id, "--store", str(path)]) == 0  # what it recorded was committed
    assert _open_files_under(tmp_path) == []

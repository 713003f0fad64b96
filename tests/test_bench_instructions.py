"""The instruction-count benchmark lays out a revision as the package and refuses a bad range.

Counting itself needs valgrind and takes minutes, so it is not run here; these are the parts a
wrong figure would come from: the package a ``--rev`` child imports, and the runs it subtracts.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import bench_instructions as bench

ROOT = Path(__file__).resolve().parent.parent


def test_a_revision_is_laid_out_as_the_package_with_its_adapters(tmp_path: Path) -> None:
    package = bench.checkout("HEAD", tmp_path)
    assert (package / "agentledger" / "__init__.py").is_file()
    assert (package / "agentledger" / "core" / "machine.py").is_file()
    assert (package / "agentledger" / "adapters" / "stores" / "sqlite.py").is_file()
    # The child imports that copy, not the installed checkout.
    found = subprocess.run(
        [sys.executable, "-c", "import agentledger; print(agentledger.__file__)"],
        env={"PYTHONPATH": str(package), "PATH": ""},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(found).resolve() == (package / "agentledger" / "__init__.py").resolve()


def test_the_first_child_must_measure_fewer_runs_than_the_second() -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(["--low", "20", "--high", "20"])
    assert bench.parse_args(["--low", "5", "--high", "25"]).high == 25


@pytest.mark.parametrize("framework", ["agentledger", "floor"])
def test_a_child_does_its_runs_without_valgrind(framework: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_instructions", "--child", framework, "b", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_counting_only_revisions_needs_one() -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(["--revs-only"])
    assert bench.parse_args(["--revs-only", "--rev", "HEAD"]).revs_only

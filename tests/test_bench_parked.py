"""What a run keeps while it waits on its model (``benchmarks/bench_parked.py``): one of each of
the run's own objects, and none of those a run only needs for what it does not use (a registry
for tools it never changes, a follower with no sinks or session to tell, a separate context or
loop object beside its binding and recorder)."""

from __future__ import annotations

import pytest

from benchmarks.bench_parked import main, parked_objects

RUNS = 40


@pytest.mark.anyio
async def test_a_waiting_run_keeps_one_of_each_of_its_own_objects() -> None:
    held = await parked_objects(RUNS)
    for name in ("AgentRun", "RunMachine", "RunRecorder", "RunBinding", "LocalDriver", "LocalStep"):
        assert held[name] == RUNS, name
    for name in ("ToolRegistry", "_Follow", "RunContext", "RunLoop", "Sinks"):
        assert held[name] == 0, name


def test_the_benchmark_prints_the_count_per_run(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--runs", "20", "--types"])
    out = capsys.readouterr().out
    assert out.startswith("tracked objects per waiting run of (a): ")
    assert "1.00  AgentRun" in out

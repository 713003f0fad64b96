"""The concurrency benchmark's floor plays the same three model calls as the agents, and a batch
with the collector off runs without it and turns it back on."""

from __future__ import annotations

import gc

import pytest

from benchmarks.bench_concurrency import FLOOR, LEDGER, child


@pytest.mark.parametrize("framework", [FLOOR, LEDGER])
@pytest.mark.parametrize("collector", [True, False])
def test_a_batch_runs_every_run_to_its_answer(framework: str, collector: bool) -> None:
    was = gc.isenabled()
    gc.enable()
    try:
        row = child(framework, runs=5, latency=0.0, collector=collector)  # each batch checks the answers
        assert (row["framework"], row["runs"]) == (framework, 5)
        if not collector:
            assert (row["collector_s"], row["full_collections"]) == (0, 0)
        assert gc.isenabled()
    finally:
        if not was:
            gc.disable()

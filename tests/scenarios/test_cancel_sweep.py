"""The cancellation sweep at CI size: runs cancelled at random points on every durable store.

Every log reads back from its ``RunStarted`` with contiguous ``seq``, the listing says of each
run what its log says (``completed``, ``failed`` or ``incomplete``), and every run that raised
the cancellation recorded how it ended. ``python -m tests._cancel_sweep --runs 1000`` runs the
longer sweep whose figures are in docs/reliability.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._cancel_sweep import STORES, open_store, sweep

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("kind", STORES)
async def test_runs_cancelled_at_random_points_leave_readable_logs_that_say_how_they_ended(
    tmp_path: Path, kind: str
) -> None:
    if kind == "postgres":
        from tests._temporal_env import require_postgres

        require_postgres()
    async with open_store(kind, tmp_path) as store:
        report = await sweep(store, kind, 40, seed=7)
    assert report.problems == []
    assert sum(report.outcomes.values()) == 40
    assert report.cancelled > 10  # the sweep did cancel runs, at the points it drew
    assert report.outcomes["completed"] > 0
    assert report.cancelled_unfinished == 0

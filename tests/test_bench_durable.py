"""The durable benchmark times every store once per round, in a rotating order, and gives each
round's ratio against the memory store of the same round."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import bench_durable
from benchmarks.bench_durable import MEMORY, Figure, paired


def test_rounds_rotate_and_ratios_pair_within_a_round(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    order: list[str] = []
    speeds = {MEMORY: [100.0, 50.0, 200.0], "A": [50.0, 50.0, 50.0], "B": [10.0, 40.0, 20.0]}

    def case(factory: object, level: int, runs: int, root: Path, dsn: str) -> Figure:
        name = factory.__name__  # type: ignore[attr-defined]
        order.append(name)
        rate = speeds[name][sum(1 for n in order if n == name) - 1]
        return Figure(rate / 24, rate)

    def named(name: str) -> object:
        def factory(directory: Path) -> None:
            return None

        factory.__name__ = name
        return factory

    monkeypatch.setattr(bench_durable, "case", case)
    factories = {name: named(name) for name in (MEMORY, "A", "B")}
    rows = paired(list(factories), factories, 10, 20, 3, tmp_path, "")  # type: ignore[arg-type]
    assert order == [MEMORY, "A", "B", "A", "B", MEMORY, "B", MEMORY, "A"]
    by_name = {name: (figure, ratios) for name, figure, ratios in rows}
    assert by_name[MEMORY][1] == [1.0, 1.0, 1.0]
    assert by_name["A"][1] == [0.5, 1.0, 0.25]
    assert by_name["B"][1] == [0.1, 0.8, 0.1]
    assert by_name["B"][0].events_per_s == 20.0  # the median round

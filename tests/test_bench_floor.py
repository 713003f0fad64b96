"""The floor benchmark does the work it is compared with: the scenario's model and tool calls, the
scripted answer, and as many events a run as agentledger's run of the same scenario."""

from __future__ import annotations

import pytest

from benchmarks._scenarios import ANSWER, SCENARIOS
from benchmarks.bench_floor import FloorRunner, ledger_events_per_run


@pytest.mark.anyio
@pytest.mark.parametrize(("key", "events"), [("a", 4), ("b", 44), ("c", 106)])
async def test_the_floor_writes_what_an_agentledger_run_writes(key: str, events: int) -> None:
    scenario = SCENARIOS[key]
    floor = FloorRunner(scenario)
    assert await floor.run() == ANSWER
    done = (floor.counter.model_calls, floor.counter.tool_calls)
    assert done == (scenario.model_calls, scenario.tool_calls)
    assert floor.events() == events == await ledger_events_per_run(scenario)

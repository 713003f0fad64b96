"""The floor benchmark does the work it is compared with: the scenario's model and tool calls, the
scripted answer, and the events agentledger's run of the same scenario writes, byte for byte but
for ids and times; and it checks what agentledger checks before it runs a tool or records an
event."""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec
import pytest

from agentledger.core.events import encode_event
from benchmarks._ledger import LedgerRunner
from benchmarks._scenarios import ANSWER, PROMPT, SCENARIOS, TOOL_NAME, Scenario, Step
from benchmarks.bench_floor import FloorRunner, Message, Response, ToolSpec, ledger_events_per_run

_RUN_ID = re.compile(rb'"run_id":"run_[0-9a-f]{18}"')
_AT = re.compile(rb'"at":\d+')
_CALL_ID = re.compile(rb"call_\d+")


@pytest.mark.anyio
@pytest.mark.parametrize(("key", "events"), [("a", 4), ("b", 44), ("c", 106)])
async def test_the_floor_writes_what_an_agentledger_run_writes(key: str, events: int) -> None:
    scenario = SCENARIOS[key]
    floor = FloorRunner(scenario)
    assert await floor.run() == ANSWER
    done = (floor.counter.model_calls, floor.counter.tool_calls)
    assert done == (scenario.model_calls, scenario.tool_calls)
    assert floor.events() == events == await ledger_events_per_run(scenario)


def _without_ids(lines: Sequence[bytes]) -> list[bytes]:
    """Encoded events with their run id (one of agentledger's form, checked), time and call ids
    blanked: what is left is what the two runs must agree on, byte for byte."""
    kept = []
    for line in lines:
        line, runs = _RUN_ID.subn(b'"run_id":"run"', line)
        assert runs == 1, line
        kept.append(_CALL_ID.sub(b"call", _AT.sub(b'"at":0', line)))
    return kept


@pytest.mark.anyio
@pytest.mark.parametrize("key", ["a", "b", "c"])
async def test_the_floor_writes_the_bytes_an_agentledger_run_writes(key: str) -> None:
    scenario = SCENARIOS[key]
    floor = FloorRunner(scenario)
    await floor.run()
    (floor_log,) = floor.store.streams.values()
    response = await LedgerRunner(scenario).agent.run(PROMPT)
    ledger = _without_ids([encode_event(e) for e in response.events])
    assert _without_ids([msgspec.json.encode(e) for e in floor_log]) == ledger


def _floor_answering(step: Step) -> FloorRunner:
    """A floor whose model answers ``step`` first, then the final text."""
    return FloorRunner(Scenario("x", "one step", (step, ANSWER)))


@pytest.mark.anyio
@pytest.mark.parametrize(
    "step",
    [
        ((TOOL_NAME, '{"n": "one"}'),),  # not the tool's parameter type (n: int)
        (("nosuch", '{"n": 1}'),),  # a tool not offered
        ((TOOL_NAME, '{"n": 9223372036854775808}'),),  # an int past int64: the log's check
    ],
)
async def test_the_floor_refuses_what_agentledger_does_not_run_or_record(step: Step) -> None:
    floor = _floor_answering(step)
    with pytest.raises((RuntimeError, msgspec.ValidationError)):
        await floor.run()
    assert floor.counter.tool_calls == 0


@pytest.mark.anyio
async def test_a_batch_is_one_tool_message_in_the_order_of_its_calls() -> None:
    floor = _floor_answering(SCENARIOS["c"].steps[0])
    seen: list[list[Message]] = []
    model = floor.model

    async def spy(transcript: Sequence[Message], tools: Sequence[ToolSpec]) -> Response:
        seen.append(list(transcript))
        assert [spec.name for spec in tools] == [TOOL_NAME]
        return await model(transcript, tools)

    floor.model = spy  # type: ignore[method-assign]
    assert await floor.run() == ANSWER
    last = seen[-1]
    assert [m.role for m in last] == ["user", "assistant", "tool"]
    calls = [c.call_id for c in last[1].contents]
    assert len(calls) == 50
    assert [c.call_id for c in last[2].contents] == calls

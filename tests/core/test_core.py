"""The sans-IO core: purity, the transition table, refolding a log."""

from __future__ import annotations

import json
import subprocess
import sys

import msgspec
import pytest

from agentledger import Agent
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core import (
    ModelCalled,
    ModelResponded,
    Phase,
    RunCompleted,
    RunMachine,
    RunStarted,
    ToolReturned,
    TransitionError,
)
from agentledger.core.events import Event, ToolSpec
from agentledger.core.machine import DERIVED, TRANSITIONS
from agentledger.core.messages import Content, Message
from agentledger.testing import FixedClock, SequentialIds


def test_core_imports_only_stdlib_and_msgspec() -> None:
    """Importing agentledger.core loads no anyio, httpx, structlog or asyncio."""
    # The parent package's __init__ imports the whole library, so the core is loaded under a bare
    # parent module: what ends up in sys.modules is what the core itself imports.
    code = """
import importlib.util, json, sys, types
spec = importlib.util.find_spec("agentledger")
parent = types.ModuleType("agentledger")
parent.__path__ = list(spec.submodule_search_locations)
sys.modules["agentledger"] = parent
import msgspec  # what msgspec itself imports is msgspec's business
before = set(sys.modules)
import agentledger.core
loaded = sorted(m.split(".")[0] for m in set(sys.modules) - before)
print(json.dumps(sorted(set(loaded))))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    third_party = {m for m in loaded - set(sys.stdlib_module_names) if not m.startswith("_")}
    assert third_party == {"agentledger"}
    assert not loaded & {"asyncio", "socket", "random", "threading", "time", "uuid", "anyio"}


def _started(**fields: object) -> RunStarted:
    base: dict[str, object] = {
        "run_id": "r",
        "seq": 0,
        "at": 10,
        "agent_id": "a",
        "messages": (Message("user", ("hi",)),),
        "tools": (ToolSpec(name="t"),),
    }
    base.update(fields)
    return RunStarted(**base)  # type: ignore[arg-type]


def _snapshot(machine: RunMachine) -> bytes:
    state = {
        "phase": machine.phase.value,
        "seq": machine.next_seq,
        "iteration": machine.iteration,
        "tools": machine.tools.names,
        "messages": machine.transcript.messages,
        "choice": machine.tool_choice,
    }
    return msgspec.json.encode(state)


def test_first_model_call_offers_the_started_tools() -> None:
    """begin() derives ModelCalled with the tools of RunStarted and a CallModel command."""
    machine = RunMachine()
    machine.handle(_started())
    events, commands = machine.begin()
    assert [type(e) for e in events] == [ModelCalled]
    called = events[0]
    assert isinstance(called, ModelCalled)
    assert (called.seq, called.at, called.tools, called.message_count) == (1, 10, ("t",), 1)
    assert len(commands) == 1


@pytest.mark.parametrize(
    "event",
    [
        ModelResponded(run_id="r", seq=1, at=1, iteration=1, message=Message("assistant", ("x",))),
        ToolReturned(run_id="r", seq=1, at=1, call_id="c", name="t"),
        RunCompleted(run_id="r", seq=1, at=1),
    ],
)
def test_illegal_input_raises_and_changes_nothing(event: Event) -> None:
    """An input not allowed in the phase raises TransitionError and leaves the state as it was."""
    machine = RunMachine()
    machine.handle(_started())
    before = _snapshot(machine)
    with pytest.raises(TransitionError) as info:
        machine.handle(event)
    assert info.value.seq == 1
    assert _snapshot(machine) == before


def test_seq_gap_is_refused() -> None:
    """An input whose seq is not the next one raises and changes nothing."""
    machine = RunMachine()
    machine.handle(_started())
    machine.begin()
    before = _snapshot(machine)
    answer = ModelResponded(run_id="r", seq=5, at=1, iteration=1, message=Message("assistant", ("x",)))
    with pytest.raises(TransitionError, match="expected seq 2"):
        machine.handle(answer)
    assert _snapshot(machine) == before


def test_derived_events_are_not_inputs() -> None:
    """Events the machine derives are never accepted as inputs, in any phase."""
    for phase, event_type in TRANSITIONS:
        assert event_type not in DERIVED, (phase, event_type)


def test_unknown_tool_is_derived_and_answered() -> None:
    """A call to a tool not offered becomes ToolNotFound and the loop asks the model again."""
    machine = RunMachine()
    machine.handle(_started())
    machine.begin()
    call = Content.from_function_call("c1", "nope", arguments="{}")
    events, commands = machine.handle(
        ModelResponded(run_id="r", seq=2, at=5, iteration=1, message=Message("assistant", (call,)))
    )
    assert [type(e).__name__ for e in events] == ["ModelResponded", "ToolNotFound", "ModelCalled"]
    assert machine.phase is Phase.AWAITING_MODEL
    assert machine.transcript.messages[-1].contents[0].result == 'Error: Requested function "nope" not found.'
    assert len(commands) == 1


@pytest.mark.anyio
async def test_refold_reproduces_a_recorded_run(clock: FixedClock, ids: SequentialIds) -> None:
    """Feeding a run's input events to a new machine derives exactly the recorded rest."""

    def double(x: int) -> int:
        return 2 * x

    client = ScriptedChatClient([[Call("double", {"x": 2}), Call("missing")], "4"])
    agent = Agent(client=client, tools=[double], clock=clock, ids=ids)
    response = await agent.run("double 2", options={"tool_choice": "required"})
    machine = RunMachine.from_events(response.events)
    assert machine.phase is Phase.DONE
    assert machine.transcript.messages == RunMachine.from_events(response.events).transcript.messages
    names = [type(e).__name__ for e in response.events]
    assert "ToolChoiceReset" in names
    assert "ToolNotFound" in names


@pytest.mark.anyio
async def test_refold_detects_a_tampered_derived_event(clock: FixedClock, ids: SequentialIds) -> None:
    """A recorded derived event that the machine would not produce is reported with its seq."""
    client = ScriptedChatClient(["hello"])
    response = await Agent(client=client, clock=clock, ids=ids).run("hi")
    events = list(response.events)
    called = events[1]
    assert isinstance(called, ModelCalled)
    events[1] = msgspec.structs.replace(called, tools=("ghost",))
    with pytest.raises(TransitionError) as info:
        RunMachine.from_events(events)
    assert info.value.seq == 1

"""What is true of the core as a whole: importing it loads nothing that does IO, and it refolds
what the whole library records (a run of an ``Agent``) into the same log. The machine's own
transitions, driven by hand, are ``test_machine.py``'s."""

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
    Phase,
    RunMachine,
    TransitionError,
)
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

"""The public surface is pinned: every exported name exists and nothing leaks by accident."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import agentledger
import agentledger.chat
import agentledger.core
import agentledger.providers
import agentledger.replay
import agentledger.run
import agentledger.session
import agentledger.store
import agentledger.subagents
import agentledger.testing
import agentledger.testing.clients
import agentledger.testing.stores

from ._public_all import PINNED

EXPECTED = {
    "Agent", "AgentContext", "AgentLedgerError", "AgentMiddleware", "AgentResponse",
    "AgentResponseUpdate", "AgentSession", "ApprovalError", "ArgumentsError", "BaseChatClient",
    "ChatContext", "ChatMiddleware", "ChatOptions", "ChatResponse", "ChatResponseUpdate",
    "CommitUnknownError", "ConflictError", "Content", "ContextProvider", "Event", "EventStore",
    "ExperimentalWarning",
    "FunctionInvocationContext", "FunctionMiddleware", "FunctionTool", "HistoryProvider",
    "InMemoryHistoryProvider", "LiveTools", "LogCorruptError",
    "MemoryEventStore", "Message", "MiddlewareError", "MiddlewareFailure", "MiddlewareTermination",
    "ModelCallError",
    "ModelResponseError", "OptionsError", "ReplayDivergence", "ReplayDrift", "ReplayRefusedError",
    "RunContext", "RunCycleError",
    "RunError", "RunEvictedError", "RunIdTakenError", "RunNotFoundError", "RunStream",
    "SCHEMA_VERSION",
    "SessionContext", "SessionState", "SessionStateError", "StoreError", "StructuredOutputError",
    "SubAgentApprovalError",
    "SubAgentDepthError",
    "ToolDefinitionError",
    "ToolMode", "ToolSpec", "TornTailWarning", "TransitionError", "UnknownToolError", "UnpricedCallError",
    "UnreadableStreamWarning", "UnrecordableError",
    "Usage", "__version__",
    "agent_middleware", "chat_middleware", "current_run_context", "default_redactor",
    "function_middleware", "normalize_messages", "redact_all", "redact_keys", "timeline", "tool",
}  # fmt: skip


def test_all_is_pinned() -> None:
    """agentledger.__all__ is exactly the documented public names."""
    assert set(agentledger.__all__) == EXPECTED
    assert len(agentledger.__all__) == len(EXPECTED)


def _public_module_names() -> list[str]:
    """Every module of the package whose dotted name has no private part."""
    walked = [m.name for m in pkgutil.walk_packages(agentledger.__path__, "agentledger.")]
    return ["agentledger", *(n for n in walked if not any(p.startswith("_") for p in n.split(".")[1:]))]


def test_every_public_all_is_pinned() -> None:
    """Each public module's __all__ is exactly the tuple tests/_public_all.py spells out for it."""
    found = {}
    for name in _public_module_names():
        module = importlib.import_module(name)
        if hasattr(module, "__all__"):
            found[name] = tuple(module.__all__)
    assert found == PINNED


def test_names_that_left_the_core_warn_for_one_release() -> None:
    """A helper the core now keeps to itself is still reachable under its old name, with a warning."""
    with pytest.warns(DeprecationWarning, match="answered_calls is no longer public"):
        old = agentledger.core.answered_calls
    assert old.__name__ == "_answered_calls"
    assert "answered_calls" not in agentledger.core.__all__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError):
            agentledger.core.never_was  # noqa: B018


def _old_names() -> list[tuple[str, Any, Any]]:
    """(old name, how it is reached, what it is now) for every name renamed in this release."""
    from agentledger.adapters.temporal.types import StepOutcome
    from agentledger.core import RunMachine, Views
    from agentledger.replay.findings import Finding

    finding = Finding(kind="drift", run_id="r", path=("r",), seq=1, rerun_seq=1, field="x")
    return [
        ("Step", lambda: agentledger.core.Step, agentledger.core.Reaction),
        ("refold", lambda: agentledger.core.refold([]).phase, RunMachine.from_events([]).phase),
        ("fold_views", lambda: len(agentledger.core.fold_views([])), len(Views.from_events([]))),
        ("rebuild", lambda: agentledger.core.ToolsProjection.rebuild([]).names, ()),
        ("MAX_DEPTH", lambda: agentledger.subagents.MAX_DEPTH, agentledger.subagents.MAX_AGENT_DEPTH),
        ("to_json", lambda: agentledger.run.to_json(b"x"), agentledger.run.to_recorded(b"x")),
        ("Finding.to_json", finding.to_json, finding.to_dict()),
        ("StepOutcome.held", lambda: StepOutcome(awaits_approval=True).held, True),
        ("SessionState.load", lambda: _loaded(), {"k": 1}),
    ]


def _loaded() -> dict[str, Any]:
    state = agentledger.AgentSession("s").state
    state.load({"k": 1})
    return dict(state)


@pytest.mark.parametrize("old", range(9))
def test_renamed_names_answer_for_one_release_with_a_warning(old: int) -> None:
    """Each renamed public name still gives what its new name gives, and warns that it moved."""
    name, reach, now = _old_names()[old]
    with pytest.warns(DeprecationWarning, match="is now|deprecated"):
        assert reach() == now, name


def test_the_old_wire_name_of_a_waiting_call_is_kept() -> None:
    """StepOutcome.awaits_approval is still "held" in a Temporal payload, so running workflows read it."""
    import msgspec

    from agentledger.adapters.temporal.types import StepOutcome

    assert msgspec.json.decode(msgspec.json.encode(StepOutcome(awaits_approval=True)))["held"] is True
    assert msgspec.json.decode(b'{"held":true}', type=StepOutcome).awaits_approval


PUBLIC_MODULES = (
    agentledger,
    agentledger.chat,
    agentledger.core,
    agentledger.providers,
    agentledger.replay,
    agentledger.run,
    agentledger.session,
    agentledger.store,
    agentledger.structured,
    agentledger.subagents,
    agentledger.testing,
    agentledger.testing.clients,
    agentledger.testing.stores,
)

DOCUMENTED_MODULES = (
    agentledger.chat,
    agentledger.structured,
    agentledger.core,
    agentledger.providers,
    agentledger.replay,
    agentledger.run,
    agentledger.store,
    agentledger.testing,
)


def test_every_exported_name_exists() -> None:
    """Each name in __all__ of the public modules resolves."""
    for module in PUBLIC_MODULES:
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"


def test_exported_classes_say_where_they_live() -> None:
    """Public classes and functions come from agentledger modules, not from dependencies."""
    for name in agentledger.__all__:
        value = getattr(agentledger, name)
        module = getattr(value, "__module__", None)
        if isinstance(module, str) and callable(value):
            assert module.startswith("agentledger"), (name, module)


def _undocumented(module: ModuleType) -> list[str]:
    """The names in ``module.__all__`` that docs/api.md never mentions in code (`name...`)."""
    text = (Path(__file__).parent.parent / "docs" / "api.md").read_text(encoding="utf-8")
    return [f"{module.__name__}.{name}" for name in module.__all__ if f"`{name}" not in text]


def test_every_public_name_is_documented() -> None:
    """docs/api.md mentions every name in agentledger.__all__."""
    assert _undocumented(agentledger) == []


def test_every_submodule_name_is_documented() -> None:
    """docs/api.md mentions every name in __all__ of the public submodules it covers."""
    missing = [name for module in DOCUMENTED_MODULES for name in _undocumented(module)]
    assert missing == []


def test_demo_command_prints_answer_and_timeline(tmp_path: Path) -> None:
    """`agentledger demo` runs on embedded defaults and prints the answer and the event timeline."""
    out = subprocess.run(
        [sys.executable, "-m", "agentledger.cli", "demo"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    lines = out.stdout.splitlines()
    assert lines[0].startswith("Lisbon is sunny")
    assert any("tools added: ['book_hotel']" in line for line in lines)
    assert any("middleware require_positive_nights answered" in line for line in lines)
    assert any("session updated by" in line for line in lines)
    assert "'preferences': {'room': 'quiet'}" in out.stdout

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


def test_the_core_exports_what_a_driver_needs_and_no_more() -> None:
    """agentledger.core is the log's events, the machine with its inputs and commands, the loop:
    45 names at most; each of the rest is public in its own module."""
    assert len(agentledger.core.__all__) <= 45
    for name in agentledger.core.__all__:
        assert getattr(agentledger.core, name) is not None
    for plumbing in ("INT64_MAX", "PROMOTE_AT", "checked_bytes", "Views", "decide_claim"):
        assert plumbing not in agentledger.core.__all__
        assert not hasattr(agentledger.core, plumbing), plumbing


@pytest.mark.parametrize(
    ("owner", "name"),
    [
        ("agentledger.core", "Step"),
        ("agentledger.core", "refold"),
        ("agentledger.core", "fold_views"),
        ("agentledger.core", "answered_calls"),
        ("agentledger.core.projections.ToolsProjection", "rebuild"),
        ("agentledger.subagents", "MAX_DEPTH"),
        ("agentledger.run", "to_json"),
        ("agentledger.replay.findings.Finding", "to_json"),
        ("agentledger.adapters.temporal.types.StepOutcome", "held"),
        ("agentledger.session.SessionState", "load"),
    ],
)
def test_names_renamed_before_the_first_release_are_gone(owner: str, name: str) -> None:
    """No name answers twice: the old spelling of a renamed name is an AttributeError, not a shim."""
    parts = owner.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            target = getattr(target, part)
        break
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError):
            getattr(target, name)


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

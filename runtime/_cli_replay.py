"""``agentledger replay``: load the agent to replay against, and report what the replay found.

The agent comes from ``--agent module:name``: an ``Agent``, or a factory. A factory that takes a
parameter is called with the ``RecordedRun`` (so it can restore tools from the log, say); one
that takes none is called with none. The report lists every finding, the first one marked;
with ``--json``, one JSON object per finding and a closing summary object.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Any

import msgspec

from ._cli_checks import UsageError
from .replay import RecordedRun, ReplayReport

__all__ = ("load_agent", "print_report")

DRIFT_NOTE = (
    "drift: the agent is configured otherwise than when the run was recorded; the rerun used the "
    "current configuration against the recorded model answers, so it cannot tell what the model "
    "would answer now (--accept-drift passes a replay with drift alone)"
)


def _takes_a_parameter(target: Any) -> bool:
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):  # a builtin or a class without a readable signature
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return any(p.kind in positional or p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters)


def load_agent(spec: str, recorded: RecordedRun | None = None) -> Any:
    """The ``Agent`` that ``spec`` (``module:name``) names or builds; a factory taking a
    parameter gets ``recorded``."""
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise UsageError(f"--agent must look like package.module:name, not {spec!r}")
    if os.getcwd() not in sys.path:  # a module in the current directory, as `python -m` finds it
        sys.path.insert(0, os.getcwd())
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot load the agent {spec!r}: {exc}") from exc
    from .agent import Agent

    try:
        if isinstance(target, Agent):
            agent = target
        elif recorded is not None and _takes_a_parameter(target):
            agent = target(recorded)
        else:
            agent = target()
    except Exception as exc:  # a function that is no agent factory
        raise UsageError(f"cannot build the agent {spec!r}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(agent, Agent):
        raise UsageError(f"{spec!r} is not an Agent or a function returning one")
    return agent


def print_report(report: ReplayReport, *, as_json: bool, accept_drift: bool) -> int:
    """Print the findings (all of them); 0 when the replay passed, 1 when not."""
    passed = report.passed(accept_drift=accept_drift)
    if as_json:
        for finding in report.findings:
            print(msgspec.json.encode(finding.to_json()).decode())
        summary = {
            "kind": "summary",
            "run_id": report.run_id,
            "runs_replayed": report.runs,
            "divergences": len(report.divergences),
            "drift": len(report.drift),
            "cannot_replay": len(report.cannot_replay),
            "passed": passed,
        }
        print(msgspec.json.encode(summary).decode())
        return 0 if passed else 1
    runs = len(report.runs)
    tree = f" ({runs} runs replayed: the lead and {runs - 1} sub-agent runs)" if runs > 1 else ""
    if not report.findings:
        print(f"run {report.run_id}: no divergence{tree}")
        return 0
    first = report.first()
    out = sys.stdout if passed else sys.stderr
    counts = ", ".join(
        f"{len(found)} {name}"
        for name, found in (
            ("divergences", report.divergences),
            ("drift", report.drift),
            ("cannot replay", report.cannot_replay),
        )
        if found
    )
    print(f"run {report.run_id}: {counts}{tree}", file=out)
    for finding in report.findings:
        mark = "* " if finding is first else "  "
        print(mark + finding.describe(), file=out)
        if finding.detail and finding.kind != "cannot_replay":
            print("\n".join("      " + line for line in finding.detail.splitlines()), file=out)
    if report.drift:
        print(DRIFT_NOTE, file=out)
    return 0 if passed else 1

"""``agentledger replay``: load the agent to replay against, and report what the replay found.

The agent comes from ``--agent module:name``: an ``Agent``, or a factory. A factory whose first
parameter is positional without a default is called with the ``RecordedRun`` (so it can restore
tools from the log, say); any other is called with no argument. The report lists every
finding, the first one marked; with ``--json``, one JSON object per finding and a closing
summary object.
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

__all__ = ("CANNOT_REPLAY", "AgentSource", "AgentUnavailable", "load_agent", "print_report", "resolve_agent")

CANNOT_REPLAY = 125
"""The exit status of a replay that could not run at all: ``git bisect run`` skips the commit."""


class AgentUnavailable(UsageError):
    """The agent's module does not import, or its factory fails, in the code as it is now."""


DRIFT_NOTE = (
    "drift: the agent is configured otherwise than when the run was recorded; the rerun used the "
    "current configuration against the recorded model answers, so it cannot tell what the model "
    "would answer now (--accept-drift passes a replay with drift alone)"
)


def _takes_the_run(target: Any) -> bool:
    """Whether a factory asks for the recorded run: its first parameter is positional and has no
    default (``def factory(recorded): ...``); parameters with defaults are the factory's own."""
    try:
        parameters = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):  # a builtin or a class without a readable signature
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if not parameters or parameters[0].kind not in positional:
        return False
    return parameters[0].default is inspect.Parameter.empty


class AgentSource:
    """What ``--agent module:name`` names, imported once: an ``Agent``, or a factory to build one
    per run (called with the ``RecordedRun`` when ``takes_run``)."""

    def __init__(self, spec: str, target: Any) -> None:
        self.spec = spec
        self.target = target
        self.takes_run = _takes_the_run(target)

    def build(self, recorded: RecordedRun | None = None) -> Any:
        """The ``Agent``: the one named, or what the factory returns now."""
        from .agent import Agent

        agent: object
        if not isinstance(self.target, Agent) and not callable(self.target):
            raise UsageError(f"{self.spec!r} is not an Agent or a function returning one")
        try:
            if isinstance(self.target, Agent):
                agent = self.target
            elif recorded is not None and self.takes_run:
                agent = self.target(recorded)
            else:
                agent = self.target()
        except (Exception, SystemExit) as exc:  # a function that is no agent factory, or one that fails now
            raise AgentUnavailable(
                f"cannot build the agent {self.spec!r}: {type(exc).__name__}: {exc}"
            ) from exc
        if inspect.iscoroutine(agent):
            agent.close()
            raise UsageError(_ASYNC.format(spec=self.spec))
        if not isinstance(agent, Agent):
            raise UsageError(f"{self.spec!r} is not an Agent or a function returning one")
        return agent

    def check(self) -> Any:
        """Refuse, before any run, what cannot give an agent: not a function, an async one, or a
        factory that fails or returns no ``Agent``; the agent built, or ``None`` when the factory
        needs the recorded run (it is then built for each run)."""
        from .agent import Agent

        if isinstance(self.target, Agent):
            return self.target
        if not callable(self.target):
            raise UsageError(f"{self.spec!r} is not an Agent or a function returning one")
        if inspect.iscoroutinefunction(self.target):
            raise UsageError(_ASYNC.format(spec=self.spec))
        return None if self.takes_run else self.build()


_ASYNC = "{spec!r} is an async function: give a plain function that returns the Agent"


def resolve_agent(spec: str) -> AgentSource:
    """Import what ``spec`` (``module:name``) names: ``UsageError`` for a spec of another shape,
    ``AgentUnavailable`` for a module that does not import or a name it does not have."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"--agent must look like package.module:name, not {spec!r}")
    if os.getcwd() not in sys.path:  # a module in the current directory, as `python -m` finds it
        sys.path.insert(0, os.getcwd())
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (Exception, SystemExit) as exc:  # it does not import in the code as it is (a syntax error...)
        raise AgentUnavailable(f"cannot load the agent {spec!r}: {type(exc).__name__}: {exc}") from exc
    return AgentSource(spec, target)


def load_agent(spec: str, recorded: RecordedRun | None = None) -> Any:
    """The ``Agent`` that ``spec`` (``module:name``) names or builds; a factory taking a
    parameter gets ``recorded``."""
    return resolve_agent(spec).build(recorded)


def print_report(report: ReplayReport, *, as_json: bool, accept_drift: bool) -> int:
    """Print the findings (all of them); 0 when the replay passed, 1 when not, ``CANNOT_REPLAY``
    when every finding is a part that could not be replayed."""
    passed = report.passed(accept_drift=accept_drift)
    only_cannot = all(f.kind == "cannot_replay" for f in report.findings)
    status = 0 if passed else (CANNOT_REPLAY if only_cannot else 1)
    if as_json:
        for finding in report.findings:
            print(msgspec.json.encode(finding.to_dict()).decode())
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
        return status
    runs = len(report.runs)
    children = "1 sub-agent run" if runs == 2 else f"{runs - 1} sub-agent runs"
    tree = f" ({runs} runs replayed: the lead and {children})" if runs > 1 else ""
    if not report.findings:
        print(f"run {report.run_id}: no divergence{tree}")
        return 0
    first = report.first()
    out = sys.stdout  # the report is the command's output, whatever it found; the status says
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
    return status

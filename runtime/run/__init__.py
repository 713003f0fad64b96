"""agentledger.run: the one seam every driver uses to carry out a run.

* ``RunSpec``: what a run is, fixed before it starts; builds ``RunStarted``.
* ``RunMachine`` (``agentledger.core``) decides; ``observe`` and ``pending`` rebuild it from a log.
* ``RunBinding``: a spec joined to a ``Recorder`` (``LiveRecorder`` feeds the machine at once,
  ``StepRecorder`` keeps one step's events for a driver whose machine is elsewhere).
* the steps: ``call_model`` (chat middleware and the client) and ``invoke_tools`` /
  ``invoke_call`` (function middleware and the tool), each recording input events.
* ``LocalDriver`` (the loop in this process) and ``AgentRun`` (a whole run with agent middleware).

``docs/architecture.md`` draws how the drivers (local, replay, Temporal) sit on it.
"""

from .binding import RunBinding
from .claims import claim_batches, refusal
from .driver import LocalDriver
from .lifecycle import AgentRun
from .model_step import call_model
from .recorder import LiveRecorder, Sink, StepRecorder, capture_sinks, watching
from .registry import ToolRegistry
from .spec import Layers, RunSpec, check_approvals, check_tool_choice, merge_options, options_record
from .tool_step import (
    CallOutcome,
    arguments_valid,
    hold_for_approval,
    invoke_call,
    invoke_tools,
    record_outcome,
)
from .values import to_json

__all__ = (
    "AgentRun",
    "CallOutcome",
    "Layers",
    "LiveRecorder",
    "LocalDriver",
    "RunBinding",
    "RunSpec",
    "Sink",
    "StepRecorder",
    "ToolRegistry",
    "arguments_valid",
    "call_model",
    "capture_sinks",
    "check_approvals",
    "check_tool_choice",
    "claim_batches",
    "hold_for_approval",
    "invoke_call",
    "invoke_tools",
    "merge_options",
    "options_record",
    "record_outcome",
    "refusal",
    "to_json",
    "watching",
)

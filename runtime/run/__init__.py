"""agentledger.run: the one seam every driver uses to carry out a run.

* ``RunSpec``: what a run is, fixed before it starts; builds ``RunStarted``.
* ``RunMachine`` (``agentledger.core``) decides; ``observe`` and ``pending`` rebuild it from a log.
* ``RunBinding``: a spec joined to a ``Recorder``: a ``RunRecorder`` in this process (into the
  current step, else to the run's owner, ``RunLoop``), a ``StepLog`` on a Temporal worker.
* the steps: ``call_model`` (chat middleware and the client) and ``invoke_call`` (function
  middleware and one tool), each recording input events into its step.
* ``LocalDriver`` (the executor of ``RunLoop.drive`` in this process) and ``AgentRun`` (a whole
  run with agent middleware).

``docs/architecture.md`` draws how the drivers (local, replay, Temporal) sit on it.
"""

from .binding import RunBinding
from .claims import claim_batches, claim_resume
from .driver import LocalDriver
from .lifecycle import AgentRun
from .model_step import call_model
from .recorder import RunRecorder, Sink, Sinks, capture_sinks, watching
from .registry import ToolRegistry
from .spec import Layers, RunSpec, check_approvals, check_tool_choice, merge_options, options_record
from .tool_step import (
    CallOutcome,
    arguments_valid,
    invoke_call,
    record_outcome,
)
from .values import to_recorded

__all__ = (
    "AgentRun",
    "CallOutcome",
    "Layers",
    "LocalDriver",
    "RunBinding",
    "RunRecorder",
    "RunSpec",
    "Sink",
    "Sinks",
    "ToolRegistry",
    "arguments_valid",
    "call_model",
    "capture_sinks",
    "check_approvals",
    "check_tool_choice",
    "claim_batches",
    "claim_resume",
    "invoke_call",
    "merge_options",
    "options_record",
    "record_outcome",
    "to_recorded",
    "watching",
)

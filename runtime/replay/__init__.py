"""agentledger.replay: replaying recorded runs: state at a point, rerun against new code, fork.

Three meanings, never confused:

* **state at** ``seq``: fold the log up to ``seq``; no code runs.
* **rerun**: run the agent's current code against the recorded model output (a replay client
  answers each model call from the log) and, with ``tools="recorded"``, the recorded tool
  outcomes instead of running tools. The new events are compared with the recorded ones, and
  the first difference raises ``ReplayDivergence``. No model is called, and with recorded tools
  no side effect is repeated.
* **fork**: rerun up to ``seq`` from the log, then continue with a live client (another model,
  prompt or tool).

Events are compared without ``at`` (time differs between runs) and without the ids of sub-agent
runs (new runs get new ids). Tool calls of one batch run concurrently, so how their events
interleave is not part of the run's meaning: within a batch, events are compared call by call,
each call's own events in order, calls in the model's order. Everything else must be equal.
"""

from .client import ReplayClient, ReplayExhausted
from .compare import canonical, compare, diff_runs, differences
from .findings import CallHow, Finding, FindingKind, ReplayedCall, ReplayReport, describe_input
from .rerun import fork, replay, rerun
from .state import RecordedRun, RunState, is_replaying, load

__all__ = (
    "CallHow",
    "Finding",
    "FindingKind",
    "RecordedRun",
    "ReplayClient",
    "ReplayExhausted",
    "ReplayReport",
    "ReplayedCall",
    "RunState",
    "canonical",
    "compare",
    "describe_input",
    "diff_runs",
    "differences",
    "fork",
    "is_replaying",
    "load",
    "replay",
    "rerun",
)

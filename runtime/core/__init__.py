"""agentledger.core: the sans-IO heart of a run.

Only the standard library and msgspec are imported here: no clock, no randomness, no IO. A test
imports this package in a fresh interpreter and checks ``sys.modules``.

``__all__`` is what a driver of the machine needs: the events of the log and their codec, the
machine with its inputs and commands, the loop that runs it, and the error it raises. Everything
else (projections, messages, limits, claims, approvals) is public in its own module:
``agentledger.core.projections``, ``agentledger.core.messages``, ... (docs/api.md).
"""

from .commands import CallModel, Command, FinishRun, InvokeTools, Phase
from .errors import TransitionError
from .events import (
    ApprovalRequested,
    ApprovalResolved,
    ArgumentsRejected,
    BatchClaimed,
    BatchResumed,
    CallsSkipped,
    ChildRunStarted,
    ContextProvided,
    Event,
    EventBase,
    IterationLimitReached,
    MiddlewareShortCircuit,
    ModelCalled,
    ModelFailed,
    ModelRequestRewritten,
    ModelResponded,
    RunCompleted,
    RunFailed,
    RunInputRewritten,
    RunStarted,
    RunTerminated,
    SessionUpdated,
    ToolCalled,
    ToolChoiceReset,
    ToolFailed,
    ToolNotFound,
    ToolReturned,
    ToolsAdded,
    ToolsRemoved,
    decode_event,
    decode_events,
    encode_event,
)
from .loop import Executor, RunLoop
from .machine import Begin, Fail, Finish, Reaction, RunMachine

__all__ = (
    "ApprovalRequested",
    "ApprovalResolved",
    "ArgumentsRejected",
    "BatchClaimed",
    "BatchResumed",
    "Begin",
    "CallModel",
    "CallsSkipped",
    "ChildRunStarted",
    "Command",
    "ContextProvided",
    "Event",
    "EventBase",
    "Executor",
    "Fail",
    "Finish",
    "FinishRun",
    "InvokeTools",
    "IterationLimitReached",
    "MiddlewareShortCircuit",
    "ModelCalled",
    "ModelFailed",
    "ModelRequestRewritten",
    "ModelResponded",
    "Phase",
    "Reaction",
    "RunCompleted",
    "RunFailed",
    "RunInputRewritten",
    "RunLoop",
    "RunMachine",
    "RunStarted",
    "RunTerminated",
    "SessionUpdated",
    "ToolCalled",
    "ToolChoiceReset",
    "ToolFailed",
    "ToolNotFound",
    "ToolReturned",
    "ToolsAdded",
    "ToolsRemoved",
    "TransitionError",
    "decode_event",
    "decode_events",
    "encode_event",
)

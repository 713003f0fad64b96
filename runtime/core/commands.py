"""What the run machine asks a driver to do: the commands, and the phases they are issued in."""

from __future__ import annotations

import enum
from collections.abc import Sequence

import msgspec

from .events import ToolChoice
from .messages import Content, Message

__all__ = ("CallModel", "Command", "FinishRun", "InvokeTools", "Phase")


class Phase(enum.Enum):
    """Where a run is: each phase accepts its own inputs (``TRANSITIONS``)."""

    __hash__ = object.__hash__  # members are singletons; Enum's own hash runs Python code per lookup

    NEW = "new"
    STARTED = "started"
    AWAITING_MODEL = "awaiting_model"
    RUNNING_TOOLS = "running_tools"
    FINISHING = "finishing"
    DONE = "done"


class CallModel(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Ask the model once, offering ``tools`` with ``tool_choice``.

    ``messages`` is what to send: the whole conversation, or with ``conversation_id`` (a
    conversation the service keeps) only the messages the service does not hold yet.
    """

    iteration: int
    messages: Sequence[Message]
    tools: tuple[str, ...]
    tool_choice: ToolChoice | None
    conversation_id: str | None = None
    final: bool = False
    """The last call after a limit: calls it asks for are not run (``CallsSkipped``), so a
    streamed run shows only its text."""


class InvokeTools(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Run this batch of calls (concurrently unless the run is sequential).

    ``gated`` names the calls whose tool requires approval: the driver checks their arguments
    and reports the valid ones with ``ApprovalRequested`` instead of running them (a call whose
    arguments cannot run is rejected at once, so nobody is asked to approve it).
    """

    iteration: int
    calls: tuple[Content, ...]
    gated: tuple[str, ...] = ()
    approved: tuple[str, ...] = ()
    """The calls a human approved (a resumed batch): each runs only with the arguments the
    approval answered; arguments rewritten after the answer are refused."""


class FinishRun(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The loop is over: ``reason`` is completed, terminated, awaiting_approval, limit_reached,
    short_circuit or failed. ``RunMachine.finish`` records how the run ended."""

    reason: str
    text: str = ""


Command = CallModel | InvokeTools | FinishRun

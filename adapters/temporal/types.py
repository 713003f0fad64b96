"""What the client, the workflow and the activities of ``agentledger.adapters.temporal`` exchange.

Every message is a frozen msgspec Struct, so events travel inside them as the same tagged JSON
they are stored as. The payload converter here writes them with msgspec as ``json/plain`` payloads
(readable in Temporal's UI and CLI, and decodable by any SDK) and reads them back typed from the
activity's or workflow's signature. This module imports only msgspec, temporalio and
``agentledger.core``, so the workflow sandbox can load it.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
import temporalio.api.common.v1
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    EncodingPayloadConverter,
    JSONPlainPayloadConverter,
)

from agentledger.core.events import Event, StateChange
from agentledger.core.messages import Content, Message, Usage

__all__ = (
    "ACTIVITIES",
    "APPEND_EVENTS",
    "CALL_MODEL",
    "DATA_CONVERTER",
    "FINISH_RUN",
    "INVOKE_TOOL",
    "LOAD_EVENTS",
    "RUN_SUBAGENT",
    "START_RUN",
    "WORKFLOW",
    "AppendRequest",
    "FinishOutcome",
    "FinishRequest",
    "Limits",
    "LoadRequest",
    "ModelRequest",
    "Resume",
    "RunInput",
    "RunResult",
    "RunView",
    "SessionInput",
    "StartOutcome",
    "StartRequest",
    "StepOutcome",
    "Timeouts",
    "ToolRequest",
)

WORKFLOW = "agentledger.AgentRun"
START_RUN = "agentledger.start_run"
CALL_MODEL = "agentledger.call_model"
INVOKE_TOOL = "agentledger.invoke_tool"
RUN_SUBAGENT = "agentledger.run_subagent"
APPEND_EVENTS = "agentledger.append_events"
FINISH_RUN = "agentledger.finish_run"
LOAD_EVENTS = "agentledger.load_events"
ACTIVITIES = (START_RUN, CALL_MODEL, INVOKE_TOOL, RUN_SUBAGENT, APPEND_EVENTS, FINISH_RUN, LOAD_EVENTS)
"""The stable names of the activities, as Temporal's history shows them."""


class Timeouts(msgspec.Struct, frozen=True, kw_only=True):
    """Seconds each kind of activity may run; a silent worker is noticed after ``heartbeat``."""

    heartbeat: float = 30.0
    model: float = 600.0
    tool: float = 600.0
    subagent: float = 3600.0
    store: float = 60.0
    retry_interval: float = 10.0
    """The longest wait between two attempts of an activity."""


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """How the run keeps within Temporal's limits (see docs/scale.md)."""

    payload_bytes: int = 1_000_000
    """Budget for one payload; Temporal refuses payloads over 2 MB by default."""
    history_events: int = 10_000
    """Continue as new at the next model call once the history holds this many events."""


class SessionInput(msgspec.Struct, frozen=True, kw_only=True):
    """The session a run continues: its history, its state, and changes not yet recorded."""

    session_id: str
    history: tuple[Message, ...] = ()
    state: dict[str, Any] = msgspec.field(default_factory=dict)
    pending: tuple[tuple[str, tuple[StateChange, ...]], ...] = ()
    paused: dict[str, str] = msgspec.field(default_factory=dict)
    """Calls waiting for approval: call id -> the run that paused on them (``paused_runs``)."""
    rerun: tuple[str, ...] = ()
    """Calls the caller allowed to run again (``AgentSession.allow_rerun``)."""
    rerun_holders: dict[str, str] = msgspec.field(default_factory=dict)
    """The run each such permission is about, where the session knows it (``rerun_holders``)."""


class Resume(msgspec.Struct, frozen=True, kw_only=True):
    """Where a continued run picks up: the events already stored, and facts about its agent."""

    version: int
    executions: int
    sequential: bool
    subagents: tuple[str, ...] = ()


class RunInput(msgspec.Struct, frozen=True, kw_only=True):
    """The workflow's input: which registered agent runs on what."""

    agent: str
    messages: tuple[Message, ...] = ()
    run_id: str | None = None
    session: SessionInput | None = None
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    function_invocation_kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    client_kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    timeouts: Timeouts = msgspec.field(default_factory=Timeouts)
    limits: Limits = msgspec.field(default_factory=Limits)
    resume: Resume | None = None


class RunResult(msgspec.Struct, frozen=True, kw_only=True):
    """How the run ended; its messages and events are in the store, under ``run_id``."""

    run_id: str
    status: Literal["completed", "failed"]
    reason: str
    text: str = ""
    usage: Usage = msgspec.field(default_factory=Usage)
    events: int = 0
    user_input_requests: tuple[Content, ...] = ()
    error_type: str | None = None
    error_message: str | None = None
    executions: int = 1


class RunView(msgspec.Struct, frozen=True, kw_only=True):
    """What a worker needs to rebuild the run's surroundings for one step."""

    agent: str
    run_id: str
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    function_invocation_kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    client_kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    session_id: str | None = None
    session_state: dict[str, Any] = msgspec.field(default_factory=dict)
    history: tuple[Message, ...] = ()
    limits: Limits = msgspec.field(default_factory=Limits)


class StartRequest(msgspec.Struct, frozen=True, kw_only=True):
    view: RunView
    messages: tuple[Message, ...]
    pending: tuple[tuple[str, tuple[StateChange, ...]], ...] = ()
    at: int
    paused: dict[str, str] = msgspec.field(default_factory=dict)
    """The session's calls waiting for approval, whose batch a resume claims first."""
    rerun: tuple[str, ...] = ()
    """Calls the caller allowed to run again although their outcome is unknown."""
    rerun_holders: dict[str, str] = msgspec.field(default_factory=dict)
    """The run each such permission is about (a permission another run holds is not used)."""


class StartOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """The stored first events (``RunStarted``, caller's session writes) and agent facts."""

    events: tuple[Event, ...]
    sequential: bool = False
    subagents: tuple[str, ...] = ()


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Append ``pending`` at ``version``, then make model call ``iteration``."""

    view: RunView
    iteration: int
    pending: tuple[Event, ...] = ()
    version: int


class ToolRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Run one call; ``tools`` are the names offered when its batch began."""

    view: RunView
    iteration: int
    call: Content
    tools: tuple[str, ...]
    gated: bool = False
    """The call's tool requires approval: hold it if its arguments are valid, else reject it."""
    approved: bool = False
    """A human approved the call: it runs only with the arguments the approval answered."""


class StepOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """The input events a step produced (``seq``/``at`` are stamped by the workflow)."""

    events: tuple[Event, ...] = ()
    error_type: str | None = None
    error_message: str | None = None
    awaits_approval: bool = msgspec.field(default=False, name="held")
    """A gated call with valid arguments: it waits for approval, not run (``held`` on the wire)."""


class AppendRequest(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    events: tuple[Event, ...]
    version: int


class FinishRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Append ``pending``, then how the run ended, as the machine refolded from the stored log
    records it (``RunCompleted``, or ``RunFailed`` after a failed model call)."""

    view: RunView
    pending: tuple[Event, ...] = ()
    version: int
    reason: str
    at: int


class FinishOutcome(msgspec.Struct, frozen=True, kw_only=True):
    version: int
    text: str = ""


class LoadRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A page of the stored log: events after ``after``, up to ``upto``, within ``max_bytes``."""

    run_id: str
    after: int
    upto: int
    max_bytes: int


# -- payloads -------------------------------------------------------------------------------------


class _MsgspecJSON(EncodingPayloadConverter):
    """``json/plain`` written and read by msgspec; other values go to the standard converter."""

    def __init__(self) -> None:
        self._fallback = JSONPlainPayloadConverter()

    @property
    def encoding(self) -> str:
        return "json/plain"

    def to_payload(self, value: Any) -> temporalio.api.common.v1.Payload | None:
        try:
            data = msgspec.json.encode(value)
        except (TypeError, msgspec.EncodeError):
            return self._fallback.to_payload(value)
        return temporalio.api.common.v1.Payload(metadata={"encoding": b"json/plain"}, data=data)

    def from_payload(self, payload: temporalio.api.common.v1.Payload, type_hint: type | None = None) -> Any:
        try:
            return msgspec.json.decode(payload.data, type=type_hint if type_hint is not None else Any)
        except TypeError:  # a type msgspec does not know
            return self._fallback.from_payload(payload, type_hint)


class PayloadConverter(CompositePayloadConverter):
    """Temporal's default converters, with msgspec in place of the standard JSON one."""

    def __init__(self) -> None:
        converters = [
            _MsgspecJSON() if isinstance(c, JSONPlainPayloadConverter) else c
            for c in DefaultPayloadConverter.default_encoding_payload_converters
        ]
        super().__init__(*converters)


DATA_CONVERTER = DataConverter(payload_converter_class=PayloadConverter)
"""The data converter clients and workers of agentledger runs must share."""

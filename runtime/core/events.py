"""The event catalogue: everything a run did, as immutable, past-tense facts.

Every event carries the envelope ``run_id``, ``seq`` (0, 1, 2, ... per run, no gaps) and ``at``
(nanoseconds from the injected clock). Events are tagged by class name in the ``type`` field, so a
log line is self-describing and one reused decoder reads any of them.

Schema evolution: a field's type never changes, and a new field always has a default, so logs
written by an older version keep decoding. A breaking change bumps ``SCHEMA_VERSION``.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

from .depth import MAX_DEPTH, too_deep
from .messages import Message, Usage

__all__ = (
    "ALWAYS_REQUIRE",
    "APPROVAL_MODES",
    "NEVER_REQUIRE",
    "SCHEMA_VERSION",
    "ApprovalRequested",
    "ApprovalResolved",
    "ArgumentsRejected",
    "BatchClaimed",
    "BatchResumed",
    "CallsSkipped",
    "ChildRunStarted",
    "ClaimedAnswer",
    "ContextProvided",
    "Event",
    "EventBase",
    "IterationLimitReached",
    "MiddlewareShortCircuit",
    "ModelCalled",
    "ModelFailed",
    "ModelRequestRewritten",
    "ModelResponded",
    "RunCompleted",
    "RunConfig",
    "RunFailed",
    "RunInputRewritten",
    "RunStarted",
    "RunTerminated",
    "SessionUpdated",
    "StateChange",
    "ToolCalled",
    "ToolChoice",
    "ToolChoiceReset",
    "ToolFailed",
    "ToolNotFound",
    "ToolReturned",
    "ToolSpec",
    "ToolsAdded",
    "ToolsRemoved",
    "decode_event",
    "decode_events",
    "encode_event",
    "to_plain",
)

ALWAYS_REQUIRE: Final = "always_require"
"""The ``approval_mode`` of a tool whose calls wait for a human's approval before they run."""
NEVER_REQUIRE: Final = "never_require"
"""The ``approval_mode`` of a tool whose calls run without asking (the default)."""
APPROVAL_MODES = (ALWAYS_REQUIRE, NEVER_REQUIRE)
"""Every ``approval_mode`` a tool may have."""

SCHEMA_VERSION = 1

ToolChoice = str | dict[str, Any]
"""``"auto"``, ``"required"``, ``"none"`` or ``{"mode": ..., "required_function_name": ...}``."""


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """What the model is told about a tool."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=dict)
    approval_mode: str = NEVER_REQUIRE
    origin: str = ""
    """Where the tool comes from when that is not the agent's own code: ``"mcp:<server>"`` for a
    tool an MCP server lists. Not sent to the model."""


class StateChange(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One key-level change of session state; ``value`` is JSON-encodable."""

    key: str
    op: Literal["set", "delete"]
    value: Any = None


class RunConfig(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """The loop's limits and error policy for one run."""

    max_iterations: int = 40
    max_consecutive_errors: int = 3
    max_function_calls: int | None = None
    detailed_errors: bool = False
    sequential_tools: bool = False
    terminate_on_unknown_calls: bool = False
    max_input_tokens: int | None = None
    """A cap on the input tokens the run's model calls reported, summed: once reached, the next
    model call is the final one (``tool_choice="none"``)."""
    max_cost: float | None = None
    """A cap on the run's model calls' prices (``ModelResponded.cost``, USD), summed: once
    reached, the next model call is the final one."""


class EventBase(
    msgspec.Struct, frozen=True, kw_only=True, tag=True, tag_field="type", gc=False, omit_defaults=True
):
    """The envelope every event shares."""

    run_id: str
    seq: int
    at: int


class RunStarted(EventBase, frozen=True, kw_only=True):
    agent_id: str
    agent_name: str | None = None
    instructions: str | None = None
    messages: tuple[Message, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    function_invocation_kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    client_kwargs_keys: tuple[str, ...] = ()
    session_id: str | None = None
    history_length: int = 0
    config: RunConfig = msgspec.field(default_factory=RunConfig)
    parent_run_id: str | None = None
    parent_call_id: str | None = None
    session_history: bool = True
    provider_name: str = ""
    schema_version: int = SCHEMA_VERSION
    library_version: str = ""
    run_option_keys: tuple[str, ...] | None = None
    """The keys of the options given to this ``run()`` itself (not the agent's defaults), so a
    rerun repeats those and takes the rest from the agent's current code; None in older logs."""
    run_tool_names: tuple[str, ...] = ()
    """The tools given to this ``run()`` itself (``tools=``), beside the agent's own."""
    middleware: tuple[str, ...] | None = None
    """The run's middleware as ``"kind:name"``, outermost first; None in older logs."""
    calls_in_model_order: bool = False
    """Whether the log keeps each batch call by call, in the model's order of the calls (every
    log written since the run loop has one owner); False in older logs, whose concurrent calls'
    events interleave as they happened."""
    run_instructions: str | None = None
    """The instructions given to this ``run()`` itself, appended to the agent's (``instructions``
    holds both); None without any, and in older logs, where a run's instructions replaced the
    agent's."""
    context_providers: tuple[str, ...] = ()
    """The ``source_id`` of each of the run's context providers, in order."""


class RunInputRewritten(EventBase, frozen=True, kw_only=True):
    """Agent middleware changed the messages, options or runtime values before the loop began.

    ``options`` holds the changed options; ``function_invocation_kwargs`` the new values after
    redaction, when they changed; ``client_kwargs_keys`` the new keys, when they changed.
    """

    by: str
    messages: tuple[Message, ...] = ()
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    function_invocation_kwargs: dict[str, Any] | None = None
    client_kwargs_keys: tuple[str, ...] | None = None


class ContextProvided(EventBase, frozen=True, kw_only=True):
    """A context provider's contribution to the run, recorded before the loop began.

    ``provider`` is the provider's ``source_id``. ``messages`` go before the run's input (after
    the session's history); ``instructions`` are appended to the run's instructions, one line
    each; ``tools`` are offered from the first model call on; ``middleware`` names the chat and
    function middleware it added, as ``"kind:name"``. What the provider wrote to session state
    is recorded as ``SessionUpdated`` with ``by="context_provider:<source_id>"``.
    """

    provider: str
    messages: tuple[Message, ...] = ()
    instructions: tuple[str, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    middleware: tuple[str, ...] = ()


class ModelRequestRewritten(EventBase, frozen=True, kw_only=True):
    """Chat middleware changed what one model call sends: its messages, tools or options."""

    iteration: int
    by: str
    messages: tuple[Message, ...] = ()
    tools: tuple[str, ...] = ()
    options: dict[str, Any] = msgspec.field(default_factory=dict)


class BatchResumed(EventBase, frozen=True, kw_only=True):
    """A run resuming a batch paused for approval: the calls of that batch still without a
    result, in call order (recorded when the batch holds calls nobody was asked to approve)."""

    call_ids: tuple[str, ...]


class ClaimedAnswer(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """One approval answer as a claim binds it: the call, the answer, and the digest of the
    call's arguments as the paused run recorded them (``agentledger.core.claims.arguments_digest``)."""

    call_id: str
    approved: bool
    digest: str = ""


class BatchClaimed(EventBase, frozen=True, kw_only=True):
    """A run (``by_run_id``) claimed this paused run's batch to resume it with ``answers``.

    Appended to the *paused* run's stream after its ``RunCompleted`` (reason
    ``awaiting_approval``) under the stream's expected version, so the store admits one claim
    per version: of several resumers exactly one runs the batch. ``after_run_id`` names the
    earlier claimant when this claim takes over from a resume that ended before any approved
    call of the batch started, or (``rerun``) whose calls the caller allowed to run again.
    """

    by_run_id: str
    answers: tuple[ClaimedAnswer, ...] = ()
    after_run_id: str | None = None
    rerun: tuple[str, ...] = ()
    """Calls the caller explicitly allowed to run again although the earlier claimant may have
    run them (it started them and recorded no outcome, or it never ended)."""


class CallsSkipped(EventBase, frozen=True, kw_only=True):
    """The final model call after a limit asked for calls anyway; they were not run."""

    iteration: int
    call_ids: tuple[str, ...]
    reason: str


class ModelCalled(EventBase, frozen=True, kw_only=True):
    """The machine asks the model once.

    ``message_count`` counts the conversation the model answers (history included). With a
    service-side conversation (``conversation_id``) the service already holds the first ``held``
    of those messages, and only the rest are sent.
    """

    iteration: int
    tools: tuple[str, ...] = ()
    tool_choice: ToolChoice | None = None
    message_count: int = 0
    conversation_id: str | None = None
    held: int = 0


class ModelResponded(EventBase, frozen=True, kw_only=True):
    iteration: int
    message: Message
    usage: Usage | None = None
    finish_reason: str | None = None
    model: str | None = None
    response_id: str | None = None
    conversation_id: str | None = None
    """The service-side conversation the response belongs to, when the service keeps it: the
    next model call continues it instead of sending the conversation again."""
    cost: float | None = None
    """The call's price in USD from the run's price table (``Agent(price=...)``), when it has
    one and knows the model; recorded, so a rerun sums the same costs."""


class ModelFailed(EventBase, frozen=True, kw_only=True):
    iteration: int
    error_type: str
    message: str


class ToolCalled(EventBase, frozen=True, kw_only=True):
    call_id: str
    name: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)


class ToolReturned(EventBase, frozen=True, kw_only=True):
    """A call finished; ``result`` is what the model sees.

    When function middleware replaced the tool's own return value after ``call_next()``,
    ``overridden_by`` names the outermost middleware that did and ``tool_result`` keeps the value
    the tool returned.
    """

    call_id: str
    name: str
    result: Any = None
    overridden_by: str | None = None
    tool_result: Any = None


class ToolFailed(EventBase, frozen=True, kw_only=True):
    call_id: str
    name: str
    error_type: str
    message: str


class ArgumentsRejected(EventBase, frozen=True, kw_only=True):
    call_id: str
    name: str
    reason: str


class ToolNotFound(EventBase, frozen=True, kw_only=True):
    call_id: str
    name: str
    reason: str


class MiddlewareShortCircuit(EventBase, frozen=True, kw_only=True):
    """A middleware answered without calling ``call_next()``; ``result`` is what the model sees."""

    call_id: str | None
    middleware: str
    result: Any = None
    scope: Literal["call", "model", "run"] = "call"
    leaves_history: bool = False
    """Agent middleware answered before the run's loop began, and the session's history stays as
    it was (False in older logs, where such a run added its input and answer)."""


class ToolsAdded(EventBase, frozen=True, kw_only=True):
    by_call_id: str | None
    tools: tuple[ToolSpec, ...]


class ToolsRemoved(EventBase, frozen=True, kw_only=True):
    by_call_id: str | None
    names: tuple[str, ...]


class ToolChoiceReset(EventBase, frozen=True, kw_only=True):
    iteration: int
    previous: ToolChoice | None = None


class SessionUpdated(EventBase, frozen=True, kw_only=True):
    """Key-level changes of a session's state.

    A sub-agent sharing its caller's session records its writes in its own log and the caller's
    log gets a copy at the same moment, naming the original in ``origin_run_id``/``origin_seq``;
    so the root run's log alone rebuilds the session, and folding several logs applies each
    write once.
    """

    session_id: str
    by: str
    changes: tuple[StateChange, ...]
    origin_run_id: str | None = None
    origin_seq: int | None = None


class ChildRunStarted(EventBase, frozen=True, kw_only=True):
    """A tool call started a sub-agent run, whose own log is the stream ``child_run_id``."""

    call_id: str
    child_run_id: str
    agent_name: str | None = None
    propagate_session: bool = False


class ApprovalRequested(EventBase, frozen=True, kw_only=True):
    call_ids: tuple[str, ...]


class ApprovalResolved(EventBase, frozen=True, kw_only=True):
    call_id: str
    approved: bool
    reason: str | None = None
    """Why, as the person who answered said (``Content.from_approval_response(reason=...)``)."""


class IterationLimitReached(EventBase, frozen=True, kw_only=True):
    iteration: int
    reason: str
    limit: int = 0
    cost_limit: float | None = None
    """For ``reason="max_cost"``: the limit in USD (``limit`` is then 0)."""


class RunTerminated(EventBase, frozen=True, kw_only=True):
    iteration: int
    reason: str
    by: str = ""
    leaves_history: bool = False
    """Agent middleware ended the run before its loop began, and the session's history stays as
    it was (False in older logs, where such a run added its input)."""


class RunCompleted(EventBase, frozen=True, kw_only=True):
    """The run ended normally; ``messages`` are the messages it produced."""

    messages: tuple[Message, ...] = ()
    text: str = ""
    usage: Usage = msgspec.field(default_factory=Usage)
    reason: str = "completed"


class RunFailed(EventBase, frozen=True, kw_only=True):
    error_type: str
    message: str


Event = (
    RunStarted
    | RunInputRewritten
    | ContextProvided
    | ModelCalled
    | ModelRequestRewritten
    | ModelResponded
    | ModelFailed
    | ToolCalled
    | ToolReturned
    | ToolFailed
    | ArgumentsRejected
    | ToolNotFound
    | MiddlewareShortCircuit
    | ToolsAdded
    | ToolsRemoved
    | ToolChoiceReset
    | SessionUpdated
    | ChildRunStarted
    | ApprovalRequested
    | ApprovalResolved
    | IterationLimitReached
    | CallsSkipped
    | BatchResumed
    | BatchClaimed
    | RunTerminated
    | RunCompleted
    | RunFailed
)

_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[Event] = msgspec.json.Decoder(Event)
_list_decoder: msgspec.json.Decoder[list[Event]] = msgspec.json.Decoder(list[Event])


def encode_event(event: Event) -> bytes:
    """One event as compact JSON (the line format of logs and exports)."""
    return _encoder.encode(event)


def decode_event(data: bytes | str) -> Event:
    """Decode one event; raises ``msgspec.ValidationError``/``DecodeError`` on bad input,
    ``DecodeError`` too for a record nested deeper than ``MAX_DEPTH``."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if too_deep(raw):
        raise msgspec.DecodeError(f"the record is nested deeper than {MAX_DEPTH} levels")
    try:
        return _decoder.decode(raw)
    except RecursionError as exc:
        raise msgspec.DecodeError(f"the record is nested deeper than {MAX_DEPTH} levels") from exc
    except UnicodeDecodeError as exc:
        raise msgspec.DecodeError(f"the record holds text that is not UTF-8: {exc}") from exc


def decode_events(data: bytes | str) -> list[Event]:
    """Decode a JSON array of events (errors as ``decode_event``)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if too_deep(raw, MAX_DEPTH + 1):
        raise msgspec.DecodeError(f"an event is nested deeper than {MAX_DEPTH} levels")
    try:
        return _list_decoder.decode(raw)
    except RecursionError as exc:
        raise msgspec.DecodeError(f"an event is nested deeper than {MAX_DEPTH} levels") from exc
    except UnicodeDecodeError as exc:
        raise msgspec.DecodeError(f"an event holds text that is not UTF-8: {exc}") from exc


def to_plain(value: Any) -> Any:
    """A value as JSON-ready builtins with *every* field of every struct, defaults included.

    The log leaves defaults out; code that reads events as plain data (a page's script, a
    report) gets them filled in here, with events tagged by ``type`` as in the log.
    """
    if isinstance(value, msgspec.Struct):
        config = type(value).__struct_config__
        out: dict[str, Any] = {}
        if isinstance(config.tag, str) and config.tag_field is not None:
            out[config.tag_field] = config.tag
        for name in value.__struct_fields__:
            out[name] = to_plain(getattr(value, name))
        return out
    if isinstance(value, list | tuple):
        return [to_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): to_plain(item) for key, item in value.items()}
    return msgspec.to_builtins(value)

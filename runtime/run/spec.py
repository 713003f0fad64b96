"""RunSpec: what one run is, fixed before it starts.

Built once from an agent and the arguments of one ``run()`` (``Agent.run_spec``), a spec holds
the merged options, the tools, the middleware layers, the kwargs and where events go. Every driver
starts from one: the local driver, a rerun or fork (the same spec with a replay client, recorded
tools and no store, through ``replace``) and a Temporal step. ``run_started`` builds the run's
first event from it, so ``RunStarted`` is made in one place.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict

import msgspec

from .._version import __version__
from ..chat import ChatClient, ChatOptions
from ..core.approvals import answers_refused, approval_responses
from ..core.events import ALWAYS_REQUIRE, RunConfig, RunStarted
from ..core.messages import Content, Message, Usage
from ..errors import ApprovalError, ArgumentsError, OptionsError
from ..logs import warn
from ..middleware import Layer
from ..providers import provider_names
from ..session import AgentSession
from ..store import EventStore
from ..structured import schema_option
from ..tools import FunctionTool, arguments_valid
from .recorder import Sink
from .values import to_recorded

__all__ = (
    "RUN_LIMITS",
    "Layers",
    "RunArguments",
    "RunSpec",
    "SpecArguments",
    "check_approvals",
    "check_option_names",
    "check_run_limit",
    "check_tool_choice",
    "given_options",
    "merge_options",
    "middleware_names",
    "options_record",
    "run_config",
)


class SpecArguments(TypedDict, total=False):
    """What one run adds to the agent's own configuration (``Agent.run_spec`` takes these)."""

    options: Mapping[str, Any] | None
    """Chat options for this run, over the agent's ``default_options``."""
    function_invocation_kwargs: Mapping[str, Any] | None
    """Runtime values for the tools (``ctx.kwargs``)."""
    client_kwargs: Mapping[str, Any] | None
    """Keyword arguments for the chat client's calls in this run."""
    middleware: Sequence[Any] | None
    """Middleware for this run, inside the agent's."""
    tools: Any
    """More tools for this run: a tool, a function, an MCP server, or a list of them."""


class RunArguments(SpecArguments, total=False):
    """The keyword arguments of one run: what ``run``, ``run_sync`` and ``run_stream`` take
    besides the input (and ``run``'s ``stream=``)."""

    session: AgentSession | None
    """The conversation the run continues and records into."""


Layers = Mapping[str, Sequence[Layer]]
"""Middleware by kind: ``"function"``, ``"agent"`` and ``"chat"``, outermost first."""
_RUN_OPTION_KEYS = ("tools", "instructions")


def merge_options(
    defaults: Mapping[str, Any], instructions: str | None, options: Mapping[str, Any] | None
) -> dict[str, Any]:
    """A run's options, as the reference framework merges them: the agent's defaults, the run's
    own on top (a ``None`` there is unset: the default stays), and the instructions: the agent's
    (``default_options["instructions"]``, else ``instructions``), then the run's own appended on
    a new line."""
    own = given_options(options)
    merged = {**defaults, **own} if own else dict(defaults)
    base = defaults.get("instructions") or instructions
    added = own.get("instructions")
    if base and added:
        merged["instructions"] = f"{base}\n{added}"
    elif base or added:
        merged["instructions"] = base or added
    return merged


def given_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The options a ``run()`` itself sets: those given, without the ``None`` values (unset) and
    an empty ``instructions``."""
    if not options:
        return {}
    return {k: v for k, v in options.items() if v is not None and not (k == "instructions" and v == "")}


_MODES = ("auto", "required", "none")
_KNOWN_OPTIONS = frozenset(ChatOptions.__annotations__)


RUN_LIMITS = ("max_input_tokens", "max_cost")
"""Options that are limits of the run (its ``RunConfig``), never sent to the chat client."""
_LIMIT_KEYS = frozenset(RUN_LIMITS)


def check_run_limit(name: str, value: Any) -> Any:
    """A run limit as given (None: no limit), or ``OptionsError``: ``max_cost`` is a positive
    finite number (USD), the others positive integers."""
    if value is None:
        return None
    if name == "max_cost":
        if type(value) not in (int, float) or not 0 < value < math.inf:
            raise OptionsError(f"max_cost must be a positive number of USD (or None), not {value!r}")
        return float(value)
    if type(value) is not int or value < 1:
        raise OptionsError(f"{name} must be a positive integer (or None), not {value!r}")
    return value


def run_config(config: RunConfig, options: Mapping[str, Any]) -> RunConfig:
    """The agent's limits with those the run's options set instead."""
    if _LIMIT_KEYS.isdisjoint(options):
        return config
    changes = {name: check_run_limit(name, options[name]) for name in RUN_LIMITS if name in options}
    return msgspec.structs.replace(config, **changes)


def check_option_names(options: Mapping[str, Any]) -> None:
    """Refuse an option name that looks like a misspelt ``ChatOptions`` key (``temprature``);
    warn about other unknown names, which clients that do not know them ignore."""
    for key in options:
        if key in _KNOWN_OPTIONS or not isinstance(key, str):
            continue
        close = difflib.get_close_matches(key, _KNOWN_OPTIONS, n=1, cutoff=0.8)
        if close:
            raise OptionsError(f"unknown option {key!r}: did you mean {close[0]!r}?")
        warn(
            f"option {key!r} is not a ChatOptions key: a client that does not know it ignores it",
            UserWarning,
            part="options",
            stacklevel=4,
        )


def middleware_names(layers: Layers) -> tuple[str, ...]:
    """The run's middleware as ``RunStarted`` records it: ``"kind:name"``, kind by kind
    (agent, chat, function), outermost first."""
    if not (layers.get("agent") or layers.get("chat") or layers.get("function")):
        return ()
    return tuple(
        f"{kind}:{layer.name}" for kind in ("agent", "chat", "function") for layer in layers.get(kind, ())
    )


def check_tool_choice(choice: Any, tools: Sequence[FunctionTool]) -> None:
    """Refuse a ``tool_choice`` no model would accept: an unknown mode, or a required function
    the run does not offer."""
    if choice is None or choice in _MODES:
        return
    if not isinstance(choice, Mapping):
        raise OptionsError(f"tool_choice must be one of {_MODES}, a mode mapping or None, not {choice!r}")
    mode, name = choice.get("mode"), choice.get("required_function_name")
    if mode not in _MODES or set(choice) - {"mode", "required_function_name"}:
        raise OptionsError(f"tool_choice {dict(choice)!r}: 'mode' must be one of {_MODES}")
    if name is not None and (mode != "required" or name not in {t.name for t in tools}):
        offered = sorted(t.name for t in tools)
        raise OptionsError(
            f"tool_choice requires {name!r}, which this run does not offer (it offers {offered})"
        )


def options_record(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options as ``RunStarted`` records them (tools and instructions have fields of their
    own; a ``response_format`` type as its JSON schema)."""
    record = {k: to_recorded(v) for k, v in options.items() if k not in _RUN_OPTION_KEYS and v is not None}
    if "response_format" in record:
        record["response_format"] = schema_option(options["response_format"])
    return record


def check_approvals(
    history: Sequence[Message],
    inputs: Sequence[Message],
    spec: RunSpec | None = None,
    *,
    answers: Sequence[Content] | None = None,
) -> None:
    """Raise ``ApprovalError`` for input the run on ``history`` may not take: the rules are the
    core's (``answers_refused``); given the run's ``spec``, a resume must also answer every
    request of the paused batch (the spec knows which calls wait for a human). ``answers``: the
    approval responses among ``inputs``, when the caller has already found them."""
    if answers is None:
        answers = approval_responses(inputs)
    reason = answers_refused(history, inputs, answers, spec.awaits_call if spec is not None else None)
    if reason is not None:
        raise ApprovalError(reason)


class RunSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One run, before it starts (see the module docstring)."""

    agent: Any
    """The agent object itself, as ``AgentContext.agent`` and ``current_run_context().agent``."""
    agent_id: str
    agent_name: str | None
    client: ChatClient
    tools: tuple[FunctionTool, ...]
    layers: Layers
    options: Mapping[str, Any]
    function_invocation_kwargs: Mapping[str, Any]
    client_kwargs: Mapping[str, Any]
    config: RunConfig
    redact: Callable[[Mapping[str, Any]], dict[str, Any]]
    clock: Callable[[], int]
    store: EventStore | None = None
    sinks: tuple[Sink, ...] = ()
    parent: tuple[str, str] | None = None
    """(run id, call id) of the tool call this run answers, for a sub-agent."""
    share_history: bool = True
    """Whether the run reads and extends its session's history (a sub-agent sharing its
    caller's session keeps its own conversation)."""
    legacy_kwargs: Mapping[str, Any] = msgspec.field(default_factory=dict)
    """Values passed as ``**kwargs`` to ``run()`` (deprecated): besides the tools, the chat
    client gets them as keyword arguments of each model call."""
    run_option_keys: tuple[str, ...] = ()
    """The keys of the options given to ``run()`` itself, on top of the agent's defaults."""
    run_instructions: str | None = None
    """The instructions given to ``run()`` itself, appended to the agent's."""
    run_tool_names: tuple[str, ...] = ()
    """The names of the tools given to ``run()`` itself, beside the agent's own."""
    price: Callable[[str, Usage, int], float | None] | None = None
    """The price table each model call is priced with (``ModelResponded.cost``), if any."""
    context_providers: tuple[Any, ...] = ()
    """The run's context providers (``agentledger.providers``), or in a rerun the stand-in that
    repeats their recorded contributions."""
    started_static: Mapping[str, Any] | None = None
    """``RunStarted``'s fields that do not change from run to run of this spec, made once
    (``with_started_static``); None: made for each run. ``replace`` drops them."""

    def awaits_call(self, call: Content) -> bool:
        """Whether ``call`` (of a paused batch) waits for a human: a call of a tool that always
        requires approval, unless ``awaits_approval`` says its arguments take it past the gate."""
        for tool in self.tools:
            if tool.name == call.name:
                return tool.approval_mode == ALWAYS_REQUIRE and self.awaits_approval(tool, call)
        return False

    def awaits_approval(self, function: FunctionTool, call: Content) -> bool:
        """Whether a call of a gated tool waits for a human: unless its arguments cannot run and
        no function middleware could repair them (then it is rejected when its batch runs).
        Middleware sees any argument text (text that is no JSON object as ``{"raw": text}``)."""
        if arguments_valid(function, call):
            return True
        if not self.layers["function"]:
            return False
        try:  # only text nested too deep to record never reaches middleware
            function.sent_arguments(call.arguments)
        except ArgumentsError:
            return False
        return True

    def on_session(self, session: Any) -> RunSpec:
        """The run on ``session``: when a service keeps its conversation
        (``session.service_session_id``), the run continues it there, unless the run itself was
        given ``options["conversation_id"]`` (that one wins, as in the reference framework)."""
        service_id = getattr(session, "service_session_id", None) if self.share_history else None
        if not service_id or self.options.get("conversation_id") == service_id:
            return self
        if "conversation_id" in self.run_option_keys and self.options.get("conversation_id"):
            return self
        return self.replace(options={**self.options, "conversation_id": service_id})

    def replace(self, **changes: Any) -> RunSpec:
        """The same run with some fields changed (a rerun: another client, no store...)."""
        changes.setdefault("started_static", None)  # made from the fields: made again
        return msgspec.structs.replace(self, **changes)

    def with_started_static(self) -> RunSpec:
        """This spec holding the part of ``RunStarted`` that is the same for every run of it
        (an agent keeps one such spec for the runs it starts without arguments)."""
        return msgspec.structs.replace(self, started_static=self._started_static())

    def started_fields(
        self, *, messages: Sequence[Message], session_id: str | None, history_length: int
    ) -> dict[str, Any]:
        """The fields of the run's ``RunStarted`` (its envelope aside)."""
        static = self.started_static if self.started_static is not None else self._started_static()
        return {
            **static,
            "messages": tuple(messages),
            "session_id": session_id,
            "history_length": history_length,
        }

    def _started_static(self) -> dict[str, Any]:
        parent, keys = self.parent, self.run_option_keys
        return {
            "agent_id": self.agent_id,
            "agent_name": self.agent_name,
            "instructions": self.options.get("instructions"),
            "tools": tuple([t.spec for t in self.tools]),
            "options": options_record(self.options),
            "function_invocation_kwargs": self.redact(self.function_invocation_kwargs),
            "client_kwargs_keys": tuple(self.client_kwargs) if self.client_kwargs else (),
            "config": self.config,
            "parent_run_id": parent[0] if parent else None,
            "parent_call_id": parent[1] if parent else None,
            "session_history": self.share_history,
            "provider_name": self.client.provider_name,
            "library_version": __version__,
            # A conversation id is the conversation's, not a setting: a rerun always repeats it.
            "run_option_keys": tuple(k for k in keys if k != "conversation_id") if keys else (),
            "run_tool_names": self.run_tool_names,
            "middleware": middleware_names(self.layers),
            "calls_in_model_order": True,
            "run_instructions": self.run_instructions,
            "context_providers": provider_names(self.context_providers),
        }

    def run_started(
        self,
        *,
        run_id: str,
        at: int,
        messages: Sequence[Message],
        session_id: str | None,
        history_length: int,
    ) -> RunStarted:
        """The run's first event."""
        fields = self.started_fields(messages=messages, session_id=session_id, history_length=history_length)
        return RunStarted(run_id=run_id, seq=0, at=at, **fields)

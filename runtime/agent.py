"""Agent: the public surface of a run (``run``, ``run_stream``, sessions, sub-agents as tools).

``Agent.run`` builds the run's ``RunSpec`` and hands it to an ``AgentRun`` (``agentledger.run``),
which records the run from ``RunStarted`` to how it ended.
"""

from __future__ import annotations

import asyncio
import difflib
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Literal, overload

import anyio
from typing_extensions import Unpack

from ._sources import Clock, IdSource, RandomIds
from .chat import ChatClient, ChatOptions
from .core.events import Event, RunConfig
from .core.messages import Content, Message, Usage
from .errors import OptionsError
from .logs import warn
from .middleware import Layer, split_middleware
from .providers import ContextProvider, check_providers
from .redaction import Redactor, default_redactor
from .response import AgentResponse, AgentResponseUpdate
from .run.lifecycle import AgentRun
from .run.spec import (
    Layers,
    RunArguments,
    RunSpec,
    SpecArguments,
    check_option_names,
    check_run_limit,
    check_tool_choice,
    given_options,
    merge_options,
    run_config,
)
from .session import AgentSession
from .store import DEFAULT_MAX_EVENTS, DEFAULT_MAX_RUNS, EventStore, MemoryEventStore
from .streaming import RunStream
from .structured import response_schema
from .subagents import StreamCallback, agent_tool, take_child_link
from .tools import FunctionTool, normalize_tools

__all__ = ("Agent", "AgentResponse", "AgentResponseUpdate", "RunArguments", "RunStream", "SpecArguments")

RunInput = str | Content | Message | Sequence[Any] | None
"""What a run is given as its input: text, a content, a message, or a list of them."""


_SPEC_NAMES = tuple(SpecArguments.__annotations__)
_CLIENT_PARAMETERS = frozenset({"messages", "options", "function_invocation_kwargs", "client_kwargs"})
_OPTION_NAMES = frozenset(ChatOptions.__annotations__) - {"tools"}
_RUN_PARAMETERS = ("stream", *RunArguments.__annotations__, *_SPEC_NAMES)


def _frozen_layers(layers: Mapping[str, list[Layer]]) -> dict[str, tuple[Layer, ...]]:
    return {kind: tuple(items) for kind, items in layers.items()}


_IMMUTABLE = frozenset({str, int, float, bool, type(None)})

_NO_PRICE = (
    "max_cost needs prices: pass Agent(price=...), e.g. agentledger.adapters.prices.genai_price "
    "(pip install 'agentledger[prices]')"
)


class Agent:
    """An LLM agent: a chat client, instructions, tools and middleware.

    Every run is recorded: ``agent.store`` (unless another store is given, a ``MemoryEventStore``
    keeping the last ``DEFAULT_MAX_RUNS`` finished runs and at most ``DEFAULT_MAX_EVENTS`` events;
    ``store=MemoryEventStore()`` keeps everything, ``store=False`` nothing) receives each run's
    events as the run goes; a sub-agent left with the default records the runs its callers start
    in the caller's store (``child_store``), so a run and its sub-agents load and replay from one
    store. ``AgentResponse.events`` holds them too. ``event_sinks`` are called with every event the
    moment it is recorded (live logging, tracing); they must not block.

    Arguments:
        client: the chat client (required); ``instructions``: the system instructions.
        name, id, description: how the agent is known (``id`` defaults to ``name``).
        tools: tools or plain callables; middleware: function, agent and chat middleware.
        default_options: ``ChatOptions`` for every run (a run's ``options`` override them).
        store: where events go (see above).
        clock, ids: the sources of time (ns) and ids; inject fixed ones for reproducible logs.
        redact: what of ``function_invocation_kwargs`` a log keeps (``agentledger.redaction``).
        max_iterations: model calls with tools before one last call with ``tool_choice="none"``.
        max_consecutive_errors: erroring batches in a row before that last call.
        max_function_calls: an optional cap on tool calls per run.
        max_input_tokens: an optional cap on the input tokens a run's model calls report, summed;
            a run can lower or raise it with ``options={"max_input_tokens": n}``.
        max_cost: an optional cap on the prices (USD) of a run's model calls, summed (also
            ``options={"max_cost": x}``); it needs ``price``.
        price: ``price(model, usage, at) -> float | None``, the price table each model call is
            priced with and recorded in ``ModelResponded.cost``, e.g.
            ``agentledger.adapters.prices.genai_price`` (the ``prices`` extra).
        include_detailed_errors: tell the model the exception of a failed tool, not just that it failed.
        sequential_tools: run a batch's calls one after another instead of concurrently.
        terminate_on_unknown_calls: a call of a tool that is not offered fails the run
            (``UnknownToolError``) instead of being answered with an error result.
        event_sinks: live consumers of every event (also of sub-agent runs).
        context_providers: memory and retrieval for each run (``agentledger.ContextProvider``):
            what they add before the loop is recorded (``ContextProvided``).
    """

    def __init__(
        self,
        client: ChatClient | None = None,
        instructions: str | None = None,
        *,
        name: str | None = None,
        id: str | None = None,
        description: str | None = None,
        tools: Any = None,
        middleware: Sequence[Any] | None = None,
        default_options: Mapping[str, Any] | None = None,
        store: EventStore | bool | None = True,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        redact: Redactor | None = None,
        max_iterations: int = 40,
        max_consecutive_errors: int = 3,
        max_function_calls: int | None = None,
        max_input_tokens: int | None = None,
        max_cost: float | None = None,
        price: Callable[[str, Usage, int], float | None] | None = None,
        include_detailed_errors: bool = False,
        sequential_tools: bool = False,
        terminate_on_unknown_calls: bool = False,
        event_sinks: Sequence[Callable[[Event], None]] = (),
        context_providers: Sequence[ContextProvider] | None = None,
    ) -> None:
        if client is None:
            raise TypeError("Agent needs a chat client: Agent(client=...)")
        if isinstance(client, str):
            raise TypeError(
                f"Agent's first argument is a chat client, not the string {client!r}: pass a client "
                "object, e.g. Agent(client=OpenAIChatClient('gpt-4o')) from agentledger.openai"
            )
        if not callable(getattr(client, "get_response", None)):
            raise TypeError(
                f"Agent(client=...) needs a chat client with get_response(), not {type(client).__name__}"
            )
        self.client = client
        self.instructions = instructions
        self.name = name
        self.description = description or ""
        self.ids: IdSource = ids or RandomIds()
        self.clock: Clock = clock or time.time_ns  # the wall clock (SystemClock), without a wrapper call
        self.id = id or (name or "agent")
        self.tools = normalize_tools(tools)
        self._offered: tuple[FunctionTool, ...] = ()  # the last run's tools, shared by runs offering them
        # The spec of a run given no arguments, with what it was made from (``_plain_spec``).
        self._plain: tuple[tuple[Any, ...], dict[str, Any], RunSpec] | None = None
        self.middleware = list(middleware or ())
        self._layers = _frozen_layers(split_middleware(self.middleware))
        self.default_options = dict(default_options or {})
        check_option_names(self.default_options)
        if store is True:
            store = MemoryEventStore(max_runs=DEFAULT_MAX_RUNS, max_events=DEFAULT_MAX_EVENTS)
            self._default_store: EventStore | None = store  # see child_store
        else:
            self._default_store = None
        self.store: EventStore | None = None if store is False else store
        self.redact = redact or default_redactor
        self.event_sinks = tuple(event_sinks)
        self.config = RunConfig(
            max_iterations=max_iterations,
            max_consecutive_errors=max_consecutive_errors,
            max_function_calls=max_function_calls,
            detailed_errors=include_detailed_errors,
            sequential_tools=sequential_tools,
            terminate_on_unknown_calls=terminate_on_unknown_calls,
            max_input_tokens=check_run_limit("max_input_tokens", max_input_tokens),
            max_cost=check_run_limit("max_cost", max_cost),
        )
        self.price = price
        self.context_providers: list[ContextProvider] = check_providers(context_providers)
        if self.config.max_cost is not None and price is None:
            raise OptionsError(_NO_PRICE)

    def create_session(self, *, session_id: str | None = None) -> AgentSession:
        """A new conversation for this agent (pass it to ``run(session=...)``)."""
        return AgentSession(session_id or self.ids("session"))

    def get_session(self, service_session_id: str, *, session_id: str | None = None) -> AgentSession:
        """A session that continues a conversation a service keeps (``resp_...`` or
        ``conv_...`` for OpenAI's Responses API): its runs send only their own input."""
        if not isinstance(service_session_id, str) or not service_session_id:
            raise TypeError(f"service_session_id must be a non-empty str, not {service_session_id!r}")
        return AgentSession(session_id or self.ids("session"), service_session_id=service_session_id)

    @overload
    def run(
        self,
        messages: RunInput = None,
        *,
        stream: Literal[False] = False,
        **arguments: Unpack[RunArguments],
    ) -> Coroutine[Any, Any, AgentResponse]: ...
    @overload
    def run(
        self, messages: RunInput = None, *, stream: Literal[True], **arguments: Unpack[RunArguments]
    ) -> RunStream: ...
    def run(
        self, messages: RunInput = None, *, stream: bool = False, **arguments: Any
    ) -> Coroutine[Any, Any, AgentResponse] | RunStream:
        """Run the agent once: model, tools, model... until it answers, and record every step.

        ``await agent.run(...)`` gives the ``AgentResponse``; ``agent.run(..., stream=True)`` is
        ``agent.run_stream(...)``: iterate it for updates as they happen. The keyword arguments
        are ``RunArguments``; any other keyword is a runtime value for the tools and the client
        (deprecated: ``function_invocation_kwargs=`` and ``client_kwargs=`` say which).
        """
        session = arguments.pop("session", None) if arguments else None
        given: dict[str, Any] = {}
        kwargs = arguments  # what is left after the run's own: runtime values the deprecated way
        if arguments:
            for name in _SPEC_NAMES:
                if name in arguments:
                    given[name] = arguments.pop(name)
            if kwargs:
                given["function_invocation_kwargs"] = self._legacy_kwargs(
                    given.get("function_invocation_kwargs"), kwargs
                )
        if session is not None:
            _check_session(session)
        link = take_child_link(self)  # this run answers a sub-agent call of another agent's run
        spec = self.run_spec(
            parent=link.parent if link else None,
            share_history=link.share_history if link else True,
            **given,
        )
        if link is not None and link.store is not spec.store:  # recorded with its caller's run
            spec = spec.replace(store=link.store)
        if kwargs:  # the deprecated path also reaches the client, as keyword arguments
            spec = spec.replace(
                legacy_kwargs={k: v for k, v in kwargs.items() if k not in _CLIENT_PARAMETERS}
            )
        if link is not None:
            run = AgentRun(spec, session, run_id=link.run_id, parent_sink=link.parent_sink)
        else:
            run = AgentRun(spec, session, run_id=self.ids("run"))
        if stream:
            return RunStream(run, messages)
        return run.execute(messages)

    def run_sync(self, messages: RunInput = None, **arguments: Unpack[RunArguments]) -> AgentResponse:
        """``run`` for code that is not async (a script): it runs the event loop until the run
        ends. Inside a running event loop (an async function, a notebook cell) it refuses, with
        ``RuntimeError``: there, ``await agent.run(...)``."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "run_sync() cannot run inside a running event loop (an async function or a notebook "
                "cell): use `await agent.run(...)` there"
            )

        async def run() -> AgentResponse:
            return await self.run(messages, **arguments)

        return anyio.run(run)

    def run_stream(self, messages: RunInput = None, **arguments: Unpack[RunArguments]) -> RunStream:
        """Run the agent, yielding model text deltas, calls and results as they happen.

        Returns a ``RunStream``: leaving early (``break``, or better ``aclose()``/``async with``)
        cancels the run, which is recorded as ``RunFailed`` with ``error_type="Cancelled"``.
        """
        return self.run(messages, stream=True, **arguments)

    @property
    def layers(self) -> Layers:
        """The agent's middleware by kind (``function``, ``agent``, ``chat``), outermost first."""
        return self._layers

    def child_store(self, caller: EventStore | None) -> EventStore | None:
        """The store a run of this agent started by another run's sub-agent call records to,
        given the store that run records to: the caller's, so that the caller's log and its
        sub-agents' logs are read back (and replayed) together from one store, unless this agent
        was given a store of its own (``store=``, ``store=False`` or a later ``agent.store = ...``)
        or the caller records nowhere."""
        store = self.store
        if caller is not None and store is not None and store is self._default_store:
            return caller
        return store

    def run_spec(
        self,
        *,
        parent: tuple[str, str] | None = None,
        share_history: bool = True,
        **arguments: Unpack[SpecArguments],
    ) -> RunSpec:
        """The specification of one run of this agent with these arguments (what ``run`` builds;
        drivers other than the local one start from it too)."""
        if parent is None and share_history and not arguments:
            return self._plain_spec()
        return self._make_spec(parent=parent, share_history=share_history, **arguments)

    def _plain_spec(self) -> RunSpec:
        """The spec of a run given no arguments, made once and kept while nothing it was made
        from changes: the agent's attributes (by identity; its tools and providers item by item)
        and ``default_options`` (by value, kept only while every value is immutable, so that a
        change inside one cannot go unseen)."""
        made_from = (
            self.client, self.instructions, self.name, self.id, self.store, self.clock, self.redact,
            self.price, self.config, self.event_sinks, self._layers, tuple(self.tools),
            tuple(self.context_providers),
        )  # fmt: skip
        plain = self._plain
        if plain is not None and plain[0] == made_from and plain[1] == self.default_options:
            return plain[2]
        spec = self._make_spec().with_started_static()
        options = self.default_options
        if all(type(value) in _IMMUTABLE for value in options.values()):
            self._plain = (made_from, dict(options), spec)
        else:
            self._plain = None
        return spec

    def _make_spec(
        self,
        *,
        parent: tuple[str, str] | None = None,
        share_history: bool = True,
        **arguments: Unpack[SpecArguments],
    ) -> RunSpec:
        options = arguments.get("options")
        function_invocation_kwargs = arguments.get("function_invocation_kwargs")
        client_kwargs = arguments.get("client_kwargs")
        middleware = arguments.get("middleware")
        tools = arguments.get("tools")
        if options:
            check_option_names(options)
        own = given_options(options)
        given = normalize_tools(tools) if tools is not None else []
        if "tools" in own:  # the reference's way to give a run more tools: as run(tools=...)
            given = [*normalize_tools(own.pop("tools")), *given]
        merged = merge_options(self.default_options, self.instructions, own)
        offered = tuple(self.tools + given) if given else tuple(self.tools)
        if offered == self._offered:  # the same tools as the last run: one tuple for all of them
            offered = self._offered
        else:
            self._offered = offered
        if merged.get("tool_choice") is not None:
            check_tool_choice(merged["tool_choice"], offered)
        if merged.get("response_format") is not None:  # OptionsError now, not at the first call
            response_schema(merged["response_format"])
        layers = self._layers
        if middleware:
            extra = split_middleware(middleware)
            layers = {kind: (*layers[kind], *extra[kind]) for kind in layers}
        config = run_config(self.config, merged)
        if config.max_cost is not None and self.price is None:
            raise OptionsError(_NO_PRICE)
        return RunSpec(
            agent=self,
            agent_id=self.id,
            agent_name=self.name,
            client=self.client,
            tools=offered,
            layers=layers,
            options=merged,
            function_invocation_kwargs=dict(function_invocation_kwargs) if function_invocation_kwargs else {},
            client_kwargs=dict(client_kwargs) if client_kwargs else {},
            config=config,
            price=self.price,
            redact=self.redact,
            clock=self.clock,
            store=self.store,
            sinks=self.event_sinks,
            parent=parent,
            share_history=share_history,
            run_option_keys=tuple(k for k in own if isinstance(k, str)) if own else (),
            run_instructions=own.get("instructions") if own else None,
            run_tool_names=tuple(t.name for t in given) if given else (),
            context_providers=tuple(self.context_providers) if self.context_providers else (),
        )

    def _legacy_kwargs(self, given: Mapping[str, Any] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
        if not kwargs:
            return dict(given or {})
        if "thread" in kwargs:
            raise TypeError("run() takes the conversation as session=, not thread=")
        for key in kwargs:  # a misspelt parameter must not pass as a runtime value
            close = difflib.get_close_matches(key, _RUN_PARAMETERS, n=1, cutoff=0.8)
            if close:
                raise TypeError(f"run() has no parameter {key!r}: did you mean {close[0]!r}?")
        misplaced = sorted(k for k in kwargs if k in _OPTION_NAMES)
        if misplaced:
            shown = ", ".join(f"{k!r}: ..." for k in misplaced)
            raise OptionsError(
                f"{', '.join(misplaced)} is a chat option: pass options={{{shown}}} to run(); as a "
                "keyword argument it would only reach tools and the client's **kwargs"
            )
        warn(
            "passing runtime values as **kwargs to run() is deprecated; "
            "use function_invocation_kwargs= (tools) or client_kwargs= (the chat client)",
            DeprecationWarning,
            part="deprecations",
            stacklevel=3,
        )
        return {**kwargs, **(given or {})}

    def as_tool(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        arg_name: str = "task",
        arg_description: str | None = None,
        approval_mode: str = "never_require",
        propagate_session: bool = False,
        stream_callback: StreamCallback | None = None,
    ) -> FunctionTool:
        """This agent as a tool of another agent; see ``agentledger.subagents``. With
        ``stream_callback`` the child run is streamed and each update handed to it."""
        return agent_tool(
            self,
            name=name,
            description=description,
            arg_name=arg_name,
            arg_description=arg_description,
            approval_mode=approval_mode,
            propagate_session=propagate_session,
            stream_callback=stream_callback,
        )

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, tools={[t.name for t in self.tools]!r})"


def _check_session(session: Any) -> None:
    if session is not None and not isinstance(session, AgentSession):
        raise TypeError(
            f"session= takes an AgentSession (agent.create_session()), not {type(session).__name__}"
        )

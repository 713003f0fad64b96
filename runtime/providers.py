"""Context providers: memory and retrieval plugged into a run, each contribution recorded.

Theory of operation. ``Agent(context_providers=[...])`` takes providers shaped as in the
reference framework: ``before_run`` fills a ``SessionContext`` (messages, instructions, tools,
chat and function middleware) once the run's input is settled and before the loop begins;
``after_run`` sees the response once the loop has ended (in reverse order, and not after a
failed run). Each provider gets ``state``: its own dict in ``session.state`` under its
``source_id``.

What a provider contributes is recorded before it takes effect: one ``ContextProvided`` event per
provider that added anything, and its state writes as ``SessionUpdated`` with
``by="context_provider:<source_id>"``. The run machine folds the contribution like any input,
so the transcript, the tools offered and ``state_at`` show it, and a rerun can repeat it from
the log (``RecordedContributions``) without calling the provider.

History stays the session's, a projection of the log: a ``HistoryProvider`` keeps a copy
elsewhere (``save_messages`` after each run) and never loads into a run; see
docs/differences.md.
"""

from __future__ import annotations

import contextlib
from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from .chat import normalize_messages
from .core.events import ContextProvided, Event, SessionUpdated
from .core.machine import DERIVED
from .core.messages import Content, Message
from .core.provided import PROVIDER_WRITER, append_instructions
from .errors import MiddlewareError, ToolDefinitionError
from .middleware import Layer, split_middleware
from .session import AgentSession, writer
from .tools import FunctionTool, normalize_tools

__all__ = (
    "ContextProvider",
    "HistoryProvider",
    "InMemoryHistoryProvider",
    "RecordedContributions",
    "SessionContext",
    "check_providers",
    "provide_after",
    "provide_before",
    "provider_names",
)


class SessionContext:
    """What the providers of one run add to it, and (after the loop) the run's response.

    ``context_messages`` keeps each provider's messages under its ``source_id``, in provider
    order; ``input_messages`` are the run's input; ``options`` the run's options (read only).
    """

    def __init__(
        self,
        *,
        session_id: str | None = None,
        service_session_id: str | None = None,
        input_messages: list[Message],
        context_messages: dict[str, list[Message]] | None = None,
        instructions: list[str] | None = None,
        tools: list[Any] | None = None,
        middleware: dict[str, list[Any]] | None = None,
        options: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.service_session_id = service_session_id
        self.input_messages = input_messages
        self.context_messages: dict[str, list[Message]] = context_messages or {}
        self.instructions: list[str] = instructions or []
        self.tools: list[Any] = tools or []
        self.middleware: dict[str, list[Any]] = {}
        for source_id, items in (middleware or {}).items():
            self.extend_middleware(source_id, items)
        self.options: dict[str, Any] = options or {}
        self.metadata: dict[str, Any] = metadata or {}
        self._response: Any = None

    @property
    def response(self) -> Any:
        """The run's ``AgentResponse`` in ``after_run`` (None before the loop)."""
        return self._response

    def extend_messages(
        self,
        source: str | object,
        messages: Sequence[Any],
        *,
        origin_session_ids: Sequence[str] | None = None,
    ) -> None:
        """Add messages from ``source`` (a ``source_id`` or a provider): they go before the input."""
        source_id = source if isinstance(source, str) else str(getattr(source, "source_id", source))
        items = [messages] if isinstance(messages, str | Message) else list(messages)
        for item in items:
            if not isinstance(item, str | Content | Message | Mapping):
                raise TypeError(
                    "extend_messages takes messages (a Message, a str, a Content or a mapping with "
                    f"a 'role'), not {type(item).__name__}"
                )
        self.context_messages.setdefault(source_id, []).extend(normalize_messages(items))

    def extend_instructions(self, source_id: str, instructions: str | Sequence[str]) -> None:
        """Add instructions, appended to the run's own one per line."""
        lines = [instructions] if isinstance(instructions, str) else list(instructions)
        self.instructions.extend(str(line) for line in lines)

    def extend_tools(self, source_id: str, tools: Sequence[Any]) -> None:
        """Offer these tools (or callables) to the run's model calls."""
        self.tools.extend(normalize_tools(list(tools)))

    def extend_middleware(self, source_id: str, middleware: Any) -> None:
        """Add chat or function middleware for this run; agent middleware raises ``MiddlewareError``."""
        items = list(middleware) if isinstance(middleware, Sequence) else [middleware]
        if split_middleware(items)["agent"]:
            raise MiddlewareError("context providers may only add chat or function middleware")
        self.middleware.setdefault(source_id, []).extend(items)

    def get_middleware(self) -> list[Any]:
        """The middleware providers added, in provider order."""
        return [item for items in self.middleware.values() for item in items]

    def get_messages(
        self,
        *,
        sources: set[str] | None = None,
        exclude_sources: set[str] | None = None,
        include_input: bool = False,
        include_response: bool = False,
    ) -> list[Message]:
        """The providers' messages (filtered by source), then the input and the response's."""
        out: list[Message] = []
        for source_id, messages in self.context_messages.items():
            if (sources is None or source_id in sources) and source_id not in (exclude_sources or ()):
                out.extend(messages)
        if include_input:
            out.extend(self.input_messages)
        if include_response and self._response is not None:
            out.extend(self._response.messages)
        return out

    def _mark(self) -> tuple[int, int, dict[str, int], dict[str, int]]:
        return (
            len(self.instructions),
            len(self.tools),
            {k: len(v) for k, v in self.context_messages.items()},
            {k: len(v) for k, v in self.middleware.items()},
        )

    def _since(self, mark: tuple[int, int, dict[str, int], dict[str, int]]) -> _Contribution:
        instructions, tools, messages, middleware = mark
        return _Contribution(
            messages=[m for k, v in self.context_messages.items() for m in v[messages.get(k, 0) :]],
            instructions=self.instructions[instructions:],
            tools=self.tools[tools:],
            middleware=[m for k, v in self.middleware.items() for m in v[middleware.get(k, 0) :]],
        )


class ContextProvider:
    """A provider of context for each run: override ``before_run`` and/or ``after_run``.

    ``source_id`` names it in the log and keys its ``state`` in ``session.state``.
    ``after_run_once_per_turn`` is kept for ported code and changes nothing here (a run is a turn).
    """

    after_run_once_per_turn: bool = False

    def __init__(self, source_id: str) -> None:
        self.source_id = source_id

    async def before_run(
        self, *, agent: Any, session: AgentSession, context: SessionContext, state: dict[str, Any]
    ) -> None:
        """Before the loop: add messages, instructions, tools or middleware to ``context``."""

    async def after_run(
        self, *, agent: Any, session: AgentSession, context: SessionContext, state: dict[str, Any]
    ) -> None:
        """After the loop: ``context.response`` holds the run's response."""


class HistoryProvider(ContextProvider):
    """Keeps a copy of each conversation elsewhere: ``save_messages`` after every run.

    The history a run sends is the session's (a projection of the log), so ``before_run`` loads
    nothing: loading it again from here would send the conversation twice. ``load_messages`` is
    kept for ported code; ``store_inputs``, ``store_outputs``, ``store_context_messages`` and
    ``store_context_from`` choose what ``after_run`` saves, as in the reference framework.
    """

    def __init__(
        self,
        source_id: str,
        *,
        load_messages: bool = True,
        store_inputs: bool = True,
        store_context_messages: bool = False,
        store_context_from: set[str] | None = None,
        store_outputs: bool = True,
    ) -> None:
        super().__init__(source_id)
        self.load_messages = load_messages
        self.store_inputs = store_inputs
        self.store_context_messages = store_context_messages
        self.store_context_from = store_context_from
        self.store_outputs = store_outputs

    @abstractmethod
    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Message]:
        """The messages kept for ``session_id`` (for the application's own use)."""

    @abstractmethod
    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[Message],
        *,
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Keep ``messages`` for ``session_id``."""

    async def after_run(
        self, *, agent: Any, session: AgentSession, context: SessionContext, state: dict[str, Any]
    ) -> None:
        """Save the run's messages as configured."""
        messages: list[Message] = []
        if self.store_context_messages:
            if self.store_context_from is not None:
                messages += context.get_messages(sources=self.store_context_from)
            else:
                messages += context.get_messages(exclude_sources={self.source_id})
        if self.store_inputs:
            messages += context.input_messages
        if self.store_outputs and context.response is not None:
            messages += context.response.messages
        if messages:
            await self.save_messages(context.session_id, messages, state=state)


class InMemoryHistoryProvider(HistoryProvider):
    """The session's own history: ``get_messages(..., session=s)`` gives ``s.history``.

    It saves nothing (the log already holds every message) and keeps no ``session.state`` entry.
    """

    DEFAULT_SOURCE_ID: ClassVar[str] = "in_memory"

    def __init__(
        self,
        source_id: str | None = None,
        *,
        load_messages: bool = True,
        store_inputs: bool = True,
        store_context_messages: bool = False,
        store_context_from: set[str] | None = None,
        store_outputs: bool = True,
        skip_excluded: bool = False,
    ) -> None:
        super().__init__(
            source_id or self.DEFAULT_SOURCE_ID,
            load_messages=load_messages,
            store_inputs=store_inputs,
            store_context_messages=store_context_messages,
            store_context_from=store_context_from,
            store_outputs=store_outputs,
        )
        self.skip_excluded = skip_excluded

    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Message]:
        session = kwargs.get("session")
        return list(session.history) if isinstance(session, AgentSession) else []

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[Message],
        *,
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Nothing to do: the session's history grows from the log."""

    async def after_run(
        self, *, agent: Any, session: AgentSession, context: SessionContext, state: dict[str, Any]
    ) -> None:
        """Nothing to save: the run's log is the history."""


class _Contribution:
    """What one provider added in one ``before_run`` (or what the log says it added)."""

    __slots__ = ("instructions", "messages", "middleware", "tools")

    def __init__(
        self,
        *,
        messages: Sequence[Message] = (),
        instructions: Sequence[str] = (),
        tools: Sequence[FunctionTool] = (),
        middleware: Sequence[Any] = (),
    ) -> None:
        self.messages = tuple(messages)
        self.instructions = tuple(instructions)
        self.tools = tuple(tools)
        self.middleware = tuple(middleware)

    def __bool__(self) -> bool:
        return bool(self.messages or self.instructions or self.tools or self.middleware)


def _layers(middleware: Sequence[Any]) -> dict[str, list[Layer]]:
    layers = split_middleware(list(middleware))
    if layers["agent"]:
        raise MiddlewareError("context providers may only add chat or function middleware")
    return layers


def _apply(binding: Any, provider: str, added: _Contribution, names: tuple[str, ...] | None = None) -> None:
    """Record what ``provider`` added, then make the run use it."""
    if not added and not names:
        return
    layers = _layers(added.middleware)
    if names is None:
        names = tuple(f"{kind}:{layer.name}" for kind in ("chat", "function") for layer in layers[kind])
    registry = binding.registry
    for tool in added.tools:
        existing = registry.by_name.get(tool.name)
        if existing is not None and existing is not tool and existing.func is not tool.func:
            raise ToolDefinitionError(
                f"a different tool named {tool.name!r} is already available in this run"
            )
    binding.recorder.record(
        ContextProvided,
        provider=provider,
        messages=added.messages,
        instructions=added.instructions,
        tools=tuple(t.spec for t in added.tools if t.name not in registry.by_name),
        middleware=names,
    )
    registry.provide(added.tools)
    if added.instructions:
        binding.options["instructions"] = append_instructions(
            binding.options.get("instructions"), added.instructions
        )
    if layers["chat"] or layers["function"]:
        current = binding.spec.layers
        merged = {kind: (*current[kind], *layers.get(kind, ())) for kind in current}
        binding.spec = binding.spec.replace(layers=merged)


class _ProviderRun:
    """The providers of one run, between ``before_run`` and ``after_run``."""

    def __init__(self, binding: Any, providers: Sequence[ContextProvider], inputs: list[Message]) -> None:
        self.binding = binding
        self.providers = providers
        session = binding.session
        # Without a session the providers get one of their own, which nothing records or keeps.
        self.session: AgentSession = (
            session if session is not None else AgentSession(f"{binding.run_id}/context")
        )
        self.context = SessionContext(
            session_id=self.session.session_id,
            service_session_id=self.session.service_session_id,
            input_messages=list(inputs),
            options=dict(binding.options),
        )

    @contextlib.contextmanager
    def writing(self, provider: ContextProvider) -> Iterator[dict[str, Any]]:
        """The provider's state, its writes attributed to it and its in-place changes recorded."""
        token = writer.set(PROVIDER_WRITER + provider.source_id)
        try:
            if isinstance(provider, InMemoryHistoryProvider):
                yield {}
            else:
                yield self.session.state.setdefault(provider.source_id, {})
            self.binding.checkpoint()
        finally:
            writer.reset(token)

    async def before(self) -> None:
        for provider in self.providers:
            if isinstance(provider, HistoryProvider) and not provider.load_messages:
                continue  # as in the reference framework: such a provider only saves
            mark = self.context._mark()
            with self.writing(provider) as state:
                await provider.before_run(
                    agent=self.binding.spec.agent, session=self.session, context=self.context, state=state
                )
            _apply(self.binding, provider.source_id, self.context._since(mark))

    async def after(self, response: Any) -> None:
        self.context._response = response
        for provider in reversed(self.providers):
            with self.writing(provider) as state:
                await provider.after_run(
                    agent=self.binding.spec.agent, session=self.session, context=self.context, state=state
                )


class RecordedContributions:
    """Stands in for a run's providers in a rerun: repeats what the log says they did.

    ``events`` is the recorded run's log; ``stand_in(name)`` gives the tool a rerun calls for a
    tool a provider added; ``names`` are the ``source_id`` of the providers the agent has now
    (what the rerun's ``RunStarted`` lists). Middleware a provider added is named as recorded but
    not run: only calling the provider could give it.

    In a fork at ``upto`` the run's end is live: when the point lies before the providers'
    recorded ``after_run`` writes, those are not repeated, and the ``live`` providers'
    ``after_run`` runs instead, on the fork's own answer.
    """

    def __init__(
        self,
        events: Sequence[Event],
        stand_in: Callable[[str], FunctionTool],
        names: tuple[str, ...],
        *,
        upto: int | None = None,
        live: Sequence[ContextProvider] = (),
    ) -> None:
        self.stand_in = stand_in
        self.names = names
        loop = next((e.seq for e in events if isinstance(e, DERIVED)), len(events))
        mine = [e for e in events if _is_provided(e)]
        self.before_events = [e for e in mine if e.seq < loop]
        self.after_events = [e for e in mine if e.seq > loop]
        end = self.after_events[0].seq if self.after_events else (events[-1].seq if events else 0)
        self.live_after: tuple[ContextProvider, ...] = tuple(live) if upto is not None and upto < end else ()
        """The providers whose ``after_run`` a fork runs (its end lies past the point)."""
        self._inputs: list[Message] = []

    async def before(self, binding: Any, inputs: Sequence[Message] = ()) -> None:
        self._inputs = list(inputs)
        for event in self.before_events:
            if type(event) is ContextProvided:
                added = _Contribution(
                    messages=event.messages,
                    instructions=event.instructions,
                    tools=[self.stand_in(spec.name) for spec in event.tools],
                )
                _apply(binding, event.provider, added, event.middleware)
            else:
                _repeat_write(binding, event)

    async def after(self, binding: Any, response: Any = None) -> None:
        if self.live_after:
            await _ProviderRun(binding, self.live_after, self._inputs).after(response)
            return
        for event in self.after_events:
            _repeat_write(binding, event)


def _is_provided(event: Event) -> bool:
    if type(event) is ContextProvided:
        return True
    return (
        type(event) is SessionUpdated and event.origin_run_id is None and event.by.startswith(PROVIDER_WRITER)
    )


def _repeat_write(binding: Any, event: Event) -> None:
    """A provider's recorded state write, made and recorded again as it was."""
    assert type(event) is SessionUpdated
    session, sink = binding.session, binding.session_sink
    if session is None or sink is None:
        return
    session.apply(event)
    sink(event.by, event.changes)


class _Providers:
    """What ``provide_before`` hands ``provide_after``."""

    __slots__ = ("live", "recorded")

    def __init__(self, live: _ProviderRun | None, recorded: tuple[RecordedContributions, Any] | None) -> None:
        self.live = live
        self.recorded = recorded


async def provide_before(binding: Any, inputs: Sequence[Message]) -> _Providers | None:
    """Run the providers' ``before_run`` (or repeat their recorded contributions) and apply them."""
    providers = binding.spec.context_providers
    if not providers:
        return None
    first = providers[0]
    if isinstance(first, RecordedContributions):
        await first.before(binding, inputs)
        return _Providers(None, (first, binding))
    run = _ProviderRun(binding, providers, list(inputs))
    await run.before()
    return _Providers(run, None)


async def provide_after(providers: _Providers | None, response: Any) -> None:
    """After the loop: each provider's ``after_run``, in reverse order; nothing after a failure."""
    if providers is None or getattr(response, "finish_reason", None) == "failed":
        return
    if providers.recorded is not None:
        recorded, binding = providers.recorded
        await recorded.after(binding, response)
    elif providers.live is not None:
        await providers.live.after(response)


def provider_names(providers: Sequence[Any]) -> tuple[str, ...]:
    """The ``source_id`` of each provider, as ``RunStarted.context_providers`` records them."""
    if not providers:
        return ()
    if len(providers) == 1 and isinstance(providers[0], RecordedContributions):
        return providers[0].names
    return tuple(str(getattr(p, "source_id", type(p).__name__)) for p in providers)


def check_providers(providers: Any) -> list[ContextProvider]:
    """``Agent(context_providers=...)`` as a list; ``TypeError`` for anything that is not a
    provider (a ``source_id`` string and ``before_run``/``after_run`` coroutines)."""
    items = list(providers or ())
    for item in items:
        hooks = all(callable(getattr(item, name, None)) for name in ("before_run", "after_run"))
        if not hooks or not isinstance(getattr(item, "source_id", None), str):
            raise TypeError(
                f"context_providers takes context providers, not {type(item).__name__}: subclass "
                "agentledger.ContextProvider (a source_id, before_run and after_run)"
            )
    return items

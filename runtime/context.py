"""What tools and middleware see of the run they are part of.

``FunctionInvocationContext`` is the one object a function middleware chain and the tool it wraps
share. ``ctx.tools`` is the run's live tool list; every change to it goes through the run's tool
registry, which records ``ToolsAdded``/``ToolsRemoved`` before the change takes effect, so the list
the model is offered is always the projection of the log.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import warnings
from collections.abc import Iterator, MutableSequence, Sequence
from typing import TYPE_CHECKING, Any, Protocol, overload

from .errors import ExperimentalWarning

if TYPE_CHECKING:
    from .chat import ChatClient, ChatOptions, ChatResponse
    from .core.events import Event, EventBase, StateChange, ToolSpec
    from .core.messages import Message
    from .session import AgentSession
    from .store import EventStore

__all__ = (
    "AgentContext",
    "ChatContext",
    "FunctionInvocationContext",
    "LiveTools",
    "Recorder",
    "RunContext",
    "SessionSink",
    "current_run_context",
    "enter_run",
    "leave_run",
    "running",
)


class _Tool(Protocol):
    """A tool as a context shows it: at run time, the ``FunctionTool`` being called or offered.

    Typed structurally so that this module need not import ``agentledger.tools``, which
    imports it to recognise context parameters and to call tools directly.
    """

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def approval_mode(self) -> str: ...
    @property
    def parameters(self) -> dict[str, Any]: ...
    @property
    def spec(self) -> ToolSpec: ...


class _Registry(Protocol):
    """The run's tool registry, as the context uses it (see ``agentledger.driver``)."""

    @property
    def tools(self) -> Sequence[_Tool]: ...
    def add(self, items: Any, by_call_id: str | None) -> None: ...
    def remove(self, items: Any, by_call_id: str | None) -> None: ...


class _HasRegistry(Protocol):
    """What a call's context asks for its run's tool registry (a run's ``RunBinding``)."""

    @property
    def registry(self) -> _Registry: ...


_warned = False
_warn_lock = threading.Lock()


def _experimental() -> None:
    """Warn once per process that progressive tools are experimental: once *shown*. A warning
    the filters turn into an error was not shown, so the next use raises again, as in the
    reference framework."""
    global _warned
    if _warned:
        return
    warnings.warn(
        "[PROGRESSIVE_TOOLS] add_tools/remove_tools are experimental and may change",
        ExperimentalWarning,
        stacklevel=4,
    )
    with _warn_lock:
        _warned = True


class LiveTools(MutableSequence[_Tool]):
    """The run's current tools; mutating it records the change in the run's log.

    ``append``/``extend`` add tools and ``remove``/``pop``/``del``/``clear`` remove them, exactly
    like ``ctx.add_tools``/``ctx.remove_tools``. Assigning to an index or inserting at a position
    is refused: the order of the tool list is not something a run records.
    """

    __slots__ = ("_by", "_registry")

    def __init__(self, registry: _Registry, by_call_id: str | None) -> None:
        self._registry = registry
        self._by = by_call_id

    @overload
    def __getitem__(self, index: int) -> _Tool: ...
    @overload
    def __getitem__(self, index: slice) -> list[_Tool]: ...
    def __getitem__(self, index: int | slice) -> _Tool | list[_Tool]:
        return list(self._registry.tools)[index]

    def __len__(self) -> int:
        return len(self._registry.tools)

    def __iter__(self) -> Iterator[_Tool]:
        return iter(list(self._registry.tools))

    def __setitem__(self, index: Any, value: Any) -> None:
        raise TypeError("ctx.tools does not support item assignment; use ctx.add_tools/remove_tools")

    def __delitem__(self, index: int | slice) -> None:
        items = self._registry.tools[index]
        self.remove_tools(items if isinstance(items, list) else [items])

    def insert(self, index: int, value: _Tool) -> None:
        if index < len(self):
            raise TypeError("ctx.tools does not support inserting at a position; use ctx.add_tools")
        self.add_tools(value)

    def append(self, value: Any) -> None:
        self.add_tools(value)

    def extend(self, values: Any) -> None:
        self.add_tools(list(values))

    def clear(self) -> None:
        self.remove_tools(list(self._registry.tools))

    def add_tools(self, tools: Any) -> None:
        _experimental()
        self._registry.add(tools, self._by)

    def remove_tools(self, tools: Any) -> None:
        _experimental()
        self._registry.remove(tools, self._by)

    @property
    def names(self) -> list[str]:
        return [str(t.name) for t in self._registry.tools]

    def __repr__(self) -> str:
        return f"LiveTools({self.names!r})"


class FunctionInvocationContext:
    """One tool call as tools and function middleware see it.

    ``arguments`` are, in function middleware, what the model sent (typed where valid, without
    defaults; as sent where invalid, to be repaired); they are checked again, defaults filled in,
    before the tool runs (mutations before ``call_next()`` reach the tool),
    ``kwargs`` a per-call copy of the run's ``function_invocation_kwargs``, ``session`` the run's
    session, ``result`` the tool's result once ``call_next()`` returned (set it without calling
    ``call_next()`` to answer in the tool's place), and ``tools`` the live tool list (None outside
    a run loop).
    """

    def __init__(
        self,
        *,
        function: _Tool,
        arguments: dict[str, Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        session: AgentSession | None = None,
        tools: LiveTools | None = None,
        call_id: str | None = None,
        run_id: str | None = None,
        iteration: int = 0,
    ) -> None:
        self.function = function
        self.arguments: dict[str, Any] = arguments if arguments is not None else {}
        self.kwargs: dict[str, Any] = kwargs if kwargs is not None else {}
        self.session = session
        self._tools = tools
        self._live: tuple[_HasRegistry, str | None] | None = None
        self.call_id = call_id
        self.run_id = run_id
        self.iteration = iteration
        self.result: Any = None
        # The call's id in metadata too, where the reference framework's middleware reads it.
        self.metadata: dict[str, Any] = {"call_id": call_id} if call_id is not None else {}

    def bind_registry(self, run: _HasRegistry, call_id: str | None) -> None:
        """Give the call its run's live tool list (``run.registry``, asked for only when the call
        reads ``tools``: a run whose calls never do makes no registry): changes are recorded as
        made by ``call_id``."""
        self._live = (run, call_id)

    @property
    def tools(self) -> LiveTools | None:
        """The run's live tool list (None outside a run loop)."""
        if self._tools is None and self._live is not None:
            run, call_id = self._live
            self._tools = LiveTools(run.registry, call_id)
        return self._tools

    @tools.setter
    def tools(self, value: LiveTools | None) -> None:
        if self._live is not None or self._tools is not None:
            raise TypeError(
                "ctx.tools cannot be replaced during a run; use ctx.add_tools/ctx.remove_tools "
                "(or append/remove on ctx.tools), so that the change is recorded"
            )
        self._tools = value

    def add_tools(self, tools: Any) -> None:
        """Offer more tools from the next model call on (experimental)."""
        if self.tools is None:
            raise RuntimeError("add_tools can only be called inside an agent run's tool loop")
        self.tools.add_tools(tools)

    def remove_tools(self, tools: Any) -> None:
        """Stop offering tools from the next model call on (experimental)."""
        if self.tools is None:
            raise RuntimeError("remove_tools can only be called inside an agent run's tool loop")
        self.tools.remove_tools(tools)

    def __repr__(self) -> str:
        return f"FunctionInvocationContext(function={self.function.name!r}, call_id={self.call_id!r})"


class AgentContext:
    """A run as agent middleware sees it; set ``result`` without ``call_next()`` to answer.

    ``kwargs`` are the run's ``function_invocation_kwargs`` (also by that name), ``stream``
    (also ``is_streaming``) says whether the run is streamed."""

    def __init__(
        self,
        *,
        agent: Any,
        messages: list[Message],
        session: AgentSession | None,
        options: dict[str, Any],
        kwargs: dict[str, Any],
        client_kwargs: dict[str, Any],
        run_id: str,
        stream: bool = False,
    ) -> None:
        self.agent = agent
        self.messages = messages
        self.session = session
        self.options = options
        self.kwargs = kwargs
        self.client_kwargs = client_kwargs
        self.run_id = run_id
        self.is_streaming = stream
        self.result: Any = None
        self.metadata: dict[str, Any] = {}

    @property
    def stream(self) -> bool:
        """Whether the run is streamed (the reference framework's name of ``is_streaming``)."""
        return self.is_streaming

    @property
    def function_invocation_kwargs(self) -> dict[str, Any]:
        """The run's ``function_invocation_kwargs``: the same dict as ``kwargs``."""
        return self.kwargs

    @function_invocation_kwargs.setter
    def function_invocation_kwargs(self, value: dict[str, Any]) -> None:
        self.kwargs = value


class ChatContext:
    """One model request as chat middleware sees it, ``client_kwargs`` included (also as
    ``kwargs``, the reference framework's name), the run's ``session`` and whether the run is
    streamed (``stream``).

    ``messages`` is a list middleware may change or replace; it is made from the run's messages
    when first read, so a request no middleware looks at is sent without copying them.
    """

    def __init__(
        self,
        *,
        client: ChatClient,
        messages: Sequence[Message],
        options: ChatOptions,
        client_kwargs: dict[str, Any],
        run_id: str,
        iteration: int,
        session: AgentSession | None = None,
        stream: bool = False,
    ) -> None:
        self.client = client
        self._messages = messages
        self.options = options
        self.client_kwargs = client_kwargs
        self.run_id = run_id
        self.iteration = iteration
        self.session = session
        self.stream = stream
        self.result: ChatResponse | None = None
        self.metadata: dict[str, Any] = {}

    @property
    def kwargs(self) -> dict[str, Any]:
        """The request's ``client_kwargs`` (the reference framework's name): the same dict."""
        return self.client_kwargs

    @kwargs.setter
    def kwargs(self, value: dict[str, Any]) -> None:
        self.client_kwargs = value

    @property
    def messages(self) -> list[Message]:
        """The messages the request sends (a list of the run's own, made on first use)."""
        if type(self._messages) is not list:
            self._messages = list(self._messages)
        return self._messages

    @messages.setter
    def messages(self, messages: list[Message]) -> None:
        self._messages = messages

    @property
    def outgoing(self) -> Sequence[Message]:
        """What the request sends, without making the list: the run's own messages unless
        middleware read or replaced them."""
        return self._messages


class Recorder(Protocol):
    """Where the events of one run go: ``record`` stamps an input event and keeps it (see
    ``agentledger.run.recorder`` for the recorders a driver uses)."""

    run_id: str

    def record(self, cls: type[EventBase], **fields: Any) -> Event:
        """Record one input event of ``cls`` with ``fields``; returns the recorded event."""
        ...


class SessionSink(Protocol):
    """Records session changes into a run: ``(by, changes, origin=None)``; ``origin`` names the
    write a copy repeats (a sub-agent's write copied into its caller's log)."""

    def __call__(
        self, by: str, changes: tuple[StateChange, ...], origin: tuple[str, int] | None = None
    ) -> None: ...


class RunContext:
    """The ambient view of the current run (``current_run_context()``).

    ``record(EventType, **fields)`` records an input event into the run's log: the way tools,
    middleware and sub-agents add what the run itself cannot see (``ChildRunStarted``...).
    ``session_sink`` records session changes into this run (a sub-agent sharing the session
    mirrors its writes through it). ``store`` is the store the run records to (None: none); a
    sub-agent that kept the default store records the runs this run starts there too.
    """

    __slots__ = ("agent", "kwargs", "options", "recorder", "run_id", "session", "session_sink", "store")

    def __init__(
        self,
        *,
        agent: Any,
        run_id: str,
        session: AgentSession | None,
        options: dict[str, Any],
        kwargs: dict[str, Any],
        recorder: Recorder | None = None,
        session_sink: SessionSink | None = None,
        store: EventStore | None = None,
    ) -> None:
        self.agent = agent
        self.run_id = run_id
        self.session = session
        self.options = options
        self.kwargs = kwargs
        self.recorder = recorder
        self.session_sink = session_sink
        self.store = store

    def record(self, cls: type[EventBase], **fields: Any) -> Event:
        """Record an input event of ``cls`` into this run's log; returns the recorded event."""
        if self.recorder is None:
            raise RuntimeError(f"run {self.run_id} records nothing here")
        return self.recorder.record(cls, **fields)


_current: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar("agentledger_run", default=None)


replaying: contextvars.ContextVar[bool] = contextvars.ContextVar("agentledger_replaying", default=False)
"""True while ``agentledger.replay`` reruns or forks a recorded run (its sub-agents included)."""


def current_run_context() -> RunContext | None:
    """The run the calling code is part of (tools, middleware, sub-agents), or None."""
    return _current.get()


def enter_run(context: RunContext) -> RunContext | None:
    """Make ``context`` the current run; return the one current before, which ``leave_run``
    makes current again. (The previous run, not a ``contextvars.Token``: a run held while it
    waits keeps no token object for the cycle collector to walk.)"""
    previous = _current.get()
    _current.set(context)
    return previous


def leave_run(previous: RunContext | None) -> None:
    """The run current before ``enter_run`` (what it returned) is current again."""
    _current.set(previous)


@contextlib.contextmanager
def running(context: RunContext) -> Iterator[RunContext]:
    """Make ``context`` the current run inside the block (what a driver does around a run)."""
    previous = enter_run(context)
    try:
        yield context
    finally:
        leave_run(previous)

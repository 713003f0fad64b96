"""Middleware: plain async callables around tool calls, runs and model calls.

Three kinds, told apart by a decorator, a base class, or the annotation of the first parameter:

* function middleware ``async def mw(context: FunctionInvocationContext, call_next)``
* agent middleware    ``async def mw(context: AgentContext, call_next)``
* chat middleware     ``async def mw(context: ChatContext, call_next)``

``call_next()`` takes no arguments: mutate the context before calling it. Returning without
calling it short-circuits the layers inside, and whatever ``context.result`` holds is the outcome.
The chain runner reports which layer short-circuited and which one last replaced the result, so
the driver can record both.
"""

from __future__ import annotations

import abc
import contextlib
import inspect
import typing
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

from .context import AgentContext, ChatContext, FunctionInvocationContext
from .errors import MiddlewareError, MiddlewareTermination

__all__ = (
    "AgentMiddleware",
    "ChainOutcome",
    "ChatMiddleware",
    "FunctionMiddleware",
    "Layer",
    "agent_middleware",
    "chat_middleware",
    "classify_middleware",
    "function_middleware",
    "run_chain",
)

Kind = Literal["function", "agent", "chat"]
CallNext = Callable[[], Awaitable[None]]
F = TypeVar("F", bound=Callable[..., Any])
_ATTR = "__agentledger_middleware__"
_FORMS = (
    "use @function_middleware / @agent_middleware / @chat_middleware, subclass FunctionMiddleware"
    " / AgentMiddleware / ChatMiddleware, or annotate the first parameter as "
    "FunctionInvocationContext, AgentContext or ChatContext"
)


class FunctionMiddleware(abc.ABC):
    """Class form of function middleware."""

    @abc.abstractmethod
    async def process(self, context: FunctionInvocationContext, call_next: CallNext) -> None: ...


class AgentMiddleware(abc.ABC):
    """Class form of agent (run) middleware."""

    @abc.abstractmethod
    async def process(self, context: AgentContext, call_next: CallNext) -> None: ...


class ChatMiddleware(abc.ABC):
    """Class form of chat middleware."""

    @abc.abstractmethod
    async def process(self, context: ChatContext, call_next: CallNext) -> None: ...


def _mark(kind: Kind) -> Callable[[F], F]:
    def decorate(func: F) -> F:
        setattr(func, _ATTR, kind)
        return func

    return decorate


function_middleware = _mark("function")
function_middleware.__doc__ = "Mark ``func`` as function middleware."
agent_middleware = _mark("agent")
agent_middleware.__doc__ = "Mark ``func`` as agent (run) middleware."
chat_middleware = _mark("chat")
chat_middleware.__doc__ = "Mark ``func`` as chat middleware."

_BASES: tuple[tuple[type, Kind], ...] = (
    (FunctionMiddleware, "function"),
    (AgentMiddleware, "agent"),
    (ChatMiddleware, "chat"),
)
_CONTEXTS: dict[str, Kind] = {
    "FunctionInvocationContext": "function",
    "AgentContext": "agent",
    "AgentRunContext": "agent",
    "ChatContext": "chat",
}


class Layer:
    """One classified middleware."""

    __slots__ = ("call", "kind", "name")

    def __init__(self, kind: Kind, name: str, call: Callable[[Any, CallNext], Awaitable[None]]):
        self.kind = kind
        self.name = name
        self.call = call

    def __repr__(self) -> str:
        return f"Layer({self.kind}, {self.name!r})"


def _kind_from_annotation(func: Callable[..., Any]) -> Kind | None:
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return None
    if not params:
        return None
    annotation: Any = params[0].annotation
    if isinstance(annotation, str):
        with contextlib.suppress(Exception):  # unresolvable: fall back to the annotation's text
            annotation = typing.get_type_hints(func).get(params[0].name, annotation)
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return _CONTEXTS.get(name.split(".")[-1])


def classify_middleware(item: Any) -> Layer:
    """Which kind ``item`` is, or ``MiddlewareError`` naming the supported forms."""
    if isinstance(item, Layer):
        return item
    name = getattr(item, "__name__", type(item).__name__)
    for base, base_kind in _BASES:
        if isinstance(item, base):
            if not inspect.iscoroutinefunction(item.process):  # type: ignore[attr-defined]
                raise MiddlewareError(f"middleware {name!r}: process() must be an async method")
            return Layer(base_kind, name, item.process)  # type: ignore[attr-defined]
    marked = getattr(item, _ATTR, None)
    if marked is None and not callable(item):
        raise MiddlewareError(f"middleware {item!r} is not callable; {_FORMS}")
    kind: Kind | None = marked or _kind_from_annotation(item)
    if kind is None:
        raise MiddlewareError(f"cannot tell what kind of middleware {name!r} is; {_FORMS}")
    if not inspect.iscoroutinefunction(item) and not inspect.iscoroutinefunction(
        getattr(item, "__call__", None)  # noqa: B004
    ):
        raise MiddlewareError(f"middleware {name!r} must be an async function")
    return Layer(kind, name, item)


def split_middleware(items: Sequence[Any] | None) -> dict[str, list[Layer]]:
    """Classify a mixed list, keeping each kind's order."""
    out: dict[str, list[Layer]] = {"function": [], "agent": [], "chat": []}
    for item in items or ():
        layer = classify_middleware(item)
        out[layer.kind].append(layer)
    return out


class ChainOutcome:
    """What happened in a chain: who short-circuited, who last replaced the result, and who
    raised ``MiddlewareTermination`` (the innermost layer it came from)."""

    __slots__ = ("overridden_by", "short_circuited_by", "terminated_by")

    def __init__(self) -> None:
        self.short_circuited_by: str | None = None
        self.overridden_by: str | None = None
        self.terminated_by: str | None = None


async def run_chain(
    layers: Sequence[Layer],
    context: Any,
    final: CallNext,
    after_layer: Callable[[], None] | None = None,
    *,
    outcome: ChainOutcome | None = None,
) -> ChainOutcome:
    """Run ``layers`` outermost first around ``final``; ``after_layer()`` runs after each layer
    (a session checkpoint: what the layer changed in place is recorded as its own write).
    ``outcome`` is filled in as the chain runs, so a caller catching ``MiddlewareTermination``
    still learns which layer raised it."""
    outcome = ChainOutcome() if outcome is None else outcome

    async def call(index: int) -> None:
        if index == len(layers):
            await final()
            return
        layer = layers[index]
        reached = False
        inner_result: Any = None

        async def call_next() -> None:
            nonlocal reached, inner_result
            reached = True
            await call(index + 1)
            inner_result = context.result

        try:
            await layer.call(context, call_next)
        except MiddlewareTermination:
            if outcome.terminated_by is None:
                outcome.terminated_by = layer.name
            raise
        if after_layer is not None:
            after_layer()
        if not reached:
            outcome.short_circuited_by = layer.name
        elif context.result is not inner_result:
            outcome.overridden_by = layer.name

    await call(0)
    return outcome

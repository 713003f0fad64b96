"""Function tools: a Python callable, its JSON schema, and validation of the model's arguments.

The schema comes from the signature or from an explicit ``schema=`` (see ``_tool_schema``); a
parameter annotated ``FunctionInvocationContext`` is injected by the run and never shown to the
model. ``parse_arguments``/``validate`` check what the model sends; ``bind_call`` binds a call.
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
import re
import sys
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar, overload

import anyio.to_thread
import msgspec

from ._tool_schema import describe_parameters, read_arguments, read_docstring
from .context import FunctionInvocationContext, replaying
from .core.depth import MAX_DEPTH, too_deep
from .core.events import APPROVAL_MODES, ToolSpec
from .core.messages import Content
from .errors import ArgumentsError, ReplayRefusedError, ToolDefinitionError
from .logs import warn

__all__ = (
    "ApprovalMode",
    "ArgumentsError",
    "FunctionTool",
    "ReplayRule",
    "ToolParameters",
    "arguments_valid",
    "normalize_tools",
    "tool",
)

ApprovalMode = Literal["always_require", "never_require"]
ReplayRule = Literal["run", "recorded"] | Callable[..., Any]
"""How a replay treats a tool: ``"run"`` (its body is the code under test), ``"recorded"`` (never
run in any replay: calls take their recorded outcomes), or a test double run in its place."""
_APPROVAL_MODES = APPROVAL_MODES
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
F = TypeVar("F", bound=Callable[..., Any])


_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def _caller_level() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside agentledger."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE + os.sep):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


class ToolParameters(dict[str, Any]):
    """A tool's JSON schema: a dict, also callable (``tool.parameters()``, the reference
    framework's spelling) for a copy of it."""

    def __call__(self) -> dict[str, Any]:
        return dict(self)


class FunctionTool:
    """A callable the model may call, with its schema and argument validation."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        approval_mode: ApprovalMode | None = "never_require",
        schema: type | Mapping[str, Any] | None = None,
        replay: ReplayRule = "run",
    ) -> None:
        self.func = func
        self._body: Callable[[Any, Mapping[str, Any]], Awaitable[Any]] | None = None
        self.name: str = name or str(getattr(func, "__name__", type(func).__name__))
        if not _NAME.match(self.name):
            raise ToolDefinitionError(f"tool name {self.name!r} must be 1-64 letters, digits, '_' or '-'")
        if approval_mode is None:  # the reference framework's default spelling
            approval_mode = "never_require"
        if approval_mode not in _APPROVAL_MODES:
            raise ToolDefinitionError(_approval_mode_error(self.name, approval_mode))
        if replay not in ("run", "recorded") and not callable(replay):
            raise ToolDefinitionError(
                f"tool {self.name!r}: replay must be 'run', 'recorded' or a function to call in "
                f"its place (a test double), not {replay!r}"
            )
        self.replay: ReplayRule = replay
        """What a replay does with a call: run the body, answer from the log, or run the double."""
        doc = inspect.getdoc(func) if inspect.isroutine(func) else None
        summary, documented = read_docstring(doc)
        self.description = description if description is not None else summary
        shape = read_arguments(func, self.name, schema)
        describe_parameters(shape.parameters, documented)
        self.parameters = ToolParameters(shape.parameters)
        self.context_param: str | None = shape.context_param
        self.accepts_kwargs = shape.accepts_kwargs
        self._args_type: type[msgspec.Struct] | None = shape.struct
        # One decoder per tool: msgspec.json.decode(type=...) looks the type up on every call.
        self._decode_args = (
            msgspec.json.Decoder(shape.struct, strict=False).decode if shape.struct is not None else None
        )
        self._pydantic: Any = shape.pydantic
        self._fields: tuple[str, ...] = shape.fields
        call = func if inspect.isroutine(func) else getattr(func, "__call__", func)  # noqa: B004
        self.is_async = inspect.iscoroutinefunction(call)
        self.needs_context = self.context_param is not None or self.accepts_kwargs
        """Whether a call must be given a ``FunctionInvocationContext`` (subclasses may insist)."""
        self.spec = ToolSpec(
            name=self.name,
            description=self.description,
            parameters=dict(self.parameters),
            approval_mode=approval_mode,
        )
        """What the model is offered and the run records; ``approval_mode`` is read from it."""
        if self.accepts_kwargs:
            warn(
                f"tool {self.name!r} declares **kwargs to receive runtime values; read them from "
                "an injected FunctionInvocationContext (ctx.kwargs) instead",
                DeprecationWarning,
                part="deprecations",
                stacklevel=_caller_level(),
            )

    @property
    def approval_mode(self) -> ApprovalMode:
        """``always_require``: no call runs before a human approves it (see the spec)."""
        return typing.cast(ApprovalMode, self.spec.approval_mode)

    @approval_mode.setter
    def approval_mode(self, mode: ApprovalMode) -> None:
        """Changing it changes the spec a run offers and gates on, so the gate follows it."""
        if mode not in _APPROVAL_MODES:
            raise ToolDefinitionError(_approval_mode_error(self.name, mode))
        self.spec = msgspec.structs.replace(self.spec, approval_mode=mode)

    # -- validation --------------------------------------------------------------------------

    def parse_arguments(self, raw: str | Mapping[str, Any] | None) -> dict[str, Any]:
        """The model's raw argument text as a JSON object (not yet validated)."""
        if raw is None or raw == "":
            return {}
        if isinstance(raw, Mapping):
            return dict(raw)
        _check_depth(raw)
        try:
            value = msgspec.json.decode(raw)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise ArgumentsError(f"arguments are not valid JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise ArgumentsError(f"arguments must be a JSON object, got {type(value).__name__}")
        return value

    def sent_arguments(self, raw: str | Mapping[str, Any] | None) -> dict[str, Any]:
        """The model's argument text as function middleware first sees it: a JSON object as it
        is; text that is no JSON object as ``{"raw": text}`` (a JSON value that is no object as
        ``{"raw": value}``), for middleware to repair. Only text nested too deep to record is
        refused (``ArgumentsError``)."""
        try:
            return self.parse_arguments(raw)
        except ArgumentsError:
            assert isinstance(raw, str)
            _check_depth(raw)
            try:
                return {"raw": msgspec.json.decode(raw)}
            except (msgspec.DecodeError, RecursionError):
                return {"raw": raw}

    def arguments_from(self, raw: str | Mapping[str, Any] | None) -> dict[str, Any]:
        """Parse and validate the model's raw arguments in one step (what a run does). Text that
        is no JSON object still runs a tool whose parameters all have defaults (it is taken as
        ``{"raw": text}``, which names no parameter); for any other tool it is refused."""
        decode = self._decode_args
        if decode is None or not isinstance(raw, str) or not raw:
            try:
                arguments = self.parse_arguments(raw)
            except ArgumentsError as exc:
                return self._defaults_only(raw, exc)
            return self.validate(arguments)
        if len(raw) > _SHALLOW:
            _check_depth(raw)
        try:
            obj = decode(raw)
        except msgspec.ValidationError as exc:
            if raw.lstrip()[:1] != "{":
                return self._defaults_only(raw, ArgumentsError(f"arguments must be a JSON object: {exc}"))
            raise ArgumentsError(str(exc)) from exc
        except (msgspec.DecodeError, RecursionError) as exc:
            return self._defaults_only(raw, ArgumentsError(f"arguments are not valid JSON: {exc}"))
        return msgspec.structs.asdict(obj)  # its fields are the parameters, in their order

    def _defaults_only(self, raw: Any, problem: ArgumentsError) -> dict[str, Any]:
        """Arguments that are no JSON object, as a run takes them: ``{"raw": ...}`` validated
        (a tool with nothing required runs on its defaults), else ``problem`` (why the text
        cannot be read as arguments)."""
        try:
            return self.validate(self.sent_arguments(raw))
        except ArgumentsError:
            raise problem from None

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Check ``arguments`` against the schema; return them typed, with defaults filled in."""
        if self._args_type is not None:
            try:
                obj = msgspec.convert(arguments, self._args_type, strict=False)
            except msgspec.ValidationError as exc:
                raise ArgumentsError(str(exc)) from exc
            return {name: getattr(obj, name) for name in self._fields}
        if self._pydantic is not None:
            try:
                model = self._pydantic.model_validate(dict(arguments))
            except ValueError as exc:
                raise ArgumentsError(_pydantic_problems(exc)) from exc
            return {name: getattr(model, name) for name in self._fields}
        missing = [k for k in self.parameters.get("required", ()) if k not in arguments]
        if missing:
            raise ArgumentsError(f"missing required arguments: {', '.join(missing)}")
        return dict(arguments)

    # -- calling -----------------------------------------------------------------------------

    def bind_call(self, arguments: Mapping[str, Any], context: Any) -> Callable[[], Any]:
        """A zero-argument callable that runs the tool with ``arguments`` and the context."""
        if self._body is not None:
            return functools.partial(self._body, context, dict(arguments))
        kwargs = dict(arguments)
        if self.context_param is not None:
            kwargs[self.context_param] = context
        if self.accepts_kwargs and context is not None:
            for key, value in context.kwargs.items():
                kwargs.setdefault(key, value)
        return functools.partial(self.func, **kwargs)

    def execute(self, arguments: Mapping[str, Any], context: Any = None) -> Awaitable[Any]:
        """Run the tool on already validated ``arguments``: await it for what the tool returns.

        The one way a tool is run, sync or async: the call is bound by ``bind_call`` (so
        subclasses that override it run the same way; an async tool given only its arguments is
        called directly, as ``bind_call`` would bind it), an async tool is awaited, a sync one runs
        in a worker thread so that it cannot block the event loop, and an awaitable a sync tool
        returns is awaited too. What the tool raises propagates. ``context`` is the
        ``FunctionInvocationContext`` the tool may receive. No validation, middleware or events.
        """
        if self.replay != "run" and self._body is None and replaying.get():
            return self._in_replay(arguments, context)  # the body never runs in a replay
        if (  # what bind_call would bind is the arguments alone: call the tool with them at once
            self.is_async
            and context is None
            and self._body is None
            and self.context_param is None
            and type(self).bind_call is FunctionTool.bind_call  # a subclass may bind its own way
        ):
            direct: Awaitable[Any] = self.func(**arguments)
            return direct
        call = self.bind_call(arguments, context)
        if self.is_async:
            running: Awaitable[Any] = call()  # the tool's own coroutine: no extra frame
            return running
        return _in_thread(call)

    async def _in_replay(self, arguments: Mapping[str, Any], context: Any) -> Any:
        """A call of a tool marked ``replay=`` that a replay asked to run: its double runs (with
        the arguments, and the context if it takes the tool's context parameter), or the call is
        refused when the tool is marked ``"recorded"`` (the log holds no outcome to answer it)."""
        double = self.replay
        if not callable(double):
            raise ReplayRefusedError(
                f"tool {self.name!r} never runs in a replay (replay='recorded') and the log holds no "
                "outcome of this call: give it a test double (@tool(replay=function)) to answer it",
                tool=self.name,
            )
        kwargs = dict(arguments)
        if self.context_param is not None and _takes(double, self.context_param):
            kwargs[self.context_param] = context
        result = double(**kwargs)
        return await result if is_awaitable(result) else result

    def with_body(self, body: Callable[[Any, Mapping[str, Any]], Awaitable[Any]]) -> FunctionTool:
        """The same tool (name, schema, argument checks, approval mode) whose calls run
        ``await body(context, arguments)`` instead of the function: a stand-in, such as a
        rerun's recorded outcome or a call that must not run again."""
        stand_in = copy.copy(self)
        stand_in.is_async = True
        stand_in.needs_context = True
        stand_in._body = body
        return stand_in

    async def invoke(self, arguments: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        """Call the tool directly, outside any run: validated, no middleware, ``ctx.tools`` None."""
        values = self.validate({**(arguments or {}), **kwargs})
        return await self.execute(values, FunctionInvocationContext(function=self, arguments=values))

    def __get__(self, instance: Any, owner: type | None = None) -> FunctionTool:
        """Used on a method of a tool class, each instance gets its own bound tool."""
        if instance is None:
            return self
        cache = instance.__dict__.setdefault("__agentledger_tools__", {})
        bound = cache.get(self.name)
        if bound is None:
            bound = FunctionTool(
                self.func.__get__(instance, owner),
                name=self.name,
                description=self.description,
                approval_mode=self.approval_mode,
                schema=self._explicit_schema(),
                replay=self.replay,
            )
            cache[self.name] = bound
        return typing.cast(FunctionTool, bound)

    def _explicit_schema(self) -> type | Mapping[str, Any] | None:
        if self._pydantic is not None and not self._pydantic.__name__.endswith("_arguments"):
            return typing.cast(type, self._pydantic)
        if self._args_type is not None and not self._args_type.__name__.endswith("_arguments"):
            return self._args_type
        return None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"FunctionTool(name={self.name!r})"


def _pydantic_problems(exc: ValueError) -> str:
    """A pydantic validation error in one line: each problem with where it is."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    problems = []
    for error in errors():
        where = ".".join(str(part) for part in error.get("loc", ()))
        problems.append(f"{error.get('msg', 'invalid')} - at $.{where}" if where else str(error.get("msg")))
    return "; ".join(problems) or str(exc)


@overload
def tool(func: F, /) -> FunctionTool: ...
@overload
def tool(
    func: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    approval_mode: ApprovalMode | None = "never_require",
    schema: type | Mapping[str, Any] | None = None,
    replay: ReplayRule = "run",
) -> Callable[[F], FunctionTool]: ...
def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    approval_mode: ApprovalMode | None = "never_require",
    schema: type | Mapping[str, Any] | None = None,
    replay: ReplayRule = "run",
) -> FunctionTool | Callable[[F], FunctionTool]:
    """Make a ``FunctionTool`` from a function: ``@tool`` or ``@tool(name=..., ...)``.

    ``replay`` says what a replay (``agentledger check``, a cassette test, a rerun, a fork) does
    with the tool's calls: ``"run"`` runs its current body; ``"recorded"`` never runs it (each
    call takes its recorded outcome: payments, mail); a function runs in its place, as a test
    double, called with the call's arguments."""

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            f, name=name, description=description, approval_mode=approval_mode, schema=schema, replay=replay
        )

    return wrap(func) if func is not None else wrap


def normalize_tools(items: Any) -> list[FunctionTool]:
    """A tool, a callable, or a sequence of them, as a new list of ``FunctionTool``.

    An object with ``as_function_tools()`` (an MCP server) stands for the tools it returns.
    """
    if items is None:
        return []
    if isinstance(items, str | bytes):
        raise ToolDefinitionError(
            f"tools= takes tools or callables (or a list of them), not the string {items!r}: "
            "pass the function itself"
        )
    if (
        isinstance(items, FunctionTool)
        or hasattr(items, "as_function_tools")
        or (callable(items) and not isinstance(items, Sequence))
    ):
        items = [items]
    out: list[FunctionTool] = []
    for item in items:
        if isinstance(item, FunctionTool):
            out.append(item)
        elif hasattr(item, "as_function_tools"):  # a source of several tools, such as an MCP server
            out.extend(normalize_tools(item.as_function_tools()))
        elif hasattr(item, "as_function_tool"):
            out.append(item.as_function_tool())
        elif callable(item):
            out.append(FunctionTool(item))
        elif isinstance(item, str):
            raise ToolDefinitionError(f"tools= takes tools or callables, not the string {item!r}")
        else:
            raise ToolDefinitionError(f"not a tool or a callable: {item!r}")
    return out


def is_awaitable(value: Any) -> typing.TypeGuard[Awaitable[Any]]:
    """Whether ``value`` can be awaited (a coroutine, a future, an object with ``__await__``)."""
    return inspect.isawaitable(value)


async def _in_thread(call: Callable[[], Any]) -> Any:
    result = await anyio.to_thread.run_sync(call)
    return await result if is_awaitable(result) else result


def arguments_valid(function: FunctionTool, call: Content) -> bool:
    """Whether ``call``'s arguments pass ``function``'s validation (the rule gating applies)."""
    try:
        function.arguments_from(call.arguments)
    except ArgumentsError:
        return False
    return True


def _takes(func: Callable[..., Any], name: str) -> bool:
    """Whether ``func`` has a parameter called ``name`` (or takes ``**kwargs``)."""
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def _approval_mode_error(name: str, mode: object) -> str:
    return f"tool {name!r}: approval_mode must be 'always_require' or 'never_require', not {mode!r}"


_SHALLOW = 2 * (MAX_DEPTH - 1)
"""Argument text no longer than this cannot nest deeper than a ``ToolCalled`` holds (a
container needs two characters)."""


def _check_depth(raw: str) -> None:
    """Refuse argument text nested deeper than a recorded ``ToolCalled`` can hold."""
    if len(raw) > _SHALLOW and too_deep(raw.encode("utf-8", "surrogatepass"), MAX_DEPTH - 1):
        raise ArgumentsError(f"arguments are nested deeper than {MAX_DEPTH - 1} levels")

"""Function tools: a Python callable, its JSON schema, and validation of the model's arguments.

The schema comes from the signature. Each parameter becomes a field of a msgspec Struct built for
the tool; the Struct gives both the JSON schema the model sees and a fast validator for the
arguments it sends. Descriptions come from ``Annotated[T, "text"]``, ``msgspec.Meta`` or, when
pydantic is installed, ``pydantic.Field``. A parameter annotated ``FunctionInvocationContext``
(under any name, also inside ``Optional``/``Annotated``) is injected by the run and never shown to
the model; with an explicit ``schema=``, an unannotated parameter named ``ctx`` is injected too.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
import types
import typing
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin, overload

import msgspec

from .core.events import ToolSpec
from .errors import ArgumentsError, ToolDefinitionError

__all__ = ("ApprovalMode", "ArgumentsError", "FunctionTool", "normalize_tools", "tool")

ApprovalMode = Literal["always_require", "never_require"]
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


def _context_type() -> type:
    from .context import FunctionInvocationContext

    return FunctionInvocationContext


def _mentions_context(annotation: Any, ctx_type: type) -> bool:
    if annotation is ctx_type:
        return True
    if isinstance(annotation, str):  # an annotation that could not be evaluated
        return re.search(rf"\b{ctx_type.__name__}\b", annotation) is not None
    origin = get_origin(annotation)
    if origin is Annotated:
        return _mentions_context(get_args(annotation)[0], ctx_type)
    if origin is Union or origin is types.UnionType:
        return any(_mentions_context(arg, ctx_type) for arg in get_args(annotation))
    return False


def _meta_from_pydantic(field: Any) -> tuple[list[msgspec.Meta], Any]:
    """msgspec constraints and the default from a ``pydantic.Field(...)``."""
    default: Any = inspect.Parameter.empty
    if getattr(field, "default", None) is not None and not _is_undefined(field.default):
        default = field.default
    keys = {
        "ge": "ge",
        "gt": "gt",
        "le": "le",
        "lt": "lt",
        "min_length": "min_length",
        "max_length": "max_length",
        "pattern": "pattern",
        "multiple_of": "multiple_of",
    }
    constraints: dict[str, Any] = {}
    for item in getattr(field, "metadata", ()):
        for attr, key in keys.items():
            if getattr(item, attr, None) is not None:
                constraints[key] = getattr(item, attr)
    description = getattr(field, "description", None)
    if description:
        constraints["description"] = description
    return ([msgspec.Meta(**constraints)] if constraints else []), default


def _is_undefined(value: Any) -> bool:
    return type(value).__name__ in ("PydanticUndefinedType", "_Unset")


def _is_pydantic_field(obj: Any) -> bool:
    return type(obj).__name__ == "FieldInfo" and type(obj).__module__.startswith("pydantic")


def _field_type(annotation: Any) -> tuple[Any, Any]:
    """A msgspec-ready type for ``annotation`` and a default taken from a pydantic Field."""
    if annotation is inspect.Parameter.empty or isinstance(annotation, str):
        return Any, inspect.Parameter.empty
    if get_origin(annotation) is not Annotated:
        return annotation, inspect.Parameter.empty
    base, *extras = get_args(annotation)
    metas: list[Any] = []
    default: Any = inspect.Parameter.empty
    for extra in extras:
        if isinstance(extra, msgspec.Meta):
            metas.append(extra)
        elif isinstance(extra, str):
            metas.append(msgspec.Meta(description=extra))
        elif _is_pydantic_field(extra):
            found, default = _meta_from_pydantic(extra)
            metas.extend(found)
    base, _ = _field_type(base)
    if not metas:
        return base, default
    return Annotated[(base, *metas)], default


def _type_hints(func: Callable[..., Any]) -> dict[str, Any]:
    """Evaluated annotations, parameter by parameter where the whole set does not evaluate.

    ``FunctionInvocationContext`` is always resolvable, even when the tool's module imports it
    only under ``TYPE_CHECKING``.
    """
    target: Any = func if inspect.isroutine(func) else getattr(func, "__call__", func)  # noqa: B004
    local = {"FunctionInvocationContext": _context_type()}
    try:
        return typing.get_type_hints(target, localns=local, include_extras=True)
    except Exception:  # some annotation does not evaluate: try each on its own
        pass
    raw = dict(getattr(target, "__annotations__", {}))
    namespace = {**getattr(target, "__globals__", {}), **local}
    hints: dict[str, Any] = {}
    for name, annotation in raw.items():
        try:
            # evaluating an annotation string is what typing.get_type_hints does too
            hints[name] = eval(annotation, namespace) if isinstance(annotation, str) else annotation
        except Exception:  # unresolvable: keep the text; the parameter's type becomes Any
            hints[name] = annotation
    return hints


def _inline_schema(struct: type[msgspec.Struct]) -> dict[str, Any]:
    schema = msgspec.json.schema(struct)
    defs: dict[str, Any] = schema.get("$defs", {})
    main = dict(defs.pop(struct.__name__))
    main.pop("title", None)
    main.setdefault("properties", {})
    if defs:
        main["$defs"] = defs
    return main


class FunctionTool:
    """A callable the model may call, with its schema and argument validation."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        approval_mode: ApprovalMode = "never_require",
        schema: type | Mapping[str, Any] | None = None,
    ) -> None:
        self.func = func
        self.name: str = name or str(getattr(func, "__name__", type(func).__name__))
        if not _NAME.match(self.name):
            raise ToolDefinitionError(f"tool name {self.name!r} must be 1-64 letters, digits, '_' or '-'")
        doc = inspect.getdoc(func) if inspect.isroutine(func) else None
        self.description = description if description is not None else (doc or "")
        self.approval_mode: ApprovalMode = approval_mode
        self.context_param: str | None = None
        self.accepts_kwargs = False
        self._args_type: type[msgspec.Struct] | None = None
        self._pydantic: Any = None
        self._fields: tuple[str, ...] = ()
        self._build(schema)
        call = func if inspect.isroutine(func) else getattr(func, "__call__", func)  # noqa: B004
        self.is_async = inspect.iscoroutinefunction(call)
        self.needs_context = self.context_param is not None or self.accepts_kwargs
        """Whether a call must be given a ``FunctionInvocationContext`` (subclasses may insist)."""
        self.spec = ToolSpec(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            approval_mode=approval_mode,
        )
        if self.accepts_kwargs:
            warnings.warn(
                f"tool {self.name!r} declares **kwargs to receive runtime values; read them from "
                "an injected FunctionInvocationContext (ctx.kwargs) instead",
                DeprecationWarning,
                stacklevel=_caller_level(),
            )

    # -- definition --------------------------------------------------------------------------

    def _build(self, schema: type | Mapping[str, Any] | None) -> None:
        ctx_type = _context_type()
        hints = _type_hints(self.func)
        fields: list[tuple[str, Any, Any]] = []
        contexts: list[str] = []
        params = list(inspect.signature(self.func).parameters.values())
        if params and params[0].name in ("self", "cls") and inspect.isfunction(self.func):
            params = params[1:]  # a method decorated in its class body; bound per instance
        for param in params:
            if param.kind is param.VAR_KEYWORD:
                self.accepts_kwargs = True
                continue
            if param.kind is param.VAR_POSITIONAL:
                continue
            annotation = hints.get(param.name, param.annotation)
            if _mentions_context(annotation, ctx_type) or (
                schema is not None and param.name == "ctx" and annotation is inspect.Parameter.empty
            ):
                contexts.append(param.name)
                continue
            ftype, fdefault = _field_type(annotation)
            default = param.default if param.default is not param.empty else fdefault
            fields.append((param.name, ftype, default))
        if len(contexts) > 1:
            raise ToolDefinitionError(
                f"tool {self.name!r} has more than one context parameter: {', '.join(contexts)}"
            )
        self.context_param = contexts[0] if contexts else None
        if schema is None:
            self._from_fields(fields)
        else:
            self._from_schema(schema)

    def _from_fields(self, fields: list[tuple[str, Any, Any]]) -> None:
        spec = [
            (name, ftype) if default is inspect.Parameter.empty else (name, ftype, default)
            for name, ftype, default in fields
        ]
        try:
            self._args_type = msgspec.defstruct(f"{self.name}_arguments", spec, kw_only=True)
            self.parameters = _inline_schema(self._args_type)
        except (TypeError, ValueError) as exc:
            raise ToolDefinitionError(f"tool {self.name!r}: {exc}") from exc
        self._fields = tuple(name for name, _, _ in fields)

    def _from_schema(self, schema: type | Mapping[str, Any]) -> None:
        if isinstance(schema, Mapping):
            self.parameters = dict(schema)
        elif isinstance(schema, type) and issubclass(schema, msgspec.Struct):
            self._args_type = schema
            self._fields = schema.__struct_fields__
            self.parameters = _inline_schema(schema)
        elif hasattr(schema, "model_json_schema") and hasattr(schema, "model_validate"):
            self._pydantic = schema
            self._fields = tuple(schema.model_fields)  # type: ignore[attr-defined]
            self.parameters = schema.model_json_schema()
            self.parameters.pop("title", None)
        else:
            raise ToolDefinitionError(
                f"tool {self.name!r}: schema must be a JSON schema dict, a msgspec Struct type "
                f"or a pydantic model, not {schema!r}"
            )

    # -- validation --------------------------------------------------------------------------

    def parse_arguments(self, raw: str | Mapping[str, Any] | None) -> dict[str, Any]:
        """The model's raw argument text as a JSON object (not yet validated)."""
        if raw is None or raw == "":
            return {}
        if isinstance(raw, Mapping):
            return dict(raw)
        try:
            value = msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            raise ArgumentsError(f"arguments are not valid JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise ArgumentsError(f"arguments must be a JSON object, got {type(value).__name__}")
        return value

    def arguments_from(self, raw: str | Mapping[str, Any] | None) -> dict[str, Any]:
        """Parse and validate the model's raw arguments in one step (what a run does)."""
        if self._args_type is None or not isinstance(raw, str) or not raw:
            return self.validate(self.parse_arguments(raw))
        try:
            obj = msgspec.json.decode(raw, type=self._args_type, strict=False)
        except msgspec.ValidationError as exc:
            if raw.lstrip()[:1] != "{":
                raise ArgumentsError(f"arguments must be a JSON object: {exc}") from exc
            raise ArgumentsError(str(exc)) from exc
        except msgspec.DecodeError as exc:
            raise ArgumentsError(f"arguments are not valid JSON: {exc}") from exc
        return {name: getattr(obj, name) for name in self._fields}

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
                raise ArgumentsError(str(exc)) from exc
            return {name: getattr(model, name) for name in self._fields}
        missing = [k for k in self.parameters.get("required", ()) if k not in arguments]
        if missing:
            raise ArgumentsError(f"missing required arguments: {', '.join(missing)}")
        return dict(arguments)

    # -- calling -----------------------------------------------------------------------------

    def bind_call(self, arguments: Mapping[str, Any], context: Any) -> Callable[[], Any]:
        """A zero-argument callable that runs the tool with ``arguments`` and the context."""
        kwargs = dict(arguments)
        if self.context_param is not None:
            kwargs[self.context_param] = context
        if self.accepts_kwargs and context is not None:
            for key, value in context.kwargs.items():
                kwargs.setdefault(key, value)
        return functools.partial(self.func, **kwargs)

    async def invoke(self, arguments: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        """Call the tool directly, outside any run: validated, no middleware, ``ctx.tools`` None."""
        from .context import FunctionInvocationContext

        values = self.validate({**(arguments or {}), **kwargs})
        context = FunctionInvocationContext(function=self, arguments=values)
        result = self.bind_call(values, context)()
        if inspect.isawaitable(result):
            result = await result
        return result

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
            )
            cache[self.name] = bound
        return typing.cast(FunctionTool, bound)

    def _explicit_schema(self) -> type | Mapping[str, Any] | None:
        if self._pydantic is not None:
            return typing.cast(type, self._pydantic)
        if self._args_type is not None and not self._args_type.__name__.endswith("_arguments"):
            return self._args_type
        return None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"FunctionTool(name={self.name!r})"


@overload
def tool(func: F, /) -> FunctionTool: ...
@overload
def tool(
    func: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    approval_mode: ApprovalMode = "never_require",
    schema: type | Mapping[str, Any] | None = None,
) -> Callable[[F], FunctionTool]: ...
def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    approval_mode: ApprovalMode = "never_require",
    schema: type | Mapping[str, Any] | None = None,
) -> FunctionTool | Callable[[F], FunctionTool]:
    """Make a ``FunctionTool`` from a function: ``@tool`` or ``@tool(name=..., ...)``."""

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(f, name=name, description=description, approval_mode=approval_mode, schema=schema)

    return wrap(func) if func is not None else wrap


def normalize_tools(items: Any) -> list[FunctionTool]:
    """A tool, a callable, or a sequence of them, as a new list of ``FunctionTool``."""
    if items is None:
        return []
    if isinstance(items, FunctionTool) or (callable(items) and not isinstance(items, Sequence)):
        items = [items]
    out: list[FunctionTool] = []
    for item in items:
        if isinstance(item, FunctionTool):
            out.append(item)
        elif hasattr(item, "as_function_tool"):
            out.append(item.as_function_tool())
        elif callable(item):
            out.append(FunctionTool(item))
        else:
            raise ToolDefinitionError(f"not a tool or a callable: {item!r}")
    return out


def is_awaitable(value: Any) -> typing.TypeGuard[Awaitable[Any]]:
    return inspect.isawaitable(value)

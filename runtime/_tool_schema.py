"""A tool's arguments read from its function's signature, or from an explicit schema.

Each parameter becomes a field of a msgspec Struct built for the tool; the Struct gives both the
JSON schema the model sees and a fast validator for the arguments it sends. Descriptions come
from ``Annotated[T, "text"]``, ``msgspec.Meta`` or, when pydantic is installed, ``pydantic.Field``.
A parameter annotated ``FunctionInvocationContext`` (under any name, also inside
``Optional``/``Annotated``) is injected by the run and never shown to the model; with an explicit
``schema=``, an unannotated parameter named ``ctx`` is injected too.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

import msgspec

from .context import FunctionInvocationContext
from .errors import ToolDefinitionError

__all__ = ("ToolArguments", "read_arguments")


@dataclass(frozen=True, slots=True)
class ToolArguments:
    """What a tool takes: the model's arguments, how to check them, and what the run injects."""

    parameters: dict[str, Any]
    """The JSON schema the model sees."""
    fields: tuple[str, ...] = ()
    """The argument names a validated call passes, in order."""
    struct: type[msgspec.Struct] | None = None
    pydantic: Any = None
    context_param: str | None = None
    accepts_kwargs: bool = False


def read_arguments(
    func: Callable[..., Any], name: str, schema: type | Mapping[str, Any] | None
) -> ToolArguments:
    """The arguments of the tool ``name`` that calls ``func``; ``schema`` replaces the signature's."""
    fields, contexts, accepts_kwargs = _parameters(func, explicit=schema is not None)
    if len(contexts) > 1:
        raise ToolDefinitionError(f"tool {name!r} has more than one context parameter: {', '.join(contexts)}")
    shape = _from_fields(name, fields) if schema is None else _from_schema(name, schema)
    context_param = contexts[0] if contexts else None
    return ToolArguments(
        shape.parameters, shape.fields, shape.struct, shape.pydantic, context_param, accepts_kwargs
    )


_Field = tuple[str, Any, Any]


def _parameters(func: Callable[..., Any], *, explicit: bool) -> tuple[list[_Field], list[str], bool]:
    """The model's fields, the context parameters and whether ``func`` takes ``**kwargs``."""
    hints = _type_hints(func)
    fields: list[_Field] = []
    contexts: list[str] = []
    accepts_kwargs = False
    params = list(inspect.signature(func).parameters.values())
    if params and params[0].name in ("self", "cls") and inspect.isfunction(func):
        params = params[1:]  # a method decorated in its class body; bound per instance
    for param in params:
        if param.kind is param.VAR_KEYWORD:
            accepts_kwargs = True
            continue
        if param.kind is param.VAR_POSITIONAL:
            continue
        annotation = hints.get(param.name, param.annotation)
        if _mentions_context(annotation) or (
            explicit and param.name == "ctx" and annotation is inspect.Parameter.empty
        ):
            contexts.append(param.name)
            continue
        ftype, fdefault = _field_type(annotation)
        default = param.default if param.default is not param.empty else fdefault
        fields.append((param.name, ftype, default))
    return fields, contexts, accepts_kwargs


def _from_fields(name: str, fields: list[_Field]) -> ToolArguments:
    spec = [
        (field, ftype) if default is inspect.Parameter.empty else (field, ftype, default)
        for field, ftype, default in fields
    ]
    try:
        struct = msgspec.defstruct(f"{name}_arguments", spec, kw_only=True)
        parameters = _inline_schema(struct)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"tool {name!r}: {exc}") from exc
    return ToolArguments(parameters, tuple(field for field, _, _ in fields), struct)


def _from_schema(name: str, schema: type | Mapping[str, Any]) -> ToolArguments:
    if isinstance(schema, Mapping):
        return ToolArguments(dict(schema))
    if isinstance(schema, type) and issubclass(schema, msgspec.Struct):
        return ToolArguments(_inline_schema(schema), schema.__struct_fields__, schema)
    if hasattr(schema, "model_json_schema") and hasattr(schema, "model_validate"):
        parameters = schema.model_json_schema()
        parameters.pop("title", None)
        return ToolArguments(parameters, tuple(schema.model_fields), pydantic=schema)  # type: ignore[attr-defined]
    raise ToolDefinitionError(
        f"tool {name!r}: schema must be a JSON schema dict, a msgspec Struct type "
        f"or a pydantic model, not {schema!r}"
    )


_CONTEXT_NAME = re.compile(r"\bFunctionInvocationContext\b")


def _mentions_context(annotation: Any) -> bool:
    if annotation is FunctionInvocationContext:
        return True
    if isinstance(annotation, str):  # an annotation that could not be evaluated
        return _CONTEXT_NAME.search(annotation) is not None
    origin = get_origin(annotation)
    if origin is Annotated:
        return _mentions_context(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return any(_mentions_context(arg) for arg in get_args(annotation))
    return False


def _meta_from_pydantic(field: Any) -> tuple[list[msgspec.Meta], Any]:
    """msgspec constraints and the default from a ``pydantic.Field(...)``."""
    default: Any = inspect.Parameter.empty
    if getattr(field, "default", None) is not None and not _is_undefined(field.default):
        default = field.default
    keys = ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern", "multiple_of")
    constraints: dict[str, Any] = {}
    for item in getattr(field, "metadata", ()):
        for key in keys:
            if getattr(item, key, None) is not None:
                constraints[key] = getattr(item, key)
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
    local = {"FunctionInvocationContext": FunctionInvocationContext}
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

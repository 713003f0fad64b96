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

import docstring_parser
import msgspec

from .context import FunctionInvocationContext
from .errors import ToolDefinitionError

__all__ = ("ToolArguments", "describe_parameters", "read_arguments", "read_docstring")


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


def read_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """A tool's description and its parameters' descriptions, from a Google, NumPy or Sphinx
    style docstring; a docstring without a parameter section is the description as it is."""
    if not doc:
        return "", {}
    try:
        parsed = docstring_parser.parse(doc)
    except docstring_parser.ParseError:
        return doc, {}
    documented = {p.arg_name: p.description for p in parsed.params if p.description}
    if not documented:
        return doc, {}
    parts = [part for part in (parsed.short_description, parsed.long_description) if part]
    return "\n\n".join(parts), documented


def describe_parameters(parameters: dict[str, Any], documented: Mapping[str, str]) -> None:
    """Give each property the docstring's description where its schema has none."""
    properties = parameters.get("properties")
    if not documented or not isinstance(properties, dict):
        return
    for name, text in documented.items():
        prop = properties.get(name)
        if isinstance(prop, dict) and "description" not in prop:
            properties[name] = {**prop, "description": text}


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
    if any(_mentions_pydantic(ftype) for _, ftype, _ in fields):
        return _from_pydantic_fields(name, fields)
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


def _from_pydantic_fields(name: str, fields: list[_Field]) -> ToolArguments:
    """Parameters typed with pydantic models: pydantic builds the schema and validates, and the
    tool receives model instances."""
    import pydantic

    definitions: dict[str, Any] = {}
    for field, ftype, default in fields:
        value = ... if default is inspect.Parameter.empty else default
        definitions[field] = (_for_pydantic(ftype), value)
    try:
        model = pydantic.create_model(f"{name}_arguments", **definitions)
        parameters = _pydantic_schema(model)
    except (TypeError, ValueError, pydantic.PydanticUserError) as exc:
        raise ToolDefinitionError(f"tool {name!r}: {exc}") from exc
    return ToolArguments(parameters, tuple(field for field, _, _ in fields), pydantic=model)


def _pydantic_schema(model: Any) -> dict[str, Any]:
    parameters: dict[str, Any] = model.model_json_schema()
    parameters.pop("title", None)
    parameters.setdefault("properties", {})
    return parameters


def _is_pydantic_model(value: Any) -> bool:
    return isinstance(value, type) and all(hasattr(value, n) for n in ("model_json_schema", "model_validate"))


def _mentions_pydantic(annotation: Any) -> bool:
    """Whether a pydantic model appears anywhere in ``annotation`` (``list[Order]``...)."""
    if _is_pydantic_model(annotation):
        return True
    return any(_mentions_pydantic(arg) for arg in get_args(annotation) if not isinstance(arg, str | int))


def _for_pydantic(annotation: Any) -> Any:
    """``annotation`` as pydantic reads it: descriptions and ``msgspec.Meta`` constraints as
    ``pydantic.Field`` arguments."""
    if get_origin(annotation) is not Annotated:
        return annotation
    import pydantic

    base, *extras = get_args(annotation)
    converted: list[Any] = []
    for extra in extras:
        if isinstance(extra, str):
            converted.append(pydantic.Field(description=extra))
        elif isinstance(extra, msgspec.Meta):
            keys = ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern", "multiple_of")
            found = {k: getattr(extra, k) for k in (*keys, "description") if getattr(extra, k) is not None}
            converted.append(pydantic.Field(**found))
        else:
            converted.append(extra)
    return Annotated[(base, *converted)]


def _from_schema(name: str, schema: type | Mapping[str, Any]) -> ToolArguments:
    if isinstance(schema, Mapping):
        return ToolArguments(dict(schema))
    if isinstance(schema, type) and issubclass(schema, msgspec.Struct):
        return ToolArguments(_inline_schema(schema), schema.__struct_fields__, schema)
    if _is_pydantic_model(schema):
        return ToolArguments(_pydantic_schema(schema), tuple(schema.model_fields), pydantic=schema)  # type: ignore[attr-defined]
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

"""Structured output: the JSON schema ``options["response_format"]`` asks the model for, and its
answer read back as that type.

``response_format`` is a pydantic model, a type msgspec knows (a dataclass, a ``msgspec.Struct``, a
``TypedDict``, an attrs class), a JSON schema, or one of OpenAI's own forms
(``{"type": "json_schema", "json_schema": {...}}``, ``{"type": "json_object"}``). ``ResponseSchema``
is what a client sends; ``schema_option`` is how a run records it (the JSON form, so a log never
holds a class); ``parse_value`` reads an answer as the type (``AgentResponse.value``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import msgspec

from .core.depth import MAX_DEPTH, too_deep
from .errors import OptionsError, StructuredOutputError

__all__ = ("ResponseSchema", "parse_value", "response_schema", "schema_option")


class ResponseSchema(msgspec.Struct, frozen=True, kw_only=True):
    """What a client asks the model for: JSON matching ``schema`` (``None``: any JSON object)."""

    name: str = "response"
    schema: dict[str, Any] | None = None
    strict: bool = False


def response_schema(response_format: Any) -> ResponseSchema | None:
    """The schema ``response_format`` asks for (None for none); ``OptionsError`` for a value
    that names no schema."""
    if response_format is None:
        return None
    if isinstance(response_format, Mapping):
        return _from_mapping(response_format)
    if isinstance(response_format, type):
        if _is_pydantic(response_format):
            schema: dict[str, Any] = response_format.model_json_schema()  # type: ignore[attr-defined]
        else:
            try:
                schema = _inline(msgspec.json.schema(response_format))
            except (TypeError, ValueError) as exc:
                raise OptionsError(f"response_format {response_format!r} has no JSON schema: {exc}") from exc
        strict, ok = _strict(schema)
        return ResponseSchema(name=response_format.__name__, schema=strict if ok else schema, strict=ok)
    raise OptionsError(
        "response_format must be a pydantic model, a dataclass or other type msgspec knows, or a "
        f"JSON schema mapping, not {response_format!r}"
    )


def schema_option(response_format: Any) -> Any:
    """``response_format`` as a run records it: OpenAI's ``json_schema`` form of its schema."""
    found = response_schema(response_format)
    if found is None:
        return None
    if found.schema is None:
        return {"type": "json_object"}
    section = {"name": found.name, "schema": found.schema, "strict": found.strict}
    return {"type": "json_schema", "json_schema": section}


def parse_value(response_format: Any, text: str) -> Any:
    """``text`` read as ``response_format``: a model or typed instance, else the decoded JSON;
    None for an empty answer (no value, as in the reference framework);
    ``StructuredOutputError`` when it does not match."""
    if response_format is None or not text.strip():
        return None
    if too_deep(text.encode("utf-8", "surrogatepass")):  # what no log holds, whatever the recursion limit
        raise StructuredOutputError(f"the answer nests deeper than {MAX_DEPTH} levels")
    try:
        if isinstance(response_format, type) and _is_pydantic(response_format):
            return response_format.model_validate_json(text)  # type: ignore[attr-defined]
        if isinstance(response_format, type):
            return msgspec.json.decode(text, type=response_format)
        return msgspec.json.decode(text)
    # pydantic's ValidationError is a ValueError; text nested past the recursion limit is no value
    except (ValueError, msgspec.DecodeError, RecursionError) as exc:
        name = getattr(response_format, "__name__", "the response format")
        raise StructuredOutputError(f"the answer does not parse as {name}: {exc}") from exc


# -- helpers ----------------------------------------------------------------------------------


def _is_pydantic(value: type) -> bool:
    return hasattr(value, "model_json_schema") and hasattr(value, "model_validate_json")


def _from_mapping(value: Mapping[str, Any]) -> ResponseSchema:
    kind = value.get("type")
    if kind == "json_object":
        return ResponseSchema()
    if kind == "json_schema":
        section = value.get("json_schema", value)
        if not isinstance(section, Mapping) or not isinstance(section.get("schema"), Mapping):
            raise OptionsError("a json_schema response_format needs a 'schema' mapping")
        name = str(section.get("name") or section["schema"].get("title") or "response")
        return ResponseSchema(name=name, schema=dict(section["schema"]), strict=bool(section.get("strict")))
    schema = dict(value)  # a JSON schema itself
    name = str(schema.pop("title", None) or "response")
    strict, ok = _strict(schema)
    return ResponseSchema(name=name, schema=strict if ok else schema, strict=ok)


def _inline(schema: dict[str, Any]) -> dict[str, Any]:
    """msgspec's schema of a named type refers to it in ``$defs``: bring it to the top."""
    ref = schema.get("$ref")
    defs: dict[str, Any] = dict(schema.get("$defs", {}))
    if not isinstance(ref, str) or not ref.startswith("#/$defs/"):
        return schema
    main = dict(defs.pop(ref.removeprefix("#/$defs/")))
    if defs:
        main["$defs"] = defs
    return main


def _strict(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The schema in OpenAI's strict form (every object closed, every property required), and
    whether it has one: an object with open-ended properties (a ``dict``) has none."""
    result = copy.deepcopy(schema)
    ok = True

    def visit(node: Any) -> None:
        nonlocal ok
        if isinstance(node, list):
            for item in node:
                visit(item)
            return
        if not isinstance(node, dict):
            return
        if node.get("type") == "object":
            extra = node.get("additionalProperties")
            if extra not in (None, False) or "properties" not in node:
                ok = False
            node["additionalProperties"] = False
            node["required"] = list(node.get("properties", {}))
        if "default" in node and node["default"] is None:
            del node["default"]
        for key, child in node.items():
            if key != "default":
                visit(child)

    visit(result)
    return result, ok

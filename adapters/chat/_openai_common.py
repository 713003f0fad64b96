"""What the Chat Completions and Responses wire formats share: options, tools, decoding.

Everything here is pure: agentledger values in, JSON-ready dicts out, or wire bytes in and typed
values out. The HTTP side lives in ``openai.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

import msgspec

from agentledger.clients import ChatOptions, ChatResponseUpdate
from agentledger.core.depth import MAX_DEPTH, too_deep
from agentledger.core.events import ToolSpec
from agentledger.core.messages import Content, Message, Usage, result_text

from ._openai_errors import MalformedResponseError

__all__ = (
    "PendingCall",
    "TokenCount",
    "UpdateMaker",
    "copy_options",
    "decode",
    "function_result_text",
    "parameters_schema",
    "text_parts",
    "tool_fields",
    "tool_mode",
)

T = TypeVar("T")

TokenCount = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
"""A token count as a server may report it: anything else is a malformed answer, not a usage."""

_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


def decode(data: bytes | str, type_: type[T], what: str) -> T:
    """Decode ``data`` as ``type_``; anything else is a ``MalformedResponseError`` naming ``what``."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if too_deep(raw):  # whatever the interpreter's recursion limit, no answer nests like that
        raise MalformedResponseError(f"{what} is nested deeper than {MAX_DEPTH} levels")
    try:
        return msgspec.json.decode(raw, type=type_)
    except msgspec.ValidationError as exc:  # (a DecodeError too: it must come first)
        raise MalformedResponseError(f"{what} does not have the expected shape: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise MalformedResponseError(f"{what} is not valid JSON: {exc}") from exc
    except RecursionError as exc:  # nested past the interpreter's limit: no answer looks like that
        raise MalformedResponseError(f"{what} is nested too deep to be an answer") from exc


def copy_options(body: dict[str, Any], options: ChatOptions, names: Mapping[str, str]) -> None:
    """Copy the options the wire format supports into ``body``, renamed as ``names`` says."""
    values: Mapping[str, Any] = options
    for ours, theirs in names.items():
        value = values.get(ours)
        if value is not None:
            body[theirs] = value


def tool_mode(value: Any) -> tuple[str | None, str | None, list[str]]:
    """``tool_choice`` as (mode, required function name, allowed tool names)."""
    if value is None or isinstance(value, str):
        return value, None, []
    if not isinstance(value, Mapping):
        raise TypeError(f"tool_choice must be a str or a ToolMode dict, not {type(value).__name__}")
    return value.get("mode"), value.get("required_function_name"), list(value.get("allowed_tools") or ())


def tool_fields(
    options: ChatOptions,
    render_tool: Callable[[ToolSpec], dict[str, Any]],
    render_choice: Callable[[Any], Any],
) -> dict[str, Any]:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls``, or nothing when no tool is offered."""
    specs: Sequence[ToolSpec] = options.get("tools") or ()
    if not specs:
        return {}
    fields: dict[str, Any] = {"tools": [render_tool(spec) for spec in specs]}
    choice = render_choice(options.get("tool_choice"))
    if choice is not None:
        fields["tool_choice"] = choice
    parallel = options.get("allow_multiple_tool_calls")
    if parallel is not None:
        fields["parallel_tool_calls"] = bool(parallel)
    return fields


def parameters_schema(spec: ToolSpec) -> dict[str, Any]:
    """The tool's JSON schema; an empty one becomes an object without properties."""
    return spec.parameters or dict(_EMPTY_SCHEMA)


def text_parts(message: Message) -> list[str]:
    """The message's text contents, in order."""
    return [c.text for c in message.contents if c.type == "text" and c.text is not None]


def function_result_text(content: Content) -> str:
    """What the model reads for a function result: its text, or the error it carries."""
    if content.result is not None:
        return result_text(content.result)
    if content.exception is not None:
        return f"Error: {content.exception}"
    return ""


@dataclass
class PendingCall:
    """A function call being assembled from a stream's deltas."""

    call_id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    def content(self) -> Content:
        return Content.from_function_call(self.call_id, self.name, arguments="".join(self.arguments))


@dataclass
class UpdateMaker:
    """Stamps every update of one stream with the response id and model seen so far."""

    model: str | None
    response_id: str | None = None

    def seen(self, response_id: str | None, model: str | None) -> None:
        self.response_id = response_id or self.response_id
        self.model = model or self.model

    def text(self, text: str) -> ChatResponseUpdate:
        return self(contents=(Content.from_text(text),))

    def __call__(
        self,
        *,
        contents: tuple[Content, ...] = (),
        usage: Usage | None = None,
        finish_reason: str | None = None,
    ) -> ChatResponseUpdate:
        return ChatResponseUpdate(
            contents=contents,
            response_id=self.response_id,
            model=self.model,
            usage=usage,
            finish_reason=finish_reason,
        )

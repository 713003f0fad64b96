"""Span attributes built from events; content as GenAI JSON and OpenInference's flat messages.

Content is built only when it was asked for. The GenAI conventions carry messages as one JSON
value (``gen_ai.input.messages``: a list of ``{"role", "parts": [...]}``); OpenInference
flattens them into indexed attributes (``llm.input_messages.0.message.role``), one message per
tool result.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import msgspec

from agentledger.core.depth import MAX_DEPTH, too_deep
from agentledger.core.events import Event, ModelResponded, RunStarted, SessionUpdated, ToolSpec
from agentledger.core.messages import Content, Message, Usage, result_text

from ._otlp_model import Attributes

__all__ = (
    "dumps",
    "fact_attributes",
    "genai_instructions",
    "genai_messages",
    "input_text",
    "openinference_messages",
    "response_attributes",
    "result_attributes",
    "scalar_options",
    "session_attributes",
    "snake",
    "tool_attributes",
    "usage_attributes",
)

_encoder = msgspec.json.Encoder(enc_hook=str)

_REQUEST_OPTIONS = {
    "model": "gen_ai.request.model",
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "max_tokens": "gen_ai.request.max_tokens",
    "seed": "gen_ai.request.seed",
}


def dumps(value: Any) -> str:
    """Compact JSON; values JSON cannot hold become their ``str``."""
    return _encoder.encode(value).decode()


def _arguments(raw: str | None) -> Any:
    """A call's argument text as JSON, or as the text itself when it is not JSON or nests deeper
    than a log may hold (the model's text is recorded as it came; decoding it would recurse)."""
    if raw is None:
        return {}
    if too_deep(raw.encode("utf-8", "surrogatepass"), MAX_DEPTH - 8):  # room for the message around it
        return raw
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return raw


def _part(content: Content) -> dict[str, Any]:
    if content.type == "text":
        return {"type": "text", "content": content.text or ""}
    if content.type == "function_call":
        return {
            "type": "tool_call",
            "id": content.call_id,
            "name": content.name,
            "arguments": _arguments(content.arguments),
        }
    if content.type == "function_result":
        response = content.exception if content.exception is not None else content.result
        return {"type": "tool_call_response", "id": content.call_id, "response": response}
    return {"type": content.type, "id": content.call_id}


def genai_messages(messages: Sequence[Message], finish_reason: str | None = None) -> str:
    """Messages in the GenAI JSON shape; output messages carry the finish reason."""
    out: list[dict[str, Any]] = []
    for message in messages:
        item: dict[str, Any] = {"role": message.role, "parts": [_part(c) for c in message.contents]}
        if message.author_name:
            item["name"] = message.author_name
        if finish_reason is not None:
            item["finish_reason"] = finish_reason
        out.append(item)
    return dumps(out)


def genai_instructions(instructions: str) -> str:
    """``gen_ai.system_instructions``: the instructions as one text part."""
    return dumps([{"type": "text", "content": instructions}])


def _flattened(messages: Sequence[Message]) -> Iterator[tuple[str, str, Sequence[Content]]]:
    """(role, text, calls) per message; each function result becomes a tool message of its own."""
    for message in messages:
        results = [c for c in message.contents if c.type == "function_result"]
        for result in results:
            yield "tool", result.call_id or "", (result,)
        if not results:
            yield message.role, message.text, message.function_calls


def openinference_messages(prefix: str, messages: Sequence[Message]) -> Attributes:
    """``{prefix}.{i}.message.role`` / ``.content`` / ``.tool_calls.{j}.tool_call...``."""
    attributes: Attributes = {}
    for index, (role, text, contents) in enumerate(_flattened(messages)):
        base = f"{prefix}.{index}.message"
        attributes[f"{base}.role"] = role
        if role == "tool":
            result = contents[0]
            attributes[f"{base}.tool_call_id"] = text
            value = result.exception if result.exception is not None else result.result
            attributes[f"{base}.content"] = result_text(value)
            continue
        if text:
            attributes[f"{base}.content"] = text
        for number, call in enumerate(contents):
            call_base = f"{base}.tool_calls.{number}.tool_call"
            attributes[f"{call_base}.id"] = call.call_id or ""
            attributes[f"{call_base}.function.name"] = call.name or ""
            attributes[f"{call_base}.function.arguments"] = call.arguments or "{}"
    return attributes


def scalar_options(options: Mapping[str, Any]) -> Attributes:
    """The request settings the GenAI conventions name (model, temperature, ...), when present."""
    attributes: Attributes = {}
    for option, name in _REQUEST_OPTIONS.items():
        value = options.get(option)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            attributes[name] = value
    stop = options.get("stop")
    if isinstance(stop, str):
        attributes["gen_ai.request.stop_sequences"] = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        attributes["gen_ai.request.stop_sequences"] = tuple(stop)
    return attributes


def tool_attributes(name: str, call_id: str, spec: ToolSpec | None, executed: bool) -> Attributes:
    """An ``execute_tool`` span's attributes when it opens."""
    attributes: Attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.type": "function",
        "openinference.span.kind": "TOOL",
        "tool.name": name,
        "tool.id": call_id,
        "agentledger.tool.executed": executed,
    }
    if spec is not None and spec.description:
        attributes["gen_ai.tool.description"] = attributes["tool.description"] = spec.description
    if spec is not None and spec.parameters:
        attributes["tool.parameters"] = dumps(spec.parameters)
    return attributes


def response_attributes(event: ModelResponded, content: bool) -> Attributes:
    """A ``chat`` span's attributes when the model answered."""
    attributes = usage_attributes(event.usage)
    if event.model is not None:
        attributes["gen_ai.response.model"] = attributes["llm.model_name"] = event.model
    if event.response_id is not None:
        attributes["gen_ai.response.id"] = event.response_id
    if event.finish_reason is not None:
        attributes["gen_ai.response.finish_reasons"] = (event.finish_reason,)
    if content:
        attributes["gen_ai.output.messages"] = genai_messages((event.message,), event.finish_reason)
        attributes.update(openinference_messages("llm.output_messages", (event.message,)))
    return attributes


def session_attributes(event: SessionUpdated, content: bool) -> Attributes:
    """A session change: which keys, set or deleted; the values only as content."""
    attributes: Attributes = {
        "agentledger.session.id": event.session_id,
        "agentledger.by": event.by,
        "agentledger.session.keys": tuple(change.key for change in event.changes),
        "agentledger.session.ops": tuple(change.op for change in event.changes),
    }
    if event.origin_run_id is not None and event.origin_seq is not None:
        attributes["agentledger.origin_run_id"] = event.origin_run_id
        attributes["agentledger.origin_seq"] = event.origin_seq
    if content:
        attributes["agentledger.session.changes"] = dumps(event.changes)
    return attributes


def fact_attributes(event: Event) -> Attributes:
    """An event's text, number, flag and name-list fields as ``agentledger.{field}``.

    Messages, dicts and other structures are left out, so no content slips through.
    """
    attributes: Attributes = {}
    for field in event.__struct_fields__:
        value = getattr(event, field)
        if field in ("run_id", "seq", "at"):
            continue
        strings = isinstance(value, tuple) and all(isinstance(item, str) for item in value)
        if isinstance(value, str | int | bool) or strings:
            attributes[f"agentledger.{field}"] = value
    return attributes


def usage_attributes(usage: Usage | None) -> Attributes:
    """Token counts, in both vocabularies."""
    if usage is None:
        return {}
    attributes: Attributes = {
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "llm.token_count.prompt": usage.input_tokens,
        "llm.token_count.completion": usage.output_tokens,
        "llm.token_count.total": usage.total_tokens or usage.input_tokens + usage.output_tokens,
    }
    for count, names in (
        (usage.cache_read_tokens, _CACHE_READ),
        (usage.cache_write_tokens, _CACHE_WRITE),
        (usage.reasoning_tokens, _REASONING),
    ):
        if count is not None:  # a count the provider did not report is left out, not zero
            attributes.update(dict.fromkeys(names, count))
    return attributes


_CACHE_READ = ("gen_ai.usage.cache_read.input_tokens", "llm.token_count.prompt_details.cache_read")
_CACHE_WRITE = ("gen_ai.usage.cache_creation.input_tokens", "llm.token_count.prompt_details.cache_write")
_REASONING = ("gen_ai.usage.reasoning.output_tokens", "llm.token_count.completion_details.reasoning")


def result_attributes(value: Any) -> Attributes:
    """A tool result as content (what the model sees)."""
    text = result_text(value)
    mime = "text/plain" if isinstance(value, str) else "application/json"
    return {"gen_ai.tool.call.result": text, "output.value": text, "output.mime_type": mime}


def input_text(event: RunStarted) -> str:
    """What the run was asked: the text of a single message, else the messages as JSON."""
    if len(event.messages) == 1 and event.messages[0].text:
        return event.messages[0].text
    return genai_messages(event.messages)


def snake(name: str) -> str:
    """``ToolChoiceReset`` -> ``tool_choice_reset``."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")

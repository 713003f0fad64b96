"""The Anthropic Messages wire format (``POST /v1/messages``), without any IO.

``messages_request`` renders agentledger messages and options as a request body;
``messages_response`` reads a whole message; ``MessagesStream`` reads a streamed one, one
server-sent event at a time.

Requests: instructions and ``system`` messages become the ``system`` field; ``tool`` messages
(function results) become ``tool_result`` blocks of a user turn; consecutive turns of one role
are joined, as the API wants turns to alternate. A call's arguments go back as the ``input``
object they encode (``{}`` when they are not a JSON object). ``max_tokens`` is required by the
API: it is 4096 unless the options say otherwise.

Tool choice: ``auto`` / ``required`` / ``none`` become ``auto`` / ``any`` / ``none``; a required
function name becomes ``{"type": "tool", "name": ...}``; ``allowed_tools`` (which the API cannot
say) narrows the tools sent to those named; ``allow_multiple_tool_calls=False`` becomes
``disable_parallel_tool_use``.

Structured output goes through a tool: ``response_format`` adds a tool named after the schema
whose input schema is the wanted schema. With no other tool offered the model is made to call
it; with other tools it is offered beside them. Its input is the answer's text (the JSON the
model wrote), and an answer that only called it finishes with ``stop``. This works on every
server that speaks the format, which a native JSON output mode does not.

Answers: ``text`` blocks are text, ``tool_use`` blocks are function calls whose arguments are
the ``input`` JSON exactly as the server wrote it (in a stream: the ``input_json_delta`` pieces
joined); ``thinking`` blocks are left out. Stop reasons map to ours: ``end_turn`` and
``stop_sequence`` to ``stop``, ``tool_use`` to ``tool_calls``, ``max_tokens`` and
``model_context_window_exceeded`` to ``length``, ``refusal`` to ``content_filter``; another is
kept as it is. Usage: ``input_tokens`` is every input token (the API's uncached count plus
``cache_read_input_tokens`` and ``cache_creation_input_tokens``, which are also reported as
``cache_read_tokens`` and ``cache_write_tokens``). A stream reports the input side in
``message_start`` and the output count in ``message_delta`` (whose counts, when present, are
the final ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from agentledger.clients import ChatOptions, ChatResponse, ChatResponseUpdate
from agentledger.core.events import ToolSpec
from agentledger.core.messages import Content, Message, Usage
from agentledger.structured import ResponseSchema, response_schema

from ._openai_common import (
    TokenCount,
    UpdateMaker,
    decode,
    function_result_text,
    parameters_schema,
    text_parts,
    tool_mode,
)
from ._openai_errors import MalformedResponseError, ResponseFailedError, TruncatedStreamError
from ._sse import ServerSentEvent

__all__ = (
    "DEFAULT_MAX_TOKENS",
    "MessagesStream",
    "finish_reason",
    "messages_request",
    "messages_response",
    "output_tool_name",
)

DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` when the options give none (the API requires one)."""

_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}

_OPTIONS = {"temperature": "temperature", "top_p": "top_p"}


def finish_reason(stop_reason: str | None, only_output_tool: bool = False) -> str | None:
    """Our finish reason for the API's ``stop_reason``."""
    if stop_reason is None:
        return None
    if stop_reason == "tool_use" and only_output_tool:
        return "stop"
    return _FINISH.get(stop_reason, stop_reason)


def output_tool_name(options: ChatOptions) -> str | None:
    """The tool that carries the structured answer, when ``response_format`` asks for one."""
    wanted = response_schema(options.get("response_format"))
    return None if wanted is None else wanted.name


# -- requests ---------------------------------------------------------------------------------


def messages_request(
    messages: Sequence[Message], options: ChatOptions, *, model: str, stream: bool
) -> dict[str, Any]:
    """The request body for one model call."""
    system, turns = _turns(messages, options.get("instructions"))
    body: dict[str, Any] = {
        "model": options.get("model") or model,
        "max_tokens": options.get("max_tokens") or DEFAULT_MAX_TOKENS,
        "messages": turns,
    }
    if system:
        body["system"] = system
    for ours, theirs in _OPTIONS.items():
        value = options.get(ours)
        if value is not None:
            body[theirs] = value
    stop = options.get("stop")
    if stop:
        body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    user = options.get("user")
    if user:
        body["metadata"] = {"user_id": user}
    body.update(_tool_fields(options, response_schema(options.get("response_format"))))
    if stream:
        body["stream"] = True
    return body


def _tool_fields(options: ChatOptions, wanted: ResponseSchema | None) -> dict[str, Any]:
    specs: Sequence[ToolSpec] = options.get("tools") or ()
    mode, name, allowed = tool_mode(options.get("tool_choice"))
    if allowed:
        specs = [spec for spec in specs if spec.name in allowed]
    tools = [_tool(spec) for spec in specs]
    choice: dict[str, Any] | None = None
    if name is not None:
        choice = {"type": "tool", "name": name}
    elif mode == "required":
        choice = {"type": "any"}
    elif mode in ("auto", "none"):
        choice = {"type": mode}
    if wanted is not None:
        schema = wanted.schema or {"type": "object"}
        tools.append(
            {"name": wanted.name, "description": "Give the answer in this shape.", "input_schema": schema}
        )
        if not specs:
            choice = {"type": "tool", "name": wanted.name}
    if not tools:
        return {}
    fields: dict[str, Any] = {"tools": tools}
    if options.get("allow_multiple_tool_calls") is False and (choice is None or choice["type"] != "none"):
        choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
    if choice is not None:
        fields["tool_choice"] = choice
    return fields


def _tool(spec: ToolSpec) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": spec.name, "input_schema": parameters_schema(spec)}
    if spec.description:
        tool["description"] = spec.description
    return tool


def _turns(messages: Sequence[Message], instructions: str | None) -> tuple[str, list[dict[str, Any]]]:
    """The system text and the alternating user / assistant turns."""
    system = [instructions] if instructions else []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            system.extend(text_parts(message))
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:  # results first in a user turn, as the API requires
        turn["content"].sort(key=lambda block: block["type"] != "tool_result")
    return "\n\n".join(system), turns


def _blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for content in message.contents:
        if content.type == "text" and content.text:
            blocks.append({"type": "text", "text": content.text})
        elif content.type == "function_call":
            blocks.append(
                {"type": "tool_use", "id": content.call_id, "name": content.name, "input": _input(content)}
            )
        elif content.type == "function_result":
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": content.call_id,
                "content": function_result_text(content),
            }
            if content.exception is not None:
                result["is_error"] = True
            blocks.append(result)
    return blocks


def _input(content: Content) -> Any:
    try:
        value = msgspec.json.decode(content.arguments or "{}")
    except (msgspec.DecodeError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


# -- whole responses --------------------------------------------------------------------------


class _Usage(msgspec.Struct):
    input_tokens: TokenCount | None = None
    output_tokens: TokenCount | None = None
    cache_read_input_tokens: TokenCount | None = None
    cache_creation_input_tokens: TokenCount | None = None

    def ours(self) -> Usage:
        return _usage(self, self)


def _usage(start: _Usage, final: _Usage) -> Usage:
    """Our usage from the counts first reported and those reported last (a stream's two)."""

    def pick(name: str) -> int | None:
        value: int | None = getattr(final, name)
        return getattr(start, name) if value is None else value

    read, write = pick("cache_read_input_tokens"), pick("cache_creation_input_tokens")
    limit = 2**63 - 1
    inputs = min((pick("input_tokens") or 0) + (read or 0) + (write or 0), limit)
    outputs = pick("output_tokens") or 0
    return Usage(
        inputs, outputs, min(inputs + outputs, limit), cache_read_tokens=read, cache_write_tokens=write
    )


class _Block(msgspec.Struct):
    type: str = ""
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"{}"))


class _Message(msgspec.Struct):
    content: list[_Block] = msgspec.field(default_factory=list)
    id: str | None = None
    model: str | None = None
    stop_reason: str | None = None
    usage: _Usage | None = None
    type: str = "message"
    error: Any = None


def messages_response(payload: bytes, model: str, output_tool: str | None = None) -> ChatResponse:
    """A whole message as a ``ChatResponse``."""
    message = decode(payload, _Message, "the message")
    if message.type == "error" or message.error is not None:
        raise ResponseFailedError(f"the server reported an error: {error_text(message.error)}")
    contents: list[Content] = []
    called = False
    for block in message.content:
        if block.type == "text" and block.text:
            contents.append(Content.from_text(block.text))
        elif block.type == "tool_use":
            arguments = _raw_text(block.input)
            if output_tool is not None and block.name == output_tool:
                contents.append(Content.from_text(arguments))
            else:
                called = True
                contents.append(
                    Content.from_function_call(block.id or "", block.name or "", arguments=arguments)
                )
    return ChatResponse(
        Message("assistant", tuple(contents)),
        response_id=message.id,
        model=message.model or model,
        usage=message.usage.ours() if message.usage is not None else None,
        finish_reason=finish_reason(
            message.stop_reason, only_output_tool=output_tool is not None and not called
        ),
    )


def _raw_text(raw: msgspec.Raw) -> str:
    """A ``tool_use`` input as the server wrote it (``{}`` for a missing or null one)."""
    text = bytes(raw).decode("utf-8", "replace")
    return "{}" if text == "null" else text


def error_text(error: Any) -> str:
    """The message of an ``error`` member, whatever its shape."""
    if isinstance(error, dict):
        return str(error.get("message") or error.get("type") or error)
    return str(error)


# -- streams ----------------------------------------------------------------------------------


class _StreamMessage(msgspec.Struct):
    id: str | None = None
    model: str | None = None
    usage: _Usage | None = None


class _Delta(msgspec.Struct):
    type: str = ""
    text: str | None = None
    partial_json: str | None = None
    stop_reason: str | None = None


class _Event(msgspec.Struct):
    type: str = ""
    index: int | None = None
    message: _StreamMessage | None = None
    content_block: _Block | None = None
    delta: _Delta | None = None
    usage: _Usage | None = None
    error: Any = None


@dataclass
class _PendingUse:
    call_id: str
    name: str
    start: str
    pieces: list[str] = field(default_factory=list)
    as_text: bool = False

    def arguments(self) -> str:
        return "".join(self.pieces) if self.pieces else self.start


class MessagesStream:
    """Reads a streamed message event by event; see the module docstring."""

    def __init__(self, model: str, output_tool: str | None = None) -> None:
        self.make = UpdateMaker(model)
        self.output_tool = output_tool
        self.uses: dict[int, _PendingUse] = {}
        self.start_usage = _Usage()
        self.final_usage = _Usage()
        self.stop_reason: str | None = None
        self.called = False
        self.started = False
        self.done = False

    def feed(self, event: ServerSentEvent) -> list[ChatResponseUpdate]:
        """The updates one event brings; ``message_stop`` ends the stream."""
        if self.done or not event.data.strip():
            return []
        item = decode(event.data, _Event, "a stream event")
        kind = item.type or event.event
        if kind == "error":
            raise ResponseFailedError(f"the server reported an error: {error_text(item.error)}")
        if kind == "message_start" and item.message is not None:
            self.started = True
            self.make.seen(item.message.id, item.message.model)
            self.start_usage = item.message.usage or _Usage()
        elif kind == "content_block_start" and item.content_block is not None:
            return self._block_start(item.index or 0, item.content_block)
        elif kind == "content_block_delta" and item.delta is not None:
            return self._delta(item.index or 0, item.delta)
        elif kind == "content_block_stop":
            return self._block_stop(item.index or 0)
        elif kind == "message_delta":
            if item.delta is not None and item.delta.stop_reason is not None:
                self.stop_reason = item.delta.stop_reason
            if item.usage is not None:
                self.final_usage = item.usage
        elif kind == "message_stop":
            self.done = True
            return self._final()
        return []

    def close(self) -> list[ChatResponseUpdate]:
        """The stream ended without ``message_stop``: complete only if a stop reason was seen."""
        if self.stop_reason is None:
            raise TruncatedStreamError("the stream ended before the message finished")
        self.done = True
        return self._final()

    def _block_start(self, index: int, block: _Block) -> list[ChatResponseUpdate]:
        if block.type == "text" and block.text:
            return [self.make.text(block.text)]
        if block.type == "tool_use":
            as_text = self.output_tool is not None and block.name == self.output_tool
            self.uses[index] = _PendingUse(
                block.id or "", block.name or "", _raw_text(block.input), as_text=as_text
            )
        return []

    def _delta(self, index: int, delta: _Delta) -> list[ChatResponseUpdate]:
        if delta.type == "text_delta" and delta.text:
            return [self.make.text(delta.text)]
        if delta.type == "input_json_delta" and delta.partial_json:
            use = self.uses.get(index)
            if use is None:
                raise MalformedResponseError(f"tool input for block {index}, which is not a tool_use block")
            use.pieces.append(delta.partial_json)
            if use.as_text:
                return [self.make.text(delta.partial_json)]
        return []

    def _block_stop(self, index: int) -> list[ChatResponseUpdate]:
        use = self.uses.pop(index, None)
        if use is None:
            return []
        if use.as_text:
            return [] if use.pieces else [self.make.text(use.start)]
        self.called = True
        call = Content.from_function_call(use.call_id, use.name, arguments=use.arguments())
        return [self.make(contents=(call,))]

    def _final(self) -> list[ChatResponseUpdate]:
        updates = [u for index in sorted(self.uses) for u in self._block_stop(index)]
        usage = _usage(self.start_usage, self.final_usage) if self.started else None
        reason = finish_reason(self.stop_reason, self.output_tool is not None and not self.called)
        updates.append(self.make(usage=usage, finish_reason=reason))
        return updates

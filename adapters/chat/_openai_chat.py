"""The Chat Completions wire format (``POST /chat/completions``), without any IO.

``chat_request`` renders agentledger messages and options as a request body; ``chat_response``
reads a whole completion; ``ChatStream`` reads a streamed one, one server-sent event at a time.

Streaming: text deltas become updates as they arrive. Tool calls arrive as fragments keyed by
``index`` (the first carries the id and the name, the others pieces of the argument text); they
are assembled and yielded whole once the choice reports its ``finish_reason`` (or the stream
ends). The usage arrives in a last chunk without choices, because the request asks for it with
``stream_options.include_usage``. The stream ends with ``data: [DONE]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from agentledger.clients import ChatOptions, ChatResponse, ChatResponseUpdate
from agentledger.core.events import ToolSpec
from agentledger.core.messages import Content, Message, Usage
from agentledger.structured import ResponseSchema, response_schema

from ._openai_common import (
    PendingCall,
    TokenCount,
    UpdateMaker,
    copy_options,
    decode,
    function_result_text,
    parameters_schema,
    text_parts,
    tool_fields,
    tool_mode,
)
from ._openai_errors import MalformedResponseError, ResponseFailedError, TruncatedStreamError
from ._sse import ServerSentEvent

__all__ = ("ChatStream", "chat_messages", "chat_request", "chat_response", "chat_tool_choice")

_OPTIONS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_tokens": "max_tokens",
    "seed": "seed",
    "stop": "stop",
    "user": "user",
}


# -- requests ---------------------------------------------------------------------------------


def chat_request(
    messages: Sequence[Message], options: ChatOptions, *, model: str, stream: bool
) -> dict[str, Any]:
    """The request body for one model call."""
    body: dict[str, Any] = {
        "model": options.get("model") or model,
        "messages": chat_messages(messages, options.get("instructions")),
    }
    copy_options(body, options, _OPTIONS)
    body.update(tool_fields(options, _tool, chat_tool_choice))
    wanted = response_schema(options.get("response_format"))
    if wanted is not None:
        body["response_format"] = _response_format(wanted)
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _response_format(wanted: ResponseSchema) -> dict[str, Any]:
    if wanted.schema is None:
        return {"type": "json_object"}
    section = {"name": wanted.name, "schema": wanted.schema, "strict": wanted.strict}
    return {"type": "json_schema", "json_schema": section}


def chat_messages(messages: Sequence[Message], instructions: str | None = None) -> list[dict[str, Any]]:
    """Instructions as the system message, then each message in the wire's roles."""
    wire: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
    for message in messages:
        wire.extend(_message(message))
    return _results_after_their_calls(wire)


def _results_after_their_calls(wire: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Put each tool result right after the assistant message that made the call.

    Chat Completions refuses a conversation where something else comes between an assistant's
    ``tool_calls`` and their results; a call answered in a later run (an approval given together
    with new user text) would otherwise be answered after that text.
    """
    results = {m["tool_call_id"]: m for m in wire if m.get("role") == "tool"}
    if not results:
        return wire
    placed: set[str] = set()
    ordered: list[dict[str, Any]] = []
    for item in wire:
        if item.get("role") == "tool":
            if item["tool_call_id"] not in placed:
                ordered.append(item)  # a result with no call before it: left where it was
            continue
        ordered.append(item)
        for call in item.get("tool_calls", ()):
            result = results.get(call["id"])
            if result is not None and call["id"] not in placed:
                ordered.append(result)
                placed.add(call["id"])
    return ordered


def chat_tool_choice(value: Any) -> Any:
    """``"auto"``/``"required"``/``"none"`` as they are; a named or restricted choice as an object."""
    mode, name, allowed = tool_mode(value)
    if name is not None:
        return {"type": "function", "function": {"name": name}}
    if allowed:
        tools = [{"type": "function", "function": {"name": n}} for n in allowed]
        return {"type": "allowed_tools", "allowed_tools": {"mode": mode or "auto", "tools": tools}}
    return mode


def _tool(spec: ToolSpec) -> dict[str, Any]:
    function: dict[str, Any] = {"name": spec.name, "parameters": parameters_schema(spec)}
    if spec.description:
        function["description"] = spec.description
    return {"type": "function", "function": function}


def _message(message: Message) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    texts = text_parts(message)
    calls = message.function_calls
    if message.role != "tool" and (texts or calls):
        item: dict[str, Any] = {"role": message.role, "content": _content(texts)}
        if message.author_name:
            item["name"] = message.author_name
        if calls:
            item["tool_calls"] = [_call(c) for c in calls]
        wire.append(item)
    for content in message.contents:
        if content.type == "function_result":
            wire.append(
                {"role": "tool", "tool_call_id": content.call_id, "content": function_result_text(content)}
            )
    return wire


def _content(texts: list[str]) -> str | list[dict[str, str]] | None:
    if not texts:
        return None
    if len(texts) == 1:
        return texts[0]
    return [{"type": "text", "text": text} for text in texts]


def _call(content: Content) -> dict[str, Any]:
    function = {"name": content.name, "arguments": content.arguments or "{}"}
    return {"id": content.call_id, "type": "function", "function": function}


# -- whole responses --------------------------------------------------------------------------


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | dict[str, Any] | None = None


class _ToolCall(msgspec.Struct):
    id: str | None = None
    function: _Function = msgspec.field(default_factory=_Function)


class _AssistantMessage(msgspec.Struct):
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(msgspec.Struct):
    message: _AssistantMessage
    index: int = 0
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct):
    cached_tokens: TokenCount | None = None
    cache_write_tokens: TokenCount | None = None  # servers that report prompt-cache writes


class _CompletionDetails(msgspec.Struct):
    reasoning_tokens: TokenCount | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: TokenCount = 0
    completion_tokens: TokenCount = 0
    total_tokens: TokenCount = 0
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None

    def ours(self) -> Usage:
        total = self.total_tokens or min(self.prompt_tokens + self.completion_tokens, 2**63 - 1)
        prompt = self.prompt_tokens_details or _PromptDetails()
        completion = self.completion_tokens_details or _CompletionDetails()
        return Usage(
            self.prompt_tokens,
            self.completion_tokens,
            total,
            cache_read_tokens=prompt.cached_tokens,
            cache_write_tokens=prompt.cache_write_tokens,
            reasoning_tokens=completion.reasoning_tokens,
        )


class _Completion(msgspec.Struct):
    choices: list[_Choice] = msgspec.field(default_factory=list)
    id: str | None = None
    model: str | None = None
    usage: _Usage | None = None
    error: Any = None


def chat_response(payload: bytes, model: str) -> ChatResponse:
    """A whole completion as a ``ChatResponse`` (the first choice)."""
    completion = decode(payload, _Completion, "the completion")
    if completion.error is not None:
        raise ResponseFailedError(f"the server reported an error: {error_text(completion.error)}")
    if not completion.choices:
        raise MalformedResponseError("the completion has no choices")
    choice = completion.choices[0]
    return ChatResponse(
        Message("assistant", _contents(choice.message)),
        response_id=completion.id,
        model=completion.model or model,
        usage=completion.usage.ours() if completion.usage is not None else None,
        finish_reason=choice.finish_reason,
    )


def _contents(message: _AssistantMessage) -> tuple[Content, ...]:
    contents: list[Content] = []
    text = message.content or message.refusal
    if text:
        contents.append(Content.from_text(text))
    for call in message.tool_calls or ():
        name = call.function.name or ""
        contents.append(Content.from_function_call(call.id or "", name, arguments=call.function.arguments))
    return tuple(contents)


def error_text(error: Any) -> str:
    """The message of an ``error`` member, whatever its shape."""
    if isinstance(error, dict):
        return str(error.get("message") or error.get("code") or error)
    return str(error)


# -- streams ----------------------------------------------------------------------------------


class _DeltaFunction(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _DeltaCall(msgspec.Struct):
    index: int | None = None
    id: str | None = None
    function: _DeltaFunction | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[_DeltaCall] | None = None


class _ChunkChoice(msgspec.Struct):
    index: int = 0
    delta: _Delta = msgspec.field(default_factory=_Delta)
    finish_reason: str | None = None


class _Chunk(msgspec.Struct):
    choices: list[_ChunkChoice] = msgspec.field(default_factory=list)
    id: str | None = None
    model: str | None = None
    usage: _Usage | None = None
    error: Any = None


class ChatStream:
    """Reads a streamed completion event by event; see the module docstring."""

    def __init__(self, model: str) -> None:
        self.make = UpdateMaker(model)
        self.calls: dict[int, PendingCall] = {}
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.done = False

    def feed(self, event: ServerSentEvent) -> list[ChatResponseUpdate]:
        """The updates one event brings; ``[DONE]`` ends the stream."""
        data = event.data.strip()
        if self.done or not data:
            return []
        if data == "[DONE]":
            self.done = True
            return self._final()
        chunk = decode(event.data, _Chunk, "a stream chunk")
        if chunk.error is not None:
            raise ResponseFailedError(f"the server reported an error: {error_text(chunk.error)}")
        self.make.seen(chunk.id, chunk.model)
        if chunk.usage is not None:
            self.usage = chunk.usage.ours()
        updates: list[ChatResponseUpdate] = []
        for choice in chunk.choices:
            if choice.index == 0:
                updates.extend(self._choice(choice))
        return updates

    def close(self) -> list[ChatResponseUpdate]:
        """The stream ended without ``[DONE]``: complete only if a finish reason was seen."""
        if self.finish_reason is None:
            raise TruncatedStreamError("the stream ended before the completion finished")
        self.done = True
        return self._final()

    def _choice(self, choice: _ChunkChoice) -> list[ChatResponseUpdate]:
        delta = choice.delta
        updates = []
        text = delta.content or delta.refusal
        if text:
            updates.append(self.make.text(text))
        for fragment in delta.tool_calls or ():
            self._fragment(fragment)
        if choice.finish_reason is not None:
            self.finish_reason = choice.finish_reason
            updates.extend(self._flush_calls())
        return updates

    def _fragment(self, fragment: _DeltaCall) -> None:
        call = self.calls.setdefault(self._index(fragment), PendingCall())
        if fragment.id and not call.call_id:
            call.call_id = fragment.id
        function = fragment.function
        if function is not None:
            if function.name and not call.name:
                call.name = function.name
            if function.arguments:
                call.arguments.append(function.arguments)

    def _index(self, fragment: _DeltaCall) -> int:
        """The fragment's call; servers that omit ``index`` start a new call with each new id."""
        if fragment.index is not None:
            return fragment.index
        if not self.calls:
            return 0
        last = max(self.calls)
        known = self.calls[last].call_id
        return last + 1 if fragment.id and known and fragment.id != known else last

    def _flush_calls(self) -> list[ChatResponseUpdate]:
        updates = [self.make(contents=(self.calls[i].content(),)) for i in sorted(self.calls)]
        self.calls.clear()
        return updates

    def _final(self) -> list[ChatResponseUpdate]:
        updates = self._flush_calls()
        updates.append(self.make(usage=self.usage, finish_reason=self.finish_reason))
        return updates

"""The Responses wire format (``POST /responses``), without any IO.

``responses_request`` renders agentledger messages and options as a request body: instructions
go to the top-level ``instructions`` field, messages become input items (role messages,
``function_call`` items, ``function_call_output`` items). ``responses_response`` reads a whole
response; ``ResponsesStream`` reads a streamed one, one server-sent event at a time.

Streaming: ``response.output_text.delta`` events become text updates as they arrive. A function
call opens with ``response.output_item.added``, grows with ``response.function_call_arguments.delta``
and is yielded whole at ``response.output_item.done``. ``response.completed`` (or
``response.incomplete``) carries the usage and ends the stream; ``response.failed`` and ``error``
events raise ``ResponseFailedError``. A stream that ends before a terminal event is truncated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from agentledger.clients import ChatOptions, ChatResponse, ChatResponseUpdate
from agentledger.core.events import ToolSpec
from agentledger.core.messages import Content, Message, Usage
from agentledger.structured import response_schema

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

__all__ = (
    "ResponsesStream",
    "responses_continuation",
    "responses_input",
    "responses_request",
    "responses_response",
    "responses_tool_choice",
)

_OPTIONS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_tokens": "max_output_tokens",
    "user": "user",
    "metadata": "metadata",
}


# -- requests ---------------------------------------------------------------------------------


def responses_request(
    messages: Sequence[Message], options: ChatOptions, *, model: str, stream: bool
) -> dict[str, Any]:
    """The request body for one model call."""
    body: dict[str, Any] = {"model": options.get("model") or model, "input": responses_input(messages)}
    instructions = options.get("instructions")
    if instructions:
        body["instructions"] = instructions
    copy_options(body, options, _OPTIONS)
    body.update(tool_fields(options, _tool, responses_tool_choice))
    conversation_id = options.get("conversation_id")
    if conversation_id:  # a conversation object, or the response the next one follows
        key = "conversation" if conversation_id.startswith("conv_") else "previous_response_id"
        body[key] = conversation_id
    store = options.get("store")
    if store is not None:
        body["store"] = bool(store)
    wanted = response_schema(options.get("response_format"))
    if wanted is not None:
        fmt: dict[str, Any] = {"type": "json_object"}
        if wanted.schema is not None:
            fmt = {"type": "json_schema", "name": wanted.name, "schema": wanted.schema}
            fmt["strict"] = wanted.strict
        body["text"] = {"format": fmt}
    if stream:
        body["stream"] = True
    return body


def responses_input(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The messages as input items, in order."""
    items: list[dict[str, Any]] = []
    for message in messages:
        items.extend(_items(message))
    return items


def responses_tool_choice(value: Any) -> Any:
    """``"auto"``/``"required"``/``"none"`` as they are; a named or restricted choice as an object."""
    mode, name, allowed = tool_mode(value)
    if name is not None:
        return {"type": "function", "name": name}
    if allowed:
        tools = [{"type": "function", "name": n} for n in allowed]
        return {"type": "allowed_tools", "mode": mode or "auto", "tools": tools}
    return mode


def _tool(spec: ToolSpec) -> dict[str, Any]:
    tool: dict[str, Any] = {
        "type": "function",
        "name": spec.name,
        "parameters": parameters_schema(spec),
        "strict": False,
    }
    if spec.description:
        tool["description"] = spec.description
    return tool


def _items(message: Message) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    texts = text_parts(message)
    if texts and message.role != "tool":
        items.append({"type": "message", "role": message.role, "content": _content(texts, message.role)})
    for content in message.contents:
        if content.type == "function_call":
            items.append(
                {
                    "type": "function_call",
                    "call_id": content.call_id,
                    "name": content.name,
                    "arguments": content.arguments or "{}",
                }
            )
        elif content.type == "function_result":
            output = function_result_text(content)
            items.append({"type": "function_call_output", "call_id": content.call_id, "output": output})
    return items


def _content(texts: list[str], role: str) -> list[dict[str, str]]:
    """Typed content parts: what the model wrote is ``output_text``, everything else ``input_text``.

    Messages go out in the API's full item form (``type: "message"`` and a list of parts), not its
    ``{"role", "content": str}`` shorthand: servers that translate input items to chat messages
    (llama.cpp's among them) reject an assistant message written in the shorthand.
    """
    kind = "output_text" if role == "assistant" else "input_text"
    return [{"type": kind, "text": text} for text in texts]


# -- whole responses --------------------------------------------------------------------------


class _Part(msgspec.Struct):
    type: str
    text: str | None = None
    refusal: str | None = None


class _Item(msgspec.Struct):
    type: str
    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    content: list[_Part] = msgspec.field(default_factory=list)


class _InputDetails(msgspec.Struct):
    cached_tokens: TokenCount | None = None
    cache_write_tokens: TokenCount | None = None  # servers that report prompt-cache writes


class _OutputDetails(msgspec.Struct):
    reasoning_tokens: TokenCount | None = None


class _Usage(msgspec.Struct):
    input_tokens: TokenCount = 0
    output_tokens: TokenCount = 0
    total_tokens: TokenCount = 0
    input_tokens_details: _InputDetails | None = None
    output_tokens_details: _OutputDetails | None = None

    def ours(self) -> Usage:
        total = self.total_tokens or min(self.input_tokens + self.output_tokens, 2**63 - 1)
        given = self.input_tokens_details or _InputDetails()
        made = self.output_tokens_details or _OutputDetails()
        return Usage(
            self.input_tokens,
            self.output_tokens,
            total,
            cache_read_tokens=given.cached_tokens,
            cache_write_tokens=given.cache_write_tokens,
            reasoning_tokens=made.reasoning_tokens,
        )


class _Incomplete(msgspec.Struct):
    reason: str | None = None


class _Error(msgspec.Struct):
    message: str | None = None
    code: str | None = None


class _Conversation(msgspec.Struct):
    id: str | None = None


class _Response(msgspec.Struct):
    id: str | None = None
    conversation: _Conversation | None = None
    model: str | None = None
    status: str | None = None
    output: list[_Item] = msgspec.field(default_factory=list)
    usage: _Usage | None = None
    incomplete_details: _Incomplete | None = None
    error: _Error | None = None


def responses_response(payload: bytes, model: str) -> ChatResponse:
    """A whole response as a ``ChatResponse``."""
    response = decode(payload, _Response, "the response")
    _raise_if_failed(response)
    if not response.output and response.status is None and response.id is None:
        # Every response names itself and its status: a body with neither is no response (an
        # empty object, a proxy's answer), not an empty answer to record as the model's.
        raise MalformedResponseError("the response has no id, status or output")
    contents = _output_contents(response.output)
    return ChatResponse(
        Message("assistant", contents),
        response_id=response.id,
        model=response.model or model,
        usage=response.usage.ours() if response.usage is not None else None,
        finish_reason=_finish_reason(response, any(c.type == "function_call" for c in contents)),
        conversation_id=response.conversation.id if response.conversation is not None else None,
    )


def responses_continuation(
    options: ChatOptions, response_id: str | None, conversation: str | None
) -> str | None:
    """The conversation the service keeps a response in, as the next request continues it: the
    conversation object the request named, else the response itself when it was stored
    (``store`` true, or left unset while continuing); None when ``store`` is false."""
    store = options.get("store")
    if store is False:
        return None
    if conversation:
        return conversation
    return response_id if store or options.get("conversation_id") else None


def _raise_if_failed(response: _Response) -> None:
    if response.status == "failed" or response.error is not None:
        error = response.error or _Error()
        raise ResponseFailedError(f"the response failed: {error.message or error.code or 'no reason given'}")


def _output_contents(output: list[_Item]) -> tuple[Content, ...]:
    contents: list[Content] = []
    for item in output:
        if item.type == "message":
            contents.extend(Content.from_text(t) for p in item.content if (t := p.text or p.refusal))
        elif item.type == "function_call":
            contents.append(_call(item))
    return tuple(contents)


def _call(item: _Item) -> Content:
    return Content.from_function_call(item.call_id or "", item.name or "", arguments=item.arguments)


def _finish_reason(response: _Response, has_calls: bool) -> str | None:
    if response.status == "incomplete":
        reason = response.incomplete_details.reason if response.incomplete_details else None
        return "length" if reason == "max_output_tokens" else reason or "incomplete"
    if has_calls:
        return "tool_calls"
    if response.status in (None, "completed"):
        return "stop"
    return response.status


# -- streams ----------------------------------------------------------------------------------


class _Event(msgspec.Struct):
    type: str = ""
    delta: Any = None
    item: _Item | None = None
    item_id: str | None = None
    output_index: int | None = None
    arguments: str | None = None
    response: _Response | None = None
    message: str | None = None
    code: str | None = None


class ResponsesStream:
    """Reads a streamed response event by event; see the module docstring."""

    def __init__(self, model: str) -> None:
        self.make = UpdateMaker(model)
        self.calls: dict[int | str, PendingCall] = {}
        self.streamed = False
        self.called = False
        self.done = False
        self._handlers: dict[str, Callable[[_Event], list[ChatResponseUpdate]]] = {
            "response.created": self._started,
            "response.in_progress": self._started,
            "response.output_text.delta": self._text,
            "response.refusal.delta": self._text,
            "response.output_item.added": self._item_added,
            "response.function_call_arguments.delta": self._arguments_delta,
            "response.function_call_arguments.done": self._arguments_done,
            "response.output_item.done": self._item_done,
            "response.completed": self._completed,
            "response.incomplete": self._completed,
            "response.failed": self._failed,
            "error": self._error,
        }

    def feed(self, event: ServerSentEvent) -> list[ChatResponseUpdate]:
        """The updates one event brings; events this client does not use are skipped."""
        if self.done or not event.data.strip():
            return []
        parsed = decode(event.data, _Event, "a stream event")
        handler = self._handlers.get(parsed.type or event.event)
        return handler(parsed) if handler is not None else []

    def close(self) -> list[ChatResponseUpdate]:
        """The stream ended before ``response.completed``: it was cut off."""
        raise TruncatedStreamError("the stream ended before the response completed")

    def _key(self, event: _Event) -> int | str:
        if event.output_index is not None:
            return event.output_index
        return event.item_id or (event.item.id if event.item is not None else None) or ""

    def _started(self, event: _Event) -> list[ChatResponseUpdate]:
        if event.response is not None:
            self.make.seen(event.response.id, event.response.model)
        return []

    def _text(self, event: _Event) -> list[ChatResponseUpdate]:
        if not isinstance(event.delta, str) or not event.delta:
            return []
        self.streamed = True
        return [self.make.text(event.delta)]

    def _item_added(self, event: _Event) -> list[ChatResponseUpdate]:
        item = event.item
        if item is not None and item.type == "function_call":
            arguments = [item.arguments] if item.arguments else []
            self.calls[self._key(event)] = PendingCall(item.call_id or "", item.name or "", arguments)
        return []

    def _arguments_delta(self, event: _Event) -> list[ChatResponseUpdate]:
        if isinstance(event.delta, str):
            self.calls.setdefault(self._key(event), PendingCall()).arguments.append(event.delta)
        return []

    def _arguments_done(self, event: _Event) -> list[ChatResponseUpdate]:
        if event.arguments is not None:
            self.calls.setdefault(self._key(event), PendingCall()).arguments = [event.arguments]
        return []

    def _item_done(self, event: _Event) -> list[ChatResponseUpdate]:
        item = event.item
        if item is None or item.type != "function_call":
            return []
        call = self.calls.pop(self._key(event), PendingCall())
        call.call_id = item.call_id or call.call_id
        call.name = item.name or call.name
        if item.arguments is not None:
            call.arguments = [item.arguments]
        self.streamed = self.called = True
        return [self.make(contents=(call.content(),))]

    def _completed(self, event: _Event) -> list[ChatResponseUpdate]:
        self.done = True
        response = event.response or _Response()
        self.make.seen(response.id, response.model)
        updates = [self.make(contents=(call.content(),)) for call in self.calls.values()]
        self.calls.clear()
        if not self.streamed and not updates:
            updates = [self.make(contents=(c,)) for c in _output_contents(response.output)]
        self.called = self.called or any(c.type == "function_call" for u in updates for c in u.contents)
        usage = response.usage.ours() if response.usage is not None else None
        final = self.make(usage=usage, finish_reason=_finish_reason(response, self.called))
        if response.conversation is not None and response.conversation.id:
            final = msgspec.structs.replace(final, conversation_id=response.conversation.id)
        updates.append(final)
        return updates

    def _failed(self, event: _Event) -> list[ChatResponseUpdate]:
        _raise_if_failed(event.response or _Response(status="failed"))
        return []

    def _error(self, event: _Event) -> list[ChatResponseUpdate]:
        raise ResponseFailedError(f"the server reported an error: {event.message or event.code or 'unknown'}")

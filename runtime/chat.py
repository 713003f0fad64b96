"""What a run and a chat client exchange: options, responses, streamed updates, messages.

``ChatClient`` is what a run needs of a client (``BaseChatClient`` in ``agentledger.clients`` is
the base class to write one). ``options["tools"]`` holds the ``ToolSpec`` of every tool the model
is offered and ``options["tool_choice"]`` what it must do with them; ``client_kwargs`` are the
caller's values for the client, passed unchanged on every model call of a run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Generic, Literal, Protocol, TypedDict

import msgspec
from typing_extensions import TypeVar

from .core.events import ToolSpec
from .core.messages import Content, Message, Usage

__all__ = (
    "ChatClient",
    "ChatOptions",
    "ChatResponse",
    "ChatResponseUpdate",
    "ToolMode",
    "merge_updates",
    "normalize_messages",
)


class ToolMode(TypedDict, total=False):
    """``tool_choice`` as a dict: ``{"mode": "required", "required_function_name": "x"}``."""

    mode: Literal["auto", "required", "none"]
    required_function_name: str
    allowed_tools: list[str]


ResponseModelT = TypeVar("ResponseModelT", default=Any)


class ChatOptions(TypedDict, Generic[ResponseModelT], total=False):
    """Request settings; every field is optional and clients ignore what they do not support.

    The type parameter is the structured-output type named by ``response_format``;
    ``ChatOptions`` alone means ``ChatOptions[Any]``.
    """

    model: str
    instructions: str
    temperature: float
    top_p: float
    max_tokens: int
    seed: int
    stop: str | list[str]
    tool_choice: ToolMode | Literal["auto", "required", "none"] | None
    tools: list[ToolSpec]
    allow_multiple_tool_calls: bool
    user: str
    metadata: dict[str, Any]
    response_format: type[ResponseModelT] | dict[str, Any]
    conversation_id: str
    """A conversation the service keeps (``resp_...`` or ``conv_...`` for OpenAI's Responses
    API): the request continues it, and only messages it does not hold are sent."""
    store: bool
    """Whether the service should keep the response; with ``True``, a client that can continue
    a stored conversation reports it in ``ChatResponse.conversation_id``."""
    additional_properties: dict[str, Any]
    max_input_tokens: int
    """A limit of the run, not a request setting (clients never see it): the input tokens the
    run's model calls may report, summed, before the final call (see ``Agent``)."""
    max_cost: float
    """A limit of the run like ``max_input_tokens``: the USD its model calls may cost, summed
    (it needs the agent's ``price`` table)."""


class ChatResponse:
    """The model's answer to one request."""

    __slots__ = ("conversation_id", "finish_reason", "messages", "model", "response_id", "usage")

    def __init__(
        self,
        messages: Message | Sequence[Message] | None = None,
        *,
        text: str | None = None,
        response_id: str | None = None,
        model: str | None = None,
        usage: Usage | None = None,
        finish_reason: str | None = None,
        conversation_id: str | None = None,
    ) -> None:
        if isinstance(messages, Message):
            messages = [messages]
        self.messages: list[Message] = list(messages or [])
        if text is not None:
            self.messages.append(Message("assistant", (Content.from_text(text),)))
        self.response_id = response_id
        self.model = model
        self.usage = usage
        self.finish_reason = finish_reason
        self.conversation_id = conversation_id
        """The conversation the service keeps this response in, when it keeps one: the next
        request of the run continues it (``options["conversation_id"]``)."""

    @property
    def text(self) -> str:
        return " ".join(m.text for m in self.messages if m.text)

    def __repr__(self) -> str:
        return f"ChatResponse(messages={self.messages!r}, model={self.model!r})"


class ChatResponseUpdate(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A piece of a streamed response: text deltas and whole function calls."""

    contents: tuple[Content, ...] = ()
    role: str = "assistant"
    response_id: str | None = None
    model: str | None = None
    usage: Usage | None = None
    finish_reason: str | None = None
    conversation_id: str | None = None

    @property
    def text(self) -> str:
        return "".join(c.text or "" for c in self.contents if c.type == "text")


def merge_updates(updates: Sequence[ChatResponseUpdate]) -> ChatResponse:
    """Fold a stream of updates into one response (adjacent text deltas joined)."""
    contents: list[Content] = []
    text: list[str] = []
    usage: Usage | None = None
    response_id = model = finish_reason = conversation_id = None
    for update in updates:
        for content in update.contents:
            if content.type == "text":
                text.append(content.text or "")
                continue
            if text:
                contents.append(Content.from_text("".join(text)))
                text = []
            contents.append(content)
        usage = update.usage if update.usage is not None else usage
        response_id = update.response_id or response_id
        model = update.model or model
        finish_reason = update.finish_reason or finish_reason
        conversation_id = update.conversation_id or conversation_id
    if text:
        contents.append(Content.from_text("".join(text)))
    message = Message("assistant", tuple(contents))
    return ChatResponse(
        message,
        response_id=response_id,
        model=model,
        usage=usage,
        finish_reason=finish_reason,
        conversation_id=conversation_id,
    )


class ChatClient(Protocol):
    """What a run needs of a chat client (``BaseChatClient`` implements it)."""

    provider_name: str

    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        options: ChatOptions | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ChatResponse:
        """One model call."""
        ...

    def get_streaming_response(
        self,
        messages: Sequence[Message],
        *,
        options: ChatOptions | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatResponseUpdate]:
        """One model call, streamed."""
        ...


def normalize_messages(messages: str | Content | Message | Sequence[Any] | None) -> list[Message]:
    """Turn what ``run()`` accepts into a list of messages (strings become user messages)."""
    if messages is None:
        return []
    if isinstance(messages, str):
        return [Message("user", (Content.from_text(messages),))]
    if isinstance(messages, Content):
        return [Message("user", (messages,))]
    if isinstance(messages, Message):
        return [messages]
    if isinstance(messages, Mapping):  # {"role": "user", "content": "..."}, as many APIs write it
        return [_message_from_mapping(messages)]
    out: list[Message] = []
    for item in messages:
        out.extend(normalize_messages(item))
    return out


def _message_from_mapping(data: Mapping[str, Any]) -> Message:
    if "role" not in data:
        raise TypeError(f"a message given as a mapping needs a 'role', got keys {sorted(data)}")
    contents = data.get("contents", data.get("content", ()))
    if contents is None:
        contents = ()
    return Message(str(data["role"]), contents if not isinstance(contents, str) else (contents,))

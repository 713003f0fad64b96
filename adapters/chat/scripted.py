"""ScriptedChatClient: a deterministic chat model that answers from a script.

Each model call takes the next entry of the script: a string (a text answer), a ``Call`` or a list
of them (function calls, in parallel when several), a ``Message`` or ``ChatResponse``, or a
callable that receives the ``ScriptedRequest`` and returns any of these. Every request is recorded
in ``client.requests``: the messages, the tools offered, ``tool_choice``, the options and the
``client_kwargs``, so a test can assert what the model was shown at each step.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import msgspec

from agentledger.clients import BaseChatClient, ChatOptions, ChatResponse, ChatResponseUpdate
from agentledger.core.events import ToolSpec
from agentledger.core.messages import Content, Message, Usage
from agentledger.errors import AgentLedgerError

__all__ = ("Call", "ScriptEntry", "ScriptExhausted", "ScriptedChatClient", "ScriptedRequest")


class Call(msgspec.Struct, frozen=True):
    """A function call the scripted model makes; ``arguments`` may be a dict or raw JSON text."""

    name: str
    arguments: dict[str, Any] | str = msgspec.field(default_factory=dict)
    call_id: str | None = None


class ScriptedRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One request the client received."""

    messages: tuple[Message, ...]
    tools: tuple[str, ...]
    tool_specs: tuple[ToolSpec, ...]
    tool_choice: Any
    options: dict[str, Any]
    client_kwargs: dict[str, Any]
    function_invocation_kwargs: dict[str, Any] | None = None


class ScriptExhausted(AgentLedgerError):
    """The model was called more often than the script has answers."""


ScriptEntry = str | Call | Sequence[Call] | Message | ChatResponse | Callable[[ScriptedRequest], Any]
"""One answer of a script (see the module docstring)."""


class ScriptedChatClient(BaseChatClient):
    """A chat client that plays back a script; see the module docstring."""

    provider_name = "scripted"

    def __init__(
        self,
        script: Sequence[ScriptEntry] = (),
        *,
        model: str = "scripted-1",
        repeat: bool = False,
        keeps_conversations: bool = False,
    ) -> None:
        self.script = list(script)
        self.model = model
        self.repeat = repeat
        self.keeps_conversations = keeps_conversations
        """Answer as a service that keeps conversations (OpenAI's Responses API does): with
        ``options["store"]`` true, or when continuing a conversation unless ``store`` is false,
        a response reports its id as ``conversation_id``."""
        self.requests: list[ScriptedRequest] = []
        self._position = 0
        self._ids = itertools.count(1)

    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        options: ChatOptions | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ChatResponse:
        request = self._record(messages, options, client_kwargs, function_invocation_kwargs)
        response = self._answer(self._next_entry(), request)
        if self.keeps_conversations and response.conversation_id is None and _kept(request.options):
            response.conversation_id = response.response_id
        return response

    async def get_streaming_response(
        self,
        messages: Sequence[Message],
        *,
        options: ChatOptions | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatResponseUpdate]:
        """Text arrives word by word; function calls arrive whole, after the text."""
        response = await self.get_response(messages, options=options, client_kwargs=client_kwargs, **kwargs)
        model = response.model  # the answer's own model, as the whole response reports it
        for message in response.messages:
            for content in message.contents:
                if content.type == "text" and content.text:
                    for word in _words(content.text):
                        yield ChatResponseUpdate(contents=(Content.from_text(word),), model=model)
                else:
                    yield ChatResponseUpdate(contents=(content,), model=model)
        yield ChatResponseUpdate(
            usage=response.usage,
            finish_reason=response.finish_reason,
            response_id=response.response_id,
            model=model,
            conversation_id=response.conversation_id,
        )

    @property
    def remaining(self) -> int:
        """Entries not yet played."""
        return len(self.script) - self._position

    def _record(
        self,
        messages: Sequence[Message],
        options: ChatOptions | None,
        client_kwargs: Mapping[str, Any] | None,
        tool_kwargs: Mapping[str, Any] | None,
    ) -> ScriptedRequest:
        opts = dict(options or {})
        specs: tuple[ToolSpec, ...] = tuple(opts.pop("tools", None) or ())  # type: ignore[arg-type]
        request = ScriptedRequest(
            messages=tuple(messages),
            tools=tuple(s.name for s in specs),
            tool_specs=specs,
            tool_choice=opts.get("tool_choice"),
            options=opts,
            client_kwargs=dict(client_kwargs or {}),
            function_invocation_kwargs=dict(tool_kwargs) if tool_kwargs is not None else None,
        )
        self.requests.append(request)
        return request

    def _next_entry(self) -> ScriptEntry:
        if self._position >= len(self.script):
            if self.repeat and self.script:
                self._position = 0
            else:
                raise ScriptExhausted(
                    f"the script has {len(self.script)} answers; call {self._position + 1} has none"
                )
        entry = self.script[self._position]
        self._position += 1
        return entry

    def _answer(self, entry: Any, request: ScriptedRequest) -> ChatResponse:
        if callable(entry) and not isinstance(entry, Call | ChatResponse | Message):
            entry = entry(request)
        if isinstance(entry, ChatResponse):
            return entry
        if isinstance(entry, str):
            message = Message("assistant", (Content.from_text(entry),))
        elif isinstance(entry, Message):
            message = entry
        else:
            calls = [entry] if isinstance(entry, Call) else list(entry)
            message = Message("assistant", tuple(self._call(c) for c in calls))
        usage = Usage(
            input_tokens=sum(len(m.text) for m in request.messages) // 4 + 1,
            output_tokens=len(message.text) // 4 + 1,
        )
        usage = Usage(usage.input_tokens, usage.output_tokens, usage.input_tokens + usage.output_tokens)
        return ChatResponse(
            message,
            model=self.model,
            usage=usage,
            response_id=f"resp_{len(self.requests)}",
            finish_reason="tool_calls" if message.function_calls else "stop",
        )

    def _call(self, call: Call) -> Content:
        if not isinstance(call, Call):
            raise TypeError(f"a script entry must be a str, Call, Message or ChatResponse, not {call!r}")
        call_id = call.call_id or f"call_{next(self._ids)}"
        return Content.from_function_call(call_id, call.name, arguments=call.arguments)


def _kept(options: Mapping[str, Any]) -> bool:
    """Whether a service that keeps conversations keeps this response."""
    store = options.get("store")
    return bool(store) if store is not None else bool(options.get("conversation_id"))


def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [w + " " for w in words[:-1]] + [words[-1]]

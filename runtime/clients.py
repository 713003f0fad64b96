"""Chat clients: one model call per ``get_response``; the tool loop belongs to the run.

A custom client subclasses ``BaseChatClient`` and implements ``get_response`` with the explicit
runtime buckets (see ``agentledger.chat`` for the options, responses and updates it exchanges).
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from .agent import Agent
from .chat import (
    ChatClient,
    ChatOptions,
    ChatResponse,
    ChatResponseUpdate,
    ToolMode,
    merge_updates,
    normalize_messages,
)
from .core.messages import Message

__all__ = (
    "BaseChatClient",
    "ChatClient",
    "ChatOptions",
    "ChatResponse",
    "ChatResponseUpdate",
    "ToolMode",
    "merge_updates",
    "normalize_messages",
)


class BaseChatClient(abc.ABC):
    """A chat model behind one method, ``get_response``."""

    provider_name: str = "custom"
    model: str | None = None

    @abc.abstractmethod
    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        options: ChatOptions | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ChatResponse:
        """One model call. ``function_invocation_kwargs`` is always None from a run."""

    async def get_streaming_response(
        self,
        messages: Sequence[Message],
        *,
        options: ChatOptions | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatResponseUpdate]:
        """Stream one model call; the default streams the whole response as one update."""
        response = await self.get_response(messages, options=options, client_kwargs=client_kwargs, **kwargs)
        for message in response.messages:
            yield ChatResponseUpdate(
                contents=message.contents,
                response_id=response.response_id,
                model=response.model,
                usage=response.usage,
                finish_reason=response.finish_reason,
                conversation_id=response.conversation_id,
            )

    def as_agent(self, **kwargs: Any) -> Agent:
        """An ``Agent`` on this client: ``client.as_agent(name=..., instructions=..., tools=[...])``."""
        return Agent(client=self, **kwargs)

"""The chat client of a rerun: it answers each model call from the log."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..chat import ChatClient, ChatOptions, ChatResponse
from ..clients import BaseChatClient
from ..core.events import (
    ModelFailed,
    ModelResponded,
)
from ..core.messages import Message
from ..errors import AgentLedgerError

__all__ = ("RecordedOutcome", "ReplayClient", "ReplayExhausted")


class ReplayExhausted(AgentLedgerError):
    """The rerun asked the model more often than the recorded run did."""


class ReplayClient(BaseChatClient):
    """Answers each model call with the next recorded response; then defers to ``live``."""

    provider_name = "replay"

    def __init__(
        self,
        responses: Sequence[ModelResponded | ModelFailed],
        live: ChatClient | None = None,
        *,
        provider_name: str = "",
    ) -> None:
        self.responses = list(responses)
        self.live = live
        self.calls = 0
        # A rerun records the provider of the run it replays (a fork: of the client it goes on with).
        self.provider_name = live.provider_name if live is not None else (provider_name or "replay")

    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        options: ChatOptions | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ChatResponse:
        index, self.calls = self.calls, self.calls + 1
        if index < len(self.responses):
            recorded = self.responses[index]
            if isinstance(recorded, ModelFailed):  # the client failed here: fail the same way
                raise type(recorded.error_type, (RecordedOutcome,), {})(recorded.message)
            return ChatResponse(
                recorded.message,
                model=recorded.model,
                usage=recorded.usage,
                response_id=recorded.response_id,
                finish_reason=recorded.finish_reason,
                conversation_id=recorded.conversation_id,
            )
        if self.live is None:
            raise ReplayExhausted(
                f"the recorded run made {len(self.responses)} model calls; this is call {index + 1}"
            )
        return await self.live.get_response(messages, options=options, client_kwargs=client_kwargs)


class RecordedOutcome(Exception):
    """Raised in place of a tool's recorded failure."""

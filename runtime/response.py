"""What a run gives back: the whole response, and the pieces a streamed run yields."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from .core.events import Event
from .core.messages import Content, Message, Usage

__all__ = ("AgentResponse", "AgentResponseUpdate")


class AgentResponse:
    """What a run produced: its text, its new messages, its id and its events."""

    __slots__ = (
        "events",
        "finish_reason",
        "messages",
        "run_id",
        "session_id",
        "usage",
        "user_input_requests",
    )

    def __init__(
        self,
        *,
        messages: Sequence[Message] = (),
        run_id: str = "",
        events: list[Event] | None = None,
        usage: Usage | None = None,
        user_input_requests: Sequence[Content] = (),
        finish_reason: str = "completed",
        session_id: str | None = None,
    ) -> None:
        self.messages = list(messages)
        self.run_id = run_id
        self.events: list[Event] = events if events is not None else []
        self.usage = usage or Usage()
        self.user_input_requests = list(user_input_requests)
        self.finish_reason = finish_reason
        self.session_id = session_id

    @property
    def text(self) -> str:
        """The text of the last assistant message."""
        for message in reversed(self.messages):
            if message.role == "assistant" and message.text:
                return message.text
        return ""

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"AgentResponse(text={self.text!r}, run_id={self.run_id!r}, events={len(self.events)})"


class AgentResponseUpdate(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A piece of a streamed run: model text deltas, function calls and function results."""

    contents: tuple[Content, ...] = ()
    role: str = "assistant"
    run_id: str = ""

    @property
    def text(self) -> str:
        return "".join(c.text or "" for c in self.contents if c.type == "text")

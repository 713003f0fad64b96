"""What a run gives back: the whole response, and the pieces a streamed run yields."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from .core.events import Event
from .core.messages import Content, Message, Usage
from .structured import parse_value

__all__ = ("AgentResponse", "AgentResponseUpdate")

_UNPARSED: Any = object()


class AgentResponse:
    """What a run produced: its text, its new messages, its id and its events."""

    __slots__ = (
        "_value",
        "events",
        "finish_reason",
        "messages",
        "response_format",
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
        response_format: Any = None,
    ) -> None:
        self.messages = list(messages)
        self.response_format = response_format
        """The run's ``options["response_format"]``, which ``value`` parses the text as."""
        self._value: Any = _UNPARSED
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
            if message.role == "assistant" and (text := message.text):
                return text
        return ""

    @property
    def value(self) -> Any:
        """The answer as the run's ``response_format`` (a model instance, a typed value or the
        decoded JSON), parsed on first use; None without one, and None for an empty answer.
        ``StructuredOutputError`` when the answer does not match."""
        if self._value is _UNPARSED:
            self._value = parse_value(self.response_format, self.text)
        return self._value

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"AgentResponse(text={self.text!r}, run_id={self.run_id!r}, events={len(self.events)})"


class AgentResponseUpdate(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A piece of a streamed run: model text deltas, function calls and function results; the
    last piece of each model call carries its ``usage`` and ``finish_reason`` when the client
    reports them, and a model update the ``response_id`` its client's update carried."""

    contents: tuple[Content, ...] = ()
    role: str = "assistant"
    run_id: str = ""
    usage: Usage | None = None
    finish_reason: str | None = None
    response_id: str | None = None

    @property
    def text(self) -> str:
        return "".join(c.text or "" for c in self.contents if c.type == "text")

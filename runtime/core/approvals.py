"""Approval responses: which calls they answer, and which answer nothing."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from .messages import Content, Message

__all__ = ("answered_calls", "approval_requests", "approval_responses", "unmatched_approvals")


def approval_responses(messages: Iterable[Message]) -> list[Content]:
    """The approval responses among ``messages``, in order."""
    return [c for m in messages for c in m.contents if c.type == "function_approval_response"]


def answered_calls(messages: Iterable[Message], responses: Mapping[str | None, bool]) -> list[Content]:
    """The function calls in ``messages`` that an approval response answers, in call order."""
    return [c for m in messages for c in m.contents if c.type == "function_call" and c.call_id in responses]


def approval_requests(messages: Iterable[Message], awaiting: Iterable[str]) -> list[Content]:
    """What a paused run asks a human: one request per call held for approval."""
    held = set(awaiting)
    return [
        Content("function_approval_request", call_id=c.call_id, name=c.name, arguments=c.arguments)
        for m in messages
        for c in m.contents
        if c.type == "function_call" and c.call_id in held
    ]


def unmatched_approvals(history: Sequence[Message], inputs: Sequence[Message]) -> list[str | None]:
    """Approval responses in ``inputs`` that answer no call awaiting approval in the conversation."""
    answers = [c.call_id for c in approval_responses(inputs)]
    if not answers:
        return []
    messages = [*history, *inputs]
    calls = {c.call_id for m in messages for c in m.contents if c.type == "function_call"}
    done = {c.call_id for m in messages for c in m.contents if c.type == "function_result"}
    return [a for a in answers if a not in calls or a in done]

"""Approval responses: which calls they answer, and which answer nothing."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from .messages import Content, Message

__all__ = (
    "approval_requests",
    "approval_responses",
    "conversation",
    "paused_calls",
    "resumed_batch",
    "unmatched_approvals",
)


def approval_responses(messages: Iterable[Message]) -> list[Content]:
    """The approval responses among ``messages``, in order."""
    found = []
    for message in messages:  # a loop, not a comprehension: this runs several times per run
        for content in message.contents:
            if content.type == "function_approval_response":
                found.append(content)
    return found


def _answered_calls(messages: Iterable[Message], responses: Mapping[str | None, bool]) -> list[Content]:
    """The function calls in ``messages`` that an approval response answers, in call order."""
    return [c for m in messages for c in m.contents if c.type == "function_call" and c.call_id in responses]


def resumed_batch(messages: Sequence[Message], responses: Mapping[str | None, bool]) -> list[Content]:
    """The paused batch the responses answer: every call of the assistant message holding the
    answered calls that has no result yet, in call order (approved, rejected or never asked)."""
    for index in range(len(messages) - 1, -1, -1):
        calls = messages[index].function_calls
        if any(c.call_id in responses for c in calls):
            later = messages[index + 1 :]
            done = {c.call_id for m in later for c in m.contents if c.type == "function_result"}
            return [c for c in calls if c.call_id not in done]
    return []


def paused_calls(history: Sequence[Message]) -> list[str | None]:
    """The calls of the conversation's last assistant message that still wait for a result (a
    batch paused for approval: every other batch is answered before its run ends)."""
    for index in range(len(history) - 1, -1, -1):
        message = history[index]
        if message.role != "assistant":
            continue
        later = history[index + 1 :]
        done = {c.call_id for m in later for c in m.contents if c.type == "function_result"}
        return [c.call_id for c in message.function_calls if c.call_id not in done]
    return []


def conversation(messages: Iterable[Message]) -> list[Message]:
    """Messages as the model and the session's history see them: approval responses are answers
    to the run, not conversation, so they are left out (and a message holding only them)."""
    kept = []
    for message in messages:
        for content in message.contents:
            if content.type == "function_approval_response":
                break
        else:  # nothing to leave out (the usual case): the message as it is
            kept.append(message)
            continue
        contents = tuple(c for c in message.contents if c.type != "function_approval_response")
        if contents:
            kept.append(Message(message.role, contents))
    return kept


def approval_requests(messages: Iterable[Message], awaiting: Iterable[str]) -> list[Content]:
    """What a paused run asks a human: one request per call held for approval."""
    waiting = set(awaiting)
    if not waiting:  # a run that did not pause asks nothing
        return []
    return [
        Content("function_approval_request", call_id=c.call_id, name=c.name, arguments=c.arguments)
        for m in messages
        for c in m.contents
        if c.type == "function_call" and c.call_id in waiting
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

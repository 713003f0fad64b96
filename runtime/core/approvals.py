"""Approval responses: which calls they answer, and which answer nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from .messages import Content, Message

__all__ = (
    "answers_refused",
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
    # A model may number each answer's calls afresh: of calls sharing an id, the last one waits.
    latest: dict[str | None, Content] = {}
    for message in messages:
        for content in message.contents:
            if content.type == "function_call" and content.call_id in waiting:
                latest.pop(content.call_id, None)
                latest[content.call_id] = content
    return [
        Content("function_approval_request", call_id=c.call_id, name=c.name, arguments=c.arguments)
        for c in latest.values()
    ]


def unmatched_approvals(history: Sequence[Message], inputs: Sequence[Message]) -> list[str | None]:
    """Approval responses in ``inputs`` that answer no call awaiting approval in the conversation."""
    answers = [c.call_id for c in approval_responses(inputs)]
    if not answers:
        return []
    # A call is answered by a result that comes after it: a model that numbers each answer's
    # calls afresh reuses the id of a call answered before.
    done: dict[str | None, bool] = {}
    for message in (*history, *inputs):
        for content in message.contents:
            if content.type == "function_call":
                done[content.call_id] = False
            elif content.type == "function_result" and content.call_id in done:
                done[content.call_id] = True
    return [a for a in answers if done.get(a, True)]


def answers_refused(
    history: Sequence[Message],
    inputs: Sequence[Message],
    answers: Sequence[Content],
    awaits: Callable[[Content], bool] | None = None,
) -> str | None:
    """Why a run on ``history`` may not take ``inputs``, whose approval responses are
    ``answers``, or ``None``: each rule keeps a call of the conversation from being left without
    its result. Refused are: a new turn while a batch waits for approval; responses that answer
    no call awaiting approval; two different answers for one call; answers mixed with new
    conversation; and (given ``awaits``, which says whether a call of the paused batch waits for
    a human) a resume that leaves a request of the paused batch unanswered."""
    if not answers:
        paused = paused_calls(history) if history else None
        if paused:
            return f"calls {paused} wait for approval: answer them before the conversation goes on"
        return None
    unmatched = unmatched_approvals(history, inputs)
    if unmatched:
        return (
            f"approval responses for {unmatched} match no call awaiting approval; "
            "resume on the session of the run that asked for them"
        )
    responses = {c.call_id: bool(c.approved) for c in answers}
    if len(responses) < len({(c.call_id, bool(c.approved)) for c in answers}):
        return "one call has two different approval answers"
    if any(c.type != "function_approval_response" for m in inputs for c in m.contents):
        return "send approval answers on their own; new text goes in the run after them"
    if awaits is None:
        return None
    batch = resumed_batch([*history, *inputs], responses)
    missing = [c.call_id for c in batch if c.call_id not in responses and awaits(c)]
    if missing:
        return f"the paused batch also waits for approval of {missing}: answer every request it made"
    return None

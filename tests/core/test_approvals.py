"""``core/approvals.py``: which calls approval responses answer, which answer nothing, and what a
paused batch is, read from messages alone."""

from __future__ import annotations

from agentledger.core.approvals import (
    answers_refused,
    approval_requests,
    approval_responses,
    conversation,
    paused_calls,
    resumed_batch,
    unmatched_approvals,
)
from agentledger.core.messages import Content, Message


def _call(call_id: str, name: str = "wire", arguments: str = '{"amount": 1}') -> Content:
    return Content.from_function_call(call_id, name, arguments=arguments)


def _result(call_id: str) -> Content:
    return Content.from_function_result(call_id, result="done")


def _answer(call_id: str, approved: bool = True) -> Content:
    return Content.from_approval_response(call_id, approved=approved)


def _paused_history() -> list[Message]:
    """A user turn, then an assistant batch of three calls of which ``c1`` already has a result."""
    return [
        Message("user", "Pay both."),
        Message("assistant", (_call("c1"), _call("c2"), _call("c3", "log"))),
        Message("tool", (_result("c1"),)),
    ]


def test_approval_responses_are_found_in_every_message_in_order() -> None:
    messages = [
        Message("user", ("text", _answer("b", approved=False))),
        Message("assistant", (_call("x"),)),
        Message("user", (_answer("a"),)),
    ]
    found = approval_responses(messages)
    assert [(c.call_id, c.approved) for c in found] == [("b", False), ("a", True)]
    assert approval_responses([Message("user", "hi"), Message("assistant", (_call("x"),))]) == []


def test_the_resumed_batch_is_every_call_of_the_answered_message_still_without_a_result() -> None:
    history = _paused_history()
    batch = resumed_batch(history, {"c2": True})
    assert [c.call_id for c in batch] == ["c2", "c3"]  # c1 has its result; c3 was never asked


def test_the_resumed_batch_is_the_last_message_holding_an_answered_call() -> None:
    """A call id reused by a later batch: the later batch is the one a response resumes."""
    history = [
        Message("assistant", (_call("c1"), _call("old"))),
        Message("tool", (_result("c1"),)),
        Message("assistant", (_call("c1"), _call("new"))),
    ]
    assert [c.call_id for c in resumed_batch(history, {"c1": True})] == ["c1", "new"]


def test_no_batch_is_resumed_by_responses_that_answer_no_call() -> None:
    assert resumed_batch(_paused_history(), {"elsewhere": True}) == []
    assert resumed_batch([], {"c1": True}) == []


def test_the_paused_calls_are_the_open_calls_of_the_last_assistant_message() -> None:
    assert paused_calls(_paused_history()) == ["c2", "c3"]
    answered = [*_paused_history(), Message("tool", (_result("c2"), _result("c3")))]
    assert paused_calls(answered) == []


def test_only_the_last_assistant_message_is_read_for_paused_calls() -> None:
    """An earlier assistant batch left open does not count once a later assistant message exists."""
    history = [
        Message("assistant", (_call("early"),)),
        Message("assistant", "All done."),
        Message("user", "Thanks."),
    ]
    assert paused_calls(history) == []
    assert paused_calls([Message("user", "hi")]) == []


def test_the_conversation_leaves_out_approval_responses_and_messages_holding_only_them() -> None:
    plain = Message("user", "hi")
    mixed = Message("user", ("go on", _answer("c1")))
    only = Message("user", (_answer("c2"), _answer("c3", approved=False)))
    kept = conversation([plain, mixed, only])
    assert kept == [plain, Message("user", "go on")]
    assert kept[0] is plain  # a message with nothing to leave out is kept as it is


def test_a_paused_run_asks_one_request_per_awaiting_call_with_its_name_and_arguments() -> None:
    history = _paused_history()
    requests = approval_requests(history, ["c3", "c2"])
    assert [(r.type, r.call_id, r.name) for r in requests] == [
        ("function_approval_request", "c2", "wire"),
        ("function_approval_request", "c3", "log"),
    ]  # in the order of the calls, not of ``awaiting``
    assert requests[0].arguments == '{"amount": 1}'
    assert approval_requests(history, []) == []


def test_an_answer_matches_when_its_call_waits_for_a_result() -> None:
    inputs = [Message("user", (_answer("c2"), _answer("c3", approved=False)))]
    assert unmatched_approvals(_paused_history(), inputs) == []


def test_answers_to_unknown_calls_and_to_calls_with_a_result_are_unmatched() -> None:
    inputs = [Message("user", (_answer("c1"), _answer("c2"), _answer("nowhere")))]
    assert unmatched_approvals(_paused_history(), inputs) == ["c1", "nowhere"]


def test_a_call_and_its_result_in_the_inputs_count_as_conversation() -> None:
    """The inputs are part of the conversation: a call they hold matches, a result they hold closes it."""
    call_in_input = [Message("assistant", (_call("late"),)), Message("user", (_answer("late"),))]
    assert unmatched_approvals([], call_in_input) == []
    closed = [Message("tool", (_result("c2"),)), Message("user", (_answer("c2"),))]
    assert unmatched_approvals(_paused_history(), closed) == ["c2"]


def test_inputs_without_answers_leave_nothing_unmatched() -> None:
    assert unmatched_approvals(_paused_history(), [Message("user", "what now?")]) == []


# -- answers_refused: the rules a run's input must meet -------------------------------------------


def _refused(history: list[Message], inputs: list[Message], awaits: object = None) -> str | None:
    answers = approval_responses(inputs)
    return answers_refused(history, inputs, answers, awaits)  # type: ignore[arg-type]


def test_a_new_turn_while_a_batch_waits_is_refused_and_names_the_calls() -> None:
    reason = _refused(_paused_history(), [Message("user", "Anything else?")])
    assert reason is not None
    assert "'c2'" in reason
    assert "'c3'" in reason
    answered = [Message("user", "Hi."), Message("assistant", "Hello.")]
    assert _refused(answered, [Message("user", "More.")]) is None
    assert _refused([], [Message("user", "Hi.")]) is None


def test_answers_that_match_nothing_or_disagree_or_come_with_text_are_refused() -> None:
    history = _paused_history()
    assert "match no call" in (_refused(history, [Message("user", (_answer("c9"),))]) or "")
    # c1 has its result already: an answer to it answers nothing
    assert "match no call" in (_refused(history, [Message("user", (_answer("c1"),))]) or "")
    two = [Message("user", (_answer("c2"), _answer("c2", approved=False)))]
    assert "two different approval answers" in (_refused(history, two) or "")
    assert _refused(history, [Message("user", (_answer("c2"), _answer("c2")))]) is None  # said twice
    mixed = [Message("user", ("And also:", _answer("c2")))]
    assert "on their own" in (_refused(history, mixed) or "")


def test_a_resume_must_answer_every_call_of_the_batch_that_waits_for_a_human() -> None:
    """``awaits`` is asked only of the batch's unanswered calls; without it nothing is missing."""
    history, inputs = _paused_history(), [Message("user", (_answer("c2"),))]
    asked: list[str | None] = []

    def awaits(call: Content) -> bool:
        asked.append(call.call_id)
        return call.name == "log"

    reason = _refused(history, inputs, awaits)
    assert reason is not None
    assert "['c3']" in reason
    assert asked == ["c3"]  # c1 has its result, c2 is answered
    assert _refused(history, inputs, lambda call: False) is None
    assert _refused(history, inputs) is None


def _reused_id_history() -> list[Message]:
    """A model that numbers each answer's calls afresh: ``c0`` ran, then ``c0`` again waits."""
    return [
        Message("user", "Check, then pay."),
        Message("assistant", (_call("c0", "balance", "{}"),)),
        Message("tool", (_result("c0"),)),
        Message("assistant", (_call("c0"),)),
    ]


def test_of_calls_sharing_an_id_the_last_one_is_the_one_awaiting() -> None:
    history = _reused_id_history()
    (request,) = approval_requests(history, ["c0"])
    assert (request.call_id, request.name) == ("c0", "wire")
    assert unmatched_approvals(history, [Message("user", (_answer("c0"),))]) == []
    answered = [*history, Message("tool", (_result("c0"),))]  # the second c0 has its result too
    assert unmatched_approvals(answered, [Message("user", (_answer("c0"),))]) == ["c0"]

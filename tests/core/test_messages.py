"""``core/messages.py``: how messages normalise their contents, what their text is, how token
counts add up, the read-only conversation window, and which function calls cannot run."""

from __future__ import annotations

import msgspec
import pytest

from agentledger.core.messages import Content, Message, MessageView, Usage, malformed_calls, result_text

INT64_MAX = 2**63 - 1


def test_strings_dicts_and_a_lone_content_become_a_tuple_of_contents() -> None:
    call = Content.from_function_call("c1", "f")
    as_decoded = {"type": "text", "text": "there"}  # a content as plain data (untyped: not in the signature)
    message = Message("user", ["hi", call, as_decoded])  # type: ignore[list-item]
    assert message.contents == (Content("text", text="hi"), call, Content("text", text="there"))
    assert Message("user", "hi").contents == (Content("text", text="hi"),)
    assert Message("assistant", call).contents == (call,)


def test_a_content_of_another_type_is_refused() -> None:
    with pytest.raises(TypeError, match="must be a Content, a str or a dict, not int"):
        Message("user", ["hi", 3])  # type: ignore[list-item]


def test_a_message_reads_back_from_the_log_as_it_was() -> None:
    message = Message("assistant", ("a", Content.from_function_call("c1", "f", arguments={"x": 1})), "bot")
    assert msgspec.json.decode(msgspec.json.encode(message), type=Message) == message


def test_the_text_is_the_text_contents_joined_by_spaces() -> None:
    call = Content.from_function_call("c1", "f")
    assert Message("user", "hi").text == "hi"
    assert Message("assistant", call).text == ""  # a lone call has no text
    assert Message("user", ["one", call, "", "two"]).text == "one two"
    assert Message("user").text == ""


def test_function_calls_are_the_call_contents_in_order() -> None:
    first, second = Content.from_function_call("a", "f"), Content.from_function_call("b", "g")
    assert Message("assistant", [first, "text", second]).function_calls == (first, second)


def test_mapping_arguments_are_kept_as_json_text_with_sorted_keys() -> None:
    call = Content.from_function_call("c1", "f", arguments={"b": 1, "a": [True, None]})
    assert call.arguments == '{"a":[true,null],"b":1}'
    assert (
        Content.from_function_call("c2", "f", arguments='{"b": 1}').arguments == '{"b": 1}'
    )  # text as given
    assert Content.from_function_call("c3", "f").arguments is None


def test_only_an_approval_request_can_be_answered() -> None:
    request = Content("function_approval_request", call_id="c1", name="wire")
    answer = request.to_approval_response(False, reason="too much")
    assert (answer.type, answer.call_id, answer.approved, answer.reason) == (
        "function_approval_response",
        "c1",
        False,
        "too much",
    )
    with pytest.raises(ValueError, match="only an approval request"):
        Content.from_function_call("c1", "wire").to_approval_response(True)
    with pytest.raises(ValueError, match="only an approval request"):
        Content("function_approval_request").to_approval_response(True)  # no call to answer


def test_usage_adds_each_count() -> None:
    total = Usage(1, 2, 3, cache_read_tokens=4) + Usage(10, 20, 30, cache_read_tokens=40, reasoning_tokens=5)
    assert total == Usage(11, 22, 33, cache_read_tokens=44, cache_write_tokens=None, reasoning_tokens=5)


def test_a_count_neither_side_reported_stays_unknown() -> None:
    total = Usage(1, 1, 2) + Usage(1, 1, 2)
    assert (total.cache_read_tokens, total.cache_write_tokens, total.reasoning_tokens) == (None, None, None)
    assert (Usage(cache_write_tokens=0) + Usage()).cache_write_tokens == 0  # a reported zero is kept


def test_usage_sums_stop_at_what_a_log_holds() -> None:
    big = Usage(INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX)
    total = big + Usage(1, 1, 1, 1, 1, 1)
    assert total == big


def _view() -> tuple[MessageView, list[Message]]:
    head = (Message("user", "h0"), Message("assistant", "h1"))
    body = [Message("user", "b0"), Message("assistant", "b1"), Message("user", "b2")]
    return MessageView(head, body, start=1, stop=3), body


def test_a_view_is_its_head_then_its_slice_of_the_body() -> None:
    view, _ = _view()
    texts = ["h0", "h1", "b1", "b2"]
    assert len(view) == 4
    assert [m.text for m in view] == texts
    assert [view[i].text for i in range(4)] == texts
    assert view[-1].text == "b2"
    assert view[-4].text == "h0"
    assert [m.text for m in view[1:3]] == ["h1", "b1"]


@pytest.mark.parametrize("index", [4, -5])
def test_an_index_outside_the_view_is_refused(index: int) -> None:
    view, _ = _view()
    with pytest.raises(IndexError):
        view[index]


def test_a_view_does_not_change_when_the_body_grows_past_it() -> None:
    view, body = _view()
    before = list(view)
    body.append(Message("assistant", "later"))
    assert list(view) == before
    assert len(MessageView((), body)) == 4  # a view made now sees the whole body


def test_a_view_equals_any_sequence_of_the_same_messages() -> None:
    view, _ = _view()
    assert view == list(view)
    assert view == tuple(view)
    assert view != list(view)[:-1]
    assert view != [*list(view)[:-1], Message("user", "other")]
    assert view != "h0h1b1b2"
    with pytest.raises(TypeError):
        hash(view)


def test_a_tool_result_is_text_verbatim_and_anything_else_json() -> None:
    assert result_text("already text") == "already text"
    assert result_text({"b": 1, "a": "x"}) == '{"a":"x","b":1}'
    assert result_text(None) == "null"
    assert result_text(["1", 2]) == '["1",2]'


def test_calls_that_can_run_are_not_malformed() -> None:
    assert malformed_calls([]) is None
    assert malformed_calls([Content.from_text("hi")]) is None
    assert malformed_calls([Content.from_function_call("a", "f")]) is None
    assert (
        malformed_calls([Content.from_function_call("a", "f"), Content.from_function_call("b", "f")]) is None
    )


def test_a_call_without_an_id_is_malformed_alone_or_among_others() -> None:
    assert malformed_calls([Content("function_call", name="f")]) == "a function call has no call id"
    many = [
        Content.from_text("x"),
        Content.from_function_call("a", "f"),
        Content("function_call", call_id=""),
    ]
    assert malformed_calls(many) == "a function call has no call id"


def test_two_calls_sharing_an_id_are_malformed() -> None:
    twice = [
        Content.from_function_call("a", "f"),
        Content.from_text("x"),
        Content.from_function_call("a", "g"),
    ]
    assert malformed_calls(twice) == "call id 'a' appears twice in one response"
    # a result sharing a call's id is no second call
    assert malformed_calls([Content.from_function_call("a", "f"), Content.from_function_result("a")]) is None

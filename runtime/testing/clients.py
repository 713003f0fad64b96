"""The ``BaseChatClient`` contract: the checks every chat client passes, scripted or over HTTP.

A run relies on a client for little, and on that exactly: one ``get_response`` is one model call
and returns a ``ChatResponse`` whose assistant message holds the text and the function calls, each
call with its id and its arguments as the raw JSON text the model wrote; the usage is reported;
``get_streaming_response`` yields updates that ``merge_updates`` folds into the same response;
``client_kwargs`` reach the model call they were given to, and no other; the request is left as it
was given; and a failure of the backend is raised as a typed error (an ``AgentLedgerError``), which
a run records as ``ModelFailed`` under the error's class name.

Subclass ``ChatClientContract`` in a test module and put a fake backend behind the client (a
script, ``httpx.MockTransport``, a server on loopback), one that answers each model call with the
next ``ModelAnswer`` in the wire format the client speaks::

    import pytest

    pytest.register_assert_rewrite("agentledger.testing.clients")  # detailed assertion messages
    from agentledger.testing.clients import ChatClientContract


    class TestMyClient(ChatClientContract):
        def open_client(self, answers): ...
        def failing_client(self): ...
        def tagged_kwargs(self, tag): ...
        def seen_tags(self): ...

The tests are async (``@pytest.mark.anyio``): they need pytest, which ``agentledger`` does not
depend on, and anyio's pytest plugin.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

try:
    import pytest
except ImportError:  # pragma: no cover - exercised only without pytest
    raise ImportError("agentledger.testing.clients needs pytest: pip install pytest") from None

from agentledger.clients import BaseChatClient, ChatOptions, ChatResponse, ChatResponseUpdate, merge_updates
from agentledger.core.events import ToolSpec
from agentledger.core.messages import Content, Message, Usage
from agentledger.errors import AgentLedgerError

__all__ = ("ChatClientContract", "FunctionCall", "ModelAnswer")


class FunctionCall(NamedTuple):
    """A function call the model makes; ``arguments`` is the JSON text exactly as written."""

    call_id: str
    name: str
    arguments: str


class ModelAnswer(NamedTuple):
    """What the backend answers to one model call: text, then function calls, and the usage."""

    text: str = ""
    calls: tuple[FunctionCall, ...] = ()
    usage: Usage = Usage(input_tokens=21, output_tokens=8, total_tokens=29)

    @property
    def contents(self) -> tuple[Content, ...]:
        """The assistant message's contents a client must return for this answer."""
        text = (Content.from_text(self.text),) if self.text else ()
        calls = tuple(
            Content.from_function_call(c.call_id, c.name, arguments=c.arguments) for c in self.calls
        )
        return text + calls

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.calls else "stop"


TEXT = ModelAnswer("Lima is sunny, 24 degrees.")
CALLS = ModelAnswer(
    calls=(
        FunctionCall("call_lima", "lookup", '{"city": "Lima"}'),
        FunctionCall("call_oslo", "lookup", '{"city":"Oslo",  "days": [1, 2]}'),
    ),
    usage=Usage(input_tokens=30, output_tokens=12, total_tokens=42),
)
TEXT_AND_CALL = ModelAnswer("Checking Lima first.", (FunctionCall("call_1", "lookup", '{"city": "Lima"}'),))
ANSWERS = {"text": TEXT, "calls": CALLS, "text-and-call": TEXT_AND_CALL}

LOOKUP = ToolSpec(
    name="lookup",
    description="Today's weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def _messages() -> list[Message]:
    return [
        Message("system", (Content.from_text("Answer briefly."),)),
        Message("user", (Content.from_text("What is the weather in Lima and Oslo?"),)),
    ]


def _options() -> ChatOptions:
    return {"tools": [LOOKUP], "tool_choice": "auto", "temperature": 0.0}


def _contents(messages: Sequence[Message]) -> list[Content]:
    return [content for message in messages for content in message.contents]


class ChatClientContract:
    """What every ``BaseChatClient`` does; subclasses put a fake backend behind the client."""

    error_type: ClassVar[type[Exception]] = AgentLedgerError
    """What a failed backend call raises: ``AgentLedgerError`` or a narrower class of the client."""

    def open_client(self, answers: Sequence[ModelAnswer]) -> BaseChatClient:
        """A client whose backend answers each model call with the next of ``answers``.

        The backend answers in its wire format, whole or streamed, as the call asks for.
        """
        raise NotImplementedError

    def failing_client(self) -> BaseChatClient:
        """A client whose backend fails the next model call (an error status, a broken stream...)."""
        raise NotImplementedError

    def tagged_kwargs(self, tag: str) -> dict[str, Any]:
        """``client_kwargs`` the client passes to its backend marked with ``tag`` (a header, say)."""
        raise NotImplementedError

    def seen_tags(self) -> list[str | None]:
        """For every model call the backend of the last opened client received, the tag it carried."""
        raise NotImplementedError

    async def stream(self, client: BaseChatClient, **kwargs: Any) -> list[ChatResponseUpdate]:
        """Every update of one streamed call of ``client`` to the contract's request."""
        updates = client.get_streaming_response(_messages(), options=_options(), **kwargs)
        return [update async for update in updates]

    @pytest.mark.anyio
    async def test_one_call_returns_one_assistant_response(self) -> None:
        """get_response returns a ChatResponse of assistant messages with the answer's text."""
        response = await self.open_client([TEXT]).get_response(_messages(), options=_options())
        assert isinstance(response, ChatResponse)
        assert [m.role for m in response.messages] == ["assistant"] * len(response.messages)
        assert response.text == TEXT.text
        assert _contents(response.messages) == list(TEXT.contents)
        assert response.finish_reason == "stop"

    @pytest.mark.anyio
    @pytest.mark.parametrize("kind", ["calls", "text-and-call"])
    async def test_function_calls_keep_their_ids_and_raw_arguments(self, kind: str) -> None:
        """Function calls come back in order with their call ids and arguments text unchanged."""
        answer = ANSWERS[kind]
        response = await self.open_client([answer]).get_response(_messages(), options=_options())
        assert _contents(response.messages) == list(answer.contents)
        calls = [c for m in response.messages for c in m.function_calls]
        assert [(c.call_id, c.name, c.arguments) for c in calls] == list(answer.calls)
        assert response.finish_reason == "tool_calls"

    @pytest.mark.anyio
    @pytest.mark.parametrize("kind", list(ANSWERS))
    async def test_usage_is_reported(self, kind: str) -> None:
        """The response's usage is the backend's token counts for that call."""
        answer = ANSWERS[kind]
        response = await self.open_client([answer]).get_response(_messages(), options=_options())
        assert response.usage == answer.usage

    @pytest.mark.anyio
    @pytest.mark.parametrize("kind", list(ANSWERS))
    async def test_stream_merges_to_the_same_response(self, kind: str) -> None:
        """get_streaming_response yields assistant updates that merge into get_response's answer."""
        answer = ANSWERS[kind]
        client = self.open_client([answer, answer])
        whole = await client.get_response(_messages(), options=_options())
        updates = await self.stream(client)
        assert all(isinstance(u, ChatResponseUpdate) and u.role == "assistant" for u in updates)
        merged = merge_updates(updates)
        assert _contents(merged.messages) == list(answer.contents) == _contents(whole.messages)
        assert (merged.usage, merged.finish_reason) == (answer.usage, answer.finish_reason)
        assert (merged.usage, merged.finish_reason, merged.model) == (
            whole.usage,
            whole.finish_reason,
            whole.model,
        )

    @pytest.mark.anyio
    async def test_client_kwargs_reach_only_their_call(self) -> None:
        """Each call's client_kwargs reach the backend for that call, unchanged, and no other call."""
        client = self.open_client([TEXT] * 4)
        given = self.tagged_kwargs("first")
        before = copy.deepcopy(given)
        await client.get_response(_messages(), options=_options(), client_kwargs=given)
        await self.stream(client, client_kwargs=self.tagged_kwargs("streamed"))
        await client.get_response(_messages(), options=_options())
        await client.get_response(_messages(), options=_options(), client_kwargs=self.tagged_kwargs("last"))
        assert self.seen_tags() == ["first", "streamed", None, "last"]
        assert given == before

    @pytest.mark.anyio
    async def test_the_request_is_left_as_given(self) -> None:
        """The messages and options passed in are not changed by a call, whole or streamed."""
        client = self.open_client([CALLS, CALLS])
        messages, options = _messages(), _options()
        await client.get_response(messages, options=options)
        updates = client.get_streaming_response(messages, options=options)
        _ = [update async for update in updates]
        assert (messages, options) == (_messages(), _options())

    @pytest.mark.anyio
    async def test_backend_failure_is_a_typed_error(self) -> None:
        """A failed call raises the client's typed error, whole or streamed."""
        with pytest.raises(self.error_type) as whole:
            await self.failing_client().get_response(_messages(), options=_options())
        with pytest.raises(self.error_type) as streamed:
            await self.stream(self.failing_client())
        for caught in (whole, streamed):
            assert isinstance(caught.value, AgentLedgerError)

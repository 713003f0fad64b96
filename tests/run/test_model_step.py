"""``run/model_step.py``: ``call_model`` carries out one ``CallModel`` and records what came back.
An answer the log can hold is ``ModelResponded``; a client that raised, or an answer the run
cannot use or the log cannot hold, is ``ModelFailed`` with the error kept for the driver; chat
middleware's changes, answers and terminations are recorded as theirs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec
import pytest

from agentledger import Agent, BaseChatClient, ChatResponse, Content, Message, tool
from agentledger.chat import ChatOptions, ChatResponseUpdate
from agentledger.context import ChatContext
from agentledger.core import (
    CallModel,
    Event,
    MiddlewareShortCircuit,
    ModelFailed,
    ModelRequestRewritten,
    ModelResponded,
    RunMachine,
    RunStarted,
    RunTerminated,
)
from agentledger.core.messages import Usage
from agentledger.errors import MiddlewareFailure, MiddlewareTermination, ModelCallError, ModelResponseError
from agentledger.middleware import CallNext
from agentledger.run import RunBinding, RunRecorder, call_model

pytestmark = pytest.mark.anyio

INT64_MAX = 2**63 - 1


class Answers(BaseChatClient):
    """A client that answers each call with the next value (an exception is raised), and keeps
    the options and keyword arguments it was called with."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.options: list[dict[str, Any]] = []

    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        options: ChatOptions | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ChatResponse:
        self.options.append(dict(options or {}))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer  # type: ignore[no-any-return]


@tool
def lookup(city: str) -> str:
    return city


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


def _ready(
    client: BaseChatClient,
    *,
    middleware: Sequence[Any] = (),
    price: Callable[[str, Usage, int], float | None] | None = None,
    on_update: Callable[[Any], None] | None = None,
    options: Mapping[str, Any] | None = None,
    client_kwargs: Mapping[str, Any] | None = None,
) -> tuple[RunBinding, RunRecorder, CallModel]:
    """A run waiting on its first model call: its binding, its recorder and the machine's command."""
    agent = Agent(client=client, tools=[lookup], middleware=list(middleware), price=price)
    spec = agent.run_spec(options=options, client_kwargs=client_kwargs)
    recorder = RunRecorder(RunMachine(), "run-1", Clock(), [])
    fields = spec.started_fields(messages=[Message("user", "Hi.")], session_id=None, history_length=0)
    recorder.record(RunStarted, **fields)
    recorder.begin()
    command = recorder.commands[-1]
    assert isinstance(command, CallModel)
    return RunBinding(spec, recorder, None, on_update=on_update), recorder, command


async def _call(client: BaseChatClient, **ready: Any) -> tuple[RunBinding, list[Event]]:
    binding, recorder, command = _ready(client, **ready)
    before = len(recorder.log)
    await call_model(binding, command)
    return binding, recorder.log[before:]


def _failed(events: list[Event]) -> ModelFailed:
    failed = [e for e in events if isinstance(e, ModelFailed)]
    assert len(failed) == 1, events
    assert not any(isinstance(e, ModelResponded) for e in events)
    return failed[0]


async def test_an_answer_is_recorded_with_what_the_client_reported() -> None:
    usage = Usage(3, 4, 7, cache_read_tokens=1)
    answer = ChatResponse(
        text="Hello.",
        model="m-1",
        usage=usage,
        response_id="resp_1",
        finish_reason="stop",
        conversation_id="",
    )
    binding, events = await _call(Answers(answer))
    responded = events[0]
    assert isinstance(responded, ModelResponded)
    assert (responded.iteration, responded.message) == (1, Message("assistant", "Hello."))
    assert (responded.model, responded.usage, responded.response_id) == ("m-1", usage, "resp_1")
    assert (responded.finish_reason, responded.conversation_id, responded.cost) == ("stop", None, None)
    assert binding.error is None


async def test_the_client_is_sent_the_offered_tools_and_never_the_runs_limits() -> None:
    client = Answers(ChatResponse(text="ok"))
    options = {"max_input_tokens": 100, "max_cost": 1.0, "temperature": 0.2}
    await _call(client, options=options, price=_priced(None))
    (sent,) = client.options
    assert [t.name for t in sent["tools"]] == ["lookup"]
    assert "max_input_tokens" not in sent
    assert "max_cost" not in sent
    assert (sent["temperature"], sent["tool_choice"]) == (0.2, None)


async def test_the_conversation_is_the_commands_and_no_other() -> None:
    """The run's options may name a conversation; the machine's command says where this call goes."""
    client = Answers(ChatResponse(text="ok"), ChatResponse(text="ok"))
    binding, _, command = _ready(client, options={"conversation_id": "conv_old"})
    assert command.conversation_id == "conv_old"
    await call_model(binding, msgspec.structs.replace(command, conversation_id=None))
    binding, _, command = _ready(client, options={"conversation_id": "conv_old"})
    await call_model(binding, msgspec.structs.replace(command, conversation_id="conv_1"))
    assert "conversation_id" not in client.options[0]
    assert client.options[1]["conversation_id"] == "conv_1"


async def test_a_client_that_raises_is_a_failed_model_call_kept_for_the_driver() -> None:
    cause = ConnectionError("host down")
    binding, events = await _call(Answers(cause))
    failed = _failed(events)
    assert (failed.error_type, failed.message) == ("ConnectionError", "host down")
    error = binding.raised_error()
    assert isinstance(error, ModelCallError)
    assert error.__cause__ is cause
    assert error.seq == failed.seq


async def test_a_client_error_text_is_scrubbed_of_what_the_log_must_not_show() -> None:
    client = Answers(RuntimeError("refused key sk-test-0123456789abcdef0123 for tenant zebra-77"))
    binding, events = await _call(client, client_kwargs={"tenant": "zebra-77"})
    failed = _failed(events)
    assert "zebra-77" not in failed.message
    assert "sk-test-0123456789abcdef0123" not in failed.message
    raised = str(binding.raised_error())  # what agent.run's caller reads: scrubbed alike
    assert "zebra-77" not in raised
    assert "sk-test-0123456789abcdef0123" not in raised
    assert raised.startswith("model call 1 failed: RuntimeError: refused key ")


async def test_an_answer_that_is_no_chat_response_is_a_response_error() -> None:
    binding, events = await _call(Answers("just text"))
    failed = _failed(events)
    assert failed.error_type == "ModelResponseError"
    assert "returned str, not a ChatResponse" in failed.message
    assert isinstance(binding.raised_error(), ModelResponseError)


@pytest.mark.parametrize(
    ("usage", "field"),
    [
        (Usage(-1, 0, 0), "input_tokens"),
        (Usage(0, INT64_MAX + 1, 0), "output_tokens"),
        (Usage(0, 0, 1.5), "total_tokens"),  # type: ignore[arg-type]
        (Usage(0, 0, True), "total_tokens"),
        (Usage(0, 0, 0, reasoning_tokens=-3), "reasoning_tokens"),
    ],
)
async def test_token_counts_must_be_integers_a_log_holds(usage: Usage, field: str) -> None:
    _, events = await _call(Answers(ChatResponse(text="ok", usage=usage)))
    failed = _failed(events)
    assert failed.error_type == "ModelResponseError"
    assert f"usage.{field} must be an integer in 0..2**63-1" in failed.message


async def test_counts_the_client_did_not_report_stay_unknown() -> None:
    _, events = await _call(Answers(ChatResponse(text="ok", usage=Usage(1, 1, 2))))
    responded = events[0]
    assert isinstance(responded, ModelResponded)
    assert responded.usage == Usage(1, 1, 2, None, None, None)


async def test_calls_that_cannot_run_fail_the_model_call() -> None:
    twice = Message(
        "assistant", (Content.from_function_call("a", "lookup"), Content.from_function_call("a", "lookup"))
    )
    _, events = await _call(Answers(ChatResponse(twice)))
    assert "call id 'a' appears twice in one response" in _failed(events).message


async def test_an_approval_flag_that_is_no_boolean_is_refused() -> None:
    odd = Content("function_approval_response", call_id="a", approved="yes")  # type: ignore[arg-type]
    _, events = await _call(Answers(ChatResponse(Message("assistant", (odd,)))))
    assert "approved must be true, false or null" in _failed(events).message


async def test_a_ported_clients_mapping_arguments_are_recorded_as_json_text() -> None:
    call = Content("function_call", call_id="a", name="lookup", arguments={"city": "Oslo"})  # type: ignore[arg-type]
    nameless = Content("function_call", call_id="b", arguments="{}")
    _, events = await _call(Answers(ChatResponse(Message("assistant", (call, nameless)))))
    responded = events[0]
    assert isinstance(responded, ModelResponded)
    first, second = responded.message.contents
    assert first.arguments == '{"city":"Oslo"}'
    assert second.name == ""  # answered as an unknown tool


async def test_an_answer_the_log_could_not_give_back_is_a_failed_model_call() -> None:
    _, events = await _call(Answers(ChatResponse(text="bad \ud800")))
    failed = _failed(events)
    assert failed.error_type == "ModelResponseError"
    assert "cannot be recorded" in failed.message


def _priced(cost: Any) -> Callable[[str, Usage, int], Any]:
    def price(model: str, usage: Usage, at: int) -> Any:
        if isinstance(cost, BaseException):
            raise cost
        return cost(model, usage) if callable(cost) else cost

    return price


async def test_a_priced_answer_records_its_cost() -> None:
    price = _priced(lambda model, usage: usage.input_tokens * 0.5 if model == "m-1" else None)
    _, events = await _call(Answers(ChatResponse(text="ok", model="m-1", usage=Usage(4, 1, 5))), price=price)
    responded = events[0]
    assert isinstance(responded, ModelResponded)
    assert responded.cost == 2.0


async def test_no_cost_is_recorded_without_a_model_a_usage_or_a_known_price() -> None:
    calls: list[str] = []

    def price(model: str, usage: Usage, at: int) -> float | None:
        calls.append(model)
        return None

    for answer in (ChatResponse(text="ok", usage=Usage(1, 1, 2)), ChatResponse(text="ok", model="m-1")):
        _, events = await _call(Answers(answer), price=price)
        assert isinstance(events[0], ModelResponded)
        assert events[0].cost is None
    assert calls == []  # nothing to price: the table is not asked
    _, events = await _call(Answers(ChatResponse(text="ok", model="m-9", usage=Usage(1, 1, 2))), price=price)
    assert isinstance(events[0], ModelResponded)
    assert (events[0].cost, calls) == (None, ["m-9"])


@pytest.mark.parametrize(
    ("cost", "message"),
    [
        (-0.01, "a price must be a finite number of USD >= 0 or None"),
        (float("inf"), "a price must be a finite number"),
        ("0.1", "a price must be a finite number"),
        (KeyError("no such model"), "the price table failed"),
    ],
)
async def test_a_price_table_that_fails_or_answers_nonsense_fails_the_call(cost: Any, message: str) -> None:
    answer = ChatResponse(text="ok", model="m-1", usage=Usage(1, 1, 2))
    _, events = await _call(Answers(answer), price=_priced(cost))
    failed = _failed(events)
    assert failed.error_type == "ModelResponseError"
    assert message in failed.message


async def test_what_chat_middleware_changed_in_the_request_is_recorded() -> None:
    async def warmer(context: ChatContext, call_next: CallNext) -> None:
        context.options["temperature"] = 0.9
        await call_next()

    client = Answers(ChatResponse(text="ok"))
    _, events = await _call(client, middleware=[warmer], options={"temperature": 0.1})
    rewritten = [e for e in events if isinstance(e, ModelRequestRewritten)]
    assert len(rewritten) == 1
    assert (rewritten[0].by, rewritten[0].options, rewritten[0].tools) == (
        "chat_middleware",
        {"temperature": 0.9},
        ("lookup",),
    )
    assert client.options[0]["temperature"] == 0.9


async def test_chat_middleware_that_changes_nothing_records_nothing_of_its_own() -> None:
    async def looking(context: ChatContext, call_next: CallNext) -> None:
        await call_next()

    _, events = await _call(Answers(ChatResponse(text="ok")), middleware=[looking])
    assert [type(e) for e in events] == [ModelResponded]


async def test_chat_middleware_answering_in_the_models_place_is_recorded_as_a_short_circuit() -> None:
    async def cache(context: ChatContext, call_next: CallNext) -> None:
        raise MiddlewareTermination("cached", result=ChatResponse(text="From the cache."))

    client = Answers()
    _, events = await _call(client, middleware=[cache])
    assert client.options == []  # the client was not called
    short = [e for e in events if isinstance(e, MiddlewareShortCircuit)]
    responded = [e for e in events if isinstance(e, ModelResponded)]
    assert [(s.middleware, s.scope, s.result) for s in short] == [("cache", "model", "From the cache.")]
    assert responded[0].message.text == "From the cache."


async def test_chat_middleware_terminating_without_an_answer_ends_the_run() -> None:
    async def stop(context: ChatContext, call_next: CallNext) -> None:
        raise MiddlewareTermination("over budget")

    binding, events = await _call(Answers(), middleware=[stop])
    terminated = [e for e in events if isinstance(e, RunTerminated)]
    assert [(t.reason, t.by, t.iteration) for t in terminated] == [("over budget", "chat_middleware", 1)]
    assert not any(isinstance(e, ModelResponded | ModelFailed) for e in events)
    assert binding.error is None


async def test_a_middleware_failure_is_not_a_failed_model_call() -> None:
    async def guard(context: ChatContext, call_next: CallNext) -> None:
        raise MiddlewareFailure("blocked")

    binding, recorder, command = _ready(Answers(), middleware=[guard])
    before = len(recorder.log)
    with pytest.raises(MiddlewareFailure):
        await call_model(binding, command)
    assert recorder.log[before:] == []
    assert binding.error is None


async def test_a_streamed_call_shows_each_update_and_records_them_merged() -> None:
    shown: list[Any] = []
    call = Content.from_function_call("a", "lookup", arguments='{"city": "Oslo"}')
    answer = ChatResponse(Message("assistant", ("Looking.", call)), model="m-1")
    binding, recorder, command = _ready(Answers(answer), on_update=shown.append)
    await call_model(binding, command)
    assert [c.type for u in shown for c in u.contents] == ["text", "function_call"]
    responded = recorder.log[-1]
    assert isinstance(responded, ModelResponded)
    assert responded.message == Message("assistant", ("Looking.", call))


async def test_the_final_call_after_a_limit_streams_no_calls() -> None:
    shown: list[ChatResponseUpdate] = []
    call = Content.from_function_call("a", "lookup", arguments="{}")
    only_calls = ChatResponse(Message("assistant", (call,)))
    with_text = ChatResponse(Message("assistant", ("Stopping.", call)))
    for answer in (only_calls, with_text):
        binding, _, command = _ready(Answers(answer), on_update=shown.append)
        await call_model(binding, msgspec.structs.replace(command, final=True))
    assert [[c.type for c in u.contents] for u in shown] == [["text"]]  # the calls-only update is dropped

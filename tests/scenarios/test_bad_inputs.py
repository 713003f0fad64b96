"""Bad inputs and limits: what goes back to the model, what ends the run, and how calls run.

Tool-side problems (bad JSON, failed validation, unknown tools, exceptions) become function
results and the loop goes on; malformed model output and a failing chat client end the run with a
typed error after recording it. Parallel calls are proven concurrent with anyio events: when every
task is blocked, a watchdog looks at what has started.
"""

import threading
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from agentledger import (
    Agent,
    AgentResponse,
    ChatOptions,
    ChatResponse,
    Content,
    Message,
    ModelCallError,
    ModelResponseError,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptedRequest
from agentledger.core.events import (
    ArgumentsRejected,
    CallsSkipped,
    IterationLimitReached,
    ModelCalled,
    ModelFailed,
    ModelResponded,
    RunFailed,
    RunStarted,
    ToolCalled,
    ToolFailed,
    ToolNotFound,
    ToolReturned,
)
from agentledger.testing import FixedClock, SequentialIds, capture_events, event_types, events_of

only = events_of


def results_sent(request: ScriptedRequest) -> list[Any]:
    """The function results in the last message of a request."""
    return [c.result for c in request.messages[-1].contents if c.type == "function_result"]


def agent_for(
    script: Sequence[Any], tools: Sequence[Any], clock: FixedClock, ids: SequentialIds, **options: Any
) -> tuple[Agent, ScriptedChatClient]:
    client = ScriptedChatClient(list(script))
    return Agent(client=client, name="Bad", tools=list(tools), clock=clock, ids=ids, **options), client


calls: list[int] = []


@tool
def square(n: int) -> int:
    """Square a number."""
    calls.append(n)
    return n * n


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    calls.clear()


# -- errors that go back to the model --------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("raw", "reason"),
    [("{not json", "not valid JSON"), ("[2, 3]", "must be a JSON object")],
    ids=["malformed", "array"],
)
async def test_invalid_json_arguments_go_back_to_the_model(
    raw: str, reason: str, clock: FixedClock, ids: SequentialIds
) -> None:
    """Arguments that are not a JSON object are rejected, the tool does not run, the loop goes on."""
    agent, client = agent_for([Call("square", raw), "sorry"], [square], clock, ids)

    response = await agent.run("square it")

    assert calls == []
    assert response.text == "sorry"
    assert event_types(response.events) == [
        "RunStarted",
        "ModelCalled",
        "ModelResponded",
        "ArgumentsRejected",
        "ModelCalled",
        "ModelResponded",
        "RunCompleted",
    ]
    (rejected,) = only(response.events, ArgumentsRejected)
    assert (rejected.call_id, rejected.name) == ("call_1", "square")
    assert reason in rejected.reason
    assert results_sent(client.requests[1]) == ["Error: Argument parsing failed."]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("arguments", "reason"),
    [({"n": "three"}, "Expected `int`, got `str`"), ({}, "missing required field `n`")],
    ids=["wrong-type", "missing"],
)
async def test_arguments_that_fail_validation_go_back_to_the_model(
    arguments: dict[str, Any], reason: str, clock: FixedClock, ids: SequentialIds
) -> None:
    """Arguments not matching the schema are rejected; the reason is shown only with detailed errors."""
    agent, client = agent_for([Call("square", arguments), "sorry"], [square], clock, ids)
    detailed, detailed_client = agent_for(
        [Call("square", arguments), "sorry"], [square], clock, ids, include_detailed_errors=True
    )

    response = await agent.run("square it")
    detailed_response = await detailed.run("square it")

    assert calls == []
    for run in (response, detailed_response):
        (rejected,) = only(run.events, ArgumentsRejected)
        assert reason in rejected.reason
        assert only(run.events, ToolCalled) == []
    assert results_sent(client.requests[1]) == ["Error: Argument parsing failed."]
    (shown,) = results_sent(detailed_client.requests[1])
    assert shown.startswith("Error: Argument parsing failed. Reason: ")
    assert reason in shown


@pytest.mark.anyio
async def test_unknown_tool_goes_back_to_the_model_in_call_order(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """A call to a tool not offered is ToolNotFound; the batch's other calls run, results in call order."""
    agent, client = agent_for(
        [[Call("square", {"n": 2}), Call("cube", {"n": 2}), Call("square", {"n": 3})], "done"],
        [square],
        clock,
        ids,
    )

    response = await agent.run("go")

    assert sorted(calls) == [2, 3]
    (missing,) = only(response.events, ToolNotFound)
    assert (missing.call_id, missing.name, missing.reason) == ("call_2", "cube", "not in the tools offered")
    assert results_sent(client.requests[1]) == ["4", 'Error: Requested function "cube" not found.', "9"]
    assert [c.call_id for c in client.requests[1].messages[-1].contents] == ["call_1", "call_2", "call_3"]
    assert response.text == "done"


@pytest.mark.anyio
async def test_unknown_tool_when_no_tools_are_offered(clock: FixedClock, ids: SequentialIds) -> None:
    """With no tools offered, a function call still gets a not-found error and the loop goes on."""
    agent, client = agent_for([Call("square", {"n": 2}), "I have no tools."], [], clock, ids)

    response = await agent.run("go")

    assert client.requests[0].tools == ()
    (missing,) = only(response.events, ToolNotFound)
    assert (missing.name, missing.reason) == ("square", "no tools are offered")
    assert results_sent(client.requests[1]) == ['Error: Requested function "square" not found.']
    assert response.text == "I have no tools."


@tool
def explode(n: int) -> int:
    raise ValueError(f"cannot handle {n}")


@tool
async def explode_async(n: int) -> int:
    raise ValueError(f"cannot handle {n}")


@pytest.mark.anyio
@pytest.mark.parametrize("failing", [explode, explode_async], ids=["sync", "async"])
@pytest.mark.parametrize(
    ("detailed", "model_sees"),
    [
        (False, "Error: Function failed."),
        (True, "Error: Function failed. Exception: ValueError: cannot handle 7"),
    ],
    ids=["generic", "detailed"],
)
async def test_a_tool_that_raises(
    failing: Any, detailed: bool, model_sees: str, clock: FixedClock, ids: SequentialIds
) -> None:
    """A tool exception is recorded as ToolFailed; the model gets a generic message unless details are on."""
    agent, client = agent_for(
        [Call(failing.name, {"n": 7}), "it failed"], [failing], clock, ids, include_detailed_errors=detailed
    )

    response = await agent.run("go")

    assert event_types(response.events)[3:6] == ["ToolCalled", "ToolFailed", "ModelCalled"]
    (failed,) = only(response.events, ToolFailed)
    assert (failed.call_id, failed.error_type, failed.message) == ("call_1", "ValueError", "cannot handle 7")
    assert results_sent(client.requests[1]) == [model_sees]
    assert response.text == "it failed"


# -- errors that end the run -----------------------------------------------------------------------


def two_calls_with_one_id() -> Message:
    a = Content.from_function_call("dup", "square", arguments={"n": 1})
    b = Content.from_function_call("dup", "square", arguments={"n": 2})
    return Message("assistant", (a, b))


def call_without_id() -> Message:
    return Message("assistant", (Content("function_call", name="square", arguments='{"n": 1}'),))


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("answer", "problem"),
    [(two_calls_with_one_id(), "appears twice"), (call_without_id(), "no call id")],
    ids=["duplicate-ids", "missing-id"],
)
async def test_malformed_model_response_raises_model_response_error(
    answer: Message, problem: str, clock: FixedClock, ids: SequentialIds
) -> None:
    """Duplicate or missing call ids end the run with ModelResponseError after ModelFailed and RunFailed."""
    agent, _ = agent_for([answer, "never"], [square], clock, ids)

    with capture_events() as events, pytest.raises(ModelResponseError, match=problem) as raised:
        await agent.run("go")

    assert calls == []
    assert event_types(events) == ["RunStarted", "ModelCalled", "ModelFailed", "RunFailed"]
    (failed,) = only(events, ModelFailed)
    assert (failed.iteration, failed.error_type) == (1, "ModelResponseError")
    assert problem in failed.message
    assert (raised.value.run_id, raised.value.seq) == (failed.run_id, failed.seq)
    assert only(events, RunFailed)[0].error_type == "ModelResponseError"
    assert agent.store is not None
    assert await agent.store.read(failed.run_id) == events


class FailingClient(ScriptedChatClient):
    """A chat client whose second call fails like an unavailable upstream."""

    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        options: ChatOptions | None = None,
        function_invocation_kwargs: Any = None,
        client_kwargs: Any = None,
        **kwargs: Any,
    ) -> ChatResponse:
        if self.requests:
            raise ConnectionError("upstream unavailable (503)")
        return await super().get_response(messages, options=options, client_kwargs=client_kwargs)


@pytest.mark.anyio
async def test_a_chat_client_that_raises_ends_the_run_with_model_call_error(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """A client exception is raised as ModelCallError (cause kept) after ModelFailed and RunFailed."""
    client = FailingClient([Call("square", {"n": 2})])
    agent = Agent(client=client, name="Bad", tools=[square], clock=clock, ids=ids)

    with capture_events() as events, pytest.raises(ModelCallError) as raised:
        await agent.run("go")

    assert isinstance(raised.value.__cause__, ConnectionError)
    assert calls == [2]
    assert event_types(events)[-3:] == ["ModelCalled", "ModelFailed", "RunFailed"]
    (failed,) = only(events, ModelFailed)
    assert (failed.iteration, failed.error_type) == (2, "ConnectionError")
    assert failed.message == "upstream unavailable (503)"
    assert (raised.value.run_id, raised.value.seq) == (failed.run_id, failed.seq)
    (run_failed,) = only(events, RunFailed)
    assert run_failed.error_type == "ModelCallError"
    assert agent.store is not None
    assert await agent.store.read(failed.run_id) == events


# -- limits ------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_max_consecutive_errors_ends_with_a_final_call_without_tools(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """After 3 erroring batches in a row (the default) the model gets one final call with tool_choice none."""
    script = [Call("nope"), Call("square", "{bad"), Call("nope"), "giving up"]
    agent, client = agent_for(script, [square], clock, ids)

    response = await agent.run("go")

    assert only(response.events, RunStarted)[0].config.max_consecutive_errors == 3
    (limit,) = only(response.events, IterationLimitReached)
    assert (limit.iteration, limit.reason, limit.limit) == (3, "max_consecutive_errors", 3)
    assert [e.tool_choice for e in only(response.events, ModelCalled)] == [None, None, None, "none"]
    assert [r.tool_choice for r in client.requests] == [None, None, None, "none"]
    assert event_types(response.events)[-4:] == [
        "IterationLimitReached",
        "ModelCalled",
        "ModelResponded",
        "RunCompleted",
    ]
    assert response.text == "giving up"


@pytest.mark.anyio
async def test_a_good_batch_resets_the_error_streak(clock: FixedClock, ids: SequentialIds) -> None:
    """Only consecutive erroring batches count toward max_consecutive_errors."""
    script = [Call("nope"), Call("square", {"n": 2}), Call("nope"), Call("nope"), "giving up"]
    agent, client = agent_for(script, [square], clock, ids, max_consecutive_errors=2)

    response = await agent.run("go")

    (limit,) = only(response.events, IterationLimitReached)
    assert (limit.iteration, limit.reason, limit.limit) == (4, "max_consecutive_errors", 2)
    assert [r.tool_choice for r in client.requests] == [None, None, None, None, "none"]
    assert response.text == "giving up"


@pytest.mark.anyio
async def test_max_iterations_ends_with_one_final_call_without_tools(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """At max_iterations the model gets one final call with tool_choice none; calls it makes are
    dropped (the log keeps them) and the answer says the limit was reached."""
    script = [Call("square", {"n": 2}), Call("square", {"n": 3}), Call("square", {"n": 4})]
    agent, client = agent_for(script, [square], clock, ids, max_iterations=2)

    response = await agent.run("go")

    assert calls == [2, 3]
    (limit,) = only(response.events, IterationLimitReached)
    assert (limit.iteration, limit.reason, limit.limit) == (2, "max_iterations", 2)
    called = only(response.events, ModelCalled)
    assert [(e.iteration, e.tool_choice) for e in called] == [(1, None), (2, None), (3, "none")]
    assert [r.tool_choice for r in client.requests] == [None, None, "none"]
    assert event_types(response.events)[-4:] == [
        "ModelCalled",
        "ModelResponded",
        "CallsSkipped",
        "RunCompleted",
    ]
    assert len(only(response.events, ToolCalled)) == 2
    (skipped,) = only(response.events, CallsSkipped)
    assert (skipped.call_ids, skipped.reason) == (("call_3",), "max_iterations")
    assert response.finish_reason == "limit_reached"
    assert [m.role for m in response.messages] == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert response.text == "Function invocation limit reached before a final answer could be produced."
    assert not response.messages[-1].function_calls
    (final,) = [e for e in only(response.events, ModelResponded) if e.iteration == 3]
    assert [c.call_id for c in final.message.function_calls] == ["call_3"]


def test_default_iteration_limit_is_40() -> None:
    """An agent allows 40 iterations and 3 consecutive erroring batches unless told otherwise."""
    agent = Agent(client=ScriptedChatClient())

    assert (agent.config.max_iterations, agent.config.max_consecutive_errors) == (40, 3)


# -- how a batch runs --------------------------------------------------------------------------------


async def run_and_watch(agent: Agent, release: anyio.Event) -> tuple[AgentResponse, bool]:
    """Run the agent; once every task is blocked, set ``release`` and say whether it was still unset."""
    responses: list[AgentResponse] = []

    async def run() -> None:
        responses.append(await agent.run("go"))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await anyio.wait_all_tasks_blocked()
        was_stuck = not release.is_set()
        release.set()
    return responses[0], was_stuck


def slow_and_fast(fast_done: anyio.Event) -> list[Any]:
    """``slow`` can only finish after ``fast`` has run."""

    @tool
    async def slow() -> str:
        await fast_done.wait()
        return "slow result"

    @tool
    async def fast() -> str:
        fast_done.set()
        return "fast result"

    return [slow, fast]


@pytest.mark.anyio
async def test_parallel_calls_run_concurrently_and_return_in_the_models_order(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """The calls of one response run concurrently; the log keeps them call by call in the model's
    order (``fast`` finished first), and their results reach the model in call order."""
    fast_done = anyio.Event()
    agent, client = agent_for([[Call("slow"), Call("fast")], "done"], slow_and_fast(fast_done), clock, ids)

    response, was_stuck = await run_and_watch(agent, fast_done)

    assert not was_stuck
    batch = [(type(e).__name__, e.name) for e in response.events if isinstance(e, ToolCalled | ToolReturned)]
    assert batch == [
        ("ToolCalled", "slow"),
        ("ToolReturned", "slow"),
        ("ToolCalled", "fast"),
        ("ToolReturned", "fast"),
    ]
    assert results_sent(client.requests[1]) == ["slow result", "fast result"]
    assert [c.call_id for c in client.requests[1].messages[-1].contents] == ["call_1", "call_2"]


@pytest.mark.anyio
async def test_sequential_tools_run_calls_one_after_another(clock: FixedClock, ids: SequentialIds) -> None:
    """With sequential_tools=True the second call starts only after the first one returned."""
    fast_done = anyio.Event()
    agent, client = agent_for(
        [[Call("slow"), Call("fast")], "done"], slow_and_fast(fast_done), clock, ids, sequential_tools=True
    )

    response, was_stuck = await run_and_watch(agent, fast_done)

    assert was_stuck
    assert event_types(response.events)[3:7] == ["ToolCalled", "ToolReturned", "ToolCalled", "ToolReturned"]
    assert results_sent(client.requests[1]) == ["slow result", "fast result"]


@pytest.mark.anyio
async def test_sync_tools_run_concurrently_in_worker_threads(clock: FixedClock, ids: SequentialIds) -> None:
    """Sync tools of one batch run at the same time, each in a worker thread, off the event loop:
    each waits at a barrier only the other can open. While they run, the first call (the head
    of the batch) is already in the log; the second's events follow once the first is done."""
    both_in = threading.Barrier(2, timeout=30)  # a broken barrier fails the test, never hangs it
    threads: dict[str, int] = {}
    seen: list[list[str]] = []

    def entered(name: str) -> None:
        threads[name] = threading.get_ident()
        both_in.wait()

    @tool
    def first() -> str:
        entered("first")
        return "first result"

    @tool
    def second() -> str:
        entered("second")
        return "second result"

    agent, client = agent_for([[Call("first"), Call("second")], "done"], [first, second], clock, ids)
    with capture_events() as events:
        response = await agent.run("go")
        seen.append([e.name for e in only(events, ToolCalled)])

    assert sorted(threads) == ["first", "second"]
    assert threading.get_ident() not in threads.values()
    assert threads["first"] != threads["second"]
    assert seen == [["first", "second"]]
    assert results_sent(client.requests[1]) == ["first result", "second result"]
    assert response.text == "done"

"""How runs end and what middleware is handed, as a program written for the reference framework
(agent-framework-core 1.23) sees them: the fail-closed ``MiddlewareFailure``, an answer set before
``MiddlewareTermination``, agent middleware ending a run before the loop, argument text that is no
JSON object, and the instructions and ``None`` values of a run's options. Each test runs the
program shape that was run on the reference; docs/differences.md lists where the outcome differs
on purpose."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest

from agentledger import (
    Agent,
    AgentContext,
    AgentResponse,
    AgentSession,
    ChatContext,
    ChatResponse,
    Content,
    FunctionInvocationContext,
    Message,
    MiddlewareFailure,
    MiddlewareTermination,
    agent_middleware,
    chat_middleware,
    function_middleware,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.core.events import (
    ArgumentsRejected,
    MiddlewareShortCircuit,
    RunCompleted,
    RunFailed,
    RunStarted,
    RunTerminated,
    ToolCalled,
)
from agentledger.replay import RecordedRun, load, rerun
from agentledger.testing import FixedClock, SequentialIds, event_types, events_of

pytestmark = pytest.mark.anyio
CallNext = Any
ran: list[Any] = []


@tool
def greet(name: str = "world", greeting: str = "hello") -> str:
    """Greet someone (every parameter has a default)."""
    ran.append((name, greeting))
    return f"{greeting} {name}"


@tool
def need(name: str) -> str:
    """Echo a name (required)."""
    ran.append(name)
    return name


def _agent(script: list[ScriptEntry], **options: Any) -> tuple[Agent, ScriptedChatClient]:
    ran.clear()
    client = ScriptedChatClient(script)
    return Agent(client=client, clock=FixedClock(), ids=SequentialIds(), **options), client


def _results(response: Any) -> list[tuple[Any, Any]]:
    return [
        (c.result, c.exception) for m in response.messages for c in m.contents if c.type == "function_result"
    ]


# -- argument text that is no JSON object -----------------------------------------------------------


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '"ada"'], ids=["text", "array", "string"])
@pytest.mark.parametrize("with_middleware", [False, True], ids=["bare", "middleware"])
async def test_a_tool_with_only_defaults_runs_on_text_that_is_no_json_object(
    text: str, with_middleware: bool
) -> None:
    """As on the reference: the text is taken as {"raw": text}, which names no parameter, so the
    tool runs on its defaults; middleware is handed the valid part of it (nothing)."""
    seen: list[dict[str, Any]] = []

    @function_middleware
    async def look(context: FunctionInvocationContext, call_next: CallNext) -> None:
        seen.append(dict(context.arguments))
        await call_next()

    middleware = [look] if with_middleware else []
    agent, _ = _agent([Call("greet", text), "done"], tools=[greet], middleware=middleware)
    response = await agent.run("go")
    assert ran == [("world", "hello")]
    assert _results(response) == [("hello world", None)]
    assert seen == ([{}] if with_middleware else [])
    [called] = events_of(response.events, ToolCalled)
    assert called.arguments == {"name": "world", "greeting": "hello"}


async def test_middleware_gets_text_that_is_no_json_object_as_raw_to_repair() -> None:
    """A tool with a required parameter: middleware sees {"raw": text} and may repair it; left
    unrepaired (or without middleware) the call is rejected and the tool does not run."""
    seen: list[dict[str, Any]] = []

    @function_middleware
    async def repair(context: FunctionInvocationContext, call_next: CallNext) -> None:
        seen.append(dict(context.arguments))
        if context.arguments.get("raw") == "<ada>":
            context.arguments = {"name": "ada"}
        await call_next()

    agent, _ = _agent(
        [[Call("need", "<ada>"), Call("need", "not json")], "done"], tools=[need], middleware=[repair]
    )
    response = await agent.run("go")
    assert seen == [{"raw": "<ada>"}, {"raw": "not json"}]
    assert ran == ["ada"]
    assert [r for r, _ in _results(response)] == ["ada", "Error: Argument parsing failed."]
    [rejected] = events_of(response.events, ArgumentsRejected)
    assert (rejected.call_id, "name" in rejected.reason) == ("call_2", True)

    bare, _ = _agent([Call("need", "not json"), "done"], tools=[need])
    response = await bare.run("go")
    assert ran == []
    [rejected] = events_of(response.events, ArgumentsRejected)
    assert "not valid JSON" in rejected.reason


async def test_context_arguments_keep_what_middleware_handed_on() -> None:
    """After call_next(), context.arguments holds what the model sent (no defaults filled in), as
    on the reference; the tool itself still gets its defaults."""
    after: list[dict[str, Any]] = []

    @function_middleware
    async def look(context: FunctionInvocationContext, call_next: CallNext) -> None:
        await call_next()
        after.append(dict(context.arguments))

    agent, _ = _agent([Call("greet", {"name": "ada"}), "done"], tools=[greet], middleware=[look])
    response = await agent.run("go")
    assert after == [{"name": "ada"}]
    assert ran == [("ada", "hello")]
    [called] = events_of(response.events, ToolCalled)
    assert called.arguments == {"name": "ada", "greeting": "hello"}


# -- MiddlewareFailure: fail closed ---------------------------------------------------------------


@tool
def step(n: int) -> str:
    """One step."""
    ran.append(n)
    return f"step {n}"


@function_middleware
async def deny_two(context: FunctionInvocationContext, call_next: CallNext) -> None:
    if context.arguments.get("n") == 2:
        raise MiddlewareFailure("step 2 is not allowed")
    await call_next()


async def _log(agent: Agent) -> list[Any]:
    assert agent.store is not None
    [run_id] = await agent.store.streams()
    return await agent.store.read(run_id)


async def test_function_middleware_failure_stops_the_batch_and_the_run() -> None:
    """A sequential batch: the call before ran, the one after never starts, no model call
    follows; run() raises the MiddlewareFailure itself and the log ends with RunFailed naming it.
    A session's history is left as it was, and a rerun reproduces the run exactly."""
    calls = [Call("step", {"n": 1}), Call("step", {"n": 2}), Call("step", {"n": 3})]
    agent, client = _agent([calls, "done"], tools=[step], middleware=[deny_two], sequential_tools=True)
    session = agent.create_session()
    with pytest.raises(MiddlewareFailure, match="step 2 is not allowed") as info:
        await agent.run("go", session=session)
    assert type(info.value) is MiddlewareFailure
    assert ran == [1]
    assert len(client.requests) == 1
    assert session.history == []
    log = await _log(agent)
    assert event_types(log)[-3:] == ["ToolCalled", "ToolReturned", "RunFailed"]
    [failed] = events_of(log, RunFailed)
    assert (failed.error_type, failed.message) == ("MiddlewareFailure", "step 2 is not allowed")
    assert agent.store is not None
    await rerun(await load(agent.store, log[0].run_id), agent)


async def test_function_middleware_failure_cancels_the_calls_still_running() -> None:
    """A concurrent batch: a call still running when another's middleware fails is cancelled."""
    never = anyio.Event()
    cancelled: list[str] = []

    @tool
    async def wait() -> str:
        """Wait for something that never comes."""
        try:
            await never.wait()
        except anyio.get_cancelled_exc_class():
            cancelled.append("wait")
            raise
        return "came"

    agent, client = _agent(
        [[Call("wait"), Call("step", {"n": 2})], "done"], tools=[wait, step], middleware=[deny_two]
    )
    with pytest.raises(MiddlewareFailure):
        await agent.run("go")
    assert cancelled == ["wait"]
    assert len(client.requests) == 1
    assert event_types(await _log(agent))[-1] == "RunFailed"


async def test_a_tool_raising_middleware_failure_fails_closed_too() -> None:
    """Without middleware, a tool that raises MiddlewareFailure aborts the run as well."""

    @tool
    def guard() -> str:
        """A guard that gives up."""
        raise MiddlewareFailure("guard unavailable")

    agent, client = _agent([Call("guard"), "done"], tools=[guard])
    with pytest.raises(MiddlewareFailure, match="guard unavailable"):
        await agent.run("go")
    assert len(client.requests) == 1


@pytest.mark.parametrize("kind", ["chat", "agent"])
async def test_chat_and_agent_middleware_failure_is_raised_as_it_is(kind: str) -> None:
    """Chat or agent middleware raising MiddlewareFailure: run() raises it (not ModelCallError),
    no model is called, RunFailed names it."""

    @chat_middleware
    async def chat_no(context: ChatContext, call_next: CallNext) -> None:
        raise MiddlewareFailure("chat says no")

    @agent_middleware
    async def agent_no(context: AgentContext, call_next: CallNext) -> None:
        raise MiddlewareFailure("agent says no")

    agent, client = _agent(["done"], middleware=[chat_no if kind == "chat" else agent_no])
    with pytest.raises(MiddlewareFailure, match=f"{kind} says no") as info:
        await agent.run("go")
    assert type(info.value) is MiddlewareFailure
    assert client.requests == []
    [failed] = events_of(await _log(agent), RunFailed)
    assert failed.error_type == "MiddlewareFailure"


def test_middleware_failure_has_the_reference_default_message() -> None:
    assert str(MiddlewareFailure()) == "Middleware failed."


# -- an answer set before MiddlewareTermination ----------------------------------------------------


def _said(text: str) -> ChatResponse:
    return ChatResponse(Message("assistant", (Content.from_text(text),)))


def _answer(text: str) -> AgentResponse:
    return AgentResponse(messages=[Message("assistant", (Content.from_text(text),))])


async def _rerun_last(agent: Agent) -> None:
    assert agent.store is not None
    run_ids = await agent.store.streams()
    await rerun(await load(agent.store, run_ids[-1]), agent)


@pytest.mark.parametrize("after_call_next", [False, True], ids=["instead", "after"])
async def test_chat_middleware_terminating_with_an_answer_answers_the_model_call(
    after_call_next: bool,
) -> None:
    """The ChatResponse it set is the run's answer (the reference returns it); the session's
    history holds the turn with that answer, and a rerun reproduces the run."""

    @chat_middleware
    async def canned(context: ChatContext, call_next: CallNext) -> None:
        if after_call_next:
            await call_next()
        context.result = _said("from chat middleware")
        raise MiddlewareTermination("stop")

    agent, client = _agent(["from the model"], middleware=[canned])
    session = agent.create_session()
    response = await agent.run("go", session=session)
    assert response.text == "from chat middleware"
    assert len(client.requests) == (1 if after_call_next else 0)
    assert [(m.role, m.text) for m in session.history] == [
        ("user", "go"),
        ("assistant", "from chat middleware"),
    ]
    shorts = events_of(response.events, MiddlewareShortCircuit)
    assert [(s.scope, s.middleware) for s in shorts] == ([] if after_call_next else [("model", "canned")])
    await _rerun_last(agent)


async def test_chat_middleware_terminating_with_an_answer_lets_its_calls_run() -> None:
    """As on the reference, the terminating answer is the model call's: calls in it run, and the
    loop goes on to the next model call."""
    calls: list[bool] = []

    @chat_middleware
    async def first_answer(context: ChatContext, call_next: CallNext) -> None:
        if not calls:
            calls.append(True)
            call = Content.from_function_call("c9", "step", arguments={"n": 7})
            context.result = ChatResponse(Message("assistant", (call,)))
            raise MiddlewareTermination("stop")
        await call_next()

    agent, client = _agent(["done"], tools=[step], middleware=[first_answer])
    response = await agent.run("go")
    assert ran == [7]
    assert response.text == "done"
    assert len(client.requests) == 1


@pytest.mark.parametrize("after_call_next", [False, True], ids=["before", "after"])
async def test_agent_middleware_terminating_with_an_answer_gives_it(after_call_next: bool) -> None:
    """context.result set before MiddlewareTermination is the run's answer, as on the reference."""

    @agent_middleware
    async def canned(context: AgentContext, call_next: CallNext) -> None:
        if after_call_next:
            await call_next()
        context.result = _answer("from agent middleware")
        raise MiddlewareTermination("stop")

    agent, client = _agent(["from the model"], middleware=[canned])
    response = await agent.run("go")
    assert response.text == "from agent middleware"
    assert len(client.requests) == (1 if after_call_next else 0)
    [completed] = events_of(await _log(agent), RunCompleted)
    assert completed.text == "from agent middleware"
    await _rerun_last(agent)


# -- agent middleware ending a run before call_next() ---------------------------------------------


@agent_middleware
async def closed(context: AgentContext, call_next: CallNext) -> None:
    context.result = _answer("We are closed.")


@agent_middleware
async def silent(context: AgentContext, call_next: CallNext) -> None:
    return


@agent_middleware
async def stop_here(context: AgentContext, call_next: CallNext) -> None:
    raise MiddlewareTermination("not today")


@agent_middleware
async def stop_with_answer(context: AgentContext, call_next: CallNext) -> None:
    context.result = _answer("Not today.")
    raise MiddlewareTermination("not today")


@pytest.mark.parametrize(
    "middleware", [closed, silent, stop_here, stop_with_answer], ids=lambda m: m.__name__
)
async def test_agent_middleware_ending_a_run_before_the_loop_leaves_the_history(middleware: Any) -> None:
    """The session's history is as it was, so the next run does not send that turn (as on the
    reference); the log says so, the rebuilt session agrees, and a rerun reproduces the run.
    Without an answer, run() returns an empty response here (None on the reference)."""

    @agent_middleware
    async def first_only(context: AgentContext, call_next: CallNext) -> None:
        if context.messages[-1].text == "first":
            await middleware(context, call_next)
            return
        await call_next()

    agent, client = _agent(["answered"], middleware=[first_only])
    session = agent.create_session()
    first = await agent.run("first", session=session)
    assert session.history == []
    assert client.requests == []
    assert first.text in ("We are closed.", "", "Not today.")
    ended = [e for e in await _log(agent) if isinstance(e, MiddlewareShortCircuit | RunTerminated)]
    assert [e.leaves_history for e in ended] == [True]
    await _rerun_last(agent)
    await agent.run("second", session=session)
    assert [m.text for m in client.requests[0].messages] == ["second"]
    assert agent.store is not None
    logs = [event for stream in await agent.store.streams() for event in await agent.store.read(stream)]
    rebuilt = AgentSession.from_events(logs, session.session_id)
    assert rebuilt.history == session.history


async def test_an_older_log_of_a_short_circuited_run_still_grows_the_history() -> None:
    """A log recorded before the rule changed (no leaves_history) is read as it was lived: the
    run added its input and answer."""
    agent, _ = _agent([], middleware=[closed])
    session = agent.create_session()
    await agent.run("first", session=session)
    older = [
        msgspec.structs.replace(e, leaves_history=False) if isinstance(e, MiddlewareShortCircuit) else e
        for e in await _log(agent)
    ]
    rebuilt = AgentSession.from_events(older, session.session_id)
    assert [m.text for m in rebuilt.history] == ["first", "We are closed."]


# -- a run's instructions and None options --------------------------------------------------------


@pytest.mark.parametrize(
    ("agent_options", "run_instructions", "sent"),
    [
        ({"instructions": "Be brief."}, "Answer in French.", "Be brief.\nAnswer in French."),
        ({}, "Answer in French.", "Answer in French."),
        (
            {"instructions": "Be brief.", "default_options": {"instructions": "Be kind."}},
            "Answer in French.",
            "Be kind.\nAnswer in French.",
        ),
        ({"instructions": "Be brief."}, None, "Be brief."),
        ({"instructions": "Be brief."}, "", "Be brief."),
    ],
    ids=["appended", "alone", "to-default-options", "none", "empty"],
)
async def test_a_runs_instructions_are_appended_to_the_agents(
    agent_options: dict[str, Any], run_instructions: str | None, sent: str
) -> None:
    """options={"instructions": ...} adds to the agent's instructions, as on the reference (None
    or "" adds nothing). RunStarted records both the instructions sent and the run's own, so a
    rerun appends them once, to the agent's current instructions."""
    agent, client = _agent(["ok"], **agent_options)
    response = await agent.run("go", options={"instructions": run_instructions})
    assert client.requests[0].options["instructions"] == sent
    [started] = events_of(response.events, RunStarted)
    assert started.instructions == sent
    assert started.run_instructions == (run_instructions or None)
    await _rerun_last(agent)


async def test_none_in_run_options_keeps_the_agents_default() -> None:
    """A None value in a run's options is unset, as on the reference: default_options stay."""
    agent, client = _agent(["ok"], default_options={"temperature": 0.5, "tool_choice": "none"})
    response = await agent.run("go", options={"temperature": None, "tool_choice": None})
    assert client.requests[0].options["temperature"] == 0.5
    assert client.requests[0].tool_choice == "none"
    [started] = events_of(response.events, RunStarted)
    assert started.run_option_keys == ()
    await _rerun_last(agent)


async def test_an_older_log_whose_run_replaced_the_instructions_reruns_as_it_ran() -> None:
    """A log of an older version has no run_instructions: its run's instructions replaced the
    agent's, and a rerun repeats that rather than appending them to the agent's."""
    agent, _ = _agent(["ok"])  # no instructions of its own: the run's stand alone either way
    await agent.run("go", options={"instructions": "Answer in French."})
    log = await _log(agent)
    started = log[0]
    assert isinstance(started, RunStarted)
    older = [msgspec.structs.replace(started, run_instructions=None), *log[1:]]
    now, _ = _agent([], instructions="Be brief.")  # the agent's code has instructions today
    response = await rerun(RecordedRun(older), now)
    assert response is not None
    [again] = events_of(response.events, RunStarted)
    assert (again.instructions, again.run_instructions) == ("Answer in French.", None)


# -- where agentledger keeps its own behaviour (docs/differences.md, "How middleware ends a run") --


@pytest.mark.parametrize("middleware", [silent, stop_here], ids=lambda m: m.__name__)
async def test_a_run_ended_without_an_answer_still_returns_a_response(middleware: Any) -> None:
    """The reference's run() returns None here; agentledger an empty response naming the run."""
    agent, _ = _agent([], middleware=[middleware])
    response = await agent.run("go")
    assert isinstance(response, AgentResponse)
    assert (response.text, response.messages) == ("", [])
    assert response.finish_reason == ("short_circuit" if middleware is silent else "terminated")
    assert response.run_id == (await _log(agent))[0].run_id


async def test_agent_middleware_termination_result_is_the_answer() -> None:
    """MiddlewareTermination(result=...) from agent middleware answers (the reference ignores it)."""

    @agent_middleware
    async def refuse(context: AgentContext, call_next: CallNext) -> None:
        raise MiddlewareTermination("closed", result="We are closed today.")

    agent, _ = _agent([], middleware=[refuse])
    response = await agent.run("go")
    assert response.text == "We are closed today."
    await _rerun_last(agent)


async def test_chat_middleware_terminating_without_an_answer_ends_the_run() -> None:
    """No answer to give (the reference raises AttributeError): RunTerminated, no text."""

    @chat_middleware
    async def stop(context: ChatContext, call_next: CallNext) -> None:
        raise MiddlewareTermination("no model today")

    agent, client = _agent(["unused"], middleware=[stop])
    response = await agent.run("go")
    assert (response.finish_reason, response.text, client.requests) == ("terminated", "", [])
    [terminated] = events_of(response.events, RunTerminated)
    assert (terminated.by, terminated.leaves_history) == ("chat_middleware", False)


async def test_the_history_holds_the_answer_agent_middleware_gave() -> None:
    """Replaced after call_next(): the reference's history keeps the model's own answer, here the
    one the caller got (what RunCompleted records)."""

    @agent_middleware
    async def polish(context: AgentContext, call_next: CallNext) -> None:
        await call_next()
        context.result = _answer("polished")

    agent, _ = _agent(["raw answer"], middleware=[polish])
    session = agent.create_session()
    await agent.run("go", session=session)
    assert [m.text for m in session.history] == ["go", "polished"]


async def test_agent_middleware_failing_after_call_next_adds_nothing_to_the_history() -> None:
    """The run failed after its loop: the reference has stored the turn by then, here a failed
    run adds nothing."""

    @agent_middleware
    async def audit(context: AgentContext, call_next: CallNext) -> None:
        await call_next()
        raise MiddlewareFailure("audit log unavailable")

    agent, client = _agent(["answer"], middleware=[audit])
    session = agent.create_session()
    with pytest.raises(MiddlewareFailure):
        await agent.run("go", session=session)
    assert len(client.requests) == 1
    assert session.history == []

"""Middleware: function, agent and chat pipelines around tool calls, runs and model calls.

Forms (annotation, decorator, class), order, mutation before ``call_next()``, short-circuit and
result replacement (both recorded), termination, the error for middleware of no known form, and
every change middleware makes to what a run uses recorded, so reruns and rebuilds stay exact.
"""

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from agentledger import (
    Agent,
    AgentContext,
    AgentMiddleware,
    AgentResponse,
    ChatContext,
    ChatMiddleware,
    ChatResponse,
    FunctionInvocationContext,
    FunctionMiddleware,
    Message,
    MiddlewareError,
    MiddlewareTermination,
    agent_middleware,
    chat_middleware,
    current_run_context,
    function_middleware,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptedRequest
from agentledger.core import ModelRequestRewritten, RunInputRewritten
from agentledger.core.events import (
    MiddlewareShortCircuit,
    ModelCalled,
    RunCompleted,
    RunTerminated,
    ToolCalled,
    ToolReturned,
)
from agentledger.core.projections import TranscriptProjection
from agentledger.redaction import REDACTED
from agentledger.testing import FixedClock, SequentialIds, event_types, events_of

CallNext = Callable[[], Awaitable[None]]


only = events_of


def results_sent(request: ScriptedRequest) -> list[Any]:
    """The function results in the last message of a request."""
    return [c.result for c in request.messages[-1].contents if c.type == "function_result"]


def agent_for(
    script: Sequence[Any], tools: Sequence[Any], clock: FixedClock, ids: SequentialIds, **options: Any
) -> tuple[Agent, ScriptedChatClient]:
    client = ScriptedChatClient(list(script))
    return Agent(client=client, name="Mw", tools=list(tools), clock=clock, ids=ids, **options), client


ran: list[str] = []


@tool
def add(a: int, b: int = 0) -> int:
    ran.append(f"add({a}, {b})")
    return a + b


@tool
def lookup(key: str) -> dict[str, str]:
    ran.append(f"lookup({key})")
    return {"key": key, "value": "secret-value"}


@pytest.fixture(autouse=True)
def _reset_ran() -> None:
    ran.clear()


# -- the three forms of each kind ----------------------------------------------------------------


def function_forms(log: list[Any]) -> list[Any]:
    """The same function middleware written as annotation, decorator and class."""

    async def annotated(context: FunctionInvocationContext, call_next: CallNext) -> None:
        log.append(("before", context.function.name, dict(context.arguments)))
        await call_next()
        log.append(("after", context.result))

    @function_middleware
    async def decorated(context, call_next):  # type: ignore[no-untyped-def]
        log.append(("before", context.function.name, dict(context.arguments)))
        await call_next()
        log.append(("after", context.result))

    class AsClass(FunctionMiddleware):
        async def process(self, context: FunctionInvocationContext, call_next: CallNext) -> None:
            log.append(("before", context.function.name, dict(context.arguments)))
            await call_next()
            log.append(("after", context.result))

    return [annotated, decorated, AsClass()]


@pytest.mark.anyio
@pytest.mark.parametrize("form", [0, 1, 2], ids=["annotation", "decorator", "class"])
async def test_function_middleware_forms_wrap_each_tool_call(
    form: int, clock: FixedClock, ids: SequentialIds
) -> None:
    """Annotated, decorated and class function middleware run around the tool with its arguments."""
    log: list[Any] = []
    middleware = function_forms(log)[form]
    agent, _ = agent_for([Call("add", {"a": 2, "b": 3}), "5"], [add], clock, ids, middleware=[middleware])

    response = await agent.run("add")

    assert log == [("before", "add", {"a": 2, "b": 3}), ("after", 5)]
    assert ran == ["add(2, 3)"]
    assert only(response.events, ToolReturned)[0].result == 5


def agent_forms(log: list[Any]) -> list[Any]:
    """The same agent middleware written as annotation, decorator and class."""

    def before(context: AgentContext) -> None:
        session = context.session.session_id if context.session else None
        texts = [m.text for m in context.messages]
        log.append(("before", texts, session, context.options.get("temperature"), dict(context.kwargs)))

    async def annotated(context: AgentContext, call_next: CallNext) -> None:
        before(context)
        await call_next()
        log.append(("after", context.result.text if isinstance(context.result, AgentResponse) else None))

    @agent_middleware
    async def decorated(context, call_next):  # type: ignore[no-untyped-def]
        before(context)
        await call_next()
        log.append(("after", context.result.text if isinstance(context.result, AgentResponse) else None))

    class AsClass(AgentMiddleware):
        async def process(self, context: AgentContext, call_next: CallNext) -> None:
            before(context)
            await call_next()
            log.append(("after", context.result.text if isinstance(context.result, AgentResponse) else None))

    return [annotated, decorated, AsClass()]


@pytest.mark.anyio
@pytest.mark.parametrize("form", [0, 1, 2], ids=["annotation", "decorator", "class"])
async def test_agent_middleware_forms_see_messages_session_options_and_kwargs(
    form: int, clock: FixedClock, ids: SequentialIds
) -> None:
    """Agent middleware in each form sees the run's input and, after call_next(), its response."""
    log: list[Any] = []
    agent, _ = agent_for(["Hi there."], [], clock, ids, middleware=[agent_forms(log)[form]])
    session = agent.create_session()

    response = await agent.run(
        "Hello!", session=session, options={"temperature": 0.3}, function_invocation_kwargs={"user_id": "u-1"}
    )

    assert log == [
        ("before", ["Hello!"], session.session_id, 0.3, {"user_id": "u-1"}),
        ("after", "Hi there."),
    ]
    assert response.text == "Hi there."


def chat_forms(log: list[Any]) -> list[Any]:
    """The same chat middleware written as annotation, decorator and class."""

    def before(context: ChatContext) -> None:
        tools = [spec.name for spec in context.options.get("tools", [])]
        log.append(("before", context.iteration, len(context.messages), tools, dict(context.client_kwargs)))

    def after(context: ChatContext) -> None:
        log.append(("after", context.result.text if isinstance(context.result, ChatResponse) else None))

    async def annotated(context: ChatContext, call_next: CallNext) -> None:
        before(context)
        await call_next()
        after(context)

    @chat_middleware
    async def decorated(context, call_next):  # type: ignore[no-untyped-def]
        before(context)
        await call_next()
        after(context)

    class AsClass(ChatMiddleware):
        async def process(self, context: ChatContext, call_next: CallNext) -> None:
            before(context)
            await call_next()
            after(context)

    return [annotated, decorated, AsClass()]


@pytest.mark.anyio
@pytest.mark.parametrize("form", [0, 1, 2], ids=["annotation", "decorator", "class"])
async def test_chat_middleware_forms_see_each_model_request(
    form: int, clock: FixedClock, ids: SequentialIds
) -> None:
    """Chat middleware in each form sees every model request, client_kwargs included, and the response."""
    log: list[Any] = []
    middleware = chat_forms(log)[form]
    agent, _ = agent_for([Call("add", {"a": 1}), "one"], [add], clock, ids, middleware=[middleware])

    await agent.run("add", client_kwargs={"deployment": "eu-west"})

    assert log == [
        ("before", 1, 1, ["add"], {"deployment": "eu-west"}),
        ("after", ""),
        ("before", 2, 3, ["add"], {"deployment": "eu-west"}),
        ("after", "one"),
    ]


# -- order -----------------------------------------------------------------------------------------


def tracer(kind: str, name: str, log: list[str]) -> Any:
    """A middleware of ``kind`` that logs entering and leaving under ``name``."""

    async def trace(context: Any, call_next: CallNext) -> None:
        log.append(f"{name}>")
        await call_next()
        log.append(f"<{name}")

    trace.__name__ = name
    marks = {"function": function_middleware, "agent": agent_middleware, "chat": chat_middleware}
    return marks[kind](trace)


@pytest.mark.anyio
async def test_order_is_agent_level_then_run_level_outermost_first(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """Each kind runs its agent-level list, then its run-level list, the first one outermost."""
    log: list[str] = []
    agent_level = [
        tracer("function", "F1", log),
        tracer("agent", "A1", log),
        tracer("chat", "C1", log),
        tracer("function", "F2", log),
        tracer("agent", "A2", log),
    ]
    run_level = [tracer("chat", "C2", log), tracer("function", "F3", log), tracer("agent", "A3", log)]
    agent, _ = agent_for([Call("add", {"a": 1}), "done"], [add], clock, ids, middleware=agent_level)

    await agent.run("add", middleware=run_level)

    assert log == [
        "A1>", "A2>", "A3>",
        "C1>", "C2>", "<C2", "<C1",
        "F1>", "F2>", "F3>", "<F3", "<F2", "<F1",
        "C1>", "C2>", "<C2", "<C1",
        "<A3", "<A2", "<A1",
    ]  # fmt: skip


@pytest.mark.anyio
async def test_run_level_middleware_applies_to_that_run_only(clock: FixedClock, ids: SequentialIds) -> None:
    """Middleware passed to run() wraps that run and is gone for the next one."""
    log: list[str] = []
    agent, _ = agent_for(["one", "two"], [], clock, ids, middleware=[tracer("agent", "kept", log)])

    await agent.run("first", middleware=[tracer("agent", "once", log)])
    await agent.run("second")

    assert log == ["kept>", "once>", "<once", "<kept", "kept>", "<kept"]


# -- what function middleware can do ---------------------------------------------------------------


@pytest.mark.anyio
async def test_function_middleware_shares_the_tools_context_object(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """The FunctionInvocationContext a middleware receives is the very object injected into the tool."""
    contexts: list[FunctionInvocationContext] = []

    async def keep(context: FunctionInvocationContext, call_next: CallNext) -> None:
        contexts.append(context)
        await call_next()

    @tool
    def probe(ctx: FunctionInvocationContext) -> str:
        contexts.append(ctx)
        return "ok"

    agent, _ = agent_for([Call("probe"), "done"], [probe], clock, ids, middleware=[keep])

    await agent.run("go")

    assert len(contexts) == 2
    assert contexts[0] is contexts[1]
    assert contexts[0].result == "ok"


@pytest.mark.anyio
async def test_mutations_before_call_next_reach_the_tool(clock: FixedClock, ids: SequentialIds) -> None:
    """Changing context.arguments and context.kwargs before call_next() is what the tool sees and records."""
    seen: list[Any] = []

    @tool
    def send_email(
        address: str, ctx: FunctionInvocationContext, user_id: str = "", tenant: str = "default"
    ) -> str:
        seen.append((address, user_id, tenant, dict(ctx.kwargs)))
        return f"Queued email for {address} from {user_id} ({tenant})"

    async def inject_run_context(context: FunctionInvocationContext, call_next: CallNext) -> None:
        run = current_run_context()
        assert run is not None
        context.arguments["user_id"] = run.kwargs["user_id"]
        context.arguments["tenant"] = run.kwargs["tenant"]
        context.kwargs["request_source"] = "middleware"
        await call_next()

    agent, client = agent_for(
        [Call("send_email", {"address": "finance@example.com"}), "sent"],
        [send_email],
        clock,
        ids,
        middleware=[inject_run_context],
    )

    response = await agent.run(
        "Email finance.", function_invocation_kwargs={"user_id": "user-123", "tenant": "contoso"}
    )

    assert seen == [
        (
            "finance@example.com",
            "user-123",
            "contoso",
            {"user_id": "user-123", "tenant": "contoso", "request_source": "middleware"},
        )
    ]
    assert only(response.events, ToolCalled)[0].arguments == {
        "address": "finance@example.com",
        "user_id": "user-123",
        "tenant": "contoso",
    }
    queued = "Queued email for finance@example.com from user-123 (contoso)"
    assert results_sent(client.requests[1]) == [queued]


@pytest.mark.anyio
async def test_arguments_changed_by_middleware_are_validated(clock: FixedClock, ids: SequentialIds) -> None:
    """Arguments a middleware makes invalid are rejected before the tool runs."""

    async def break_arguments(context: FunctionInvocationContext, call_next: CallNext) -> None:
        context.arguments["a"] = "not a number"
        await call_next()

    agent, _ = agent_for([Call("add", {"a": 1}), "done"], [add], clock, ids, middleware=[break_arguments])

    response = await agent.run("add")

    assert ran == []
    assert event_types(response.events)[3:5] == ["ArgumentsRejected", "ModelCalled"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("answer", "model_sees"),
    [("Error: lookups are disabled.", "Error: lookups are disabled."), ({"cached": True}, '{"cached":true}')],
    ids=["str", "dict"],
)
async def test_short_circuit_answers_in_place_of_the_tool(
    answer: Any, model_sees: str, clock: FixedClock, ids: SequentialIds
) -> None:
    """context.result set without call_next() skips the tool, is recorded, and is what the model sees."""

    async def answer_from_cache(context: FunctionInvocationContext, call_next: CallNext) -> None:
        if context.function.name == "lookup":
            context.result = answer
            return
        await call_next()

    agent, client = agent_for(
        [[Call("lookup", {"key": "k"}), Call("add", {"a": 1, "b": 1})], "done"],
        [lookup, add],
        clock,
        ids,
        middleware=[answer_from_cache],
    )

    response = await agent.run("go")

    assert ran == ["add(1, 1)"]
    assert [e.call_id for e in only(response.events, ToolCalled)] == ["call_2"]
    (short,) = only(response.events, MiddlewareShortCircuit)
    assert (short.call_id, short.middleware, short.result) == ("call_1", "answer_from_cache", answer)
    assert [e.call_id for e in only(response.events, ToolReturned)] == ["call_2"]
    assert results_sent(client.requests[1]) == [model_sees, "2"]
    assert response.text == "done"


@pytest.mark.anyio
async def test_result_replaced_after_call_next_is_recorded(clock: FixedClock, ids: SequentialIds) -> None:
    """Replacing context.result after call_next() is what the model sees; ToolReturned keeps both."""

    async def audit(context: FunctionInvocationContext, call_next: CallNext) -> None:
        await call_next()

    async def redact(context: FunctionInvocationContext, call_next: CallNext) -> None:
        await call_next()
        context.result = {**context.result, "value": "[hidden]"}

    script = [Call("lookup", {"key": "k"}), "done"]
    agent, client = agent_for(script, [lookup], clock, ids, middleware=[audit, redact])

    response = await agent.run("go")

    (returned,) = only(response.events, ToolReturned)
    assert returned.result == {"key": "k", "value": "[hidden]"}
    assert returned.overridden_by == "redact"
    assert returned.tool_result == {"key": "k", "value": "secret-value"}
    assert results_sent(client.requests[1]) == ['{"key":"k","value":"[hidden]"}']


@pytest.mark.anyio
async def test_replaced_result_names_the_outermost_middleware_that_replaced_it(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """When several layers replace the result, overridden_by names the outermost one."""

    async def outer(context: FunctionInvocationContext, call_next: CallNext) -> None:
        await call_next()
        context.result = f"outer({context.result})"

    async def inner(context: FunctionInvocationContext, call_next: CallNext) -> None:
        await call_next()
        context.result = f"inner({context.result})"

    agent, _ = agent_for([Call("add", {"a": 2}), "done"], [add], clock, ids, middleware=[outer, inner])

    response = await agent.run("go")

    (returned,) = only(response.events, ToolReturned)
    assert (returned.result, returned.overridden_by, returned.tool_result) == ("outer(inner(2))", "outer", 2)


@pytest.mark.anyio
async def test_unchanged_result_records_no_override(clock: FixedClock, ids: SequentialIds) -> None:
    """Middleware that calls call_next() and leaves the result alone leaves overridden_by empty."""

    async def audit(context: FunctionInvocationContext, call_next: CallNext) -> None:
        await call_next()

    agent, _ = agent_for([Call("add", {"a": 2}), "done"], [add], clock, ids, middleware=[audit])

    response = await agent.run("go")

    (returned,) = only(response.events, ToolReturned)
    assert (returned.result, returned.overridden_by) == (2, None)


@pytest.mark.anyio
@pytest.mark.parametrize("after_call_next", [False, True], ids=["before", "after"])
async def test_middleware_termination_ends_the_run_after_the_current_batch(
    after_call_next: bool, clock: FixedClock, ids: SequentialIds
) -> None:
    """MiddlewareTermination lets the rest of the batch finish, then ends the run without a model call."""

    async def stop_on_lookup(context: FunctionInvocationContext, call_next: CallNext) -> None:
        if after_call_next:
            await call_next()
        if context.function.name == "lookup":
            raise MiddlewareTermination("quota reached")
        if not after_call_next:
            await call_next()

    agent, client = agent_for(
        [[Call("lookup", {"key": "k"}), Call("add", {"a": 1, "b": 2})], "never sent"],
        [lookup, add],
        clock,
        ids,
        middleware=[stop_on_lookup],
    )

    response = await agent.run("go")

    assert len(client.requests) == 1
    assert sorted(ran) == (["add(1, 2)", "lookup(k)"] if after_call_next else ["add(1, 2)"])
    (terminated,) = only(response.events, RunTerminated)
    assert (terminated.reason, terminated.by) == ("quota reached", "call_1")
    returned = sorted(e.call_id for e in only(response.events, ToolReturned))
    short = [e.call_id for e in only(response.events, MiddlewareShortCircuit)]
    assert (returned, short) == ((["call_1", "call_2"], []) if after_call_next else (["call_2"], ["call_1"]))
    assert len(only(response.events, ModelCalled)) == 1
    assert event_types(response.events)[-1] == "RunCompleted"
    assert only(response.events, RunCompleted)[0].reason == "terminated"
    assert response.finish_reason == "terminated"
    assert [m.role for m in response.messages] == ["assistant", "tool"]


# -- agent and chat middleware -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_agent_middleware_short_circuit_answers_without_a_model_call(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """Agent middleware setting context.result without call_next() is the run's answer, recorded."""

    async def maintenance(context: AgentContext, call_next: CallNext) -> None:
        context.result = "We are down for maintenance."

    agent, client = agent_for(["never sent"], [add], clock, ids, middleware=[maintenance])
    session = agent.create_session()

    response = await agent.run("Hello!", session=session)

    assert response.text == "We are down for maintenance."
    assert client.requests == []
    assert event_types(response.events) == ["RunStarted", "MiddlewareShortCircuit", "RunCompleted"]
    (short,) = only(response.events, MiddlewareShortCircuit)
    assert (short.call_id, short.middleware) == (None, "maintenance")
    assert short.result == "We are down for maintenance."
    (completed,) = only(response.events, RunCompleted)
    assert (completed.text, completed.reason) == ("We are down for maintenance.", "short_circuit")
    assert session.history == []  # the loop never ran: the conversation is as it was


@pytest.mark.anyio
async def test_chat_middleware_changes_client_kwargs_for_one_request_only(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """A chat middleware's change to client_kwargs reaches that request's client call, not the next one."""
    seen: list[dict[str, Any]] = []

    async def route_first_call(context: ChatContext, call_next: CallNext) -> None:
        seen.append(dict(context.client_kwargs))
        if context.iteration == 1:
            context.client_kwargs["deployment"] = "fast"
        await call_next()

    script = [Call("add", {"a": 1}), "one"]
    agent, client = agent_for(script, [add], clock, ids, middleware=[route_first_call])

    await agent.run("add", client_kwargs={"deployment": "eu-west", "user": "u-1"})

    assert seen == [{"deployment": "eu-west", "user": "u-1"}] * 2
    assert [r.client_kwargs for r in client.requests] == [
        {"deployment": "fast", "user": "u-1"},
        {"deployment": "eu-west", "user": "u-1"},
    ]


# -- middleware of no known form -------------------------------------------------------------------


async def unannotated(context, call_next):  # type: ignore[no-untyped-def]
    await call_next()


@pytest.mark.parametrize(
    "item", [unannotated, lambda context, call_next: None, 42], ids=["async", "lambda", "int"]
)
def test_unclassifiable_middleware_raises_naming_the_forms(item: Any) -> None:
    """Middleware that is neither decorated, subclassed nor annotated is refused with the forms named."""
    with pytest.raises(MiddlewareError) as raised:
        Agent(client=ScriptedChatClient(), middleware=[item])

    message = str(raised.value)
    for form in (
        "@function_middleware",
        "@agent_middleware",
        "@chat_middleware",
        "FunctionMiddleware",
        "AgentMiddleware",
        "ChatMiddleware",
        "FunctionInvocationContext",
        "AgentContext",
        "ChatContext",
    ):
        assert form in message
    assert isinstance(raised.value, TypeError)


@pytest.mark.anyio
async def test_unclassifiable_run_level_middleware_is_refused_before_the_run(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """Run-level middleware of no known form raises MiddlewareError and nothing is recorded."""
    agent, client = agent_for(["never sent"], [], clock, ids)

    with pytest.raises(MiddlewareError, match="cannot tell what kind of middleware 'unannotated' is"):
        await agent.run("go", middleware=[unannotated])

    assert client.requests == []
    assert agent.store is not None
    assert await agent.store.streams() == []


def test_sync_middleware_is_refused() -> None:
    """A middleware that is not async is refused when the agent is built."""

    def sync_layer(context: FunctionInvocationContext, call_next: CallNext) -> None:
        pass

    with pytest.raises(MiddlewareError, match="must be an async function"):
        Agent(client=ScriptedChatClient(), middleware=[sync_layer])


# -- every change middleware makes to what a run uses is recorded ------------------------------


@pytest.mark.anyio
async def test_agent_middleware_kwargs_change_is_recorded_and_used(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """Agent middleware adding runtime values: tools see them and RunInputRewritten records them redacted."""
    seen: list[dict[str, object]] = []

    @tool
    def probe(ctx: FunctionInvocationContext) -> str:
        seen.append(dict(ctx.kwargs))
        return "ok"

    async def stamp(context: AgentContext, call_next: CallNext) -> None:
        context.kwargs["tenant"] = "contoso"
        context.kwargs["api_token"] = "t-123"
        await call_next()

    client = ScriptedChatClient([Call("probe"), "done"])
    agent = Agent(client=client, tools=[probe], middleware=[stamp], clock=clock, ids=ids)
    response = await agent.run("go", function_invocation_kwargs={"user_id": "u"})
    assert seen == [{"user_id": "u", "tenant": "contoso", "api_token": "t-123"}]
    [rewritten] = [e for e in response.events if isinstance(e, RunInputRewritten)]
    assert rewritten.function_invocation_kwargs == {
        "user_id": "u",
        "tenant": "contoso",
        "api_token": REDACTED,
    }


@pytest.mark.anyio
async def test_chat_middleware_rewrite_is_recorded(clock: FixedClock, ids: SequentialIds) -> None:
    """Chat middleware changing messages and tools is recorded; sent_at gives what the model saw."""

    @tool
    def hidden() -> str:
        return "x"

    async def trim(context: ChatContext, call_next: CallNext) -> None:
        context.messages = [Message("system", ["be brief"]), *context.messages]
        context.options["tools"] = []
        context.options["temperature"] = 0.0
        await call_next()

    client = ScriptedChatClient(["brief answer"])
    agent = Agent(client=client, tools=[hidden], middleware=[trim], clock=clock, ids=ids)
    response = await agent.run("hello")
    [rewritten] = [e for e in response.events if isinstance(e, ModelRequestRewritten)]
    assert rewritten.tools == ()
    assert rewritten.options == {"temperature": 0.0}
    transcript = TranscriptProjection.from_events(response.events)
    assert transcript.sent_at(1) == list(client.requests[0].messages)
    assert client.requests[0].messages[0].text == "be brief"
    assert client.requests[0].tools == ()


@pytest.mark.anyio
async def test_unchanged_requests_record_nothing(clock: FixedClock, ids: SequentialIds) -> None:
    """Middleware that only looks records no rewrite."""

    async def look(context: ChatContext, call_next: CallNext) -> None:
        await call_next()

    async def look_agent(context: AgentContext, call_next: CallNext) -> None:
        await call_next()

    client = ScriptedChatClient(["fine"])
    agent = Agent(client=client, middleware=[look, look_agent], clock=clock, ids=ids)
    response = await agent.run("hello", options={"temperature": 0.5})
    names = [type(e).__name__ for e in response.events]
    assert "ModelRequestRewritten" not in names
    assert "RunInputRewritten" not in names

"""Runtime context: one test per rule of the design's "Runtime context" section.

The three buckets (``session=``, ``function_invocation_kwargs=``, ``client_kwargs=``), the injected
``FunctionInvocationContext``, the legacy ``**kwargs`` paths, tool classes, the ambient
``current_run_context()``, session writes by agent middleware, and sessions as projections of
the log.
"""

import threading
import types
import warnings
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, Optional

import anyio
import msgspec
import pytest

from agentledger import (
    Agent,
    AgentContext,
    AgentResponse,
    AgentSession,
    ChatContext,
    FunctionInvocationContext,
    FunctionTool,
    RunContext,
    current_run_context,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptedRequest
from agentledger.core.events import (
    ModelCalled,
    RunStarted,
    SessionUpdated,
    StateChange,
    ToolCalled,
    ToolReturned,
    encode_event,
)
from agentledger.testing import FixedClock, SequentialIds, capture_events, event_types, events_of

CallNext = Callable[[], Awaitable[None]]


only = events_of


def agent_for(
    script: Sequence[Any], tools: Sequence[Any], clock: FixedClock, ids: SequentialIds, **options: Any
) -> tuple[Agent, ScriptedChatClient]:
    client = ScriptedChatClient(list(script))
    return Agent(client=client, name="Ctx", tools=list(tools), clock=clock, ids=ids, **options), client


# -- the three buckets ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_function_invocation_kwargs_reach_tools_as_a_per_call_copy(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """Each call gets its own ctx.kwargs copy; a tool's changes reach neither later calls nor the caller."""
    seen: list[dict[str, Any]] = []
    dicts: list[dict[str, Any]] = []

    @tool
    def scribble(ctx: FunctionInvocationContext) -> str:
        seen.append(dict(ctx.kwargs))
        dicts.append(ctx.kwargs)
        ctx.kwargs["user_id"] = "changed"
        ctx.kwargs["added"] = True
        return "scribbled"

    @tool
    def read(ctx: FunctionInvocationContext) -> str:
        seen.append(dict(ctx.kwargs))
        dicts.append(ctx.kwargs)
        return "read"

    caller = {"user_id": "user-123", "tenant": "contoso"}
    agent, _ = agent_for([Call("scribble"), Call("read"), "done"], [scribble, read], clock, ids)

    response = await agent.run("go", function_invocation_kwargs=caller)

    assert seen == [caller, caller]
    assert dicts[0] is not dicts[1]
    assert all(d is not caller for d in dicts)
    assert caller == {"user_id": "user-123", "tenant": "contoso"}
    assert only(response.events, RunStarted)[0].function_invocation_kwargs == caller


@pytest.mark.anyio
async def test_function_invocation_kwargs_never_reach_the_chat_client(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """Tool-only values are not passed to the chat client nor shown to chat middleware."""
    chat_seen: list[dict[str, Any]] = []

    async def watch(context: ChatContext, call_next: CallNext) -> None:
        chat_seen.append(dict(context.client_kwargs))
        await call_next()

    @tool
    def whoami(ctx: FunctionInvocationContext) -> str:
        return str(ctx.kwargs["user_id"])

    agent, client = agent_for([Call("whoami"), "done"], [whoami], clock, ids, middleware=[watch])

    response = await agent.run("go", function_invocation_kwargs={"user_id": "user-123"})

    assert only(response.events, ToolReturned)[0].result == "user-123"
    assert chat_seen == [{}, {}]
    for request in client.requests:
        assert request.client_kwargs == {}
        assert request.function_invocation_kwargs is None
        assert "user-123" not in repr(request.options)


@pytest.mark.anyio
async def test_client_kwargs_reach_the_chat_client_unchanged_on_every_call(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """The client gets the very same client_kwargs values on each model call; tools never see them."""
    connection = object()
    tool_views: list[tuple[dict[str, Any], dict[str, Any]]] = []

    @tool
    def probe(ctx: FunctionInvocationContext) -> str:
        ambient = current_run_context()
        assert ambient is not None
        tool_views.append((dict(ctx.kwargs), dict(ambient.kwargs)))
        return "ok"

    agent, client = agent_for([Call("probe"), Call("probe"), "done"], [probe], clock, ids)
    client_kwargs = {"connection": connection, "deployment": "eu-west"}

    response = await agent.run(
        "go", client_kwargs=client_kwargs, function_invocation_kwargs={"user_id": "user-123"}
    )

    assert len(client.requests) == 3
    for request in client.requests:
        assert request.client_kwargs == client_kwargs
        assert request.client_kwargs["connection"] is connection
    assert tool_views == [({"user_id": "user-123"}, {"user_id": "user-123"})] * 2
    assert client_kwargs == {"connection": connection, "deployment": "eu-west"}
    assert only(response.events, RunStarted)[0].client_kwargs_keys == ("connection", "deployment")


@pytest.mark.anyio
async def test_ctx_kwargs_never_contains_the_session(clock: FixedClock, ids: SequentialIds) -> None:
    """With session= the session is ctx.session, never an entry of ctx.kwargs or context.kwargs."""
    views: list[tuple[str, dict[str, Any], AgentSession | None]] = []

    async def look(context: FunctionInvocationContext, call_next: CallNext) -> None:
        views.append(("middleware", dict(context.kwargs), context.session))
        await call_next()

    @tool
    def inspect_ctx(ctx: FunctionInvocationContext) -> str:
        views.append(("tool", dict(ctx.kwargs), ctx.session))
        return "ok"

    agent, _ = agent_for([Call("inspect_ctx"), "done"], [inspect_ctx], clock, ids, middleware=[look])
    session = agent.create_session()

    await agent.run("go", session=session, function_invocation_kwargs={"user_id": "user-123"})

    assert [(where, kwargs) for where, kwargs, _ in views] == [
        ("middleware", {"user_id": "user-123"}),
        ("tool", {"user_id": "user-123"}),
    ]
    assert all(seen is session for _, _, seen in views)


@pytest.mark.anyio
async def test_recorded_function_invocation_kwargs_are_redacted(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """RunStarted records function_invocation_kwargs after redaction; the tool still gets the real values."""
    seen: list[dict[str, Any]] = []

    @tool
    def call_api(ctx: FunctionInvocationContext) -> str:
        seen.append(dict(ctx.kwargs))
        return "called"

    agent, _ = agent_for([Call("call_api"), "done"], [call_api], clock, ids)
    kwargs = {"user_id": "user-123", "api_token": "tok-9f2c"}

    response = await agent.run("go", function_invocation_kwargs=kwargs)

    assert seen == [kwargs]
    recorded = only(response.events, RunStarted)[0].function_invocation_kwargs
    assert recorded == {"user_id": "user-123", "api_token": "[redacted]"}
    assert not any(b"tok-9f2c" in encode_event(event) for event in response.events)


# -- the injected context parameter --------------------------------------------------------------


@tool
def plain_name(query: str, runtime: FunctionInvocationContext) -> str:
    return f"{query}:{type(runtime).__name__}:{runtime.call_id}"


@tool
def optional_ctx(query: str, c: Optional[FunctionInvocationContext] = None) -> str:  # noqa: UP045 - the form under test
    return f"{query}:{type(c).__name__}:{c.call_id if c else None}"


@tool
def union_ctx(query: str, c: FunctionInvocationContext | None = None) -> str:
    return f"{query}:{type(c).__name__}:{c.call_id if c else None}"


@tool
def annotated_ctx(query: str, meta: Annotated[FunctionInvocationContext, "injected"]) -> str:
    return f"{query}:{type(meta).__name__}:{meta.call_id}"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "injected", [plain_name, optional_ctx, union_ctx, annotated_ctx], ids=lambda t: t.name
)
async def test_context_parameter_is_injected_by_annotation_and_hidden(
    injected: FunctionTool, clock: FixedClock, ids: SequentialIds
) -> None:
    """A FunctionInvocationContext parameter (any name, Optional, Annotated) is injected, not shown."""
    agent, client = agent_for([Call(injected.name, {"query": "q"}), "done"], [injected], clock, ids)

    response = await agent.run("go")

    assert injected.spec.parameters["properties"] == {"query": {"type": "string"}}
    assert injected.spec.parameters["required"] == ["query"]
    assert client.requests[0].tool_specs[0].parameters == injected.spec.parameters
    assert only(response.events, RunStarted)[0].tools[0].parameters == injected.spec.parameters
    assert only(response.events, ToolCalled)[0].arguments == {"query": "q"}
    assert only(response.events, ToolReturned)[0].result == "q:FunctionInvocationContext:call_1"


class LookupArgs(msgspec.Struct, kw_only=True):
    query: str


LOOKUP_SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}


@pytest.mark.anyio
@pytest.mark.parametrize("schema", [LOOKUP_SCHEMA, LookupArgs], ids=["json-schema", "struct"])
async def test_unannotated_ctx_is_injected_with_an_explicit_schema(
    schema: Any, clock: FixedClock, ids: SequentialIds
) -> None:
    """With an explicit schema, an unannotated parameter named ctx receives the context."""

    @tool(schema=schema)
    def lookup(query, ctx):  # type: ignore[no-untyped-def]
        return f"{query}:{type(ctx).__name__}:{ctx.kwargs['user_id']}"

    lookup_tool = lookup
    agent, _ = agent_for([Call("lookup", {"query": "q"}), "done"], [lookup_tool], clock, ids)

    response = await agent.run("go", function_invocation_kwargs={"user_id": "user-123"})

    assert "ctx" not in lookup_tool.spec.parameters["properties"]
    assert only(response.events, ToolReturned)[0].result == "q:FunctionInvocationContext:user-123"


def test_unannotated_ctx_without_a_schema_is_an_ordinary_parameter() -> None:
    """Without an explicit schema, an unannotated ctx is a model-visible parameter like any other."""

    def lookup(query: str, ctx) -> str:  # type: ignore[no-untyped-def]
        return query

    lookup_tool = tool(lookup)

    assert set(lookup_tool.spec.parameters["properties"]) == {"query", "ctx"}
    assert lookup_tool.spec.parameters["required"] == ["query", "ctx"]


def test_two_context_parameters_raise_value_error_at_definition() -> None:
    """A tool with two injected context parameters is refused when it is defined."""

    def annotated_twice(a: FunctionInvocationContext, b: Optional[FunctionInvocationContext]) -> str:  # noqa: UP045
        return ""

    def with_schema(query, ctx, other: FunctionInvocationContext):  # type: ignore[no-untyped-def]
        return query

    with pytest.raises(ValueError, match="more than one context parameter"):
        tool(annotated_twice)
    with pytest.raises(ValueError, match="more than one context parameter"):
        tool(schema=LOOKUP_SCHEMA)(with_schema)


POSTPONED_TOOLS = """
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

if TYPE_CHECKING:
    from agentledger import FunctionInvocationContext


def optional_ctx(query: str, ctx: Optional[FunctionInvocationContext] = None) -> str:
    return query


def union_ctx(query: str, ctx: FunctionInvocationContext | None = None) -> str:
    return query


def annotated_ctx(query: str, ctx: Annotated[FunctionInvocationContext, "injected"]) -> str:
    return query
"""


@pytest.mark.parametrize("name", ["optional_ctx", "union_ctx", "annotated_ctx"])
def test_context_inside_optional_is_recognised_in_postponed_annotations(name: str) -> None:
    """Optional/Annotated context parameters are injected also under postponed, unresolvable annotations."""
    module = types.ModuleType("postponed_tools")
    exec(compile(POSTPONED_TOOLS, "<postponed_tools>", "exec"), module.__dict__)

    function_tool = tool(getattr(module, name))

    assert function_tool.context_param == "ctx"
    assert "ctx" not in function_tool.spec.parameters["properties"]


# -- legacy paths ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_legacy_run_kwargs_warn_and_become_function_invocation_kwargs(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """Extra **kwargs on run() raise a DeprecationWarning and reach tools as ctx.kwargs, not the client."""
    seen: list[dict[str, Any]] = []

    @tool
    def whoami(ctx: FunctionInvocationContext) -> str:
        seen.append(dict(ctx.kwargs))
        return "ok"

    agent, client = agent_for([Call("whoami"), "done"], [whoami], clock, ids)

    with pytest.deprecated_call(match="function_invocation_kwargs"):
        response = await agent.run("go", user_id="user-123", tenant="contoso")  # type: ignore[call-overload]

    assert seen == [{"user_id": "user-123", "tenant": "contoso"}]
    started = only(response.events, RunStarted)[0]
    assert started.function_invocation_kwargs == {"user_id": "user-123", "tenant": "contoso"}
    assert started.client_kwargs_keys == ()
    assert all(request.client_kwargs == {} for request in client.requests)


@pytest.mark.anyio
async def test_tool_declaring_var_kwargs_warns_and_receives_runtime_values(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """A tool with **kwargs is deprecated at definition and still receives function_invocation_kwargs."""
    with pytest.deprecated_call(match=r"ctx\.kwargs"):

        @tool
        def legacy_email(address: str, **kwargs: Any) -> str:
            return f"{address} {sorted(kwargs.items())}"

    script = [Call("legacy_email", {"address": "a@example.com"}), "done"]
    agent, _ = agent_for(script, [legacy_email], clock, ids)
    session = agent.create_session()

    response = await agent.run(
        "go", session=session, function_invocation_kwargs={"user_id": "user-123", "tenant": "contoso"}
    )

    assert legacy_email.spec.parameters["properties"] == {"address": {"type": "string"}}
    assert only(response.events, ToolCalled)[0].arguments == {"address": "a@example.com"}
    assert only(response.events, ToolReturned)[0].result == (
        "a@example.com [('tenant', 'contoso'), ('user_id', 'user-123')]"
    )


def test_var_kwargs_warning_points_at_the_decorated_tool() -> None:
    """The **kwargs DeprecationWarning of @tool(...) is attributed to the file that defines the tool."""
    with pytest.deprecated_call() as record:

        @tool(approval_mode="never_require")
        def legacy(**kwargs: Any) -> str:
            return ""

    assert [w.filename for w in record] == [__file__]


# -- tool classes, the ambient run context -------------------------------------------------------


class Inventory:
    """Long-lived tool state kept on an instance; its bound methods are the tools."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add_item(self, item: str) -> int:
        """Add an item; returns how many there are."""
        self.items.append(item)
        return len(self.items)

    @tool
    def count_items(self, ctx: FunctionInvocationContext) -> int:
        """How many items there are."""
        return len(self.items)


@pytest.mark.anyio
async def test_bound_methods_of_a_tool_class_keep_state_on_the_instance(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """Bound methods (plain or @tool-decorated) are tools whose state lives on their instance across runs."""
    inventory, other = Inventory(), Inventory()
    script = [
        Call("add_item", {"item": "apple"}),
        "ok",
        Call("add_item", {"item": "pear"}),
        Call("count_items"),
        "ok",
    ]
    agent, _ = agent_for(script, [inventory.add_item, inventory.count_items], clock, ids)

    first = await agent.run("add an apple")
    second = await agent.run("add a pear and count")

    assert inventory.items == ["apple", "pear"]
    assert other.items == []
    assert other.count_items is not inventory.count_items
    assert inventory.count_items.spec.parameters["properties"] == {}
    assert [e.result for e in only(first.events, ToolReturned)] == [1]
    assert [e.result for e in only(second.events, ToolReturned)] == [2, 2]
    assert [spec.name for spec in only(second.events, RunStarted)[0].tools] == ["add_item", "count_items"]
    described = only(second.events, RunStarted)[0].tools
    assert [spec.description for spec in described] == [
        "Add an item; returns how many there are.",
        "How many items there are.",
    ]


@pytest.mark.anyio
async def test_current_run_context_inside_tools_and_middleware(clock: FixedClock, ids: SequentialIds) -> None:
    """current_run_context() gives run id, session, options, kwargs to tools (threads too) and middleware."""
    seen: list[tuple[str, RunContext | None, bool]] = []
    loop_thread = threading.get_ident()

    async def agent_layer(context: AgentContext, call_next: CallNext) -> None:
        seen.append(("agent", current_run_context(), True))
        await call_next()

    async def function_layer(context: FunctionInvocationContext, call_next: CallNext) -> None:
        seen.append(("function", current_run_context(), True))
        await call_next()

    @tool
    async def async_tool() -> str:
        seen.append(("async tool", current_run_context(), threading.get_ident() == loop_thread))
        return "a"

    @tool
    def sync_tool() -> str:
        seen.append(("sync tool", current_run_context(), threading.get_ident() == loop_thread))
        return "s"

    agent, _ = agent_for(
        [Call("async_tool"), Call("sync_tool"), "done"],
        [async_tool, sync_tool],
        clock,
        ids,
        middleware=[agent_layer, function_layer],
    )
    session = agent.create_session()

    assert current_run_context() is None
    response = await agent.run(
        "go",
        session=session,
        options={"temperature": 0.2},
        function_invocation_kwargs={"user_id": "user-123"},
    )
    assert current_run_context() is None

    assert [(where, on_loop) for where, _, on_loop in seen] == [
        ("agent", True),
        ("function", True),
        ("async tool", True),
        ("function", True),
        ("sync tool", False),
    ]
    for _, context, _ in seen:
        assert context is not None
        assert context.run_id == response.run_id
        assert context.session is session
        assert context.agent is agent
        assert context.options["temperature"] == 0.2
        assert context.kwargs == {"user_id": "user-123"}


# -- sessions --------------------------------------------------------------------------------------


async def stamp_request_metadata(context: AgentContext, call_next: CallNext) -> None:
    if context.session is not None and "request_id" in context.kwargs:
        context.session.state["requestId"] = str(context.kwargs["request_id"])
    await call_next()


@pytest.mark.anyio
async def test_agent_middleware_session_writes_are_recorded_and_seen_by_tools(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """Agent middleware writing context.session.state records SessionUpdated; tools then read the value."""
    read: list[object] = []

    @tool
    def read_request_id(ctx: FunctionInvocationContext) -> str:
        assert ctx.session is not None
        read.append(ctx.session.state.get("requestId"))
        return "ok"

    script = [Call("read_request_id"), "Hello!"]
    agent, _ = agent_for(script, [read_request_id], clock, ids, middleware=[stamp_request_metadata])
    session = agent.create_session()

    response = await agent.run(
        "Hello!", session=session, function_invocation_kwargs={"request_id": "req-abc-123"}
    )

    assert session.state["requestId"] == "req-abc-123"
    assert read == ["req-abc-123"]
    assert event_types(response.events)[:3] == ["RunStarted", "SessionUpdated", "ModelCalled"]
    (updated,) = only(response.events, SessionUpdated)
    assert updated.session_id == session.session_id
    assert updated.changes == (StateChange("requestId", "set", "req-abc-123"),)
    assert updated.by == "agent_middleware"


@pytest.mark.anyio
async def test_a_session_passed_to_one_run_does_not_stick_to_the_agent(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """A later run without session= has no session, no history and records no session id."""
    sessions: list[AgentSession | None] = []

    @tool
    def which_session(ctx: FunctionInvocationContext) -> str:
        ambient = current_run_context()
        assert ambient is not None
        assert ambient.session is ctx.session
        sessions.append(ctx.session)
        return "ok"

    script = [Call("which_session"), "first", Call("which_session"), "second", Call("which_session"), "third"]
    agent, client = agent_for(script, [which_session], clock, ids)
    session, other = agent.create_session(), agent.create_session()

    await agent.run("one", session=session)
    second = await agent.run("two")
    third = await agent.run("three", session=other)

    assert sessions == [session, None, other]
    started = only(second.events, RunStarted)[0]
    assert (started.session_id, started.history_length) == (None, 0)
    assert only(third.events, RunStarted)[0].history_length == 0
    assert [m.text for m in client.requests[2].messages] == ["two"]
    assert [m.text for m in client.requests[4].messages] == ["three"]
    assert len(session.history) == 4
    assert [m.text for m in other.history if m.role == "user"] == ["three"]


@pytest.mark.anyio
async def test_concurrent_runs_each_see_their_own_session(clock: FixedClock, ids: SequentialIds) -> None:
    """Two runs of one agent at the same time each give their tools their own session and run context."""
    seen: list[tuple[str | None, AgentSession | None, RunContext | None]] = []
    release = anyio.Event()

    @tool
    async def which(ctx: FunctionInvocationContext) -> str:
        seen.append((ctx.run_id, ctx.session, current_run_context()))
        await release.wait()
        return "ok"

    def answer(request: ScriptedRequest) -> Call | str:
        return Call("which") if request.messages[-1].role == "user" else "done"

    agent, _ = agent_for([answer] * 4, [which], clock, ids)
    sessions = [agent.create_session(), agent.create_session()]
    responses: list[AgentResponse] = []

    async def run(session: AgentSession) -> None:
        responses.append(await agent.run("go", session=session))

    async with anyio.create_task_group() as group:
        for session in sessions:
            group.start_soon(run, session)
        await anyio.wait_all_tasks_blocked()
        waiting_together = len(seen)
        release.set()

    assert waiting_together == 2
    session_of_run = {response.run_id: response.session_id for response in responses}
    for run_id, seen_session, ambient in seen:
        assert ambient is not None
        assert seen_session is not None
        assert (ambient.run_id, ambient.session) == (run_id, seen_session)
        assert session_of_run[str(run_id)] == seen_session.session_id
    assert sorted(session_of_run.values(), key=str) == sorted(s.session_id for s in sessions)


@pytest.mark.anyio
async def test_session_rebuilt_from_events_equals_the_live_session(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """AgentSession.from_events gives the live state and history, in-place nested changes included."""

    @tool
    def remember(room: str, ctx: FunctionInvocationContext) -> str:
        assert ctx.session is not None
        ctx.session.state.setdefault("prefs", {})["room"] = room
        ctx.session.state.setdefault("visits", []).append(room)
        ctx.session.state["topic"] = "hotels"
        return "remembered"

    async def log_run(context: AgentContext, call_next: CallNext) -> None:
        await call_next()
        if context.session is not None:
            context.session.state["visits"].append("run end")

    script = [Call("remember", {"room": "quiet"}), "ok", Call("remember", {"room": "sea view"}), "ok"]
    agent, _ = agent_for(script, [remember], clock, ids, middleware=[log_run])
    session = agent.create_session()

    with capture_events() as events:
        await agent.run("first", session=session)
        session.state["prefs"]["floor"] = 3
        del session.state["topic"]
        await agent.run("second", session=session)

    rebuilt = AgentSession.from_events(events, session.session_id)

    assert session.state == {
        "prefs": {"room": "sea view", "floor": 3},
        "visits": ["quiet", "run end", "sea view", "run end"],
        "topic": "hotels",
    }
    assert rebuilt.state == session.state
    assert rebuilt.history == session.history
    assert len(rebuilt.history) == 8
    nested = [c for e in only(events, SessionUpdated) for c in e.changes if c.key == "prefs"]
    assert nested[-1] == StateChange("prefs", "set", {"room": "sea view", "floor": 3})
    by_caller = [c for e in only(events, SessionUpdated) if e.by == "caller" for c in e.changes]
    assert sorted(by_caller, key=lambda change: change.key) == [
        StateChange("prefs", "set", {"room": "quiet", "floor": 3}),
        StateChange("topic", "delete"),
    ]


@pytest.mark.anyio
async def test_client_kwargs_values_never_appear_in_recorded_events(
    clock: FixedClock, ids: SequentialIds
) -> None:
    """No encoded event (from run, run_stream or the store) contains a client_kwargs value; keys are kept."""

    async def read_headers(context: ChatContext, call_next: CallNext) -> None:
        assert context.client_kwargs["api_key"] == "sk-live-3f9a"
        await call_next()

    @tool
    def echo(text: str) -> str:
        return text

    script = [Call("echo", {"text": "hi"}), "done", Call("echo", {"text": "again"}), "done"]
    agent, client = agent_for(script, [echo], clock, ids, middleware=[read_headers])
    client_kwargs = {"api_key": "sk-live-3f9a", "extra_headers": {"X-Trace": "trace-77d1"}}
    session = agent.create_session()

    with capture_events() as events:
        await agent.run("go", session=session, client_kwargs=client_kwargs)
        async for _ in agent.run_stream("go", session=session, client_kwargs=client_kwargs):
            pass

    assert agent.store is not None
    stored = [e for stream in await agent.store.streams() for e in await agent.store.read(stream)]
    assert len(stored) == len(events) > 0
    assert all(request.client_kwargs == client_kwargs for request in client.requests)
    encoded = [encode_event(event) for event in [*events, *stored]]
    assert not any(b"sk-live-3f9a" in line or b"trace-77d1" in line for line in encoded)
    assert [e.client_kwargs_keys for e in only(events, RunStarted)] == [("api_key", "extra_headers")] * 2
    assert len(only(events, ModelCalled)) == 4


def test_no_warning_for_plain_tools() -> None:
    """Defining a tool with an injected context and no **kwargs emits no warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        @tool
        def plain(query: str, ctx: FunctionInvocationContext) -> str:
            return query

    assert plain.context_param == "ctx"


@pytest.mark.parametrize(("typo", "meant"), [("sesion", "session"), ("option", "options"), ("tool", "tools")])
@pytest.mark.anyio
async def test_a_misspelt_run_parameter_is_refused_not_passed_on(typo: str, meant: str) -> None:
    """The deprecated **kwargs path takes runtime values, not typos of run()'s own parameters."""
    agent = ScriptedChatClient(["unused"]).as_agent(name="Memo")
    given: dict[str, Any] = {typo: object()}
    with pytest.raises(TypeError, match=f"did you mean '{meant}'"):
        await agent.run("hi", **given)


def test_enter_and_leave_restore_the_run_before_in_any_nesting() -> None:
    from agentledger.context import enter_run, leave_run, running

    def context(run_id: str) -> RunContext:
        return RunContext(agent=None, run_id=run_id, session=None, options={}, kwargs={})

    outer, inner = context("outer"), context("inner")
    assert current_run_context() is None
    before_outer = enter_run(outer)
    assert before_outer is None
    assert current_run_context() is outer
    before_inner = enter_run(inner)
    assert before_inner is outer
    assert current_run_context() is inner
    with running(context("block")) as block:
        assert current_run_context() is block
    assert current_run_context() is inner
    leave_run(before_inner)
    assert current_run_context() is outer
    leave_run(before_outer)
    assert current_run_context() is None

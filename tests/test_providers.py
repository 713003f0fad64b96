"""Context providers as the reference framework's users write them (memory, retrieval), with
everything a provider adds recorded: the log says what it added, a rerun repeats it without
calling the provider, a live rerun reports a changed contribution, and history stays the log's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from agentledger import (
    Agent,
    AgentContext,
    AgentSession,
    ContextProvider,
    FunctionInvocationContext,
    HistoryProvider,
    InMemoryHistoryProvider,
    Message,
    MiddlewareError,
    ReplayDivergence,
    ReplayDrift,
    SessionContext,
    ToolDefinitionError,
    UnrecordableError,
    agent_middleware,
    function_middleware,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.core.events import (
    ContextProvided,
    RunFailed,
    SessionUpdated,
    ToolSpec,
    decode_event,
    encode_event,
)
from agentledger.core.projections import Views
from agentledger.replay import RecordedRun, replay, rerun
from agentledger.testing import FixedClock, SequentialIds, event_types

pytestmark = pytest.mark.anyio
CallNext = Callable[[], Awaitable[None]]


class Retrieval(ContextProvider):
    """Adds one retrieved fact and an instruction, and counts its calls in its own state."""

    def __init__(self, fact: str = "Fact: the sky is green.") -> None:
        super().__init__("rag")
        self.fact = fact
        self.calls = 0

    async def before_run(
        self, *, agent: Any, session: AgentSession, context: SessionContext, state: dict[str, Any]
    ) -> None:
        self.calls += 1
        state["calls"] = state.get("calls", 0) + 1
        context.extend_messages(self, [Message("user", [self.fact])])
        context.extend_instructions(self.source_id, "Use the facts.")

    async def after_run(
        self, *, agent: Any, session: AgentSession, context: SessionContext, state: dict[str, Any]
    ) -> None:
        state["last"] = context.response.text


def _agent(script: Sequence[ScriptEntry], providers: Sequence[Any], **kwargs: Any) -> Agent:
    return Agent(
        client=ScriptedChatClient(list(script)),
        instructions="Be brief.",
        context_providers=providers,
        clock=FixedClock(),
        ids=SequentialIds(),
        **kwargs,
    )


def _sent(agent: Agent, index: int = -1) -> list[tuple[str, str]]:
    client = agent.client
    assert isinstance(client, ScriptedChatClient)
    return [(m.role, m.text) for m in client.requests[index].messages]


def _instructions(agent: Agent, index: int = -1) -> Any:
    client = agent.client
    assert isinstance(client, ScriptedChatClient)
    return client.requests[index].options.get("instructions")


async def test_a_retrieved_message_and_instruction_are_sent_and_recorded() -> None:
    """As on the reference: the fact goes before the input, the instruction after the agent's;
    the log records both as the provider's contribution."""
    agent = _agent(["a1"], [Retrieval()])
    response = await agent.run("q1")
    assert _sent(agent) == [("user", "Fact: the sky is green."), ("user", "q1")]
    assert _instructions(agent) == "Be brief.\nUse the facts."
    [provided] = [e for e in response.events if type(e) is ContextProvided]
    assert provided.provider == "rag"
    assert [m.text for m in provided.messages] == ["Fact: the sky is green."]
    assert provided.instructions == ("Use the facts.",)
    assert response.text == "a1"
    assert [m.text for m in response.messages] == ["a1"]


async def test_the_session_history_comes_first_and_never_holds_the_fact() -> None:
    """The second run sends the history, then this run's fact, then its input; the session's
    history holds only the conversation (the fact was context for one run)."""
    agent = _agent(["a1", "a2"], [Retrieval()])
    session = agent.create_session()
    await agent.run("q1", session=session)
    await agent.run("q2", session=session)
    assert _sent(agent) == [
        ("user", "q1"),
        ("assistant", "a1"),
        ("user", "Fact: the sky is green."),
        ("user", "q2"),
    ]
    assert [m.text for m in session.history] == ["q1", "a1", "q2", "a2"]


async def test_provider_state_lives_in_the_session_and_is_recorded_as_its_writes() -> None:
    """``state`` is ``session.state[source_id]``, as on the reference; every write is a
    ``SessionUpdated`` by the provider, so the session rebuilds from the log."""
    agent = _agent(["a1", "a2"], [Retrieval()])
    session = agent.create_session()
    first = await agent.run("q1", session=session)
    second = await agent.run("q2", session=session)
    assert session.state["rag"] == {"calls": 2, "last": "a2"}
    writers = {e.by for e in [*first.events, *second.events] if type(e) is SessionUpdated}
    assert writers == {"context_provider:rag"}
    rebuilt = AgentSession.from_events([*first.events, *second.events], session.session_id)
    assert rebuilt.state == session.state
    assert rebuilt.history == session.history


async def test_state_at_shows_what_the_provider_added() -> None:
    """``state_at`` right after the contribution: the fact in the transcript, the provider's
    state; ``instructions_at`` the instruction in force, ``provided`` the contribution."""
    agent = _agent(["a1"], [Retrieval()])
    response = await agent.run("q1", session=agent.create_session())
    recorded = RecordedRun(response.events)
    seq = next(e.seq for e in response.events if type(e) is ContextProvided)
    state = recorded.state_at(seq)
    assert [m.text for m in state.transcript] == ["Fact: the sky is green.", "q1"]
    assert state.session == {"rag": {"calls": 1}}
    assert recorded.instructions_at(seq) == "Be brief.\nUse the facts."
    assert recorded.instructions_at(0) == "Be brief."
    assert [p.provider for p in recorded.provided()] == ["rag"]


async def test_the_projections_rebuilt_from_the_log_match_the_live_run() -> None:
    """Folding the log gives the transcript the model saw and the tools a provider offered."""

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return key.upper()

    class Tools(ContextProvider):
        async def before_run(self, *, context: SessionContext, **_: Any) -> None:
            context.extend_tools(self.source_id, [lookup])

    agent = _agent([Call("lookup", {"key": "x"}), "done"], [Retrieval(), Tools("tools")])
    response = await agent.run("q1")
    views = Views.from_events(response.events)
    assert "lookup" in views.tools.specs
    assert [m.text for m in views.transcript.messages[:2]] == ["Fact: the sky is green.", "q1"]
    assert views.transcript.provided == 1
    assert response.text == "done"


async def test_rerun_repeats_the_contribution_without_calling_the_provider() -> None:
    """A recorded rerun reproduces the run from the log: the provider is not called, and its
    messages, instructions and state writes are repeated exactly."""
    provider = Retrieval()
    agent = _agent(["a1"], [provider])
    session = agent.create_session()
    response = await agent.run("q1", session=session)
    provider.calls = 0
    again = await rerun(RecordedRun(response.events), agent)
    assert provider.calls == 0
    assert again is not None
    assert again.text == "a1"


async def test_a_live_rerun_reports_a_changed_contribution() -> None:
    """Calling the provider again (``providers="live"``) finds that it now retrieves another
    fact: a divergence at its ``ContextProvided``, and ``rerun`` raises."""
    provider = Retrieval()
    agent = _agent(["a1"], [provider])
    response = await agent.run("q1", session=agent.create_session())
    recorded = RecordedRun(response.events)
    assert (await replay(recorded, agent, providers="live")).passed()
    provider.fact = "Fact: the sky is blue."
    report = await replay(recorded, agent, providers="live")
    assert [(f.kind, f.event_type) for f in report.findings] == [("divergence", "ContextProvided")]
    assert provider.calls == 3
    with pytest.raises(ReplayDivergence):
        await rerun(recorded, agent, providers="live")
    assert (await replay(recorded, agent)).passed()  # recorded mode does not ask the provider


async def test_a_provider_added_to_the_agent_since_is_drift() -> None:
    """The providers an agent has are part of its configuration: adding one is drift."""
    agent = _agent(["a1"], [])
    response = await agent.run("q1")
    agent.context_providers.append(Retrieval())
    report = await replay(RecordedRun(response.events), agent)
    assert [(f.kind, f.field) for f in report.findings] == [("drift", "context_providers")]
    with pytest.raises(ReplayDrift):
        await rerun(RecordedRun(response.events), agent)


async def test_a_provider_tool_is_offered_and_a_recorded_rerun_answers_it_from_the_log() -> None:
    """A tool a provider adds is offered from the first call; a recorded rerun needs neither the
    provider nor the tool."""
    ran: list[str] = []

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        ran.append(key)
        return key.upper()

    class Tools(ContextProvider):
        async def before_run(self, *, context: SessionContext, **_: Any) -> None:
            context.extend_tools(self.source_id, [lookup])

    agent = _agent([Call("lookup", {"key": "x"}), "done"], [Tools("tools")])
    response = await agent.run("q1")
    client = agent.client
    assert isinstance(client, ScriptedChatClient)
    assert client.requests[0].tools == ("lookup",)
    [provided] = [e for e in response.events if type(e) is ContextProvided]
    assert [t.name for t in provided.tools] == ["lookup"]
    assert ran == ["x"]
    agent.context_providers.clear()
    agent.context_providers.append(ContextProvider("tools"))  # does nothing now: not called
    await rerun(RecordedRun(response.events), agent)
    assert ran == ["x"]


async def test_a_provider_tool_named_like_another_tool_is_refused() -> None:
    """A different tool under a name the run offers already fails the run, before it is offered."""

    @tool(name="clash")
    def one() -> str:
        """One."""
        return "1"

    @tool(name="clash")
    def two() -> str:
        """Two."""
        return "2"

    class Tools(ContextProvider):
        async def before_run(self, *, context: SessionContext, **_: Any) -> None:
            context.extend_tools(self.source_id, [two])

    agent = _agent(["a1"], [Tools("tools")], tools=[one])
    with pytest.raises(ToolDefinitionError, match="clash"):
        await agent.run("q1")


async def test_provider_middleware_runs_and_is_named_in_the_log() -> None:
    """Function middleware a provider adds wraps the run's calls (after the agent's own)."""
    seen: list[str] = []

    @function_middleware
    async def audit(context: FunctionInvocationContext, call_next: CallNext) -> None:
        seen.append(context.function.name)
        await call_next()

    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    class Audit(ContextProvider):
        async def before_run(self, *, context: SessionContext, **_: Any) -> None:
            context.extend_middleware(self.source_id, [audit])

    agent = _agent([Call("ping"), "done"], [Audit("audit")], tools=[ping])
    response = await agent.run("q1")
    assert seen == ["ping"]
    [provided] = [e for e in response.events if type(e) is ContextProvided]
    assert provided.middleware == ("function:audit",)


async def test_a_provider_cannot_add_agent_middleware() -> None:
    """As on the reference: ``extend_middleware`` refuses agent middleware."""

    @agent_middleware
    async def outer(context: AgentContext, call_next: CallNext) -> None:
        await call_next()

    context = SessionContext(input_messages=[])
    with pytest.raises(MiddlewareError, match="chat or function"):
        context.extend_middleware("p", [outer])


async def test_hooks_run_inside_agent_middleware_and_after_run_in_reverse() -> None:
    """As measured on the reference: agent middleware, then each ``before_run`` in order, the
    loop, each ``after_run`` in reverse order, then the rest of the middleware."""
    order: list[str] = []

    class Named(ContextProvider):
        async def before_run(self, **_: Any) -> None:
            order.append(f"before {self.source_id}")

        async def after_run(self, *, context: SessionContext, **_: Any) -> None:
            order.append(f"after {self.source_id}: {context.response.text}")

    @agent_middleware
    async def around(context: AgentContext, call_next: CallNext) -> None:
        order.append("middleware in")
        await call_next()
        order.append("middleware out")

    agent = _agent(["a1"], [Named("a"), Named("b")], middleware=[around])
    await agent.run("q1")
    assert order == [
        "middleware in",
        "before a",
        "before b",
        "after b: a1",
        "after a: a1",
        "middleware out",
    ]


async def test_a_provider_that_raises_fails_the_run_with_its_error() -> None:
    """As on the reference, the provider's exception is what ``run()`` raises; the log ends in
    ``RunFailed`` and no model is called."""

    class Down(ContextProvider):
        async def before_run(self, **_: Any) -> None:
            raise RuntimeError("retrieval is down")

    events: list[Any] = []
    agent = _agent(["a1"], [Down("down")], event_sinks=[events.append])
    with pytest.raises(RuntimeError, match="retrieval is down"):
        await agent.run("q1")
    assert type(events[-1]) is RunFailed
    assert "ModelCalled" not in event_types(events)


async def test_after_run_is_not_called_after_a_failed_run() -> None:
    """A run whose model call failed does not reach ``after_run`` (no response to look at)."""
    called: list[str] = []

    class Watch(ContextProvider):
        async def after_run(self, **_: Any) -> None:
            called.append("after")

    def fail(request: Any) -> str:
        raise ConnectionError("offline")

    agent = _agent([fail], [Watch("watch")])
    with pytest.raises(Exception, match="offline"):
        await agent.run("q1")
    assert called == []


async def test_without_a_session_providers_get_one_of_their_own() -> None:
    """A run without a session still runs its providers, on a session nothing records."""
    provider = Retrieval()
    agent = _agent(["a1"], [provider])
    response = await agent.run("q1")
    assert provider.calls == 1
    assert not [e for e in response.events if type(e) is SessionUpdated]


class Saved(HistoryProvider):
    """A history kept in a dict, as a porting user keeps it in a database."""

    def __init__(self, **flags: Any) -> None:
        super().__init__("db", **flags)
        self.db: dict[str | None, list[Message]] = {}

    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Message]:
        return list(self.db.get(session_id, []))

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[Message],
        *,
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.db.setdefault(session_id, []).extend(messages)


async def test_a_history_provider_keeps_a_copy_and_the_model_sees_the_conversation_once() -> None:
    """As on the reference, the provider saves each run's input and answer, and the second run
    sends the conversation once; here it comes from the session (the log), not the provider."""
    saved = Saved()
    agent = _agent(["d1", "d2"], [saved, Retrieval()])
    session = agent.create_session()
    await agent.run("q1", session=session)
    await agent.run("q2", session=session)
    assert [m.text for m in saved.db[session.session_id]] == ["q1", "d1", "q2", "d2"]
    assert _sent(agent) == [
        ("user", "q1"),
        ("assistant", "d1"),
        ("user", "Fact: the sky is green."),
        ("user", "q2"),
    ]
    assert session.state["db"] == {}  # its state, created empty as on the reference


async def test_a_history_provider_saves_context_messages_when_asked() -> None:
    """``store_context_messages`` saves the other providers' messages before the input."""
    saved = Saved(store_context_messages=True)
    agent = _agent(["d1"], [Retrieval(), saved])
    session = agent.create_session()
    await agent.run("q1", session=session)
    assert [m.text for m in saved.db[session.session_id]] == ["Fact: the sky is green.", "q1", "d1"]


async def test_in_memory_history_is_the_sessions_own() -> None:
    """``InMemoryHistoryProvider`` stands for the session's history: nothing doubles, no state
    entry, and the agent's providers stay as given (the reference appends one to them)."""
    memory = InMemoryHistoryProvider()
    agent = _agent(["e1", "e2"], [memory, Retrieval()])
    session = agent.create_session()
    await agent.run("q1", session=session)
    await agent.run("q2", session=session)
    assert _sent(agent) == [
        ("user", "q1"),
        ("assistant", "e1"),
        ("user", "Fact: the sky is green."),
        ("user", "q2"),
    ]
    assert "in_memory" not in session.state
    assert await memory.get_messages(session.session_id, session=session) == session.history
    plain = _agent(["x"], [])
    await plain.run("q", session=plain.create_session())
    assert plain.context_providers == []


async def test_agent_refuses_what_is_not_a_provider() -> None:
    """``context_providers`` takes providers; anything else is a ``TypeError`` at once."""
    with pytest.raises(TypeError, match="ContextProvider"):
        _agent(["a1"], ["rag"])


async def test_the_temporal_driver_refuses_an_agent_with_providers() -> None:
    """A distributed run cannot run providers around it: a clear typed error at the start."""
    steps = pytest.importorskip("agentledger.adapters.temporal.steps")
    types = pytest.importorskip("agentledger.adapters.temporal.types")
    agent = _agent(["a1"], [Retrieval()])
    request = types.StartRequest(view=types.RunView(agent="rag", run_id="run_1"), messages=(), at=0)
    with pytest.raises(steps.UnsupportedAgent, match="context providers"):
        steps.started_events(agent, request)


def test_a_contribution_round_trips_through_the_log() -> None:
    """``ContextProvided`` encodes and decodes as itself (the log's one format)."""
    event = ContextProvided(
        run_id="r",
        seq=1,
        at=5,
        provider="rag",
        messages=(Message("user", ["fact"]),),
        instructions=("Use it.",),
        tools=(ToolSpec(name="lookup"),),
        middleware=("function:audit",),
    )
    assert decode_event(encode_event(event)) == event


async def test_a_resume_sends_provided_messages_before_the_paused_batch() -> None:
    """A run resuming a paused batch still runs its providers, but their messages go before the
    history: the batch's calls stay right before their results, as every chat API requires."""

    @tool(approval_mode="always_require")
    def pay(amount: int) -> str:
        """Pay."""
        return f"paid {amount}"

    agent = _agent([Call("pay", {"amount": 5}), "Paid."], [Retrieval()], tools=[pay])
    session = agent.create_session()
    paused = await agent.run("pay 5", session=session)
    answers = [request.to_approval_response(True) for request in paused.user_input_requests]
    done = await agent.run(Message("user", answers), session=session)
    client = agent.client
    assert isinstance(client, ScriptedChatClient)
    roles = [(m.role, m.text) for m in client.requests[-1].messages]
    assert roles == [
        ("user", "Fact: the sky is green."),
        ("user", "pay 5"),
        ("assistant", ""),
        ("tool", ""),
    ]
    assert [m.role for m in session.history] == ["user", "assistant", "tool", "assistant"]
    recorded = RecordedRun(done.events, prior=paused.events)
    seq = next(e.seq for e in done.events if type(e) is ContextProvided)
    assert recorded.state_at(seq).transcript[0].text == "Fact: the sky is green."
    await rerun(recorded, agent)


async def test_what_no_log_could_hold_fails_the_run_with_a_typed_error() -> None:
    """A provider message that is not a message is a ``TypeError`` naming what is taken; one the
    log cannot hold (a lone surrogate) fails the run with ``UnrecordableError``, recorded."""
    context = SessionContext(input_messages=[])
    with pytest.raises(TypeError, match="extend_messages takes messages"):
        context.extend_messages("p", [42])

    class Broken(ContextProvider):
        async def before_run(self, *, context: SessionContext, **_: Any) -> None:
            context.extend_messages(self, [Message("user", ["bad \ud800"])])

    events: list[Any] = []
    agent = _agent(["a1"], [Broken("broken")], event_sinks=[events.append])
    with pytest.raises(UnrecordableError):
        await agent.run("q1")
    assert event_types(events) == ["RunStarted", "RunFailed"]


async def test_recorded_tools_with_live_providers_do_not_run_a_provided_tool() -> None:
    """``tools="recorded"`` runs no tool body, a tool a live provider offers included: its
    calls take their recorded outcomes, with the live tool's spec and checks."""
    charged: list[int] = []

    @tool
    def charge_card(amount: int) -> str:
        """Charge the card."""
        charged.append(amount)
        return f"charged {amount}"

    class Billing(ContextProvider):
        async def before_run(self, *, agent: Any, session: Any, context: SessionContext, state: Any) -> None:
            context.extend_tools(self.source_id, [charge_card])

    def agent(client: ScriptedChatClient) -> Agent:
        return Agent(client=client, context_providers=[Billing("billing")], store=False)

    response = await agent(ScriptedChatClient([Call("charge_card", {"amount": 10}), "Charged."])).run("Bill.")
    assert charged == [10]
    recorded = RecordedRun(response.events)
    report = await replay(recorded, agent(ScriptedChatClient([])), tools="recorded", providers="live")
    assert charged == [10]
    assert report.findings == []
    live = await replay(recorded, agent(ScriptedChatClient([])), tools="live", providers="live")
    assert charged == [10, 10]  # live tools: the provider's tool runs
    assert live.findings == []

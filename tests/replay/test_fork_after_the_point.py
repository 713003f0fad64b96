"""What a fork does after its point: the new model's calls run live, whatever their ids, and the
run's end (the context providers' ``after_run``) is the fork's own, not the recording's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from agentledger import (
    Agent,
    AgentLedgerError,
    ChatContext,
    ChatResponse,
    Content,
    FunctionInvocationContext,
    MemoryEventStore,
    Message,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core import ChildRunStarted, SessionUpdated, ToolFailed, ToolReturned
from agentledger.providers import ContextProvider
from agentledger.replay import fork, load

pytestmark = pytest.mark.anyio


async def test_a_call_of_the_new_model_runs_live_though_its_id_repeats_one_from_before() -> None:
    """A client that numbers its calls from call_1 repeats the recorded ids after the point: the
    new call still runs, and does not take the old call's recorded outcome."""
    sent: list[str] = []

    def agent(client: ScriptedChatClient, store: MemoryEventStore | bool) -> Agent:
        @tool
        def send_mail(to: str) -> str:
            """Send a mail."""
            sent.append(to)
            return f"sent to {to}"

        return Agent(client=client, tools=[send_mail], store=store)

    store = MemoryEventStore()
    response = await agent(ScriptedChatClient([Call("send_mail", {"to": "ops"}), "Done."]), store).run(
        "Mail."
    )
    recorded = await load(store, response.run_id)
    [returned] = [e.seq for e in recorded.events if isinstance(e, ToolReturned)]
    new = ScriptedChatClient([Call("send_mail", {"to": "ceo"}), "Mailed the CEO."])
    forked = await fork(recorded, agent(ScriptedChatClient([]), False), at=returned, client=new)
    assert sent == ["ops", "ceo"]
    results = [(e.call_id, e.result) for e in forked.events if isinstance(e, ToolReturned)]
    assert results == [("call_1", "sent to ops"), ("call_1", "sent to ceo")]


async def test_a_sub_agent_call_of_the_new_model_runs_its_child_live() -> None:
    sent: list[str] = []

    def lead(client: ScriptedChatClient, store: MemoryEventStore | bool) -> Agent:
        @tool
        def send_mail(to: str) -> str:
            """Send a mail."""
            sent.append(to)
            return f"sent to {to}"

        child = ScriptedChatClient(
            [
                Call("send_mail", {"to": "ops"}),
                "Mailed ops.",
                Call("send_mail", {"to": "ceo"}),
                "Mailed the CEO.",
            ]
        )
        mailer = Agent(client=child, name="mailer", tools=[send_mail])
        return Agent(client=client, tools=[mailer.as_tool(name="mailer")], store=store)

    store = MemoryEventStore()
    recording = lead(ScriptedChatClient([Call("mailer", {"task": "tell ops"}), "Told."]), store)
    response = await recording.run("Tell ops.")
    recorded = await load(store, response.run_id)
    [returned] = [e.seq for e in recorded.events if isinstance(e, ToolReturned)]
    forking = lead(ScriptedChatClient([]), False)
    forking.tools[0].agent.client = ScriptedChatClient([Call("send_mail", {"to": "ceo"}), "Mailed the CEO."])  # type: ignore[attr-defined]
    new = ScriptedChatClient([Call("mailer", {"task": "tell the ceo"}), "Told the CEO."])
    forked = await fork(recorded, forking, at=returned, client=new)
    assert sent == ["ops", "ceo"]
    links = [e.child_run_id for e in forked.events if isinstance(e, ChildRunStarted)]
    assert len(links) == 2
    assert links[1] != links[0]  # a new child run, not the recorded one
    assert [e.result for e in forked.events if isinstance(e, ToolReturned)] == [
        "Mailed ops.",
        "Mailed the CEO.",
    ]


class _LastAnswer(ContextProvider):
    def __init__(self) -> None:
        super().__init__("memory")
        self.seen: list[str] = []

    async def after_run(
        self, *, agent: object, session: object, context: object, state: dict[str, object]
    ) -> None:
        text = context.response.text  # type: ignore[attr-defined]
        self.seen.append(text)
        state["last_answer"] = text


async def test_a_fork_runs_the_providers_after_run_on_its_own_answer() -> None:
    """The recording's end is not the fork's: its after_run writes are not repeated, the live
    providers' after_run runs on the fork's answer, and the recorded log is left as it was."""
    store = MemoryEventStore()
    recording = _LastAnswer()
    agent = Agent(client=ScriptedChatClient(["Original."]), store=store, context_providers=[recording])
    response = await agent.run("Hi.", session=agent.create_session())
    before = [e.changes for e in await store.read(response.run_id) if isinstance(e, SessionUpdated)]
    recorded = await load(store, response.run_id)
    forking = _LastAnswer()
    fork_agent = Agent(client=ScriptedChatClient([]), store=False, context_providers=[forking])
    forked = await fork(recorded, fork_agent, at=0, client=ScriptedChatClient(["Forked."]))
    assert forking.seen == ["Forked."]
    writes = [c.value for e in forked.events if isinstance(e, SessionUpdated) for c in e.changes]
    assert writes[-1] == {"last_answer": "Forked."}
    assert {"last_answer": "Original."} not in writes
    assert [e.changes for e in await store.read(response.run_id) if isinstance(e, SessionUpdated)] == before


@pytest.mark.filterwarnings("ignore::agentledger.ExperimentalWarning")  # add_tools
async def test_a_tool_added_during_the_recorded_run_says_why_a_fork_cannot_run_it() -> None:
    """Known to the fork by its recorded spec only: a call of it past the point fails, recorded,
    with the reason and what to do."""

    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        return f"{order}: shipped"

    @tool
    def unlock(ctx: FunctionInvocationContext) -> str:
        """Unlock the order tools."""
        ctx.add_tools([lookup])
        return "unlocked"

    store = MemoryEventStore()
    agent = Agent(client=ScriptedChatClient([Call("unlock"), "Ready."]), tools=[unlock], store=store)
    response = await agent.run("Unlock.")
    recorded = await load(store, response.run_id)
    [returned] = [e.seq for e in recorded.events if isinstance(e, ToolReturned)]
    new = ScriptedChatClient([Call("lookup", {"order": "o1"}), "Looked."])
    fork_agent = Agent(client=ScriptedChatClient([]), tools=[unlock], store=False)
    forked = await fork(recorded, fork_agent, at=returned, client=new)
    [failed] = [e for e in forked.events if isinstance(e, ToolFailed)]
    assert "no live tool 'lookup'" in failed.message
    assert "give it to the agent's tools" in failed.message


async def test_a_call_chat_middleware_answered_before_the_point_is_the_past() -> None:
    """An answer chat middleware gave in the model's place is given again by the fork's
    middleware: its calls are the past like the client's, and never run again."""
    sent: list[str] = []

    @tool
    def send_mail(to: str) -> str:
        """Send a mail."""
        sent.append(to)
        return f"mailed {to}"

    async def cached_plan(context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        if context.iteration == 2:  # answered from a cache, with a call
            call = Content.from_function_call("c_cache", "send_mail", arguments='{"to": "bob"}')
            context.result = ChatResponse(Message("assistant", [call]))
            return
        await call_next()

    def agent(client: ScriptedChatClient, store: MemoryEventStore | bool) -> Agent:
        return Agent(client=client, tools=[send_mail], middleware=[cached_plan], store=store)

    store = MemoryEventStore()
    response = await agent(ScriptedChatClient([Call("send_mail", {"to": "alice"}), "All sent."]), store).run(
        "Mail."
    )
    assert sent == ["alice", "bob"]
    recorded = await load(store, response.run_id)
    bob = next(e.seq for e in recorded.events if isinstance(e, ToolReturned) and e.call_id == "c_cache")
    for at in range(bob, len(recorded.events)):
        sent.clear()
        await fork(
            recorded, agent(ScriptedChatClient([]), False), at=at, client=ScriptedChatClient(["Forked."] * 3)
        )
        assert sent == [], at


async def test_a_fork_sends_its_conversation_in_full_not_the_services() -> None:
    """The service holds the conversation as the recorded run went on past the point: the fork
    leaves it, and sends the new client the conversation up to the point."""

    @tool
    def price(item: str) -> str:
        """The price of an item."""
        return f"{item}: 3 EUR"

    def agent(client: ScriptedChatClient, store: MemoryEventStore | bool) -> Agent:
        return Agent(client=client, tools=[price], store=store, default_options={"store": True})

    recording = ScriptedChatClient(
        [Call("price", {"item": "tea"}), Call("price", {"item": "jam"}), "Tea 3, jam 3."],
        keeps_conversations=True,
    )
    store = MemoryEventStore()
    keeper = agent(recording, store)
    response = await keeper.run("Tea and jam?", session=keeper.create_session())
    assert recording.requests[-1].options.get("conversation_id") is not None  # the service kept it
    recorded = await load(store, response.run_id)
    [first, _] = [e.seq for e in recorded.events if isinstance(e, ToolReturned)]
    new = ScriptedChatClient(["Forked."], keeps_conversations=True)
    await fork(recorded, agent(ScriptedChatClient([]), False), at=first, client=new)
    [request] = new.requests
    assert request.options.get("conversation_id") is None
    assert [m.role for m in request.messages] == ["user", "assistant", "tool"]


async def test_a_run_whose_model_repeated_a_call_id_is_not_forked() -> None:
    @tool
    def send(to: str) -> str:
        """Send."""
        return f"sent to {to}"

    client = ScriptedChatClient(
        [
            Call("send", {"to": "alice"}, call_id="call_0"),
            Call("send", {"to": "bob"}, call_id="call_0"),
            "Both.",
        ]
    )
    store = MemoryEventStore()
    response = await Agent(client=client, tools=[send], store=store).run("Send.")
    recorded = await load(store, response.run_id)
    with pytest.raises(AgentLedgerError, match="'call_0' again in model call 2"):
        await fork(
            recorded, Agent(client=ScriptedChatClient([]), tools=[send], store=False), at=4, client=client
        )


async def test_a_run_on_a_conversation_only_the_service_holds_is_not_forked() -> None:
    """Its earlier turns are not in the log, and a fork sends the conversation in full: it says
    so rather than send the new client the run's own messages alone."""
    client = ScriptedChatClient(["Tea found."], keeps_conversations=True)
    store = MemoryEventStore()
    agent = Agent(client=client, store=store)
    response = await agent.run("Find tea.", session=agent.get_session("resp_earlier_turns"))
    recorded = await load(store, response.run_id)
    with pytest.raises(
        AgentLedgerError, match="'resp_earlier_turns', whose earlier turns the log does not hold"
    ):
        await fork(recorded, Agent(client=ScriptedChatClient([]), store=False), at=0, client=client)


async def test_a_later_turn_of_a_conversation_only_the_service_holds_is_not_forked() -> None:
    client = ScriptedChatClient(["One.", "Two."], keeps_conversations=True)
    store = MemoryEventStore()
    agent = Agent(client=client, store=store)
    session = agent.get_session("resp_earlier_turns")
    await agent.run("t1", session=session)
    response = await agent.run("t2", session=session)
    recorded = await load(store, response.run_id)
    with pytest.raises(
        AgentLedgerError, match="'resp_earlier_turns', whose earlier turns the log does not hold"
    ):
        await fork(recorded, Agent(client=ScriptedChatClient([]), store=False), at=0, client=client)

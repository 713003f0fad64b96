"""A lead agent with a research sub-agent, in the variants the replay tests load with ``--agent``.

``build(...)`` makes the tree with a change or none. Every chat client here fails the test if a
replay asks it anything: a replay answers model calls from the log, sub-agents included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from agentledger import Agent, BaseChatClient, ChatResponse, FunctionInvocationContext, Message, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.replay import RecordedRun
from agentledger.store import EventStore
from agentledger.testing import FixedClock, SequentialIds

LEAD_INSTRUCTIONS = "You lead research. Delegate to the researcher, then answer."
RESEARCH_INSTRUCTIONS = "Research the topic and store what you find."


class NoModel(BaseChatClient):
    """A chat client that must never be called: it counts calls and then raises."""

    provider_name = "scripted"
    calls = 0

    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        options: Mapping[str, Any] | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ChatResponse:
        NoModel.calls += 1
        raise AssertionError("a replay called a model")


def build(
    *,
    recording: bool = False,
    store: EventStore | bool = False,
    lead_instructions: str = LEAD_INSTRUCTIONS,
    research_instructions: str = RESEARCH_INSTRUCTIONS,
    finding: str = "tides follow the moon",
    search_description: str = "Search the library.",
) -> Agent:
    """The tree: recording, with scripted models that answer; else with models that must not be asked."""
    ids, clock = SequentialIds(), FixedClock()

    @tool(description=search_description)
    def search(query: Annotated[str, "What to look up."]) -> str:
        return f"{query}: {finding}"

    @tool
    def store_note(note: Annotated[str, "What to keep."], ctx: FunctionInvocationContext) -> str:
        """Keep a note in the session."""
        if ctx.session is not None:
            ctx.session.state["note"] = note
        return "kept"

    child_client: BaseChatClient = (
        ScriptedChatClient(
            [Call("search", {"query": "tides"}), Call("store_note", {"note": "lunar"}), "Found it."]
        )
        if recording
        else NoModel()
    )
    researcher = Agent(
        client=child_client,
        name="researcher",
        instructions=research_instructions,
        tools=[search, store_note],
        ids=ids,
        clock=clock,
        store=store,
    )
    lead_client: BaseChatClient = (
        ScriptedChatClient([Call("research", {"task": "tides"}), "Tides follow the moon."])
        if recording
        else NoModel()
    )
    return Agent(
        client=lead_client,
        name="lead",
        instructions=lead_instructions,
        tools=[
            researcher.as_tool(name="research", description="Ask the researcher.", propagate_session=True)
        ],
        ids=ids,
        clock=clock,
        store=store,
    )


def researcher_of(lead: Agent) -> Agent:
    """The sub-agent behind the lead's research tool."""
    [research] = lead.tools
    agent = getattr(research, "agent", None)
    assert isinstance(agent, Agent)
    return agent


def same() -> Agent:
    return build()


def same_researcher() -> Agent:
    return researcher_of(build())


def changed_tool_body() -> Agent:
    return build(finding="tides follow the wind")


def changed_description() -> Agent:
    return build(search_description="Search the whole library.")


def changed_description_and_body() -> Agent:
    return build(search_description="Search the whole library.", finding="tides follow the wind")


def changed_lead_prompt() -> Agent:
    return build(lead_instructions="You lead research. Answer in French.")


def changed_research_prompt() -> Agent:
    return build(research_instructions="Research the topic. Be brief.")


def from_recording(recorded: RecordedRun) -> Agent:
    """A factory that reads the recorded run: it refuses one of another agent."""
    assert recorded.started.agent_name == "lead", recorded.started.agent_name
    return build()

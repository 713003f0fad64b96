"""Conversations a service keeps: ``service_session_id``, ``options["conversation_id"]`` and
``store``, as a run sends them, records them and replays them with no server."""

from __future__ import annotations

from typing import Any

import pytest

from agentledger import Agent, ApprovalError, ModelCallError, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core.events import ModelCalled, ModelResponded, RunCompleted, RunStarted
from agentledger.core.machine import RunMachine
from agentledger.core.messages import Message
from agentledger.core.projections import TranscriptProjection, conversation_after
from agentledger.replay import load, rerun
from agentledger.session import AgentSession
from agentledger.testing import FixedClock, SequentialIds
from tests.clients.test_openai_responses import (
    Server,
    answer,
    call_item,
    client,
    message_item,
    sse,
    streamed,
    text_events,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@tool
def lookup(city: str) -> str:
    """Look up the weather of a city."""
    return f"{city}: sunny"


@tool(approval_mode="always_require")
def book(city: str) -> str:
    """Book a trip."""
    return f"booked {city}"


def keeping(*script: Any) -> ScriptedChatClient:
    return ScriptedChatClient(list(script), keeps_conversations=True)


def agent_on(llm: Any, **options: Any) -> Agent:
    return Agent(
        client=llm,
        name="Weather",
        tools=[lookup, book],
        clock=FixedClock(),
        ids=SequentialIds(),
        default_options=options,
    )


def texts(messages: Any) -> list[str]:
    return [f"{m.role}:{m.text}" if m.text else f"{m.role}:{[c.type for c in m.contents]}" for m in messages]


# -- a run in a stored conversation -----------------------------------------------------------


async def test_stored_run_sends_only_what_the_service_does_not_hold() -> None:
    """With store, the call after a batch sends the batch's results alone, continuing the first
    response; the session then follows the conversation, and its next run sends only its input."""
    llm = keeping(Call("lookup", {"city": "Lima"}, call_id="c1"), "Lima is sunny.", "You asked about Lima.")
    agent = agent_on(llm, store=True)
    session = agent.create_session()
    first = await agent.run("Weather in Lima?", session=session)
    assert first.text == "Lima is sunny."
    one, two = llm.requests
    assert texts(one.messages) == ["user:Weather in Lima?"]
    assert "conversation_id" not in one.options
    assert texts(two.messages) == ["tool:['function_result']"]
    assert two.options["conversation_id"] == "resp_1"
    assert session.service_session_id == "resp_2"

    await agent.run("What did I ask?", session=session)
    three = llm.requests[2]
    assert texts(three.messages) == ["user:What did I ask?"]  # the history stays with the service
    assert three.options["conversation_id"] == "resp_2"
    assert session.service_session_id == "resp_3"
    assert len(session.history) == 6  # the local record is whole all the same


async def test_the_log_says_what_was_held_and_what_came_back() -> None:
    llm = keeping(Call("lookup", {"city": "Lima"}, call_id="c1"), "Lima is sunny.")
    response = await agent_on(llm, store=True).run("Weather in Lima?")
    called = [e for e in response.events if isinstance(e, ModelCalled)]
    responded = [e for e in response.events if isinstance(e, ModelResponded)]
    assert [(e.conversation_id, e.held, e.message_count) for e in called] == [(None, 0, 1), ("resp_1", 2, 3)]
    assert [e.conversation_id for e in responded] == ["resp_1", "resp_2"]
    transcript = TranscriptProjection.from_events(response.events)
    assert [texts(transcript.sent_at(i)) for i in (1, 2)] == [
        ["user:Weather in Lima?"],
        ["tool:['function_result']"],
    ]
    assert texts(transcript.seen_at(2)) == [
        "user:Weather in Lima?",
        "assistant:['function_call']",
        "tool:['function_result']",
    ]
    assert conversation_after(response.events) == "resp_2"
    machine = RunMachine.from_events(response.events)  # rebuilt from the log, it asks for the same
    assert machine.conversation_id == "resp_2"


async def test_without_store_the_whole_conversation_goes_out() -> None:
    """A client that could keep the conversation is not asked to: nothing changes."""
    llm = keeping(Call("lookup", {"city": "Lima"}, call_id="c1"), "Sunny.", "Again sunny.")
    agent = agent_on(llm)
    session = agent.create_session()
    await agent.run("Weather in Lima?", session=session)
    await agent.run("And now?", session=session)
    assert session.service_session_id is None
    assert len(llm.requests[2].messages) == 5  # history and input
    assert all("conversation_id" not in r.options for r in llm.requests)


async def test_store_false_turns_continuation_off() -> None:
    llm = keeping("Hello.", "Hello again.")
    agent = agent_on(llm)
    session = agent.get_session("resp_old")
    await agent.run("Hi", session=session, options={"store": False})
    assert llm.requests[0].options["conversation_id"] == "resp_old"
    assert session.service_session_id == "resp_old"  # the response was not kept: nothing to follow


# -- continuing a conversation by its id -------------------------------------------------------


async def test_get_session_continues_the_service_conversation() -> None:
    llm = keeping("Welcome back.")
    agent = agent_on(llm)
    session = agent.get_session("conv_abc", session_id="s-1")
    assert (session.session_id, session.service_session_id) == ("s-1", "conv_abc")
    response = await agent.run("Where were we?", session=session)
    request = llm.requests[0]
    assert request.options["conversation_id"] == "conv_abc"
    assert texts(request.messages) == ["user:Where were we?"]
    started = response.events[0]
    assert isinstance(started, RunStarted)
    assert started.options["conversation_id"] == "conv_abc"  # recorded, so a rerun sends it too
    assert session.service_session_id == "resp_1"  # continuing keeps the response unless store=False


async def test_the_option_given_to_the_run_wins_over_the_session_id() -> None:
    """As in agent-framework-core 1.23 (measured): the run's own conversation_id is sent; an
    agent's default one is not, the session's conversation wins over it."""
    llm = keeping("Hi.", "Again.")
    agent = agent_on(llm)
    session = agent.get_session("resp_session")
    await agent.run("Hi", session=session, options={"conversation_id": "resp_option"})
    assert llm.requests[0].options["conversation_id"] == "resp_option"
    defaulted = agent_on(llm, conversation_id="resp_default")
    await defaulted.run("Again", session=defaulted.get_session("resp_session"))
    assert llm.requests[1].options["conversation_id"] == "resp_session"


async def test_conversation_id_option_without_a_session() -> None:
    llm = ScriptedChatClient(["Hi."])  # a client that reports nothing back
    await agent_on(llm).run("Hi", options={"conversation_id": "resp_9"})
    assert llm.requests[0].options["conversation_id"] == "resp_9"


def test_get_session_refuses_what_is_not_an_id() -> None:
    agent = agent_on(keeping())
    for bad in ("", None, {"id": "x"}):
        with pytest.raises(TypeError, match="service_session_id"):
            agent.get_session(bad)  # type: ignore[arg-type]


async def test_a_failed_run_leaves_the_conversation_where_it_was() -> None:
    def broken(request: Any) -> Any:
        raise RuntimeError("service down")

    llm = keeping(Call("lookup", {"city": "Lima"}, call_id="c1"), broken)
    agent = agent_on(llm, store=True)
    session = agent.get_session("resp_0")
    with pytest.raises(ModelCallError):
        await agent.run("Weather?", session=session)
    assert llm.requests[1].options["conversation_id"] == "resp_1"  # the run did continue...
    assert session.service_session_id == "resp_0"  # ...but the session stays at the last completed run
    assert session.history == []


# -- approvals, streaming, rebuilding, replaying -----------------------------------------------


async def test_resume_after_approval_sends_the_results_to_the_paused_response() -> None:
    llm = keeping(Call("book", {"city": "Lima"}, call_id="b1"), "Booked.")
    agent = agent_on(llm, store=True)
    session = agent.create_session()
    paused = await agent.run("Book Lima", session=session)
    assert session.service_session_id == "resp_1"
    answer_ = paused.user_input_requests[0].to_approval_response(True)
    resumed = await agent.run(Message("user", (answer_,)), session=session)
    assert resumed.text == "Booked."
    second = llm.requests[1]
    assert texts(second.messages) == ["tool:['function_result']"]
    assert second.options["conversation_id"] == "resp_1"
    assert session.service_session_id == "resp_2"
    with pytest.raises(ApprovalError):  # the answer was used: the batch does not run twice
        await agent.run(Message("user", (answer_,)), session=session)


async def test_a_streamed_run_follows_the_conversation_too() -> None:
    llm = keeping(Call("lookup", {"city": "Lima"}, call_id="c1"), "Lima is sunny.")
    agent = agent_on(llm, store=True)
    session = agent.create_session()
    [u async for u in agent.run_stream("Weather?", session=session)]
    assert llm.requests[1].options["conversation_id"] == "resp_1"
    assert session.service_session_id == "resp_2"


async def test_a_session_rebuilt_from_the_log_follows_the_same_conversation() -> None:
    llm = keeping(Call("lookup", {"city": "Lima"}, call_id="c1"), "Sunny.", "Yes.", "No.")
    agent = agent_on(llm, store=True)
    session = agent.create_session()
    await agent.run("Weather?", session=session)
    await agent.run("Sure?", session=session, options={"store": False})
    await agent.run("Really?", session=session)
    store = agent.store
    assert store is not None
    events = [e for run_id in await store.streams() for e in await store.read(run_id)]
    rebuilt = AgentSession.from_events(events, session.session_id)
    assert rebuilt.service_session_id == session.service_session_id == "resp_4"
    assert rebuilt.history == session.history


async def test_a_rerun_needs_no_server_and_sends_what_the_run_sent() -> None:
    llm = keeping(Call("lookup", {"city": "Lima"}, call_id="c1"), "Sunny.", "It was Lima.")
    agent = agent_on(llm, store=True)
    session = agent.create_session()
    await agent.run("Weather in Lima?", session=session)
    second = await agent.run("Which city?", session=session)
    assert agent.store is not None
    recorded = await load(agent.store, second.run_id)
    again = await rerun(recorded, agent_on(ScriptedChatClient([]), store=True))  # all from the log
    assert again is not None
    assert again.text == "It was Lima."
    called = [e for e in again.events if isinstance(e, ModelCalled)]
    assert [(e.conversation_id, e.held) for e in called] == [("resp_2", 4)]  # the first run is held
    assert isinstance(again.events[-1], RunCompleted)


# -- the Responses client on the wire ---------------------------------------------------------


async def test_responses_client_continues_by_previous_response_id() -> None:
    server = Server(
        answer(call_item("c1", '{"city": "Lima"}')),
        answer(message_item("Lima is sunny."), id="resp_2"),
    )
    agent = agent_on(client(server), store=True)
    session = agent.create_session()
    await agent.run("Weather in Lima?", session=session)
    first, second = server.bodies
    assert first["store"] is True
    assert "previous_response_id" not in first
    assert second["previous_response_id"] == "resp_1"
    assert second["input"] == [{"type": "function_call_output", "call_id": "c1", "output": "Lima: sunny"}]
    assert session.service_session_id == "resp_2"


async def test_responses_client_continues_a_conversation_object() -> None:
    conversation = {"conversation": {"id": "conv_1"}}
    server = Server(answer(message_item("Hello."), **conversation))
    agent = agent_on(client(server))
    session = agent.get_session("conv_1")
    await agent.run("Hi", session=session)
    body = server.bodies[0]
    assert body["conversation"] == "conv_1"
    assert "previous_response_id" not in body
    assert "store" not in body
    assert session.service_session_id == "conv_1"  # the conversation, not the response, is followed


async def test_responses_client_reports_nothing_unless_the_response_is_kept() -> None:
    server = Server(answer(message_item("Hi.")), answer(message_item("Hi.")), answer(message_item("Hi.")))
    llm = client(server)
    plain = await llm.get_response([Message("user", ["Hi"])])
    unstored = await llm.get_response(
        [Message("user", ["Hi"])], options={"store": False, "conversation_id": "resp_0"}
    )
    stored = await llm.get_response([Message("user", ["Hi"])], options={"store": True})
    assert (plain.conversation_id, unstored.conversation_id, stored.conversation_id) == (None, None, "resp_1")
    assert server.bodies[1]["store"] is False
    assert server.bodies[1]["previous_response_id"] == "resp_0"


async def test_responses_client_stream_reports_the_kept_response() -> None:
    server = Server(streamed(sse(*text_events("Hel", "lo."))))
    llm = client(server)
    updates = [
        u async for u in llm.get_streaming_response([Message("user", ["Hi"])], options={"store": True})
    ]
    assert [u.conversation_id for u in updates if u.conversation_id] == ["resp_7"]

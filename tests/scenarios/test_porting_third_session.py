"""Sessions, history providers, a run's own options and the tool options of programs written for
the reference framework (agent-framework-core 1.23). The dicts below are exactly what 1.23's
``AgentSession.to_dict()`` wrote after the runs named in each docstring (the session ids shortened);
docs/differences.md lists where the outcome differs on purpose."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentledger import Agent, AgentSession
from agentledger.adapters.chat.scripted import ScriptedChatClient

pytestmark = pytest.mark.anyio

# After `await agent.run("hello", session=s)`, the model answering "hi back".
REFERENCE_PLAIN = json.loads(
    '{"type": "session", "session_id": "9ecd0da9", "service_session_id": null, "state": {"in_memory":'
    ' {"messages": [{"role": "user", "contents": [{"type": "text", "text": "hello",'
    ' "additional_properties": {}}], "additional_properties": {}, "type": "message"}, {"role":'
    ' "assistant", "contents": [{"type": "text", "text": "hi back", "additional_properties": {}}],'
    ' "author_name": "UnnamedAgent", "additional_properties": {}, "type": "message"}]}}}'
)

# After `await agent.run("sum", session=s)` with an `add` tool the model called once.
REFERENCE_TOOL = json.loads(
    '{"type": "session", "session_id": "200d540d", "service_session_id": null, "state": {"in_memory":'
    ' {"messages": [{"role": "user", "contents": [{"type": "text", "text": "sum",'
    ' "additional_properties": {}}], "additional_properties": {}, "type": "message"}, {"role":'
    ' "assistant", "contents": [{"type": "function_call", "call_id": "c1", "name": "add", "arguments":'
    ' "{\\"a\\": 1, \\"b\\": 2}", "hosted": false, "id": "af-call-b475", "additional_properties": {}}],'
    ' "author_name": "UnnamedAgent", "additional_properties": {}, "type": "message"}, {"role": "tool",'
    ' "contents": [{"type": "function_result", "call_id": "c1", "result": "3", "items": [{"type":'
    ' "text", "text": "3", "additional_properties": {}}], "id": "af-call-b475", "additional_properties":'
    ' {}}], "author_name": "UnnamedAgent", "additional_properties": {}, "type": "message"}, {"role":'
    ' "assistant", "contents": [{"type": "text", "text": "3", "additional_properties": {}}],'
    ' "author_name": "UnnamedAgent", "additional_properties": {}, "type": "message"}]}}}'
)


def _shape(messages: Any) -> list[tuple[str, str, Any]]:
    return [
        (m.role, c.type, c.text if c.type == "text" else (c.call_id, c.name, c.arguments, c.result))
        for m in messages
        for c in m.contents
    ]


def test_a_reference_session_loads_with_its_conversation() -> None:
    """The reference keeps the conversation in state["in_memory"]; it becomes the history."""
    session = AgentSession.from_dict(REFERENCE_PLAIN)
    assert session.session_id == "9ecd0da9"
    assert _shape(session.history) == [("user", "text", "hello"), ("assistant", "text", "hi back")]
    assert session.history[1].author_name == "UnnamedAgent"
    assert dict(session.state) == {}


def test_a_reference_session_with_a_tool_call_keeps_call_and_result() -> None:
    """Function calls and results of a reference session load with their ids, arguments, results."""
    session = AgentSession.from_dict(REFERENCE_TOOL)
    assert _shape(session.history) == [
        ("user", "text", "sum"),
        ("assistant", "function_call", ("c1", "add", '{"a": 1, "b": 2}', None)),
        ("tool", "function_result", ("c1", None, None, "3")),
        ("assistant", "text", "3"),
    ]


async def test_the_next_run_on_a_loaded_reference_session_sends_its_conversation() -> None:
    """The model's next call gets the saved conversation before the new input; the session grows."""
    client = ScriptedChatClient(["fine"])
    session = AgentSession.from_dict(REFERENCE_PLAIN)
    await Agent(client=client).run("again", session=session)
    sent = _shape(client.requests[0].messages)
    expected = [("user", "text", "hello"), ("assistant", "text", "hi back"), ("user", "text", "again")]
    assert sent[-3:] == expected
    assert [m.role for m in session.history] == ["user", "assistant", "user", "assistant"]
    assert "in_memory" not in AgentSession.from_dict(session.to_dict()).state


def test_a_state_entry_that_is_not_a_history_stays_state() -> None:
    """Only a {"messages": [message, ...]} entry is a history; other state is kept as it was."""
    data = {**REFERENCE_PLAIN, "state": {"notes": {"messages": ["not a message"]}, "n": 1}}
    session = AgentSession.from_dict(data)
    assert session.history == []
    assert dict(session.state) == {"notes": {"messages": ["not a message"]}, "n": 1}


def test_broken_messages_in_a_reference_history_are_a_value_error() -> None:
    """A history entry whose message cannot be read names where it is, as ValueError."""
    data = {**REFERENCE_PLAIN, "state": {"in_memory": {"messages": [{"role": 3, "contents": []}]}}}
    with pytest.raises(ValueError, match="in_memory"):
        AgentSession.from_dict(data)

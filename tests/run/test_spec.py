"""``run/spec.py``: what a run is before it starts: its merged options and limits, the checks
made on them and on approval answers before anything is recorded, and ``RunSpec``'s own rules
(which gated calls wait, which conversation a session continues, what ``RunStarted`` holds)."""

from __future__ import annotations

import math
from typing import Any

import pydantic
import pytest

from agentledger import Agent, AgentSession, Content, Message, tool
from agentledger.adapters.chat.scripted import ScriptedChatClient
from agentledger.core.events import RunConfig
from agentledger.errors import ApprovalError, OptionsError
from agentledger.middleware import CallNext, Layer
from agentledger.run import RunSpec, check_approvals, check_tool_choice, merge_options, options_record
from agentledger.run.spec import (
    check_option_names,
    check_run_limit,
    given_options,
    middleware_names,
    run_config,
)


@tool(approval_mode="always_require")
def wire(amount: int) -> str:
    """Send money."""
    return f"sent {amount}"


@tool
def balance() -> int:
    return 100


@tool
def rate(currency: str) -> float:
    return 1.0


async def _pass(context: Any, call_next: CallNext) -> None:
    await call_next()


def _spec(*, function_layers: int = 0, **arguments: Any) -> RunSpec:
    layers = [Layer("function", f"fix{i}", _pass) for i in range(function_layers)]
    agent = Agent(client=ScriptedChatClient([]), tools=[wire, balance], middleware=layers)
    return agent.run_spec(**arguments)


# merge_options, given_options


def test_a_runs_options_go_over_the_defaults_and_none_leaves_a_default() -> None:
    merged = merge_options(
        {"temperature": 0.1, "seed": 1}, None, {"temperature": 0.9, "seed": None, "top_p": 1}
    )
    assert merged == {"temperature": 0.9, "seed": 1, "top_p": 1}


def test_the_runs_instructions_are_appended_to_the_agents() -> None:
    assert (
        merge_options({}, "Be brief.", {"instructions": "Use metric."})["instructions"]
        == "Be brief.\nUse metric."
    )
    assert merge_options({}, "Be brief.", None)["instructions"] == "Be brief."
    assert merge_options({}, None, {"instructions": "Use metric."})["instructions"] == "Use metric."
    assert "instructions" not in merge_options({}, None, {"instructions": ""})


def test_default_options_instructions_win_over_the_agents_instructions() -> None:
    merged = merge_options({"instructions": "From defaults."}, "From the agent.", {"instructions": "Run."})
    assert merged["instructions"] == "From defaults.\nRun."


def test_the_options_a_run_sets_leave_out_unset_ones() -> None:
    assert given_options(None) == {}
    assert given_options({"a": None, "instructions": "", "seed": 0, "stop": ""}) == {"seed": 0, "stop": ""}


# limits


def test_an_unset_limit_is_no_limit() -> None:
    assert check_run_limit("max_cost", None) is None
    assert check_run_limit("max_input_tokens", None) is None


def test_a_cost_limit_is_a_positive_finite_number_of_usd() -> None:
    assert check_run_limit("max_cost", 2) == 2.0
    assert type(check_run_limit("max_cost", 2)) is float
    for wrong in (0, -1.5, math.inf, math.nan, "1", True):
        with pytest.raises(OptionsError, match="max_cost must be a positive number"):
            check_run_limit("max_cost", wrong)


def test_a_token_limit_is_a_positive_integer() -> None:
    assert check_run_limit("max_input_tokens", 1) == 1
    for wrong in (0, -1, 1.5, "10", True):
        with pytest.raises(OptionsError, match="max_input_tokens must be a positive integer"):
            check_run_limit("max_input_tokens", wrong)


def test_a_runs_limits_replace_the_agents() -> None:
    config = RunConfig(max_input_tokens=100, max_cost=1.0)
    assert run_config(config, {"temperature": 0}) is config  # no limit given: the agent's config itself
    changed = run_config(config, {"max_cost": 3, "temperature": 0})
    assert (changed.max_input_tokens, changed.max_cost) == (100, 3.0)
    assert run_config(config, {"max_input_tokens": None}).max_input_tokens is None  # None lifts it
    with pytest.raises(OptionsError):
        run_config(config, {"max_input_tokens": 0})


# option names, middleware names, tool_choice


def test_a_misspelt_option_is_refused_with_the_name_it_resembles() -> None:
    with pytest.raises(OptionsError, match="unknown option 'temprature': did you mean 'temperature'"):
        check_option_names({"temprature": 0.2})


def test_an_unknown_option_unlike_any_is_only_warned_about() -> None:
    check_option_names({"temperature": 0.2, "max_tokens": 5})  # known: no warning (warnings are errors here)
    with pytest.warns(UserWarning, match="'reasoning_effort' is not a ChatOptions key"):
        check_option_names({"reasoning_effort": "low"})


def test_middleware_is_named_by_kind_agent_chat_function_outermost_first() -> None:
    layers = {
        "function": [Layer("function", "f1", _pass)],
        "chat": [Layer("chat", "c1", _pass), Layer("chat", "c2", _pass)],
        "agent": [Layer("agent", "a1", _pass)],
    }
    assert middleware_names(layers) == ("agent:a1", "chat:c1", "chat:c2", "function:f1")
    assert middleware_names({"function": [], "chat": [], "agent": []}) == ()


@pytest.mark.parametrize("choice", [None, "auto", "required", "none", {"mode": "auto"}])
def test_a_tool_choice_any_model_accepts_passes(choice: Any) -> None:
    check_tool_choice(choice, [wire])


def test_a_required_function_the_run_offers_passes() -> None:
    check_tool_choice({"mode": "required", "required_function_name": "wire"}, [wire, balance])


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        ("sometimes", "tool_choice must be one of"),
        (3, "tool_choice must be one of"),
        ({"mode": "always"}, "'mode' must be one of"),
        ({"mode": "auto", "extra": 1}, "'mode' must be one of"),
        ({"mode": "required", "required_function_name": "teleport"}, "requires 'teleport', which this run"),
        ({"mode": "auto", "required_function_name": "wire"}, "requires 'wire', which this run"),
    ],
)
def test_a_tool_choice_no_model_would_accept_is_refused(choice: Any, message: str) -> None:
    with pytest.raises(OptionsError, match=message):
        check_tool_choice(choice, [wire, balance])


# options_record


class Answer(pydantic.BaseModel):
    city: str


def test_the_recorded_options_leave_out_tools_instructions_and_unset_values() -> None:
    record = options_record(
        {"tools": [wire], "instructions": "x", "seed": None, "temperature": 0.5, "stop": ["a"]}
    )
    assert record == {"temperature": 0.5, "stop": ["a"]}


def test_a_response_format_type_is_recorded_as_its_json_schema() -> None:
    schema = options_record({"response_format": Answer})["response_format"]
    assert schema["type"] == "json_schema"
    assert schema["json_schema"]["schema"]["properties"] == {"city": {"title": "City", "type": "string"}}


# check_approvals


def _call(call_id: str, name: str = "wire", arguments: str = '{"amount": 1}') -> Content:
    return Content.from_function_call(call_id, name, arguments=arguments)


def _paused(*calls: Content) -> list[Message]:
    return [Message("user", "Pay."), Message("assistant", calls)]


def _answers(*answers: tuple[str, bool]) -> list[Message]:
    return [Message("user", tuple(Content.from_approval_response(c, approved=a) for c, a in answers))]


def test_a_new_turn_while_a_batch_waits_for_approval_is_refused() -> None:
    with pytest.raises(ApprovalError, match=r"calls \['c1'\] wait for approval"):
        check_approvals(_paused(_call("c1")), [Message("user", "And now?")])
    check_approvals([], [Message("user", "Hi.")])
    check_approvals([Message("user", "Hi."), Message("assistant", "Hello.")], [Message("user", "And now?")])


def test_an_answer_to_no_waiting_call_is_refused() -> None:
    with pytest.raises(ApprovalError, match=r"approval responses for \['c9'\] match no call"):
        check_approvals(_paused(_call("c1")), _answers(("c9", True)))


def test_two_different_answers_for_one_call_are_refused_and_the_same_answer_twice_is_not() -> None:
    with pytest.raises(ApprovalError, match="two different approval answers"):
        check_approvals(_paused(_call("c1")), _answers(("c1", True), ("c1", False)))
    check_approvals(_paused(_call("c1")), _answers(("c1", True), ("c1", True)))


def test_answers_mixed_with_new_text_are_refused() -> None:
    mixed = [Message("user", ("also, hi", Content.from_approval_response("c1", approved=True)))]
    with pytest.raises(ApprovalError, match="send approval answers on their own"):
        check_approvals(_paused(_call("c1")), mixed)


def test_a_resume_that_leaves_a_gated_request_of_its_batch_unanswered_is_refused() -> None:
    history = _paused(_call("c1"), _call("c2"), _call("b1", "balance", "{}"))
    with pytest.raises(ApprovalError, match=r"also waits for approval of \['c2'\]"):
        check_approvals(history, _answers(("c1", True)), _spec())
    check_approvals(history, _answers(("c1", True)))  # without the spec, the tools are unknown
    check_approvals(history, _answers(("c1", True), ("c2", False)), _spec())  # balance is not gated


def test_a_gated_call_that_cannot_run_is_no_request_left_unanswered() -> None:
    history = _paused(_call("c1"), _call("c2", arguments='{"amount": "lots"}'))
    check_approvals(history, _answers(("c1", True)), _spec())
    with pytest.raises(ApprovalError, match=r"\['c2'\]"):  # function middleware could repair it
        check_approvals(history, _answers(("c1", True)), _spec(function_layers=1))


# RunSpec


def test_a_gated_call_waits_when_its_arguments_can_run() -> None:
    assert _spec().awaits_approval(wire, _call("c1"))


def test_a_gated_call_whose_arguments_cannot_run_waits_only_if_middleware_could_repair_them() -> None:
    broken = _call("c1", arguments="not json")
    assert not _spec().awaits_approval(wire, broken)
    assert _spec(function_layers=1).awaits_approval(wire, broken)


def test_arguments_too_deep_to_record_never_wait_even_with_middleware() -> None:
    deep = _call("c1", arguments="[" * 300 + "]" * 300)
    assert not _spec(function_layers=1).awaits_approval(wire, deep)


def test_a_session_a_service_keeps_the_conversation_of_is_continued_there() -> None:
    spec = _spec()
    session = AgentSession("s", service_session_id="conv_1")
    assert spec.on_session(session).options["conversation_id"] == "conv_1"
    assert spec.on_session(AgentSession("t")) is spec


def test_a_conversation_the_run_was_given_wins_over_the_sessions() -> None:
    spec = _spec(options={"conversation_id": "conv_mine"})
    assert spec.on_session(AgentSession("s", service_session_id="conv_1")) is spec
    same = _spec().replace(options={"conversation_id": "conv_1"})
    assert same.on_session(AgentSession("s", service_session_id="conv_1")) is same


def test_a_run_that_keeps_its_own_conversation_does_not_continue_the_sessions() -> None:
    agent = Agent(client=ScriptedChatClient([]), tools=[wire])
    spec = agent.run_spec(share_history=False)
    assert spec.on_session(AgentSession("s", service_session_id="conv_1")) is spec


def test_the_started_fields_name_the_parent_and_the_runs_own_settings() -> None:
    spec = _spec(
        parent=("caller", "call_7"),
        options={"temperature": 0.5, "conversation_id": "conv_1"},
        client_kwargs={"api_key": "sk-secret"},
        tools=[rate],
    )
    fields = spec.started_fields(messages=[Message("user", "Hi.")], session_id="s", history_length=3)
    assert (fields["parent_run_id"], fields["parent_call_id"]) == ("caller", "call_7")
    assert fields["run_option_keys"] == ("temperature",)  # a conversation id is no setting
    assert fields["client_kwargs_keys"] == ("api_key",)
    assert "sk-secret" not in repr(fields)
    assert (fields["session_id"], fields["history_length"]) == ("s", 3)
    assert [t.name for t in fields["tools"]] == ["wire", "balance", "rate"]
    assert fields["run_tool_names"] == ("rate",)
    unparented = _spec().started_fields(messages=[], session_id=None, history_length=0)
    assert (unparented["parent_run_id"], unparented["run_option_keys"], unparented["middleware"]) == (
        None,
        (),
        (),
    )


# The spec an agent keeps for runs given no arguments


async def _started(agent: Agent) -> Any:
    response = await agent.run("Hi.")
    return response.events[0]


def _answering(*answers: str) -> ScriptedChatClient:
    return ScriptedChatClient([Message("assistant", a) for a in answers])


def test_runs_given_no_arguments_share_one_spec_while_nothing_changes() -> None:
    agent = Agent(client=ScriptedChatClient([]), tools=[balance], default_options={"temperature": 0.2})
    first = agent.run_spec()
    assert agent.run_spec() is first
    assert first.started_static is not None
    assert agent.run_spec(options={"seed": 1}) is not first  # arguments make a spec of their own
    assert agent.run_spec(options={"seed": 1}).started_static is None


@pytest.mark.anyio
async def test_a_change_to_the_agent_between_runs_reaches_the_next_runs_start() -> None:
    agent = Agent(client=_answering("a", "b", "c", "d", "e", "f"), tools=[balance])
    await _started(agent)
    agent.default_options["temperature"] = 0.7  # changed in place
    assert (await _started(agent)).options == {"temperature": 0.7}
    agent.tools.append(rate)
    assert [t.name for t in (await _started(agent)).tools] == ["balance", "rate"]
    agent.instructions = "Be brief."
    assert (await _started(agent)).instructions == "Be brief."
    agent.name = "renamed"
    assert (await _started(agent)).agent_name == "renamed"
    agent.store = None  # recorded nowhere: the run still starts as before
    assert (await _started(agent)).agent_name == "renamed"
    assert agent.run_spec().store is None


@pytest.mark.anyio
async def test_a_change_inside_a_mutable_default_option_reaches_the_next_run() -> None:
    agent = Agent(client=_answering("a", "b"), default_options={"stop": ["END"]})
    assert (await _started(agent)).options == {"stop": ["END"]}
    agent.default_options["stop"].append("STOP")  # the dict is equal to itself: only a copy sees it
    assert (await _started(agent)).options == {"stop": ["END", "STOP"]}


def test_a_replaced_spec_makes_its_started_fields_again() -> None:
    agent = Agent(client=ScriptedChatClient([]), tools=[balance])
    spec = agent.run_spec()
    other = spec.replace(run_tool_names=("x",))
    assert other.started_static is None
    fields = other.started_fields(messages=[], session_id=None, history_length=0)
    assert fields["run_tool_names"] == ("x",)

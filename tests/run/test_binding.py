"""``run/binding.py``: what the steps of one run share. ``scrub`` cuts every value the run was
given that its log must not show out of an error text; ``bound``/``enter``/``leave`` make the run
current and its session record into it, and undo both; the model failure kept for the driver
names the ``seq`` its event got; in-place session changes are recorded at a checkpoint; a run
reads the tools its agent's runs share until its registry (made on first use) changes them."""

from __future__ import annotations

from typing import Any

import pytest

from agentledger import Agent, AgentSession, FunctionInvocationContext, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.context import current_run_context
from agentledger.core import ModelFailed, RunMachine, RunStarted, SessionUpdated, ToolReturned
from agentledger.core.events import RunConfig, StateChange
from agentledger.errors import ModelCallError
from agentledger.run import RunBinding, RunRecorder, ToolRegistry
from agentledger.run import binding as binding_module


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


def _binding(session: AgentSession | None = None, run_id: str = "run-1", **arguments: Any) -> RunBinding:
    spec = Agent(client=ScriptedChatClient([])).run_spec(**arguments)
    recorder = RunRecorder(RunMachine(), run_id, Clock(), [], session=session)
    recorder.record(RunStarted, agent_id="a", config=RunConfig())
    return RunBinding(spec, recorder, session)


def _log(binding: RunBinding) -> RunRecorder:
    recorder = binding.recorder
    assert isinstance(recorder, RunRecorder)
    return recorder


def _writes(binding: RunBinding) -> list[SessionUpdated]:
    return [e for e in _log(binding).log if isinstance(e, SessionUpdated)]


def test_a_kwarg_the_redaction_policy_hides_is_cut_out_of_an_error_text() -> None:
    binding = _binding(function_invocation_kwargs={"db_password": "hunter 22!", "user": "ada"})
    assert binding.scrub("login as ada with hunter 22! failed") == "login as ada with [redacted] failed"
    # as it went out in a URL, percent-encoded
    assert binding.scrub("GET /login/ada/hunter%2022%21 failed") == "GET /login/ada/[redacted] failed"


def test_every_client_kwargs_value_is_cut_out_at_any_depth() -> None:
    binding = _binding(client_kwargs={"headers": {"X-Tenant": "zebra-1234"}, "ids": ["tok-98765"], "n": 5})
    scrubbed = binding.scrub("sent X-Tenant zebra-1234 and tok-98765, 5 retries")
    assert scrubbed == "sent X-Tenant [redacted] and [redacted], 5 retries"


def test_values_too_short_to_mask_and_text_without_secrets_stay() -> None:
    binding = _binding(client_kwargs={"region": "eu"})
    assert binding.scrub("region eu is down") == "region eu is down"


def test_credentials_of_a_known_shape_are_hidden_without_being_given() -> None:
    scrubbed = _binding().scrub("GET https://api.example.com/v1?api_key=abc123 -> 401")
    assert "abc123" not in scrubbed
    assert "[redacted]" in scrubbed


def test_the_run_is_current_inside_the_binding_and_the_one_before_after_it() -> None:
    outer, inner = _binding(run_id="outer"), _binding(run_id="inner")
    assert current_run_context() is None
    with outer.bound() as outer_context:
        assert current_run_context() is outer_context
        assert outer_context.run_id == "outer"
        with inner.bound():
            assert current_run_context() is inner
        assert current_run_context() is outer_context
    assert current_run_context() is None


def test_the_session_records_into_the_run_only_while_bound() -> None:
    session = AgentSession("s")
    binding = _binding(session)
    binding.enter()
    session.state["room"] = "sea"
    binding.leave()
    session.state["later"] = 1  # unbound: no run to record into
    writes = _writes(binding)
    assert [(w.session_id, w.changes) for w in writes] == [("s", (StateChange("room", "set", "sea"),))]


def test_an_in_place_change_is_recorded_at_a_checkpoint() -> None:
    session = AgentSession("s")
    binding = _binding(session)
    with binding.bound():
        session.state["prefs"] = {"rooms": []}
        session.state["prefs"]["rooms"].append("sea")  # no write goes through the state here
        before = len(_writes(binding))
        binding.checkpoint()
    after = _writes(binding)
    assert len(after) == before + 1
    assert after[-1].changes == (StateChange("prefs", "set", {"rooms": ["sea"]}),)


def test_a_checkpoint_without_a_session_records_nothing() -> None:
    binding = _binding()
    binding.checkpoint()
    assert binding.session_sink is None
    assert len(_log(binding).log) == 1


def test_the_session_sink_names_where_a_relayed_write_was_first_kept() -> None:
    binding = _binding(AgentSession("s"))
    assert binding.session_sink is not None
    change = (StateChange("k", "set", 1),)
    binding.session_sink("tool", change)
    binding.session_sink("child/tool", change, ("child-run", 4))
    plain, relayed = _writes(binding)
    assert (plain.by, plain.origin_run_id, plain.origin_seq) == ("tool", None, None)
    assert (relayed.by, relayed.origin_run_id, relayed.origin_seq) == ("child/tool", "child-run", 4)


def test_the_model_failure_to_raise_names_the_seq_of_its_event() -> None:
    binding = _binding()
    assert binding.raised_error() is None
    _log(binding).begin()  # the run waits on its model
    event = binding.recorder.record(ModelFailed, iteration=1, error_type="Boom", message="down")
    error = ModelCallError("model call 1 failed", run_id="run-1")
    binding.fail_with(error, event)
    assert binding.raised_error() is error
    assert error.seq == event.seq == 2  # after RunStarted and ModelCalled


def test_options_and_kwargs_agent_middleware_set_are_what_the_run_and_its_tools_see() -> None:
    binding = _binding(options={"temperature": 0.1}, function_invocation_kwargs={"user": "ada"})
    assert (binding.options, binding.kwargs) == ({"temperature": 0.1}, {"user": "ada"})
    binding.use_input({"temperature": 0.9}, {"user": "bob"}, {"timeout": 3})
    assert (binding.options, binding.kwargs, binding.client_kwargs) == (
        {"temperature": 0.9},
        {"user": "bob"},
        {"timeout": 3},
    )
    with binding.bound():  # what a tool of the run reads from its context
        context = current_run_context()
        assert context is not None
        assert (context.options, context.kwargs) == ({"temperature": 0.9}, {"user": "bob"})
    assert binding.spec.options == {"temperature": 0.1}  # the spec itself stays as it was



def _tool_binding(agent: Agent) -> RunBinding:
    spec = agent.run_spec()
    recorder = RunRecorder(RunMachine(), "run-1", Clock(), [])
    recorder.record(RunStarted, agent_id="a", config=RunConfig(), tools=tuple(t.spec for t in spec.tools))
    return RunBinding(spec, recorder, None)


def test_a_run_that_changes_no_tools_reads_the_mapping_its_agents_runs_share() -> None:
    ping, pong, extra = (tool(name=n)(lambda: "ok") for n in ("ping", "pong", "extra"))
    agent = Agent(client=ScriptedChatClient([]), tools=[ping, pong])
    first, second = _tool_binding(agent), _tool_binding(agent)
    assert first.by_name == {"ping": ping, "pong": pong}
    assert first.by_name is second.by_name  # one mapping for both: no registry made, no copy
    registry = first.registry
    assert first.registry is registry  # made once, on first use
    registry.provide([extra])  # the first change makes the run's own mapping
    assert first.by_name == {"ping": ping, "pong": pong, "extra": extra}
    assert second.by_name == {"ping": ping, "pong": pong}  # the other run's tools are its own


@pytest.mark.anyio
async def test_a_registry_is_made_only_by_a_run_whose_calls_read_their_tools(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[object] = []

    class Counted(ToolRegistry):
        def __init__(self, *args: Any) -> None:
            made.append(self)
            super().__init__(*args)

    monkeypatch.setattr(binding_module, "ToolRegistry", Counted)

    @tool
    def plain(n: int, ctx: FunctionInvocationContext) -> str:  # given its context, not reading its tools
        return f"{n} in {ctx.run_id}"

    @tool
    def looking(ctx: FunctionInvocationContext) -> str:
        assert ctx.tools is not None
        return ",".join(sorted(t.name for t in ctx.tools))

    script: list[ScriptEntry] = [Call("plain", {"n": 1}), "done", Call("plain", {"n": 2}), "done"]
    script += [Call("looking", {}), "done"]
    agent = Agent(client=ScriptedChatClient(script), tools=[plain, looking])
    for _ in range(2):
        assert (await agent.run("go")).text == "done"
    assert made == []  # two runs, a tool call each, no registry
    response = await agent.run("go")
    assert [e.result for e in response.events if isinstance(e, ToolReturned)] == ["looking,plain"]
    assert len(made) == 1

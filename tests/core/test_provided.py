"""``core/provided.py``: what context providers contributed to a run, read from its log: the
contributions of its preamble, how many leading messages they added, the instructions in force."""

from __future__ import annotations

from agentledger.core import (
    ApprovalResolved,
    ContextProvided,
    Event,
    ModelCalled,
    RunInputRewritten,
    RunStarted,
)
from agentledger.core.messages import Content, Message
from agentledger.core.provided import append_instructions, contributions, instructions_after, provided_count


def _started(instructions: str | None = "Be brief.", messages: tuple[Message, ...] = ()) -> RunStarted:
    return RunStarted(run_id="r", seq=0, at=1, agent_id="a", instructions=instructions, messages=messages)


def _provided(seq: int, provider: str, *lines: str, messages: int = 0) -> ContextProvided:
    added = tuple(Message("user", f"{provider} {i}") for i in range(messages))
    return ContextProvided(run_id="r", seq=seq, at=1, provider=provider, instructions=lines, messages=added)


def test_lines_are_appended_after_the_agents_own_one_per_line() -> None:
    assert (
        append_instructions("Be brief.", ["Use metric.", "Say please."])
        == "Be brief.\nUse metric.\nSay please."
    )
    assert append_instructions(None, ["Use metric."]) == "Use metric."
    assert append_instructions("", ["Use metric."]) == "Use metric."
    assert append_instructions("Be brief.", []) == "Be brief."
    assert append_instructions(None, []) is None  # nothing to add leaves no instructions at all


def test_the_contributions_are_those_recorded_before_the_loop() -> None:
    first, second = _provided(1, "memory", "x"), _provided(2, "rag", "y")
    late = _provided(4, "late", "z")
    log: list[Event] = [_started(), first, second, ModelCalled(run_id="r", seq=3, at=1, iteration=1), late]
    assert contributions(log) == [first, second]


def test_a_resumed_batch_ends_the_preamble_too() -> None:
    resolved = ApprovalResolved(run_id="r", seq=1, at=1, call_id="c", approved=True)
    assert contributions([_started(), resolved, _provided(2, "memory", "x")]) == []


def test_the_provided_count_is_every_message_the_contributions_added() -> None:
    log: list[Event] = [
        _started(),
        _provided(1, "memory", messages=2),
        _provided(2, "rag", "line", messages=1),
    ]
    assert provided_count(log) == 3
    assert provided_count([_started()]) == 0


def test_a_run_resuming_a_paused_batch_leads_with_no_provided_messages() -> None:
    answer = Message("user", (Content.from_approval_response("c1", approved=True),))
    log: list[Event] = [_started(messages=(answer,)), _provided(1, "memory", messages=2)]
    assert provided_count(log) == 0  # they went before the history in that run


def test_the_instructions_are_the_runs_then_each_providers_lines() -> None:
    log: list[Event] = [_started(), _provided(1, "memory", "Use metric."), _provided(2, "rag", "Cite.")]
    assert instructions_after(log) == "Be brief.\nUse metric.\nCite."
    assert instructions_after([_started(None)]) is None
    assert instructions_after([]) is None


def test_instructions_agent_middleware_rewrote_replace_the_runs_own() -> None:
    rewritten = RunInputRewritten(
        run_id="r", seq=1, at=1, by="agent_middleware", options={"instructions": "Be long."}
    )
    untouched = RunInputRewritten(run_id="r", seq=1, at=1, by="agent_middleware", options={"temperature": 0})
    assert instructions_after([_started(), rewritten, _provided(2, "memory", "x")]) == "Be long.\nx"
    assert instructions_after([_started(), untouched]) == "Be brief."


def test_instructions_in_force_are_read_only_up_to_the_loop() -> None:
    log: list[Event] = [
        _started(),
        ModelCalled(run_id="r", seq=1, at=1, iteration=1),
        _provided(2, "late", "x"),
    ]
    assert instructions_after(log) == "Be brief."


def test_instructions_that_are_not_text_are_given_as_text() -> None:
    rewritten = RunInputRewritten(
        run_id="r", seq=1, at=1, by="agent_middleware", options={"instructions": ["a"]}
    )
    assert instructions_after([_started(), rewritten]) == "['a']"

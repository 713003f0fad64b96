"""``core/claims.py``: who may resume a paused batch (``decide_claim`` on the folded log,
``paused_batch``), what binds an answer to a call (``arguments_digest``), and how a session's
history grows once a run ended (``history_growth``). All pure: logs in, decisions out."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agentledger import Agent, AgentSession, Content, MemoryEventStore, Message, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core import (
    ApprovalRequested,
    BatchClaimed,
    ContextProvided,
    Event,
    MiddlewareShortCircuit,
    ModelFailed,
    ModelResponded,
    RunCompleted,
    RunFailed,
    RunStarted,
    ToolCalled,
    ToolReturned,
)
from agentledger.core.claims import (
    ClaimDecision,
    HistoryGrowth,
    arguments_digest,
    decide_claim,
    history_growth,
    paused_batch,
)
from agentledger.core.events import ApprovalResolved, BatchResumed, ClaimedAnswer
from agentledger.core.machine import RunMachine
from agentledger.core.projections import NO_OUTCOME
from agentledger.errors import ModelCallError

pytestmark = pytest.mark.anyio

C1 = Content.from_function_call("c1", "wire", arguments='{"amount": 1}')
C2 = Content.from_function_call("c2", "wire", arguments='{"amount": 2}')


def _paused_log(reason: str = "awaiting_approval") -> list[Event]:
    """Run ``p`` asked for two wires and paused on both (``reason``: how it ended)."""
    return [
        RunStarted(run_id="p", seq=0, at=1, agent_id="a", messages=(Message("user", "Pay."),)),
        ModelResponded(run_id="p", seq=1, at=2, iteration=1, message=Message("assistant", (C1, C2))),
        ApprovalRequested(run_id="p", seq=2, at=3, call_ids=("c1", "c2")),
        RunCompleted(run_id="p", seq=3, at=4, reason=reason),
    ]


DIGESTS = {"c1": arguments_digest({"amount": 1}), "c2": arguments_digest({"amount": 2})}
BOTH = {"c1": True, "c2": False}


ANSWERS = (
    ClaimedAnswer(call_id="c1", approved=True, digest=DIGESTS["c1"]),
    ClaimedAnswer(call_id="c2", approved=False, digest=DIGESTS["c2"]),
)


def _claimed_by(holder: str) -> list[Event]:
    """The paused log with ``holder``'s claim of the batch (c1 approved, c2 rejected) stored."""
    return [*_paused_log(), BatchClaimed(run_id="p", seq=4, at=5, by_run_id=holder, answers=ANSWERS)]


def _holder(*after_start: Event, ended: bool) -> list[Event]:
    """The log of run ``h``, which holds the claim: what it did, and whether it ended."""
    log: list[Event] = [RunStarted(run_id="h", seq=0, at=6, agent_id="a"), *after_start]
    if ended:
        log.append(RunFailed(run_id="h", seq=len(log), at=9, error_type="Boom", message="gone"))
    return log


def _started(call_id: str, seq: int) -> ToolCalled:
    return ToolCalled(run_id="h", seq=seq, at=7, call_id=call_id, name="wire", arguments={"amount": 1})


def _returned(call_id: str, seq: int) -> ToolReturned:
    return ToolReturned(run_id="h", seq=seq, at=8, call_id=call_id, name="wire", result="sent")


def _decide(holder_log: Sequence[Event] | None, rerun: Sequence[str] = ()) -> ClaimDecision:
    """What run ``r`` may do with the batch ``h`` claimed, given ``h``'s log."""
    return decide_claim(
        paused_batch(_claimed_by("h")),
        BOTH,
        DIGESTS,
        by_run_id="r",
        at=10,
        holder_log=holder_log,
        rerun=rerun,
    )


# arguments_digest


def test_a_digest_is_the_same_for_the_same_json_whatever_its_spelling() -> None:
    digest = arguments_digest({"a": 1, "b": [1, 2]})
    assert arguments_digest('{"b": [1, 2], "a": 1}') == digest
    assert arguments_digest(b'{"a":1,"b":[1,2]}') == digest
    assert arguments_digest({"a": 1, "b": [2, 1]}) != digest
    assert arguments_digest({"a": "1", "b": [1, 2]}) != digest


def test_text_that_is_no_json_is_digested_as_text() -> None:
    assert arguments_digest("not json") == arguments_digest("not json")
    assert arguments_digest("not json") != arguments_digest("not json!")
    assert arguments_digest("not json") == arguments_digest('"not json"')  # the same JSON value
    assert arguments_digest(b"\xff\xfe") == arguments_digest(b"\xff\xfe")  # bytes that are not UTF-8


def test_a_value_with_no_json_form_is_digested_by_its_repr_without_raising() -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "Opaque()"

    assert arguments_digest(Opaque()) == arguments_digest(Opaque())
    assert arguments_digest(Opaque()) != arguments_digest("Opaque")


# paused_batch


def test_a_paused_log_folds_to_its_awaiting_calls_with_their_digests_tools_and_arguments() -> None:
    paused = paused_batch(_paused_log())
    assert (paused.run_id, paused.version, paused.paused, paused.since) == ("p", 4, True, 4)
    assert paused.awaiting == ("c1", "c2")
    assert paused.digests == DIGESTS
    assert paused.tools == {"c1": "wire", "c2": "wire"}
    assert paused.arguments == {"c1": '{"amount": 1}', "c2": '{"amount": 2}'}
    assert paused.claim is None


def test_a_run_that_did_not_pause_awaits_nothing() -> None:
    paused = paused_batch(_paused_log(reason="completed"))
    assert (paused.paused, paused.awaiting, paused.digests) == (False, (), {})
    empty = paused_batch([])
    assert (empty.run_id, empty.version, empty.paused) == ("", 0, False)


def test_the_last_claim_stored_is_the_one_folded() -> None:
    log = _claimed_by("first")
    log.append(BatchClaimed(run_id="p", seq=5, at=6, by_run_id="second", after_run_id="first"))
    paused = paused_batch(log)
    assert paused.claim is not None
    assert paused.claim.by_run_id == "second"
    assert paused.version == 6


# decide_claim: before any claim


def test_the_first_resume_claims_the_batch_at_the_paused_logs_version() -> None:
    decision = decide_claim(paused_batch(_paused_log()), BOTH, DIGESTS, by_run_id="r", at=10)
    assert decision.kind == "claim"
    claim = decision.claim
    assert claim is not None
    assert (claim.run_id, claim.seq, claim.at, claim.by_run_id) == ("p", 4, 10, "r")
    assert [(a.call_id, a.approved, a.digest) for a in claim.answers] == [
        ("c1", True, DIGESTS["c1"]),
        ("c2", False, DIGESTS["c2"]),
    ]
    assert (claim.after_run_id, claim.rerun, decision.holder) == (None, (), None)


def test_the_answers_are_claimed_in_the_order_of_the_paused_batch() -> None:
    decision = decide_claim(
        paused_batch(_paused_log()), {"c2": True, "c1": True}, DIGESTS, by_run_id="r", at=1
    )
    assert decision.claim is not None
    assert [a.call_id for a in decision.claim.answers] == ["c1", "c2"]


def test_a_run_that_is_not_paused_cannot_be_claimed() -> None:
    decision = decide_claim(paused_batch(_paused_log("completed")), BOTH, DIGESTS, by_run_id="r", at=1)
    assert (decision.kind, decision.claim) == ("refused", None)
    assert "not paused for approval" in decision.reason


def test_answers_to_calls_the_run_does_not_wait_on_are_refused_by_name() -> None:
    decision = decide_claim(
        paused_batch(_paused_log()), {"c1": True, "zz": True, "aa": False}, DIGESTS, by_run_id="r", at=1
    )
    assert (decision.kind, decision.call_ids) == ("refused", ("aa", "zz"))


def test_an_answer_held_with_other_arguments_is_a_mismatch() -> None:
    digests = {**DIGESTS, "c2": arguments_digest({"amount": 2000})}
    decision = decide_claim(paused_batch(_paused_log()), BOTH, digests, by_run_id="r", at=1)
    assert (decision.kind, decision.call_ids, decision.claim) == ("mismatch", ("c2",), None)


def test_an_answer_whose_arguments_the_resumer_does_not_hold_is_bound_to_the_recorded_ones() -> None:
    decision = decide_claim(paused_batch(_paused_log()), BOTH, {}, by_run_id="r", at=1)
    assert decision.kind == "claim"
    assert decision.claim is not None
    assert [a.digest for a in decision.claim.answers] == [DIGESTS["c1"], DIGESTS["c2"]]


# decide_claim: a claim is stored


def test_the_run_holding_the_claim_goes_on() -> None:
    paused = paused_batch(_claimed_by("r"))
    decision = decide_claim(paused, BOTH, DIGESTS, by_run_id="r", at=10)
    assert (decision.kind, decision.holder, decision.claim) == ("held", "r", None)


def test_a_holder_that_ended_after_running_a_call_leaves_the_batch_used() -> None:
    log = _holder(_started("c1", 1), _returned("c1", 2), ended=True)
    decision = _decide(log, rerun=("c1",))  # even the caller's word does not run it again
    assert (decision.kind, decision.holder, decision.call_ids) == ("refused", "h", ("c1",))
    assert "one execution" in decision.reason


def test_a_holder_that_ended_with_a_call_started_and_no_outcome_leaves_it_unknown() -> None:
    log = _holder(_started("c1", 1), ended=True)
    decision = _decide(log)
    assert (decision.kind, decision.holder, decision.call_ids) == ("unknown", "h", ("c1",))
    assert "allow_rerun('c1')" in decision.reason


def test_the_callers_word_lets_an_unknown_call_of_an_ended_holder_run_again() -> None:
    decision = _decide(_holder(_started("c1", 1), ended=True), rerun=("c1",))
    assert decision.kind == "claim"
    assert decision.claim is not None
    assert (decision.claim.after_run_id, decision.claim.rerun, decision.holder) == ("h", ("c1",), "h")


def test_a_holder_that_ended_before_starting_any_call_is_taken_over() -> None:
    decision = _decide(_holder(ended=True))
    assert decision.kind == "claim"
    assert decision.claim is not None
    assert (decision.claim.by_run_id, decision.claim.after_run_id, decision.claim.rerun) == ("r", "h", ())


@pytest.mark.parametrize("holder_log", [None, []], ids=["not-read", "nothing-stored"])
def test_a_holder_that_has_not_ended_keeps_the_batch(holder_log: list[Event] | None) -> None:
    decision = _decide(holder_log)
    assert (decision.kind, decision.holder, decision.call_ids) == ("refused", "h", ("c1",))
    assert "has not started any of its calls" in decision.reason


def test_the_callers_word_takes_a_batch_over_from_a_holder_that_started_nothing() -> None:
    decision = _decide(_holder(ended=False), rerun=("c1",))
    assert decision.kind == "claim"
    assert decision.claim is not None
    assert (decision.claim.by_run_id, decision.claim.after_run_id, decision.claim.rerun) == (
        "r",
        "h",
        ("c1",),
    )


def test_a_running_holder_with_a_call_started_and_no_outcome_leaves_it_unknown() -> None:
    decision = _decide(_holder(_started("c1", 1), ended=False))
    assert (decision.kind, decision.call_ids) == ("unknown", ("c1",))
    assert "still running" in decision.reason


def test_a_holder_that_ran_a_call_and_stopped_is_refused_without_the_callers_word() -> None:
    decision = _decide(_holder(_started("c1", 1), _returned("c1", 2), ended=False))
    assert (decision.kind, decision.call_ids) == ("refused", ("c1",))
    assert "which ran calls ['c1']" in decision.reason


def test_the_callers_word_continues_a_holder_that_ran_its_calls_from_its_log() -> None:
    decision = _decide(_holder(_started("c1", 1), _returned("c1", 2), ended=False), rerun=("c1",))
    assert (decision.kind, decision.holder, decision.call_ids) == ("continue", "h", ())
    claim = decision.claim
    assert claim is not None
    assert (claim.seq, claim.by_run_id, claim.after_run_id, claim.rerun) == (5, "h", "h", ())
    assert claim.answers == ANSWERS


def test_the_callers_word_continues_a_holder_with_an_unknown_call_and_names_it_to_run_again() -> None:
    decision = _decide(_holder(_started("c1", 1), ended=False), rerun=("c1",))
    assert (decision.kind, decision.call_ids) == ("continue", ("c1",))
    assert decision.claim is not None
    assert decision.claim.rerun == ("c1",)


def _returned_as(call_id: str, seq: int) -> ToolReturned:
    return ToolReturned(run_id="h", seq=seq, at=8, call_id=call_id, name="audit", result="logged")


def test_a_holder_that_ended_after_a_call_needing_no_approval_ran_leaves_the_batch_used() -> None:
    # c3 waited in the batch without needing approval: its outcome counts like any other.
    started = ToolCalled(run_id="h", seq=1, at=7, call_id="c3", name="audit", arguments={})
    decision = _decide(_holder(started, _returned_as("c3", 2), ended=True), rerun=("c1",))
    assert (decision.kind, decision.call_ids) == ("refused", ("c3",))


def test_a_running_holder_that_ran_a_call_needing_no_approval_is_continued_not_taken_over() -> None:
    started = ToolCalled(run_id="h", seq=1, at=7, call_id="c3", name="audit", arguments={})
    decision = _decide(_holder(started, _returned_as("c3", 2), ended=False), rerun=("c1",))
    assert (decision.kind, decision.holder) == ("continue", "h")  # c3 answered from h's log


def _resumed(*rest: Event) -> list[Event]:
    """Run ``h`` resumed the batch: c1 approved, c2 rejected, as it recorded them."""
    return [
        BatchResumed(run_id="h", seq=1, at=6, call_ids=("c1", "c2")),
        ApprovalResolved(run_id="h", seq=2, at=6, call_id="c1", approved=True),
        ApprovalResolved(run_id="h", seq=3, at=6, call_id="c2", approved=False),
        *rest,
    ]


def test_a_holder_that_resumed_the_batch_and_completed_used_it_whatever_ran() -> None:
    log = [
        RunStarted(run_id="h", seq=0, at=6, agent_id="a"),
        *_resumed(RunCompleted(run_id="h", seq=4, at=9)),
    ]
    decision = _decide(log, rerun=("c1", "c2"))
    assert (decision.kind, decision.holder) == ("refused", "h")
    assert "completed" in decision.reason


def test_a_rejection_the_holder_recorded_is_never_overruled_by_a_later_approval() -> None:
    log = _holder(*_resumed(), ended=True)  # it failed before any call started
    overruled = decide_claim(
        paused_batch(_claimed_by("h")),
        {"c1": True, "c2": True},
        DIGESTS,
        by_run_id="r",
        at=10,
        holder_log=log,
    )
    assert (overruled.kind, overruled.call_ids) == ("refused", ("c2",))
    assert "rejected" in overruled.reason
    same = _decide(log)  # the same answers: nothing of the batch ran, so it is taken over
    assert same.kind == "claim"


def test_a_call_started_again_after_its_outcome_is_open_once_more() -> None:
    log = _holder(_started("c1", 1), _returned("c1", 2), _started("c1", 3), ended=True)
    decision = _decide(log)
    assert (decision.kind, decision.call_ids) == ("unknown", ("c1",))


# history_growth


def _user(text: str) -> Message:
    return Message("user", text)


def _assistant(text: str) -> Message:
    return Message("assistant", text)


def test_a_completed_run_adds_its_input_and_its_answer() -> None:
    answer = _assistant("Hello.")
    log: list[Event] = [
        RunStarted(run_id="r", seq=0, at=1, agent_id="a", messages=(_user("Hi."),)),
        ModelResponded(run_id="r", seq=1, at=2, iteration=1, message=answer, conversation_id="conv-1"),
        RunCompleted(run_id="r", seq=2, at=3, messages=(answer,)),
    ]
    growth = history_growth(log)
    assert growth.messages == (_user("Hi."), answer)
    assert (growth.conversation_id, growth.paused) == ("conv-1", {})


def test_messages_a_context_provider_added_never_join_the_history() -> None:
    answer = _assistant("Hello.")
    log: list[Event] = [
        RunStarted(run_id="r", seq=0, at=1, agent_id="a", messages=(_user("Hi."),)),
        ContextProvided(run_id="r", seq=1, at=1, provider="memory", messages=(_user("You like tea."),)),
        ModelResponded(run_id="r", seq=2, at=2, iteration=1, message=answer),
        RunCompleted(run_id="r", seq=3, at=3, messages=(answer,)),
    ]
    assert history_growth(log).messages == (_user("Hi."), answer)


def test_a_paused_run_notes_its_waiting_calls_under_its_own_id() -> None:
    growth = history_growth(_paused_log())
    assert growth.paused == {"c1": "p", "c2": "p"}
    assert growth.messages == (_user("Pay."),)  # RunCompleted of this log holds no messages


def test_a_run_agent_middleware_answered_before_its_loop_leaves_the_history_alone() -> None:
    def log(leaves_history: bool) -> list[Event]:
        return [
            RunStarted(run_id="r", seq=0, at=1, agent_id="a", messages=(_user("Hi."),)),
            MiddlewareShortCircuit(
                run_id="r",
                seq=1,
                at=2,
                call_id=None,
                middleware="cache",
                scope="run",
                leaves_history=leaves_history,
            ),
            RunCompleted(run_id="r", seq=2, at=3, reason="short_circuit", messages=(_assistant("Cached."),)),
        ]

    assert history_growth(log(True)).messages == ()
    assert history_growth(log(False)).messages == (_user("Hi."), _assistant("Cached."))  # an older log


def test_a_failed_run_adds_nothing() -> None:
    log: list[Event] = [
        RunStarted(run_id="r", seq=0, at=1, agent_id="a", messages=(_user("Hi."),)),
        ModelFailed(run_id="r", seq=1, at=2, iteration=1, error_type="Boom", message="down"),
        RunFailed(run_id="r", seq=2, at=3, error_type="Boom", message="down"),
    ]
    assert history_growth(log).messages == ()


@pytest.mark.parametrize(
    "log",
    [[], _paused_log()[:1], _paused_log()[:3], _paused_log()[1:]],
    ids=["empty", "started-only", "no-end", "no-start"],
)
def test_a_log_that_has_not_ended_or_does_not_start_a_run_adds_nothing(log: list[Event]) -> None:
    assert history_growth(log) == HistoryGrowth()


async def test_a_failed_resume_keeps_the_results_of_the_batch_it_ran() -> None:
    """The approved call ran, then the model failed: the batch's results stay, so a retry of the
    same answers finds no call waiting instead of running it again."""

    @tool(approval_mode="always_require")
    def wire(amount: int) -> str:
        return f"sent {amount}"

    store = MemoryEventStore()
    client = ScriptedChatClient([Call("wire", {"amount": 1})])  # nothing left for the resume
    agent = Agent(client=client, tools=[wire], store=store)
    session = AgentSession("s")
    paused = await agent.run("Pay.", session=session)
    (request,) = paused.user_input_requests
    answer = Message("user", (request.to_approval_response(True),))
    history = list(session.history)
    with pytest.raises(ModelCallError) as failed:
        await agent.run(answer, session=session)
    log = await store.read(failed.value.run_id)
    assert type(log[-1]) is RunFailed
    growth = history_growth(log)
    assert [m.role for m in growth.messages] == ["tool"]
    (result,) = growth.messages[0].contents
    assert (result.call_id, result.result) == (request.call_id, "sent 1")
    # A driver holding the live transcript gets the same answer as the fold of the log.
    machine = RunMachine.from_events(log, history)
    given = history_growth(log, transcript=machine.transcript.messages, input_count=machine.input_count)
    assert given == growth


def _failed_resume(*outcomes: Event) -> list[Event]:
    """Run ``h`` resumed ``c1`` (approved) and ``c3`` (needing no approval), recorded
    ``outcomes``, then failed."""
    answers = Message("user", (Content.from_approval_response("c1", approved=True),))
    log: list[Event] = [
        RunStarted(run_id="h", seq=0, at=6, agent_id="a", messages=(answers,), history_length=2),
        BatchResumed(run_id="h", seq=1, at=6, call_ids=("c1", "c3")),
        ApprovalResolved(run_id="h", seq=2, at=6, call_id="c1", approved=True),
        *outcomes,
    ]
    log.append(RunFailed(run_id="h", seq=len(log), at=9, error_type="Boom", message="gone"))
    return log


def test_a_resume_that_failed_part_way_through_its_batch_closes_it_in_the_history() -> None:
    started = ToolCalled(run_id="h", seq=3, at=7, call_id="c3", name="audit", arguments={})
    growth = history_growth(_failed_resume(started, _returned_as("c3", 4)))
    (tool_message,) = growth.messages
    assert [(c.call_id, c.result) for c in tool_message.contents] == [("c1", NO_OUTCOME), ("c3", "logged")]
    assert tool_message.contents[0].exception == "NoOutcome"


def test_a_resume_that_failed_before_any_call_of_its_batch_ran_adds_nothing() -> None:
    # A later resume may take the batch over, so its calls must still wait in the session.
    assert history_growth(_failed_resume()) == HistoryGrowth()
    started = ToolCalled(run_id="h", seq=3, at=7, call_id="c1", name="wire", arguments={})
    assert history_growth(_failed_resume(started)) == HistoryGrowth()  # unknown: allow_rerun decides

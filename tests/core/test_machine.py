"""RunMachine driven by hand: every transition of ``TRANSITIONS`` and every decision the machine makes.

No IO and no ``Agent``: a test feeds input events (stamped by ``Run``) and checks the events the
machine derives, the commands it issues and the state it is left in. Only ``agentledger.core`` is
imported.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import Any, TypeVar, get_args

import msgspec
import pytest

from agentledger.core import (
    ApprovalRequested,
    ApprovalResolved,
    ArgumentsRejected,
    BatchClaimed,
    BatchResumed,
    CallModel,
    CallsSkipped,
    ChildRunStarted,
    Command,
    ContextProvided,
    Event,
    EventBase,
    FinishRun,
    InvokeTools,
    IterationLimitReached,
    MiddlewareShortCircuit,
    ModelCalled,
    ModelFailed,
    ModelRequestRewritten,
    ModelResponded,
    Phase,
    Reaction,
    RunCompleted,
    RunFailed,
    RunInputRewritten,
    RunMachine,
    RunStarted,
    RunTerminated,
    SessionUpdated,
    ToolCalled,
    ToolChoiceReset,
    ToolFailed,
    ToolNotFound,
    ToolReturned,
    ToolsAdded,
    ToolsRemoved,
    TransitionError,
)
from agentledger.core.events import ClaimedAnswer, RunConfig, StateChange, ToolSpec
from agentledger.core.machine import BY_PHASE, DERIVED, TRANSITIONS, Begin, Fail, Finish
from agentledger.core.messages import Content, Message, Usage
from agentledger.core.projections import LIMIT_REACHED, REJECTED_BY_USER

E = TypeVar("E", bound=EventBase)

RUN = "run-1"
T = ToolSpec(name="t")
U = ToolSpec(name="u")
DANGER = ToolSpec(name="danger", approval_mode="always_require")
TOOLS = (T, U, DANGER)


def user(text: str) -> Message:
    return Message("user", (text,))


def call(call_id: str, name: str = "t") -> Content:
    return Content.from_function_call(call_id, name, arguments="{}")


def assistant(*contents: Content | str) -> Message:
    return Message("assistant", contents)


def names(events: Sequence[Event]) -> list[str]:
    return [type(e).__name__ for e in events]


def only(events: Sequence[Event], cls: type[E]) -> E:
    """The one event of type ``cls`` among ``events``."""
    found = [e for e in events if isinstance(e, cls)]
    assert len(found) == 1, names(events)
    return found[0]


class Run:
    """One machine driven by hand: inputs are stamped with the run id, the machine's next seq and
    a fresh ``at``; ``log`` keeps every event the machine returned, ``commands`` every command."""

    def __init__(self, history: Sequence[Message] = ()) -> None:
        self.machine = RunMachine(history)
        self.log: list[Event] = []
        self.commands: list[Command] = []
        self.clock = 0
        self.edges: set[tuple[Phase, type, Phase]] = set()
        """Every (phase, input, phase after) this run went through."""

    def make(self, cls: type[E], **fields: Any) -> E:
        """An input of type ``cls`` stamped for the machine's next seq (the machine is not fed)."""
        stamp: dict[str, Any] = {"run_id": RUN, "seq": self.machine.next_seq, "at": self.clock + 1000}
        return cls(**{**stamp, **fields})

    def feed(self, cls: type[EventBase], **fields: Any) -> Reaction:
        event: Any = self.make(cls, **fields)
        self.clock = event.at
        before = self.machine.phase
        step = self.keep(self.machine.handle(event))
        self.edges.add((before, cls, self.machine.phase))
        return step

    def keep(self, step: Reaction) -> Reaction:
        self.log.extend(step[0])
        self.commands.extend(step[1])
        return step

    def start(self, *, begin: bool = True, **fields: Any) -> Reaction:
        """RunStarted (tools t, u, danger and one user message unless given), then begin()."""
        started = {"agent_id": "a", "messages": (user("hi"),), "tools": TOOLS, **fields}
        step = self.feed(RunStarted, **started)
        return self.begin() if begin else step

    def begin(self) -> Reaction:
        step = self.keep(self.machine.begin())
        self.edges.add((S, Begin, self.machine.phase))
        return step

    def finish(self, **overrides: Any) -> Reaction:
        self.clock += 1000
        step = self.keep(self.machine.finish(self.clock, **overrides))
        self.edges.add((F, Finish, self.machine.phase))
        return step

    def fail(self) -> Reaction:
        self.clock += 1000
        before = self.machine.phase
        step = self.keep(self.machine.fail(self.clock, "Crash", "boom"))
        self.edges.add((before, Fail, self.machine.phase))
        return step

    def respond(self, *contents: Content | str, usage: Usage | None = None) -> Reaction:
        message = assistant(*contents)
        return self.feed(ModelResponded, iteration=self.machine.iteration, message=message, usage=usage)

    def returned(self, call_id: str, name: str = "t", result: str = "ok") -> Reaction:
        return self.feed(ToolReturned, call_id=call_id, name=name, result=result)

    def failed(self, call_id: str, name: str = "t") -> Reaction:
        return self.feed(ToolFailed, call_id=call_id, name=name, error_type="ValueError", message="bad")


def snapshot(machine: RunMachine) -> bytes:
    """Everything a refused input must leave as it was."""
    state = {
        "phase": machine.phase,
        "run_id": machine.run_id,
        "next_seq": machine.next_seq,
        "iteration": machine.iteration,
        "messages": machine.transcript.messages,
        "open_calls": machine.transcript.pending,
        "tools": machine.tools.specs,
        "tool_choice": machine.tool_choice,
        "awaiting": machine.awaiting_approval,
        "counters": (machine.calls_made, machine.error_streak, machine.model_calls, machine.terminated),
        "pending": machine.pending(),
    }
    return msgspec.json.encode(state, enc_hook=list)  # a CallModel's messages are a view


def reach(phase: Phase) -> Run:
    """A run driven to ``phase``; in RUNNING_TOOLS the batch is c1 (tool t) and c2 (danger, gated)."""
    run = Run()
    if phase is not Phase.NEW:
        run.start(begin=phase is not Phase.STARTED)
    if phase is Phase.RUNNING_TOOLS:
        run.respond(call("c1"), call("c2", "danger"))
    elif phase is Phase.FINISHING:
        run.respond("done")
    elif phase is Phase.DONE:  # paused for approval of c2, so a later run may claim the batch
        run.respond(call("c2", "danger"))
        run.feed(ApprovalRequested, call_ids=("c2",))
    if phase is Phase.DONE:
        run.finish()
    assert run.machine.phase is phase
    return run


def limited(**config: Any) -> Run:
    """A run with the given limits, waiting on its first model call."""
    run = Run()
    run.start(config=RunConfig(**config))
    return run


# -- the table ----------------------------------------------------------------------------------

SAMPLES: dict[type[EventBase], dict[str, Any]] = {
    RunStarted: {"agent_id": "a", "messages": (user("hi"),), "tools": TOOLS},
    RunInputRewritten: {"by": "mw", "messages": (user("rewritten"),)},
    ContextProvided: {"provider": "rag", "messages": (user("fact"),), "tools": (ToolSpec(name="w"),)},
    ModelCalled: {"iteration": 1},
    ModelRequestRewritten: {"iteration": 1, "by": "mw"},
    ModelResponded: {"iteration": 1, "message": assistant("done")},
    ModelFailed: {"iteration": 1, "error_type": "Timeout", "message": "slow"},
    ToolCalled: {"call_id": "c1", "name": "t"},
    ToolReturned: {"call_id": "c1", "name": "t", "result": "ok"},
    ToolFailed: {"call_id": "c1", "name": "t", "error_type": "ValueError", "message": "bad"},
    ArgumentsRejected: {"call_id": "c1", "name": "t", "reason": "x is required"},
    ToolNotFound: {"call_id": "c1", "name": "t", "reason": "no tools are offered"},
    MiddlewareShortCircuit: {"call_id": None, "middleware": "mw"},
    ToolsAdded: {"by_call_id": "c1", "tools": (ToolSpec(name="v"),)},
    ToolsRemoved: {"by_call_id": "c1", "names": ("u",)},
    ToolChoiceReset: {"iteration": 1, "previous": "required"},
    SessionUpdated: {"session_id": "s", "by": "mw", "changes": (StateChange("k", "set", 1),)},
    ChildRunStarted: {"call_id": "c1", "child_run_id": "child"},
    ApprovalRequested: {"call_ids": ("c2",)},
    ApprovalResolved: {"call_id": "c2", "approved": True},
    IterationLimitReached: {"iteration": 1, "reason": "max_iterations", "limit": 1},
    CallsSkipped: {"iteration": 1, "call_ids": ("c1",), "reason": "max_iterations"},
    BatchResumed: {"call_ids": ("c1",)},
    BatchClaimed: {"by_run_id": "resume", "answers": (ClaimedAnswer(call_id="c2", approved=True),)},
    RunTerminated: {"iteration": 1, "reason": "user stop"},
    RunCompleted: {},
    RunFailed: {"error_type": "Crash", "message": "boom"},
}
"""One input of every event type, valid in the phase ``reach`` leaves a run in."""

S, A, R, F = Phase.STARTED, Phase.AWAITING_MODEL, Phase.RUNNING_TOOLS, Phase.FINISHING
ACCEPTED: dict[tuple[Phase, type[EventBase]], tuple[Phase, tuple[type, ...]]] = {
    (Phase.NEW, RunStarted): (S, ()),
    (S, RunInputRewritten): (S, ()),
    (S, ContextProvided): (S, ()),
    (S, SessionUpdated): (S, ()),
    (S, MiddlewareShortCircuit): (F, (FinishRun,)),
    (S, RunTerminated): (F, (FinishRun,)),
    (A, ModelResponded): (F, (FinishRun,)),
    (A, ModelFailed): (F, (FinishRun,)),
    (A, SessionUpdated): (A, ()),
    (A, RunTerminated): (F, (FinishRun,)),
    (A, MiddlewareShortCircuit): (A, ()),
    (A, ModelRequestRewritten): (A, ()),
    (R, ToolCalled): (R, ()),
    (R, ToolReturned): (R, ()),
    (R, MiddlewareShortCircuit): (R, ()),
    (R, ToolFailed): (R, ()),
    (R, ArgumentsRejected): (R, ()),
    (R, ToolsAdded): (R, ()),
    (R, ToolsRemoved): (R, ()),
    (R, SessionUpdated): (R, ()),
    (R, ChildRunStarted): (R, ()),
    (R, RunTerminated): (R, ()),
    (R, ApprovalRequested): (F, (FinishRun,)),
    (F, SessionUpdated): (F, ()),
    (Phase.DONE, BatchClaimed): (Phase.DONE, ()),
}
"""(phase, input) -> (phase after the sample input, commands it issues)."""

REFUSED = [(p, k) for p in Phase for k in get_args(Event) if (p, k) not in TRANSITIONS]


def _id(pair: tuple[Phase, type[EventBase]]) -> str:
    return f"{pair[0].value}-{pair[1].__name__}"


def test_the_cases_cover_the_table_and_every_event_type() -> None:
    """The accepted cases are exactly the events of TRANSITIONS, and there is a sample of every
    event type; where each sample leads is one of the places its entry says it may lead."""
    events = set(get_args(Event))
    assert set(ACCEPTED) == {pair for pair in TRANSITIONS if pair[1] in events}
    assert {kind for _, kind in TRANSITIONS} - events == {Begin, Finish, Fail}
    assert set(SAMPLES) == events
    for pair, (phase, _) in ACCEPTED.items():
        assert phase in TRANSITIONS[pair].leads_to, pair


def _batch(*ids: str) -> Run:
    """A run waiting on the results of calls ``ids`` (tool t)."""
    run = Run()
    run.start()
    run.respond(*(call(i) for i in ids))
    return run


def _outcome(run: Run, kind: type[EventBase], call_id: str) -> None:
    fields: dict[type[EventBase], dict[str, Any]] = {
        ToolReturned: {"name": "t", "result": "ok"},
        MiddlewareShortCircuit: {"middleware": "mw"},
        ToolFailed: {"name": "t", "error_type": "ValueError", "message": "bad"},
        ArgumentsRejected: {"name": "t", "reason": "x is required"},
    }
    run.feed(kind, call_id=call_id, **fields[kind])


def _scenarios() -> list[Run]:
    """Runs that between them take every way the table says a run may go."""
    runs = []
    run = Run()  # started: what it takes before the loop, and how it ends there
    run.start(begin=False)
    run.feed(RunInputRewritten, **SAMPLES[RunInputRewritten])
    run.feed(ContextProvided, **SAMPLES[ContextProvided])
    run.feed(SessionUpdated, **SAMPLES[SessionUpdated])
    run.feed(MiddlewareShortCircuit, call_id="x", middleware="mw")
    run.feed(MiddlewareShortCircuit, call_id=None, middleware="mw")
    run.feed(SessionUpdated, **SAMPLES[SessionUpdated])
    run.fail()
    runs.append(run)
    for end in ("terminated", "failed"):
        run = Run()
        run.start(begin=False)
        run.feed(RunTerminated, **SAMPLES[RunTerminated]) if end == "terminated" else run.fail()
        runs.append(run)
    run = Run()  # awaiting the model: what it takes, and each way it ends
    run.start()
    for noted in (SessionUpdated, ModelRequestRewritten):
        run.feed(noted, **SAMPLES[noted])
    run.feed(MiddlewareShortCircuit, call_id=None, middleware="mw")
    run.respond(call("x", "nope"))  # an unknown tool only: the model is asked again
    run.feed(RunTerminated, **SAMPLES[RunTerminated])
    runs.append(run)
    for last in (ModelFailed, RunFailed, ModelResponded):
        run = Run()
        run.start()
        if last is ModelFailed:
            run.feed(ModelFailed, **SAMPLES[ModelFailed])
        elif last is RunFailed:
            run.fail()
        else:
            run.respond("done")
            run.finish()
        runs.append(run)
    run = _batch("c1", "c2")  # running tools: what a batch takes while open
    run.feed(ToolCalled, call_id="c1", name="t")
    for fact in (ToolsAdded, ToolsRemoved, SessionUpdated, ChildRunStarted, RunTerminated):
        run.feed(fact, **SAMPLES[fact])
    run.fail()
    runs.append(run)
    for kind in (ToolReturned, MiddlewareShortCircuit, ToolFailed, ArgumentsRejected):
        run = _batch("c1", "c2")  # the batch stays open, then is whole
        _outcome(run, kind, "c1")
        _outcome(run, kind, "c2")
        runs.append(run)
        run = _batch("c1")  # whole after a stop was asked for
        run.feed(RunTerminated, **SAMPLES[RunTerminated])
        _outcome(run, kind, "c1")
        runs.append(run)
    run = Run()  # approval: the whole batch waits for the answer; a later run claims it
    run.start()
    run.respond(call("c1"), call("c2", "danger"))
    run.feed(ApprovalRequested, call_ids=("c2",))
    run.finish()
    run.feed(BatchClaimed, **SAMPLES[BatchClaimed])
    runs.append(run)
    runs.append(resumed(("a1", True))[0])  # begin resumes a batch
    return runs


def test_the_table_says_where_each_transition_leads() -> None:
    """Every (phase, input, next phase) the table allows is one a run takes, and no run takes
    another: the machine holds itself to ``Transition.leads_to``."""
    declared = {(p, kind, to) for (p, kind), edge in TRANSITIONS.items() for to in edge.leads_to}
    taken = set().union(*(run.edges for run in _scenarios()))
    assert taken == declared


@pytest.mark.parametrize("pair", list(ACCEPTED), ids=_id)
def test_every_pair_in_the_table_is_accepted(pair: tuple[Phase, type[EventBase]]) -> None:
    """Each (phase, input) of the table is taken: returned first, seq advanced, next phase and commands."""
    phase, kind = pair
    run = reach(phase)
    event: Any = run.make(kind, **SAMPLES[kind])
    events, commands = run.machine.handle(event)
    assert events == [event]
    assert run.machine.next_seq == event.seq + 1
    assert (run.machine.phase, tuple(type(c) for c in commands)) == ACCEPTED[pair]


@pytest.mark.parametrize("pair", list(ACCEPTED), ids=_id)
def test_handle_into_appends_what_handle_returns(
    pair: tuple[Phase, type[EventBase]],
) -> None:
    """The owner's form of ``handle``: the same events and commands, appended after what the
    log and the queue already hold, and the machine left in the same state."""
    phase, kind = pair
    returned, appended = reach(phase), reach(phase)
    first: Any = returned.make(kind, **SAMPLES[kind])
    events, commands = returned.machine.handle(first)
    earlier = returned.make(ToolCalled, call_id="earlier", name="t")  # stands for the log so far
    log: list[Event] = [earlier]
    queue: collections.deque[Command] = collections.deque([FinishRun(reason="earlier")])
    again: Any = appended.make(kind, **SAMPLES[kind])
    appended.machine.handle_into(again, log, queue)
    assert log == [earlier, *events]
    assert list(queue) == [FinishRun(reason="earlier"), *commands]
    assert snapshot(appended.machine) == snapshot(returned.machine)


@pytest.mark.parametrize("pair", REFUSED[::7], ids=_id)
def test_handle_into_appends_nothing_it_refuses(pair: tuple[Phase, type[EventBase]]) -> None:
    phase, kind = pair
    run = reach(phase)
    log: list[Event] = []
    queue: collections.deque[Command] = collections.deque()
    event: Any = run.make(kind, **SAMPLES[kind])
    with pytest.raises(TransitionError):
        run.machine.handle_into(event, log, queue)
    assert (log, list(queue)) == ([], [])


def test_a_failing_handler_leaves_no_half_reaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug in a transition's handler after it derived events: the log and the queue are as
    they were before the input, and the error goes on."""
    run = reach(A)
    edge = TRANSITIONS[(A, ModelResponded)]

    def broken(machine: RunMachine, event: Any) -> None:
        edge.handler(machine, event)  # derives and issues what the real one does
        raise RuntimeError("handler bug")

    monkeypatch.setitem(BY_PHASE[A], ModelResponded, dataclasses.replace(edge, handler=broken))
    log: list[Event] = [run.make(ToolCalled, call_id="before", name="t")]
    queue: collections.deque[Command] = collections.deque()
    with pytest.raises(RuntimeError, match="handler bug"):
        run.machine.handle_into(run.make(ModelResponded, **SAMPLES[ModelResponded]), log, queue)
    assert [type(e) for e in log] == [ToolCalled]
    assert not queue


@pytest.mark.parametrize("pair", REFUSED, ids=_id)
def test_pairs_not_in_the_table_are_refused_and_change_nothing(pair: tuple[Phase, type[EventBase]]) -> None:
    """An input the phase does not accept raises TransitionError naming it, and leaves the state as it was."""
    phase, kind = pair
    run = reach(phase)
    event: Any = run.make(kind, **SAMPLES[kind])
    before = snapshot(run.machine)
    with pytest.raises(TransitionError, match=f"{kind.__name__} is not accepted") as info:
        run.machine.handle(event)
    assert (info.value.seq, info.value.run_id) == (event.seq, run.machine.run_id)
    assert snapshot(run.machine) == before


MISSTAMPED = [
    pytest.param(pair, stamp, id=f"{_id(pair)}-{stamp}")
    for pair in ACCEPTED
    for stamp in ("seq+1", "seq-1", "other run")
    if not (pair[0] is Phase.NEW and stamp == "other run")  # the first event sets the run id
]


@pytest.mark.parametrize(("pair", "stamp"), MISSTAMPED)
def test_wrong_seq_or_run_is_refused(pair: tuple[Phase, type[EventBase]], stamp: str) -> None:
    """An accepted input with a seq other than next_seq, or another run's id, raises and changes nothing."""
    phase, kind = pair
    run = reach(phase)
    seq = run.machine.next_seq
    wrong: dict[str, Any] = {
        "seq+1": {"seq": seq + 1},
        "seq-1": {"seq": seq - 1},
        "other run": {"run_id": "x"},
    }
    event: Any = run.make(kind, **{**SAMPLES[kind], **wrong[stamp]})
    before = snapshot(run.machine)
    with pytest.raises(TransitionError, match="expected seq"):
        run.machine.handle(event)
    assert snapshot(run.machine) == before


@pytest.mark.parametrize("phase", [Phase.NEW, A, R, F, Phase.DONE])
def test_begin_outside_started_raises_and_changes_nothing(phase: Phase) -> None:
    """begin() is only accepted in STARTED."""
    run = reach(phase)
    before = snapshot(run.machine)
    with pytest.raises(TransitionError, match="begin is not accepted"):
        run.machine.begin()
    assert snapshot(run.machine) == before


# -- started and begin ---------------------------------------------------------------------------


def test_run_started_takes_run_id_limits_and_tool_choice() -> None:
    """RunStarted sets the run id, config and tool_choice, and waits for begin() without a command."""
    run = Run()
    config = RunConfig(max_iterations=3)
    events, commands = run.start(begin=False, config=config, options={"tool_choice": "auto"})
    assert (names(events), commands) == (["RunStarted"], [])
    machine = run.machine
    assert (machine.run_id, machine.config, machine.tool_choice, machine.phase) == (RUN, config, "auto", S)


def test_begin_calls_the_model_with_the_started_tools() -> None:
    """begin() derives ModelCalled with RunStarted's tools and issues CallModel with history then input."""
    history = (user("earlier"), assistant("before"))
    run = Run(history)
    run.start(begin=False, tools=(U, T), options={"tool_choice": "auto"}, history_length=len(history))
    events, commands = run.begin()
    called = only(events, ModelCalled)
    assert (called.iteration, called.tools, called.tool_choice) == (1, ("u", "t"), "auto")
    assert called.message_count == 3
    expected = CallModel(iteration=1, messages=(*history, user("hi")), tools=("u", "t"), tool_choice="auto")
    assert commands == [expected]
    assert run.machine.phase is A


def test_run_input_rewritten_replaces_the_input_and_tool_choice() -> None:
    """Agent middleware's RunInputRewritten replaces the messages sent and the tool_choice offered."""
    run = Run()
    run.start(begin=False, options={"tool_choice": "auto"})
    run.feed(RunInputRewritten, by="mw", messages=(user("a"), user("b")), options={"tool_choice": "none"})
    _, commands = run.begin()
    assert isinstance(commands[0], CallModel)
    assert (commands[0].messages, commands[0].tool_choice) == ((user("a"), user("b")), "none")
    run.respond("answer")
    assert run.machine.response_messages() == [assistant("answer")]


def test_run_input_rewritten_without_tool_choice_keeps_it() -> None:
    """A rewrite that does not name tool_choice leaves the started one in force."""
    run = Run()
    run.start(begin=False, options={"tool_choice": "required"})
    run.feed(RunInputRewritten, by="mw", messages=(user("a"),))
    assert only(run.begin()[0], ModelCalled).tool_choice == "required"


def test_context_provided_goes_before_the_input_and_offers_its_tools() -> None:
    """A provider's messages are sent after the history and before the input, its tools are
    offered, and none of them is a message of the run."""
    run = Run(history=[user("old")])
    run.start(begin=False)
    run.feed(ContextProvided, provider="a", messages=(user("fact a"),))
    run.feed(ContextProvided, provider="b", messages=(user("fact b"),), tools=(ToolSpec(name="w"),))
    _, commands = run.begin()
    assert isinstance(commands[0], CallModel)
    assert list(commands[0].messages) == [user("old"), user("fact a"), user("fact b"), user("hi")]
    assert "w" in commands[0].tools
    run.respond("answer")
    assert run.machine.response_messages() == [assistant("answer")]


def test_agent_short_circuit_finishes_the_run() -> None:
    """MiddlewareShortCircuit with call_id None in STARTED finishes with short_circuit, no model call."""
    run = Run()
    run.start(begin=False)
    events, commands = run.feed(MiddlewareShortCircuit, call_id=None, middleware="cache", scope="run")
    assert (names(events), commands) == (["MiddlewareShortCircuit"], [FinishRun(reason="short_circuit")])
    done = only(run.finish(messages=[assistant("cached")])[0], RunCompleted)
    assert (done.reason, done.text, done.messages) == ("short_circuit", "cached", (assistant("cached"),))
    assert not any(isinstance(e, ModelCalled) for e in run.log)


def test_a_rewritten_input_is_not_a_message_of_the_run() -> None:
    """After RunInputRewritten and a short circuit, the run reports none of the new input as its own."""
    run = Run()
    run.start(begin=False)
    run.feed(RunInputRewritten, by="mw", messages=(user("a"), user("b")))
    run.feed(MiddlewareShortCircuit, call_id=None, middleware="cache")
    assert run.machine.response_messages() == []
    assert only(run.finish()[0], RunCompleted).messages == ()


def test_short_circuit_naming_a_call_in_started_is_only_recorded() -> None:
    """MiddlewareShortCircuit with a call_id in STARTED neither finishes nor issues anything."""
    run = Run()
    run.start(begin=False)
    assert run.feed(MiddlewareShortCircuit, call_id="x", middleware="mw")[1] == []
    assert run.machine.phase is S


# -- approvals carried in the input ---------------------------------------------------------------


def resumed(*answers: tuple[str, bool], extra: tuple[Content, ...] = ()) -> tuple[Run, Reaction]:
    """A run whose history holds the paused batch a1 (danger), a2 (danger) and ``extra``, and
    whose input answers some of them."""
    history = (user("hi"), assistant(call("a1", "danger"), call("a2", "danger"), *extra))
    responses = tuple(Content.from_approval_response(cid, approved=ok) for cid, ok in answers)
    run = Run(history)
    run.start(begin=False, messages=(Message("user", responses),), history_length=len(history))
    return run, run.begin()


def test_begin_resumes_approved_calls_without_gating() -> None:
    """Approval responses resume: ApprovalResolved per answer, InvokeTools of the approved calls, ungated."""
    run, (events, commands) = resumed(("a1", True), ("a2", True))
    assert names(events) == ["ApprovalResolved", "ApprovalResolved"]
    batch = (call("a1", "danger"), call("a2", "danger"))
    assert commands == [InvokeTools(iteration=1, calls=batch, gated=(), approved=("a1", "a2"))]
    assert run.machine.phase is R
    assert run.machine.transcript.messages == []  # the answers are not conversation


def test_a_rejected_call_gets_the_rejection_result() -> None:
    """A rejected call is not invoked; the model is sent the rejection as its result with the others'."""
    run, (events, commands) = resumed(("a1", True), ("a2", False))
    resolved = [(e.call_id, e.approved) for e in events if isinstance(e, ApprovalResolved)]
    assert resolved == [("a1", True), ("a2", False)]
    assert commands == [InvokeTools(iteration=1, calls=(call("a1", "danger"),), approved=("a1",))]
    _, after = run.returned("a1", "danger", "done")
    assert isinstance(after[0], CallModel)
    assert [m.role for m in after[0].messages] == ["user", "assistant", "tool"]
    results = [(c.call_id, c.result) for c in after[0].messages[-1].contents]
    assert results == [("a1", "done"), ("a2", REJECTED_BY_USER)]


def test_only_rejections_call_the_model_at_once() -> None:
    """When every answer is a rejection nothing is invoked and the model is asked again."""
    _, (events, commands) = resumed(("a1", False), ("a2", False))
    assert names(events) == ["ApprovalResolved", "ApprovalResolved", "ModelCalled"]
    assert [type(c) for c in commands] == [CallModel]


def test_the_rest_of_a_resumed_batch_runs_with_it() -> None:
    """Calls nobody was asked about run with the approved ones; one tool message, in call order."""
    run, (events, commands) = resumed(("a1", True), ("a2", True), extra=(call("a3"),))
    assert names(events) == ["BatchResumed", "ApprovalResolved", "ApprovalResolved"]
    assert only(events, BatchResumed).call_ids == ("a1", "a2", "a3")
    batch = (call("a1", "danger"), call("a2", "danger"), call("a3"))
    assert commands == [InvokeTools(iteration=1, calls=batch, gated=(), approved=("a1", "a2"))]
    run.returned("a3")
    run.returned("a1", "danger")
    _, after = run.returned("a2", "danger")
    assert isinstance(after[0], CallModel)
    assert [c.call_id for c in after[0].messages[-1].contents] == ["a1", "a2", "a3"]


def test_an_unanswered_gated_call_of_a_resumed_batch_stays_gated() -> None:
    """A call of the batch that still needs approval is gated again, not run unasked."""
    _, (events, commands) = resumed(("a1", True))
    assert names(events) == ["BatchResumed", "ApprovalResolved"]
    batch = (call("a1", "danger"), call("a2", "danger"))
    assert commands == [InvokeTools(iteration=1, calls=batch, gated=("a2",), approved=("a1",))]


def test_an_approved_call_of_a_tool_not_offered_is_tool_not_found() -> None:
    """A call of the resumed batch whose tool this run does not offer becomes ToolNotFound."""
    _, (events, commands) = resumed(("a1", True), ("a2", True), extra=(call("a3", "gone"),))
    missing = only(events, ToolNotFound)
    assert (missing.call_id, missing.name) == ("a3", "gone")
    assert missing.reason == "not in the tools offered to this run"
    batch = (call("a1", "danger"), call("a2", "danger"))
    assert commands == [InvokeTools(iteration=1, calls=batch, approved=("a1", "a2"))]


# -- model responses -----------------------------------------------------------------------------


def test_an_answer_without_calls_finishes_completed() -> None:
    """A response without calls finishes the loop: FinishRun(completed) with its text."""
    run = Run()
    run.start()
    events, commands = run.respond("the answer")
    assert names(events) == ["ModelResponded"]
    assert commands == [FinishRun(reason="completed", text="the answer")]
    assert run.machine.phase is F


def test_calls_are_invoked_as_one_batch() -> None:
    """A response with calls issues one InvokeTools of them, in order, and waits for every result."""
    run = Run()
    run.start()
    _, commands = run.respond(call("c1"), call("c2", "u"))
    assert commands == [InvokeTools(iteration=1, calls=(call("c1"), call("c2", "u")), gated=())]
    assert run.returned("c2", "u")[1] == []
    _, after = run.returned("c1")
    assert isinstance(after[0], CallModel)
    assert after[0].iteration == 2
    assert [c.call_id for c in after[0].messages[-1].contents] == ["c1", "c2"]  # in call order


def test_unknown_tool_when_no_tools_are_offered() -> None:
    """With no tools offered, a call becomes ToolNotFound 'no tools are offered'; the model is asked again."""
    run = Run()
    run.start(tools=())
    events, commands = run.respond(call("c1", "ghost"))
    assert names(events) == ["ModelResponded", "ToolNotFound", "ModelCalled"]
    assert only(events, ToolNotFound).reason == "no tools are offered"
    assert [type(c) for c in commands] == [CallModel]


def test_unknown_tool_among_offered_tools() -> None:
    """A call to a tool not offered becomes ToolNotFound 'not in the tools offered'; the rest still run."""
    run = Run()
    run.start()
    events, commands = run.respond(call("c1", "ghost"), call("c2"))
    missing = only(events, ToolNotFound)
    assert (missing.call_id, missing.name, missing.reason) == ("c1", "ghost", "not in the tools offered")
    assert commands == [InvokeTools(iteration=1, calls=(call("c2"),))]


def test_an_unknown_tool_is_answered_with_the_error_the_model_is_shown() -> None:
    """The ToolNotFound a call of a tool not offered derives is answered in the transcript, so the
    model asked again reads why."""
    run = Run()
    run.start()
    run.respond(call("c1", "nope"))
    assert run.machine.phase is A
    assert (
        run.machine.transcript.messages[-1].contents[0].result
        == 'Error: Requested function "nope" not found.'
    )


def test_derived_events_are_not_inputs() -> None:
    """Events the machine derives are never accepted as inputs, in any phase (``REFUSED`` is drawn
    from the table, so this checks the table itself)."""
    for phase, event_type in TRANSITIONS:
        assert event_type not in DERIVED, (phase, event_type)


@pytest.mark.parametrize("choice", ["required", {"mode": "required", "required_function_name": "t"}])
def test_a_required_tool_choice_resets_after_the_first_call(choice: Any) -> None:
    """After the first model call with calls, a required tool_choice is reset and the next call has none."""
    run = Run()
    run.start(options={"tool_choice": choice})
    events, _ = run.respond(call("c1"))
    assert only(events, ToolChoiceReset).previous == choice
    events, commands = run.returned("c1")
    assert only(events, ModelCalled).tool_choice is None
    assert isinstance(commands[0], CallModel)
    assert commands[0].tool_choice is None


def test_the_tool_choice_reset_happens_once() -> None:
    """A second response with calls derives no second ToolChoiceReset."""
    run = Run()
    run.start(options={"tool_choice": "required"})
    run.respond(call("c1"))
    run.returned("c1")
    events, _ = run.respond(call("c2"))
    assert names(events) == ["ModelResponded"]
    assert names(run.log).count("ToolChoiceReset") == 1


def test_an_auto_tool_choice_is_kept() -> None:
    """A tool_choice that is not required is offered again on the next call."""
    run = Run()
    run.start(options={"tool_choice": "auto"})
    events, _ = run.respond(call("c1"))
    assert "ToolChoiceReset" not in names(events)
    assert only(run.returned("c1")[0], ModelCalled).tool_choice == "auto"


# -- approval gating -----------------------------------------------------------------------------


def gated_batch() -> tuple[Run, Reaction]:
    run = Run()
    run.start()
    return run, run.respond(call("c1"), call("c2", "danger"))


def test_calls_of_approval_tools_are_gated() -> None:
    """Calls of a tool with approval_mode always_require are listed in InvokeTools.gated."""
    _, (_, commands) = gated_batch()
    assert commands == [InvokeTools(iteration=1, calls=(call("c1"), call("c2", "danger")), gated=("c2",))]


def test_held_calls_pause_the_whole_batch() -> None:
    """ApprovalRequested holds the whole batch: the run finishes awaiting_approval at once, no result."""
    run, _ = gated_batch()
    events, commands = run.feed(ApprovalRequested, call_ids=("c2",))
    assert (names(events), commands) == (["ApprovalRequested"], [FinishRun(reason="awaiting_approval")])
    assert run.machine.approval_requests() == [
        Content("function_approval_request", call_id="c2", name="danger", arguments="{}")
    ]
    assert [m.role for m in run.machine.response_messages()] == ["assistant"]


def test_approval_requested_after_the_rest_pauses_at_once() -> None:
    """When every other call already has its result, ApprovalRequested itself pauses the run."""
    run, _ = gated_batch()
    run.returned("c1")
    _, commands = run.feed(ApprovalRequested, call_ids=("c2",))
    assert commands == [FinishRun(reason="awaiting_approval")]
    assert run.machine.awaiting_approval == ("c2",)


def test_a_held_batch_leaves_nothing_pending_but_the_finish() -> None:
    """pending() of a paused batch is the FinishRun: none of its calls is to be run now."""
    run, _ = gated_batch()
    run.feed(ApprovalRequested, call_ids=("c2",))
    assert run.machine.pending() == FinishRun(reason="awaiting_approval")


@pytest.mark.parametrize("call_ids", [("c1",), ("c1", "c2"), ("zz",)])
def test_approval_requested_for_an_ungated_call_is_refused(call_ids: tuple[str, ...]) -> None:
    """ApprovalRequested naming any call that was not gated raises TransitionError and changes nothing."""
    run, _ = gated_batch()
    before = snapshot(run.machine)
    with pytest.raises(TransitionError, match="not gated"):
        run.machine.handle(run.make(ApprovalRequested, call_ids=call_ids))
    assert snapshot(run.machine) == before


@pytest.mark.parametrize(
    ("calls", "problem"),
    [
        ((Content.from_function_call("", "t", arguments="{}"),), "no call id"),
        ((call("c1"), call("c1", "u")), "appears twice"),
    ],
)
def test_a_response_with_calls_that_cannot_run_is_refused(calls: tuple[Content, ...], problem: str) -> None:
    """A ``ModelResponded`` whose calls have no id, or share one, is refused and changes nothing:
    such an answer is a failed model call, so a log that holds one is not a log of this machine."""
    run = Run()
    run.start()
    before = snapshot(run.machine)
    message = assistant(*calls)
    with pytest.raises(TransitionError, match=problem):
        run.machine.handle(run.make(ModelResponded, iteration=1, message=message))
    assert snapshot(run.machine) == before


# -- limits ----------------------------------------------------------------------------------------


def test_max_iterations_makes_a_final_call_without_tools() -> None:
    """At max_iterations: IterationLimitReached, then a final CallModel with tool_choice none."""
    run = limited(max_iterations=1)
    run.respond(call("c1"))
    events, commands = run.returned("c1")
    assert names(events) == ["ToolReturned", "IterationLimitReached", "ModelCalled"]
    reached = only(events, IterationLimitReached)
    assert (reached.iteration, reached.reason, reached.limit) == (1, "max_iterations", 1)
    assert isinstance(commands[0], CallModel)
    assert (commands[0].iteration, commands[0].tool_choice) == (2, "none")


def test_calls_on_the_final_call_are_dropped() -> None:
    """Calls the model still returns on the final call become CallsSkipped and FinishRun(limit_reached);
    the conversation keeps the answer's text without the calls."""
    run = limited(max_iterations=1)
    run.respond(call("c1"))
    run.returned("c1")
    events, commands = run.respond("last words", call("c2"), call("c3", "ghost"))
    skipped = only(events, CallsSkipped)
    assert (skipped.call_ids, skipped.reason) == (("c2", "c3"), "max_iterations")
    assert commands == [FinishRun(reason="limit_reached", text="last words")]
    assert run.machine.transcript.messages[-1] == assistant("last words")


def test_a_final_answer_of_calls_only_says_the_limit_was_reached() -> None:
    """With nothing but calls on the final call, the answer is the limit's message."""
    run = limited(max_iterations=1)
    run.respond(call("c1"))
    run.returned("c1")
    _, commands = run.respond(call("c2"))
    assert commands == [FinishRun(reason="limit_reached", text=LIMIT_REACHED)]


def test_an_answer_on_the_final_call_finishes_limit_reached() -> None:
    """A plain answer to the final call finishes with limit_reached, nothing skipped."""
    run = limited(max_iterations=1)
    run.respond(call("c1"))
    run.returned("c1")
    events, commands = run.respond("summary")
    assert names(events) == ["ModelResponded"]
    assert commands == [FinishRun(reason="limit_reached", text="summary")]


def fail_batch(run: Run, kind: str, call_id: str) -> Reaction:
    """One batch of one call that errors as ``kind``."""
    if kind == "ToolNotFound":
        return run.respond(call(call_id, "ghost"))
    run.respond(call(call_id))
    if kind == "ToolFailed":
        return run.failed(call_id)
    return run.feed(ArgumentsRejected, call_id=call_id, name="t", reason="bad json")


@pytest.mark.parametrize("kind", ["ToolFailed", "ArgumentsRejected", "ToolNotFound"])
def test_consecutive_erroring_batches_reach_the_limit(kind: str) -> None:
    """max_consecutive_errors erroring batches in a row reach the limit of that name."""
    run = limited(max_consecutive_errors=2)
    assert "IterationLimitReached" not in names(fail_batch(run, kind, "c1")[0])
    events, commands = fail_batch(run, kind, "c2")
    reached = only(events, IterationLimitReached)
    assert (reached.reason, reached.limit) == ("max_consecutive_errors", 2)
    assert isinstance(commands[0], CallModel)
    assert commands[0].tool_choice == "none"


def test_one_failed_call_makes_the_batch_erroring() -> None:
    """A batch with one failure among successes counts as an erroring batch."""
    run = limited(max_consecutive_errors=1)
    run.respond(call("c1"), call("c2"))
    run.failed("c1")
    assert only(run.returned("c2")[0], IterationLimitReached).reason == "max_consecutive_errors"


def test_a_good_batch_resets_the_error_streak() -> None:
    """An erroring batch, a good one, an erroring one: the streak restarts and no limit is reached."""
    run = limited(max_consecutive_errors=2)
    fail_batch(run, "ToolFailed", "c1")
    run.respond(call("c2"))
    run.returned("c2")
    assert run.machine.error_streak == 0
    events, _ = fail_batch(run, "ToolFailed", "c3")
    assert names(events) == ["ToolFailed", "ModelCalled"]
    assert run.machine.error_streak == 1


def test_max_function_calls_counts_calls_across_batches() -> None:
    """max_function_calls is reached by the total number of calls run, not by one batch."""
    run = limited(max_function_calls=3)
    run.respond(call("c1"), call("c2"))
    run.returned("c1")
    assert "IterationLimitReached" not in names(run.returned("c2")[0])
    run.respond(call("c3"))
    reached = only(run.returned("c3")[0], IterationLimitReached)
    assert (reached.reason, reached.limit) == ("max_function_calls", 3)


# -- termination -----------------------------------------------------------------------------------


def test_terminated_before_begin_finishes_at_once() -> None:
    """RunTerminated in STARTED finishes terminated; begin() is then refused and the model never called."""
    run = Run()
    run.start(begin=False)
    assert run.feed(RunTerminated, iteration=0, reason="stop")[1] == [FinishRun(reason="terminated")]
    with pytest.raises(TransitionError):
        run.machine.begin()
    assert only(run.finish()[0], RunCompleted).reason == "terminated"


def test_terminated_while_awaiting_the_model_finishes_at_once() -> None:
    """RunTerminated in AWAITING_MODEL finishes terminated; the model's late answer is refused."""
    run = Run()
    run.start()
    assert run.feed(RunTerminated, iteration=1, reason="stop")[1] == [FinishRun(reason="terminated")]
    with pytest.raises(TransitionError):
        run.respond("late")


def test_terminated_mid_batch_finishes_after_the_last_result() -> None:
    """RunTerminated mid-batch waits for the batch; the last result finishes terminated, no model call."""
    run = limited(max_iterations=1)
    run.respond(call("c1"), call("c2"))
    run.returned("c1")
    assert run.feed(RunTerminated, iteration=1, reason="stop")[1] == []
    assert run.machine.phase is R
    events, commands = run.returned("c2")
    assert (names(events), commands) == (["ToolReturned"], [FinishRun(reason="terminated")])
    done = only(run.finish()[0], RunCompleted)
    assert done.reason == "terminated"
    assert [c.call_id for c in done.messages[-1].contents] == ["c1", "c2"]


# -- model failure, finish and fail ------------------------------------------------------------------


def test_model_failed_finishes_failed() -> None:
    """ModelFailed finishes the loop with FinishRun(failed)."""
    run = Run()
    run.start()
    events, commands = run.feed(ModelFailed, iteration=1, error_type="Timeout", message="slow")
    assert (names(events), commands) == (["ModelFailed"], [FinishRun(reason="failed")])


@pytest.mark.parametrize(
    ("reported", "recorded"), [("Timeout", "ModelCallError"), ("ModelResponseError", "ModelResponseError")]
)
def test_finish_after_a_model_failure_records_run_failed(reported: str, recorded: str) -> None:
    """finish() after ModelFailed derives RunFailed: ModelResponseError kept, anything else ModelCallError."""
    run = Run()
    run.start()
    run.feed(ModelFailed, iteration=1, error_type=reported, message="bad answer")
    events, commands = run.finish()
    assert events == [RunFailed(run_id=RUN, seq=3, at=run.clock, error_type=recorded, message="bad answer")]
    assert (commands, run.machine.phase, run.machine.is_open) == ([], Phase.DONE, False)


def test_finish_records_what_the_run_produced() -> None:
    """finish() derives RunCompleted with the run's own messages, its last assistant text and summed usage."""
    run = Run()
    run.start()
    run.respond("thinking", call("c1"), usage=Usage(1, 2, 3))
    run.returned("c1")
    run.respond("final", usage=Usage(10, 20, 30))
    done = only(run.finish()[0], RunCompleted)
    assert list(done.messages) == run.machine.response_messages()
    assert [m.role for m in done.messages] == ["assistant", "tool", "assistant"]
    assert (done.text, done.usage, done.reason) == ("final", Usage(11, 22, 33), "completed")
    assert done.at == run.clock
    assert run.machine.pending() is None


def test_finish_takes_what_middleware_answered_instead() -> None:
    """finish() records the messages, text and usage it is given; text defaults to theirs."""
    run = reach(Phase.FINISHING)
    machine = run.machine
    done = only(machine.finish(5, messages=[assistant("other")], usage=Usage(7, 7, 14))[0], RunCompleted)
    assert (done.messages, done.text, done.usage) == ((assistant("other"),), "other", Usage(7, 7, 14))
    run = reach(Phase.FINISHING)
    assert only(run.machine.finish(5, text="said")[0], RunCompleted).text == "said"


@pytest.mark.parametrize("phase", [Phase.NEW, S, A, R, Phase.DONE])
def test_finish_outside_finishing_raises_and_changes_nothing(phase: Phase) -> None:
    """finish() is only accepted in FINISHING."""
    run = reach(phase)
    before = snapshot(run.machine)
    with pytest.raises(TransitionError, match="finish is not accepted"):
        run.machine.finish(1)
    assert snapshot(run.machine) == before


@pytest.mark.parametrize("phase", [S, A, R, F])
def test_fail_in_an_open_phase_records_run_failed(phase: Phase) -> None:
    """fail() in any open phase derives RunFailed at the given time and the machine is DONE."""
    run = reach(phase)
    seq = run.machine.next_seq
    events, commands = run.machine.fail(77, "Cancelled", "gone")
    assert events == [RunFailed(run_id=RUN, seq=seq, at=77, error_type="Cancelled", message="gone")]
    assert (commands, run.machine.phase, run.machine.pending()) == ([], Phase.DONE, None)


@pytest.mark.parametrize("phase", [Phase.NEW, Phase.DONE])
def test_fail_outside_an_open_phase_raises_and_changes_nothing(phase: Phase) -> None:
    """fail() before RunStarted or after the run ended raises TransitionError."""
    run = reach(phase)
    before = snapshot(run.machine)
    with pytest.raises(TransitionError, match="fail is not accepted"):
        run.machine.fail(1, "X", "y")
    assert snapshot(run.machine) == before


# -- tool list changes -------------------------------------------------------------------------------


def test_tools_added_mid_batch_are_offered_on_the_next_call_only() -> None:
    """ToolsAdded in a batch leaves the batch in flight as it was and is offered on the next CallModel."""
    run = Run()
    run.start(tools=(T,))
    run.respond(call("c1"), call("c2"))
    run.feed(ToolsAdded, by_call_id="c1", tools=(ToolSpec(name="v", approval_mode="always_require"),))
    run.returned("c1")
    assert run.machine.pending() == InvokeTools(iteration=1, calls=(call("c2"),))
    assert only(run.returned("c2")[0], ModelCalled).tools == ("t", "v")
    _, commands = run.respond(call("c3", "v"))
    assert commands == [InvokeTools(iteration=2, calls=(call("c3", "v"),), gated=("c3",))]


def test_tools_removed_mid_batch_stop_being_offered_after_the_batch() -> None:
    """ToolsRemoved in a batch: the removed tool's call still completes; the next call no longer offers it."""
    run = Run()
    run.start(tools=(T, U))
    run.respond(call("c1", "u"))
    run.feed(ToolsRemoved, by_call_id="c1", names=("u",))
    assert run.machine.pending() == InvokeTools(iteration=1, calls=(call("c1", "u"),))
    assert only(run.returned("c1", "u")[0], ModelCalled).tools == ("t",)
    assert only(run.respond(call("c2", "u"))[0], ToolNotFound).reason == "not in the tools offered"


# -- observe, refold and pending ---------------------------------------------------------------------


Mark = tuple[int, list[Command], Command | None]


def driven() -> tuple[Run, list[Mark]]:
    """A run through a tool_choice reset, an unknown tool, a failed call, a tool list change and a
    limit, finished; after each step: the log length, the step's commands, what the machine waits on."""
    run = Run()
    marks: list[Mark] = []

    def step(taken: Reaction) -> None:
        marks.append((len(run.log), taken[1], run.machine.pending()))

    step(run.start(begin=False, options={"tool_choice": "required"}, config=RunConfig(max_iterations=2)))
    step(run.begin())
    step(run.respond(call("c1"), call("c2", "ghost"), call("c3", "u"), usage=Usage(1, 1, 2)))
    step(run.feed(ToolCalled, call_id="c1", name="t"))
    step(run.returned("c1"))
    step(run.feed(SessionUpdated, session_id="s", by="t", changes=(StateChange("k", "set", 1),)))
    step(run.failed("c3", "u"))
    step(run.respond(call("c4"), "more"))
    step(run.feed(ToolsAdded, by_call_id="c4", tools=(ToolSpec(name="v"),)))
    step(run.returned("c4"))
    step(run.respond(call("c5")))
    step(run.finish())
    return run, marks


def test_the_live_machine_waits_on_the_command_it_issued() -> None:
    """After each step that issues a command, pending() is that command."""
    run, marks = driven()
    for _, commands, pending in marks[:-1]:
        if commands:
            assert pending == commands[-1]
    kinds = [CallModel, InvokeTools, CallModel, InvokeTools, CallModel, FinishRun]
    assert [type(c) for c in run.commands] == kinds
    assert marks[-1] == (len(run.log), [], None)


def test_refold_reproduces_a_hand_driven_run() -> None:
    """Observing a whole log in a new machine reproduces its phase, seq, transcript, usage and pending()."""
    run, _ = driven()
    machine = RunMachine.from_events(run.log)
    assert (machine.phase, machine.next_seq, machine.pending()) == (Phase.DONE, len(run.log), None)
    assert machine.transcript.messages == run.machine.transcript.messages
    assert machine.response_messages() == run.machine.response_messages()
    assert machine.usage == run.machine.usage


def test_pending_after_observing_a_prefix_is_what_the_run_waits_on() -> None:
    """refold of the log up to any step waits on what the live machine waited on at that step."""
    run, marks = driven()
    for length, _, pending in marks:
        assert RunMachine.from_events(run.log[:length]).pending() == pending, length


def test_pending_lists_only_the_calls_without_a_result() -> None:
    """Observed mid-batch, pending() is the InvokeTools of the calls that have no result yet."""
    run, marks = driven()
    after_c1 = next(length for length, _, _ in marks if isinstance(run.log[length - 1], ToolReturned))
    rebuilt = RunMachine.from_events(run.log[:after_c1])
    assert rebuilt.pending() == InvokeTools(iteration=1, calls=(call("c3", "u"),))


def test_refold_reproduces_a_paused_and_a_resumed_run() -> None:
    """A run paused for approval, and one resumed with its history, refold to the same state."""
    paused, _ = gated_batch()
    paused.feed(ApprovalRequested, call_ids=("c2",))
    again = RunMachine.from_events(paused.log)
    assert (again.phase, again.approval_requests()) == (F, paused.machine.approval_requests())
    assert again.pending() == FinishRun(reason="awaiting_approval")
    run, _ = resumed(("a1", True), ("a2", False), extra=(call("a3"),))
    history = run.machine.history
    expected = InvokeTools(iteration=1, calls=(call("a1", "danger"), call("a3")), approved=("a1",))
    assert RunMachine.from_events(run.log, history).pending() == expected


def _tamper(log: list[Event], cls: type[E], **fields: Any) -> list[Event]:
    index = next(i for i, e in enumerate(log) if isinstance(e, cls))
    return [*log[:index], msgspec.structs.replace(log[index], **fields), *log[index + 1 :]]


@pytest.mark.parametrize(
    ("cls", "fields"),
    [
        (ModelCalled, {"tools": ("ghost",)}),
        (ModelCalled, {"tool_choice": "auto"}),
        (ToolChoiceReset, {"previous": "auto"}),
        (ToolNotFound, {"reason": "no tools are offered"}),
        (IterationLimitReached, {"limit": 9}),
        (CallsSkipped, {"call_ids": ("c9",)}),
        (RunCompleted, {"reason": "completed"}),
    ],
)
def test_refold_refuses_a_tampered_derived_event(cls: type[EventBase], fields: dict[str, Any]) -> None:
    """A recorded derived event the machine would not derive raises TransitionError at its seq."""
    run, _ = driven()
    log = _tamper(run.log, cls, **fields)
    seq = next(e.seq for e in log if isinstance(e, cls))
    with pytest.raises(TransitionError) as info:
        RunMachine.from_events(log)
    assert info.value.seq == seq


@pytest.mark.parametrize("cls", [ModelCalled, ToolNotFound, IterationLimitReached])
def test_refold_refuses_a_log_missing_a_derived_event(cls: type[EventBase]) -> None:
    """A log without a derived event the machine makes (no renumbering) is refused."""
    run, _ = driven()
    index = next(i for i, e in enumerate(run.log) if isinstance(e, cls) and i > 1)
    with pytest.raises(TransitionError):
        RunMachine.from_events([*run.log[:index], *run.log[index + 1 :]])


def test_refold_refuses_a_log_missing_calls_skipped() -> None:
    """A log whose CallsSkipped was dropped before RunCompleted is refused."""
    run, _ = driven()
    log = [e for e in run.log if not isinstance(e, CallsSkipped)]
    with pytest.raises(TransitionError):
        RunMachine.from_events(log)


def test_refold_refuses_run_completed_after_a_model_failure() -> None:
    """A log that records RunCompleted where finish() derives RunFailed is refused."""
    run = Run()
    run.start()
    run.feed(ModelFailed, iteration=1, error_type="Timeout", message="slow")
    done = RunCompleted(run_id=RUN, seq=run.machine.next_seq, at=run.clock, reason="failed")
    with pytest.raises(TransitionError):
        RunMachine.from_events([*run.log, done])


def test_refold_refuses_an_invented_derived_event() -> None:
    """A derived event the machine does not make at that point raises TransitionError."""
    run = Run()
    run.start()
    run.respond("done")
    extra = ToolChoiceReset(run_id=RUN, seq=run.machine.next_seq, at=run.clock, iteration=1)
    with pytest.raises(TransitionError):
        RunMachine.from_events([*run.log, extra])


# -- time ------------------------------------------------------------------------------------------


def test_derived_events_take_at_from_their_input() -> None:
    """Every derived event's at is the at of the input that caused it; seqs run 0, 1, 2... without gaps."""
    run, _ = driven()
    assert [e.seq for e in run.log] == list(range(len(run.log)))
    cause = -1
    for event in run.log:
        if isinstance(event, DERIVED):
            assert event.at == cause, event
        elif not isinstance(event, RunCompleted | RunFailed):
            cause = event.at
    assert len({e.at for e in run.log}) > 5


@pytest.mark.parametrize("kind", ["stranger", "twice"])
def test_result_for_a_call_not_awaiting_one_is_refused(kind: str) -> None:
    """A result for a call outside the open batch, or a second one for a call, changes nothing."""
    run = Run()
    run.start()
    run.respond(call("c1"), call("c2"))
    if kind == "twice":
        run.returned("c1")
    before = snapshot(run.machine)
    stray = run.make(ToolReturned, call_id="c1" if kind == "twice" else "c9", name="t", result="ok")
    with pytest.raises(TransitionError, match="not awaiting a result"):
        run.machine.handle(stray)
    assert snapshot(run.machine) == before


def test_the_table_moves_the_phase_where_a_transition_has_one_destination() -> None:
    """A transition that leads to one other phase is moved there by the table, not its handler;
    one that may lead to several is checked against them."""
    from agentledger.core.machine import TRANSITIONS

    single = 0
    for (phase, _kind), edge in TRANSITIONS.items():
        (only,) = edge.leads_to if len(edge.leads_to) == 1 else (None,)
        if only is not None and only is not phase:
            assert edge.moves_to is only
            single += 1
        else:
            assert edge.moves_to is None
    assert single >= 8  # RunStarted, Finish, the four Fail edges, ModelFailed, ApprovalRequested...

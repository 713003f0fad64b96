"""``core/projections.py``: the folds of a log into what the model saw, the tools offered and the
session's state.

Two properties. For random runs of an ``Agent``, the live projections equal the projections
rebuilt from the log. And ``Views.from_events`` folds any log, however odd, as each projection's
own ``apply`` folds it, and as the plainer folds it replaced did (kept below as the reference):
those logs are generated event by event, in any order, with call ids that collide, repeat, are
missing or answer nothing, so the batch bookkeeping meets every edge a hostile log can hold.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st

from agentledger import Agent, AgentSession, FunctionInvocationContext, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.core import RunMachine
from agentledger.core.events import (
    ALWAYS_REQUIRE,
    NEVER_REQUIRE,
    ApprovalRequested,
    ApprovalResolved,
    ArgumentsRejected,
    BatchResumed,
    CallsSkipped,
    ContextProvided,
    Event,
    MiddlewareShortCircuit,
    ModelCalled,
    ModelRequestRewritten,
    ModelResponded,
    RunCompleted,
    RunConfig,
    RunInputRewritten,
    RunStarted,
    SessionUpdated,
    StateChange,
    ToolCalled,
    ToolFailed,
    ToolNotFound,
    ToolReturned,
    ToolsAdded,
    ToolSpec,
    ToolsRemoved,
)
from agentledger.core.messages import Content, Message, result_text
from agentledger.core.projections import (
    TRANSCRIPT_FOLDS,
    ModelCall,
    SessionProjection,
    ToolsProjection,
    TranscriptProjection,
    Views,
)
from agentledger.testing import FixedClock, SequentialIds


@tool
def echo(text: str) -> str:
    """Echo the text."""
    return text


@tool
def fail() -> str:
    """Always raises."""
    raise ValueError("broken")


@tool
def put(key: str, value: int, ctx: FunctionInvocationContext) -> str:
    """Set a session key."""
    assert ctx.session is not None
    ctx.session.state[key] = value
    return "ok"


@tool
def push(value: int, ctx: FunctionInvocationContext) -> str:
    """Append to a list in session state (nested mutation)."""
    assert ctx.session is not None
    ctx.session.state.setdefault("log", []).append(value)
    return "ok"


@tool
def extra() -> str:
    """Only offered after unlock."""
    return "extra"


@tool
def unlock(ctx: FunctionInvocationContext) -> str:
    """Offer `extra` from the next model call on."""
    ctx.add_tools(extra)
    return "unlocked"


@tool
def lock(ctx: FunctionInvocationContext) -> str:
    """Stop offering `extra`."""
    ctx.remove_tools("extra")
    return "locked"


CONFIGURED = [echo, fail, put, push, unlock, lock]
NAMES = ["echo", "fail", "put", "push", "unlock", "lock", "extra", "ghost"]

calls = st.one_of(
    st.builds(lambda t: Call("echo", {"text": t}), st.text(max_size=5)),
    st.just(Call("fail")),
    st.builds(lambda k, v: Call("put", {"key": k, "value": v}), st.sampled_from("abc"), st.integers(-5, 5)),
    st.builds(lambda v: Call("push", {"value": v}), st.integers(0, 9)),
    st.sampled_from([Call("unlock"), Call("lock"), Call("extra"), Call("ghost")]),
    st.just(Call("put", "{not json")),
    st.just(Call("put", {"key": "a", "value": "NaN-string"})),
)
batches = st.lists(calls, min_size=1, max_size=3)
runs = st.lists(st.lists(batches, max_size=5), min_size=1, max_size=3)


def _check_run(events: list[Event], requests: list[Any], history: list[Any]) -> None:
    """Each model call saw the folded tools and transcript; the machine refolds the log."""
    calls_seen = [e for e in events if isinstance(e, ModelCalled)]
    assert len(calls_seen) == len(requests)
    started = events[0]
    assert isinstance(started, RunStarted)
    assert [t.name for t in started.tools] == [t.name for t in CONFIGURED]
    for called, request in zip(calls_seen, requests, strict=True):
        prefix = events[: called.seq + 1]
        assert request.tools == ToolsProjection.from_events(prefix).names == called.tools
        transcript = TranscriptProjection.from_events(prefix)
        assert list(request.messages) == history + transcript.seen_at(called.iteration)
    RunMachine.from_events(events, history)


@settings(max_examples=40, deadline=None)
@given(runs)
def test_live_projections_equal_rebuilt(script: list[list[list[Call]]]) -> None:
    """Tools offered, transcript and session state all equal their folds of the log."""

    async def scenario() -> None:
        clock, ids = FixedClock(), SequentialIds()
        session: AgentSession | None = None
        every_event: list[Event] = []
        for run_script in script:
            client = ScriptedChatClient([*run_script, "done"])
            agent = Agent(client=client, tools=CONFIGURED, clock=clock, ids=ids, max_iterations=10)
            session = session or agent.create_session()
            history = list(session.history)
            response = await agent.run("go", session=session)
            _check_run(response.events, client.requests, history)
            every_event.extend(response.events)
        assert session is not None
        rebuilt = AgentSession.from_events(every_event, session.session_id)
        assert rebuilt.state.snapshot() == session.state.snapshot()
        assert rebuilt.history == session.history

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        anyio.run(scenario)


IDS = ["c1", "c2", "c3", ""]
call_ids = st.sampled_from(IDS)
names = st.sampled_from(["a", "b", "c"])
results = st.one_of(st.none(), st.text(max_size=3), st.integers(-2, 2), st.just({"k": [1, "x"]}))

contents = st.one_of(
    st.builds(
        lambda i, n: Content("function_call", call_id=i or None, name=n, arguments="{}"), call_ids, names
    ),
    st.builds(Content.from_text, st.text(max_size=3)),
    st.builds(lambda i, ok: Content.from_approval_response(i, approved=ok), call_ids, st.booleans()),
    st.just(Content("reasoning", text="hm")),
)
messages = st.builds(
    lambda role, items: Message(role, tuple(items)),
    st.sampled_from(["user", "assistant", "tool"]),
    st.lists(contents, max_size=3),
)
message_lists = st.lists(messages, max_size=3).map(tuple)
specs = st.builds(
    lambda n, gated: ToolSpec(name=n, approval_mode=ALWAYS_REQUIRE if gated else NEVER_REQUIRE),
    names,
    st.booleans(),
)
spec_lists = st.lists(specs, max_size=3).map(tuple)
changes = st.lists(
    st.builds(
        lambda k, op, v: StateChange(k, op, v),
        st.sampled_from("xy"),
        st.sampled_from(["set", "delete"]),
        results,
    ),
    max_size=2,
).map(tuple)

E: dict[str, Any] = {"run_id": "r", "seq": 0, "at": 0}


def _e(cls: type, **fields: Any) -> Callable[..., Event]:
    return lambda **values: cls(**E, **fields, **values)


events = st.one_of(
    st.builds(
        _e(RunStarted, agent_id="x"),
        messages=message_lists,
        tools=spec_lists,
        history_length=st.integers(0, 3),
        config=st.builds(lambda d: RunConfig(detailed_errors=d), st.booleans()),
    ),
    st.builds(_e(RunInputRewritten, by="m"), messages=message_lists),
    st.builds(_e(ContextProvided, provider="p"), messages=message_lists, tools=spec_lists),
    st.builds(
        _e(ModelCalled),
        iteration=st.integers(0, 3),
        tools=st.lists(names, max_size=2).map(tuple),
        message_count=st.integers(0, 6),
        conversation_id=st.one_of(st.none(), st.just("conv")),
        held=st.integers(0, 3),
    ),
    st.builds(_e(ModelRequestRewritten, by="m"), iteration=st.integers(0, 3), messages=message_lists),
    st.builds(_e(ModelResponded), iteration=st.integers(0, 3), message=messages),
    st.builds(_e(ToolReturned), call_id=call_ids, name=names, result=results),
    st.builds(
        _e(MiddlewareShortCircuit, middleware="m"), call_id=st.one_of(st.none(), call_ids), result=results
    ),
    st.builds(
        _e(ToolFailed), call_id=call_ids, name=names, error_type=st.just("E"), message=st.text(max_size=2)
    ),
    st.builds(_e(ArgumentsRejected), call_id=call_ids, name=names, reason=st.just("bad")),
    st.builds(_e(ToolNotFound), call_id=call_ids, name=names, reason=st.just("gone")),
    st.builds(_e(ApprovalRequested), call_ids=st.lists(call_ids, max_size=2).map(tuple)),
    st.builds(_e(ApprovalResolved), call_id=call_ids, approved=st.booleans()),
    st.builds(_e(BatchResumed), call_ids=st.lists(call_ids, max_size=3).map(tuple)),
    st.builds(_e(CallsSkipped, reason="limit"), iteration=st.integers(0, 3), call_ids=st.just(())),
    st.builds(_e(ToolsAdded), by_call_id=st.none(), tools=spec_lists),
    st.builds(_e(ToolsRemoved), by_call_id=st.none(), names=st.lists(names, max_size=2).map(tuple)),
    st.builds(
        _e(SessionUpdated, by="t"),
        session_id=st.sampled_from(["s1", "s2"]),
        changes=changes,
        origin_run_id=st.one_of(st.none(), st.just("child")),
        origin_seq=st.one_of(st.none(), st.integers(0, 2)),
    ),
    st.builds(_e(ToolCalled), call_id=call_ids, name=names),
    st.builds(_e(RunCompleted)),
)


def _renumbered(log: Sequence[Event], run_ids: Sequence[str]) -> list[Event]:
    """Seqs 0, 1, 2, ...; run ids as drawn (a session write's key is its run id and seq)."""
    import msgspec

    return [msgspec.structs.replace(e, seq=i, run_id=run_ids[i % len(run_ids)]) for i, e in enumerate(log)]


# -- the reference: the folds as they were before they were made cheaper ----------------------------


def _reference_tools_apply(view: ToolsProjection, event: Event) -> None:
    if type(event) not in (RunStarted, ToolsAdded, ToolsRemoved, ContextProvided):
        return
    if type(event) is RunStarted:
        view.specs = {spec.name: spec for spec in event.tools}
    elif type(event) is ToolsAdded or type(event) is ContextProvided:
        for spec in event.tools:
            view.specs.setdefault(spec.name, spec)
    elif type(event) is ToolsRemoved:
        for name in event.names:
            view.specs.pop(name, None)
    view.gated = sum(1 for spec in view.specs.values() if spec.approval_mode == ALWAYS_REQUIRE)


class _ReferenceTranscript(TranscriptProjection):
    __slots__ = ()

    def _called(self, event: ModelCalled) -> None:
        self.calls.append(ModelCall.of(event))

    def _responded(self, event: ModelResponded) -> None:
        self.messages.append(event.message)
        self._open_batch(tuple(c.call_id or "" for c in event.message.contents if c.type == "function_call"))

    def _returned(self, event: ToolReturned | MiddlewareShortCircuit) -> None:
        if event.call_id is not None:
            self.resolve(event.call_id, result_text(event.result))

    def resolve(self, call_id: str, text: str, exception: str | None = None) -> None:
        if call_id not in self._open:
            return
        self._results[call_id] = Content("function_result", call_id=call_id, result=text, exception=exception)
        if len(self._results) >= len(self.batch):
            self._close_if_whole()

    def _close_if_whole(self) -> None:
        if len(self._results) < len(self.batch):
            return
        if self._results:
            self.messages.append(Message("tool", tuple(self._results[c] for c in self.batch)))
        self._open_batch(())


_REFERENCE_FOLDS = {
    kind: getattr(_ReferenceTranscript, fold.__name__) for kind, fold in TRANSCRIPT_FOLDS.items()
}


def _reference(log: Sequence[Event]) -> tuple[ToolsProjection, SessionProjection, TranscriptProjection]:
    tools, session, transcript = ToolsProjection(), SessionProjection(), _ReferenceTranscript()
    for event in log:
        _reference_tools_apply(tools, event)
        session.apply(event)
        fold = _REFERENCE_FOLDS.get(type(event))
        if fold is not None:
            fold(transcript, event)
    return tools, session, transcript


# -- comparing ----------------------------------------------------------------------------------


def _seen(
    views: tuple[ToolsProjection, SessionProjection, TranscriptProjection] | Exception,
) -> object:
    """Everything a projection shows, or the kind of error its fold raised."""
    if isinstance(views, Exception):
        return type(views)
    tools, session, transcript = views
    return (
        list(tools.specs.items()),
        tools.gated,
        session.session_id,
        session.state,
        transcript.messages,
        transcript.calls,
        transcript.rewritten,
        transcript.history_length,
        transcript.provided,
        transcript.context,
        transcript.resuming,
        transcript.config,
        transcript.batch,
        transcript.pending,
        [transcript.awaits(i) for i in IDS],
    )


def _folded(fold: Callable[[], Any]) -> Any:
    try:
        return fold()
    except Exception as exc:  # an odd log may break a fold: then every fold must break alike
        return exc


@settings(max_examples=400, deadline=None)
@given(st.lists(events, max_size=30), st.lists(st.sampled_from(["r", "child"]), min_size=1, max_size=2))
def test_one_pass_fold_agrees_with_each_projection_and_the_reference(
    log: list[Event], run_ids: list[str]
) -> None:
    log = _renumbered(log, run_ids)
    fast = _seen(_folded(lambda: tuple(Views.from_events(log))))
    each = _seen(
        _folded(
            lambda: (
                ToolsProjection.from_events(log),
                SessionProjection.from_events(log),
                TranscriptProjection.from_events(log),
            )
        )
    )
    assert fast == each
    assert fast == _seen(_folded(lambda: _reference(log)))


def test_a_tool_batch_closes_once_every_call_has_a_result() -> None:
    """A plain case by hand: two calls, results in the other order, the tool message in call order."""
    calls = (Content.from_function_call("c1", "a"), Content.from_function_call("c2", "b"))
    log: list[Event] = [
        RunStarted(**E, agent_id="x", messages=(Message("user", "hi"),), tools=(ToolSpec(name="a"),)),
        ModelCalled(**E, iteration=1, message_count=1),
        ModelResponded(**E, iteration=1, message=Message("assistant", calls)),
        ToolReturned(**E, call_id="c2", name="b", result={"n": 1}),
    ]
    transcript = Views.from_events(log).transcript
    assert transcript.pending == ("c1",)
    transcript = Views.from_events(
        [*log, ToolFailed(**E, call_id="c1", name="a", error_type="E", message="m")]
    ).transcript
    assert transcript.pending == ()
    assert transcript.messages[-1] == Message(
        "tool",
        (
            Content("function_result", call_id="c1", result="Error: Function failed.", exception="m"),
            Content("function_result", call_id="c2", result='{"n":1}'),
        ),
    )

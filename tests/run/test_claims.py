"""One approval, one execution: a resume claims the paused batch in the paused run's own log.

Two OS processes resume one paused batch on a shared store at the same moment, round after
round: the store admits one claim, so the tool runs exactly once and the loser gets
``ApprovalError``. A resume that was cut off is never silently run again.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentledger import Agent, AgentSession, ApprovalError, MemoryEventStore, Message, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient, ScriptEntry
from agentledger.core import BatchClaimed, RunCompleted, ToolCalled
from agentledger.core.projections import NO_OUTCOME
from agentledger.errors import ApprovalMismatchError, CallOutcomeUnknownError
from agentledger.store import EventStore, SupportsAclose
from tests._resume_child import bank_agent, open_store, session_of
from tests._temporal_env import drop_schema, require_postgres, unique_schema

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 100
"""Rounds of the two-process race per store: each is one paused run and two resumes."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _answer(session: AgentSession, approved: bool = True) -> Message:
    from agentledger import Content

    return Message(
        "user", tuple(Content.from_approval_response(c, approved=approved) for c in session.paused_runs)
    )


class _Child:
    """One resuming process (tests/_resume_child.py), driven line by line."""

    def __init__(self, kind: str, location: str, ledger: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests._resume_child", kind, location, str(ledger)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def receive(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        assert line, f"the resuming process ended (exit {self.process.poll()})"
        return line

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                self.send("quit")
                self.process.wait(timeout=30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            for pipe in (self.process.stdin, self.process.stdout):
                if pipe is not None:
                    pipe.close()


async def _race(kind: str, location: str, store: EventStore, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    ledger.touch()
    children = [_Child(kind, location, ledger) for _ in range(2)]
    try:
        for round_ in range(ROUNDS):
            note = f"round-{round_}"
            client = ScriptedChatClient([Call("wire", {"amount": round_, "note": note})])
            paused = await bank_agent(store, ledger, client).run(
                "Send it.", session=AgentSession(f"s{round_}")
            )
            assert paused.finish_reason == "awaiting_approval"
            for child in children:
                child.send(f"resume s{round_}")
            assert [child.receive() for child in children] == ["ready", "ready"]
            for child in children:  # both hold the same paused session: now they race
                child.send("go")
            outcomes = sorted(child.receive() for child in children)
            # The loser is refused: the batch is being resumed, or (once the winner stored its
            # call as started) that call's outcome is not known yet.
            assert outcomes[0] == "ran", (round_, outcomes)
            refusals = ("refused ApprovalError", "refused CallOutcomeUnknownError")
            assert outcomes[1] in refusals, (round_, outcomes)
            runs = ledger.read_text(encoding="utf-8").splitlines()
            assert runs.count(note) == 1, (round_, runs[-3:])
            claims = [e for e in await store.read(paused.run_id) if type(e) is BatchClaimed]
            assert len(claims) == 1
        assert len(ledger.read_text(encoding="utf-8").splitlines()) == ROUNDS
    finally:
        for child in children:
            child.close()


async def test_two_processes_resume_one_batch_once_on_sqlite(tmp_path: Path) -> None:
    """Two processes, one SQLite file, the same approval at the same moment: one runs the tool."""
    path = tmp_path / "runs.db"
    store = open_store("sqlite", str(path))
    try:
        await _race("sqlite", str(path), store, tmp_path)
    finally:
        assert isinstance(store, SupportsAclose)
        await store.aclose()


@pytest.fixture
def pg_schema() -> Iterator[tuple[str, str]]:
    dsn = require_postgres()
    schema = unique_schema()
    try:
        yield dsn, schema
    finally:
        drop_schema(dsn, schema)


async def test_two_processes_resume_one_batch_once_on_postgres(
    pg_schema: tuple[str, str], tmp_path: Path
) -> None:
    """The same race on a shared PostgreSQL store."""
    dsn, schema = pg_schema
    location = f"{dsn}|{schema}"
    store = open_store("postgres", location)
    try:
        await _race("postgres", location, store, tmp_path)
    finally:
        assert isinstance(store, SupportsAclose)
        await store.aclose()


# -- one process, several sessions rebuilt from the store -------------------------------------------


def _bank(store: EventStore, ran: list[str], client: Any) -> Agent:
    @tool(approval_mode="always_require")
    async def wire(amount: int, note: str) -> str:
        """Send money."""
        ran.append(note)
        return f"sent {amount}"

    return Agent(client=client, tools=[wire], store=store, name="bank")


async def _rebuilt(store: EventStore, session_id: str) -> AgentSession:
    return await session_of(store, session_id)


async def test_a_second_session_rebuilt_after_the_resume_is_refused() -> None:
    """A session rebuilt from a copy taken before the resume still names the paused batch; the
    claim in the paused run's log refuses it, and the tool ran once."""
    store, ran = MemoryEventStore(), list[str]()
    agent = _bank(store, ran, ScriptedChatClient([Call("wire", {"amount": 1, "note": "a"}), "Sent."]))
    paused = await agent.run("Send it.", session=AgentSession("s"))
    early = await _rebuilt(store, "s")  # a copy of the session before anyone resumed
    late = await _rebuilt(store, "s")
    await agent.run(_answer(early), session=early)
    with pytest.raises(ApprovalError, match=r"was resumed by run .* an approval allows one execution"):
        await agent.run(_answer(late), session=late)
    assert ran == ["a"]
    log = await store.read(paused.run_id)
    assert [type(e) for e in log[-2:]] == [RunCompleted, BatchClaimed]


async def test_a_resume_cut_off_inside_the_tool_leaves_the_call_unknown() -> None:
    """The resume is cancelled while the approved tool runs: its outcome is unknown, so a later
    resume of the same answers (from a session that does not know) is refused, naming the call."""
    store, ran = MemoryEventStore(), list[str]()
    entered = anyio.Event()

    @tool(approval_mode="always_require")
    async def wire(amount: int, note: str) -> str:
        """Send money."""
        ran.append(note)
        entered.set()
        await anyio.sleep_forever()
        return "never"

    client = ScriptedChatClient([Call("wire", {"amount": 1, "note": "a"}), "Sent."])
    agent = Agent(client=client, tools=[wire], store=store)
    await agent.run("Send it.", session=AgentSession("s"))
    first, second = await _rebuilt(store, "s"), await _rebuilt(store, "s")
    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:

            async def resume() -> None:
                await agent.run(_answer(first), session=first)

            group.start_soon(resume)
            await entered.wait()
            group.cancel_scope.cancel()
    with pytest.raises(CallOutcomeUnknownError, match="recording their outcome") as caught:
        await agent.run(_answer(second), session=second)
    assert ran == ["a"]
    assert caught.value.call_ids
    assert caught.value.run_id is not None


async def test_the_caller_may_say_explicitly_that_an_unknown_call_runs_again() -> None:
    """After a resume cut off inside the tool, allow_rerun lets the next resume run the call
    again; the claim records the permission and whose claim it took over."""
    store, ran = MemoryEventStore(), list[str]()
    entered = anyio.Event()

    @tool(approval_mode="always_require")
    async def wire(amount: int, note: str) -> str:
        """Send money."""
        ran.append(note)
        if len(ran) == 1:
            entered.set()
            await anyio.sleep_forever()
        return "sent"

    client = ScriptedChatClient([Call("wire", {"amount": 1, "note": "a"}), "Sent."])
    agent = Agent(client=client, tools=[wire], store=store)
    paused = await agent.run("Send it.", session=AgentSession("s"))
    first, second = await _rebuilt(store, "s"), await _rebuilt(store, "s")
    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:

            async def resume() -> None:
                await agent.run(_answer(first), session=first)

            group.start_soon(resume)
            await entered.wait()
            group.cancel_scope.cancel()
    second.allow_rerun(*second.paused_runs)
    resumed = await agent.run(_answer(second), session=second)
    assert resumed.text == "Sent."
    assert ran == ["a", "a"]
    claims = [e for e in await store.read(paused.run_id) if type(e) is BatchClaimed]
    assert [(c.after_run_id, c.rerun) for c in claims] == [(None, ()), (claims[0].by_run_id, ("call_1",))]
    assert second.rerun_allowed == set()


async def test_a_resume_that_ended_before_the_call_started_is_taken_over() -> None:
    """A resume that failed before its approved call started (its agent middleware refused to go
    on) leaves the batch to a later resume, which claims it after it and runs the call once."""
    from agentledger import AgentContext

    store, ran = MemoryEventStore(), list[str]()
    client = ScriptedChatClient([Call("wire", {"amount": 1, "note": "a"}), "Sent.", "Sent."])
    agent = _bank(store, ran, client)
    paused = await agent.run("Send it.", session=AgentSession("s"))
    first, second = await _rebuilt(store, "s"), await _rebuilt(store, "s")

    async def offline(context: AgentContext, call_next: Any) -> None:
        raise RuntimeError("the bank is offline")

    with pytest.raises(RuntimeError, match="offline"):
        await agent.run(_answer(first), session=first, middleware=[offline])
    await agent.run(_answer(second), session=second)
    claims = [e for e in await store.read(paused.run_id) if type(e) is BatchClaimed]
    assert [c.after_run_id for c in claims] == [None, claims[0].by_run_id]
    assert ran == ["a"]


async def test_rewritten_arguments_after_the_answer_are_refused() -> None:
    """Function middleware that changes an approved call's arguments after the answer: the call
    is refused with ApprovalMismatchError (recorded as ToolFailed), and the tool never runs."""
    from agentledger import FunctionInvocationContext
    from agentledger.core import ToolFailed

    store, ran = MemoryEventStore(), list[str]()
    agent = _bank(store, ran, ScriptedChatClient([Call("wire", {"amount": 1, "note": "a"}), "Sent."]))
    session = AgentSession("s")
    await agent.run("Send it.", session=session)

    async def inflate(context: FunctionInvocationContext, call_next: Any) -> None:
        context.arguments = {**context.arguments, "amount": 1000}
        await call_next()

    resumed = await agent.run(_answer(session), session=session, middleware=[inflate])
    failed = [e for e in resumed.events if type(e) is ToolFailed]
    assert [e.error_type for e in failed] == ["ApprovalMismatchError"]
    assert not [e for e in resumed.events if type(e) is ToolCalled]
    assert ran == []


async def test_a_session_holding_another_version_of_the_call_is_refused() -> None:
    """The answer is bound to the arguments the paused run recorded: a session whose copy of the
    call differs is refused before anything of the resume is recorded."""
    from agentledger import Content

    store, ran = MemoryEventStore(), list[str]()
    agent = _bank(store, ran, ScriptedChatClient([Call("wire", {"amount": 1, "note": "a"}), "Sent."]))
    session = AgentSession("s")
    await agent.run("Send it.", session=session)
    index = next(i for i, m in enumerate(session.history) if m.function_calls)
    call = session.history[index].function_calls[0]
    forged_arguments = {"amount": 9, "note": "a"}
    forged = Content.from_function_call(call.call_id or "", call.name or "", arguments=forged_arguments)
    session.history[index] = Message("assistant", (forged,))
    before = len(await store.streams())
    with pytest.raises(ApprovalMismatchError, match="other arguments"):
        await agent.run(_answer(session), session=session)
    assert ran == []
    assert len(await store.streams()) == before


async def test_a_claimed_paused_run_and_its_resumer_rerun_without_divergence() -> None:
    """The claim is a later run's fact on the paused run's log: a rerun of the paused run does
    not make it, and is not told it diverged; the resumer reruns against its session as well."""
    from agentledger.replay import load, rerun

    store, ran = MemoryEventStore(), list[str]()
    agent = _bank(store, ran, ScriptedChatClient([Call("wire", {"amount": 1, "note": "a"}), "Sent."]))
    session = AgentSession("s")
    paused = await agent.run("Send it.", session=session)
    resumed = await agent.run(_answer(session), session=session)
    for run_id in (paused.run_id, resumed.run_id):
        recorded = await load(store, run_id)
        await rerun(recorded, _bank(MemoryEventStore(), ran, ScriptedChatClient([])))
        assert recorded.state_at(len(recorded.events) - 1).phase == "done"
    assert ran == ["a"]  # recorded tools: the rerun ran nothing


async def test_a_paused_run_a_bounded_store_dropped_still_resumes_in_its_process() -> None:
    """A bounded store that evicted the paused run cannot hold the claim: the resume goes on
    under the process-local claim, as before there were claims."""
    store, ran = MemoryEventStore(max_runs=1), list[str]()
    script: list[ScriptEntry] = [Call("wire", {"amount": 1, "note": "a"}), "Other.", "Sent."]
    agent = _bank(store, ran, ScriptedChatClient(script))
    session = AgentSession("s")
    paused = await agent.run("Send it.", session=session)
    await agent.run("Something else.", session=AgentSession("t"))
    assert paused.run_id not in await store.streams()
    resumed = await agent.run(_answer(session), session=session)
    assert resumed.text == "Sent."
    assert ran == ["a"]


async def test_a_resume_against_a_durable_store_without_the_paused_run_is_refused(tmp_path: Path) -> None:
    """A mistyped store path (or a store file deleted since the pause) holds no paused run, so
    nothing can be claimed there: the resume is refused before the tool runs, rather than run
    unguarded while the real store never learns of it."""
    from agentledger.adapters.stores.sqlite import SqliteEventStore

    ledger = tmp_path / "ledger.txt"
    store = SqliteEventStore(tmp_path / "bank.db")
    paused_agent = bank_agent(
        store, ledger, ScriptedChatClient([Call("wire", {"amount": 5, "note": "sent 5"})])
    )
    session = paused_agent.create_session()
    await paused_agent.run("Send 5.", session=session)
    saved = session.to_dict()
    store.close()
    elsewhere = SqliteEventStore(tmp_path / "typo.db")
    resumer = bank_agent(elsewhere, ledger, ScriptedChatClient(["Sent."]))
    restored = AgentSession.from_dict(saved)
    with pytest.raises(ApprovalError, match="is not in"):
        await resumer.run(_answer(restored), session=restored)
    elsewhere.close()
    assert not ledger.exists()  # the tool did not run


async def test_two_resumes_of_one_batch_run_it_once() -> None:
    """Within one process, a second resume of the same answers while the first still runs is
    refused before anything is recorded, so no gated call runs twice."""
    entered, leave = anyio.Event(), anyio.Event()
    ran: list[int] = []

    @tool(approval_mode="always_require")
    async def transfer(amount: int) -> str:
        """Move money."""
        ran.append(amount)
        entered.set()
        await leave.wait()
        return f"moved {amount}"

    store = MemoryEventStore()
    client = ScriptedChatClient([Call("transfer", {"amount": 5}), "Done."])
    agent = Agent(client=client, tools=[transfer], store=store)
    session = agent.create_session()
    paused = await agent.run("Move 5.", session=session)
    answer = Message("user", tuple(r.to_approval_response(True) for r in paused.user_input_requests))
    before = len(await store.streams())
    refused: list[ApprovalError] = []

    async def first() -> None:
        await agent.run(answer, session=session)

    with anyio.fail_after(30):  # a second resume that ran the tool would wait here forever
        async with anyio.create_task_group() as group:
            group.start_soon(first)
            await entered.wait()  # the first resume is inside the tool
            try:
                with pytest.raises(ApprovalError, match="being resumed by run") as caught:
                    await agent.run(answer, session=session)
                refused.append(caught.value)
            finally:
                leave.set()

    assert ran == [5]
    assert len(await store.streams()) == before + 1  # the refused resume recorded nothing
    with pytest.raises(ApprovalError, match="match no call awaiting approval"):
        await agent.run(answer, session=session)  # and after it, the answer is used up


async def test_a_resume_against_a_memory_store_without_the_paused_run_is_refused(tmp_path: Path) -> None:
    """A paused run lives in SQLite; a resume given an agent with a fresh memory store cannot
    claim the batch there, so it is refused before the tool runs, and the resume against the
    real store runs the call once (the memory store was no guard across stores)."""
    from agentledger.adapters.stores.sqlite import SqliteEventStore

    ledger = tmp_path / "ledger.txt"
    store = SqliteEventStore(tmp_path / "bank.db")
    client = ScriptedChatClient([Call("wire", {"amount": 5, "note": "sent 5"})])
    paused_agent = bank_agent(store, ledger, client)
    session = paused_agent.create_session()
    await paused_agent.run("Send 5.", session=session)
    saved = session.to_dict()
    elsewhere = bank_agent(MemoryEventStore(), ledger, ScriptedChatClient(["Sent."]))
    restored = AgentSession.from_dict(saved)
    with pytest.raises(ApprovalError, match="is not in"):
        await elsewhere.run(_answer(restored), session=restored)
    assert not ledger.exists()
    real = bank_agent(store, ledger, ScriptedChatClient(["Sent."]))
    restored = AgentSession.from_dict(saved)
    resumed = await real.run(_answer(restored), session=restored)
    assert resumed.text == "Sent."
    assert ledger.read_text(encoding="utf-8").splitlines() == ["sent 5"]
    store.close()


async def test_claim_resume_spends_the_permissions_it_uses_and_shows_the_claim() -> None:
    """``claim_resume`` appends the claim to the paused run's log and hands it to the sinks; a
    first claim takes over nobody, so it uses no permission to run again and both stay (one a
    take-over uses is spent: ``test_the_caller_may_say_explicitly_...``)."""
    from agentledger.run import claim_resume

    store, ran = MemoryEventStore(), list[str]()
    agent = _bank(store, ran, ScriptedChatClient([Call("wire", {"amount": 1, "note": "a"})]))
    paused = await agent.run("Send it.", session=AgentSession("s"))
    session = await _rebuilt(store, "s")
    (call_id,) = session.paused_runs
    session.allow_rerun(call_id, "call_elsewhere")
    seen: list[object] = []
    claims = await claim_resume(
        store, session, session.history, [_answer(session)], run_id="run_b", at=7, sinks=[seen.append]
    )
    assert claims.continues is None
    (claim,) = claims.claims
    assert (claim.by_run_id, claim.after_run_id, claim.rerun, claim.at) == ("run_b", None, (), 7)
    assert seen == [claim]
    assert (await store.read(paused.run_id))[-1] == claim
    assert session.rerun_allowed == {call_id, "call_elsewhere"}
    assert ran == []  # a claim runs nothing


def _wire_and_audit(store: EventStore, wired: list[int], audited: list[str], middleware: Any = ()) -> Agent:
    """An agent whose model asks for a gated wire and an audit line (no approval needed) in one
    batch: the audit waits for the wire's answer, and both are side effects."""

    @tool(approval_mode="always_require")
    def wire(amount: int) -> str:
        """Send money."""
        wired.append(amount)
        return "sent"

    @tool
    def audit(note: str) -> str:
        """Write an audit line."""
        audited.append(note)
        return "logged"

    client = ScriptedChatClient(
        [[Call("audit", {"note": "wire 5"}), Call("wire", {"amount": 5})], "ok", "ok"]
    )
    return Agent(client=client, tools=[audit, wire], store=store, middleware=list(middleware))


async def test_a_resume_that_ran_a_call_needing_no_approval_leaves_the_batch_used() -> None:
    """The resume ran the batch's audit line, then a fail-closed guardrail stopped it before the
    wire started: the audit's outcome is recorded, so a retry of the same answers is refused
    instead of writing the audit line again."""
    from agentledger import FunctionInvocationContext
    from agentledger.errors import MiddlewareFailure

    async def guardrail(context: FunctionInvocationContext, call_next: Any) -> None:
        if context.function.name == "wire":
            raise MiddlewareFailure("the policy service is down")
        await call_next()

    store, wired, audited = MemoryEventStore(), list[int](), list[str]()
    agent = _wire_and_audit(store, wired, audited, [guardrail])
    await agent.run("Send 5.", session=AgentSession("s"))
    session, stale = await _rebuilt(store, "s"), await _rebuilt(store, "s")
    answers = _answer(session)
    with pytest.raises(MiddlewareFailure):
        await agent.run(answers, session=session)
    with pytest.raises(ApprovalError, match="match no call awaiting approval"):
        await agent.run(answers, session=session)  # the history holds the batch closed
    with pytest.raises(ApprovalError, match=r"which ran calls \['call_1'\]"):
        await agent.run(_answer(stale), session=stale)  # a copy from before: the store refuses
    assert (audited, wired) == (["wire 5"], [])
    # The conversation goes on: the model sees the audit's result, and that the wire has none.
    (tool_message,) = [m for m in session.history if m.role == "tool"]
    assert [c.result for c in tool_message.contents] == ["logged", NO_OUTCOME]
    assert session.paused_runs == {}
    assert (await agent.run("What happened?", session=session)).text == "ok"


@pytest.mark.parametrize("later_approves", [False, True], ids=["same-answers", "stale-approval"])
async def test_a_batch_resumed_with_its_call_rejected_is_never_resumed_again(later_approves: bool) -> None:
    """One copy of the session rejects the wire and the resume completes (the audit ran); a
    copy taken before it answers later, the same or with an approval: refused, so the audit
    is not written twice and the human's rejection stands."""
    store, wired, audited = MemoryEventStore(), list[int](), list[str]()
    agent = _wire_and_audit(store, wired, audited)
    paused = await agent.run("Send 5.", session=AgentSession("s"))
    first, second = await _rebuilt(store, "s"), await _rebuilt(store, "s")
    done = await agent.run(_answer(first, approved=False), session=first)
    assert done.finish_reason == "completed"
    with pytest.raises(ApprovalError, match=r"rejected|allows one execution"):
        await agent.run(_answer(second, approved=later_approves), session=second)
    assert (audited, wired) == (["wire 5"], [])
    assert len([e for e in await store.read(paused.run_id) if type(e) is BatchClaimed]) == 1


async def test_a_permission_given_about_one_holder_is_not_used_for_another() -> None:
    """Run ``run_killed`` claimed the batch and died. Two sessions are refused naming it, and
    both allow the call to run again. The first takes the batch over and is inside the tool
    when the second resumes: the second's permission was about ``run_killed``, not about the
    run that holds the batch now, so it is refused and the wire runs once."""
    from agentledger.run import claim_resume

    store, ran = MemoryEventStore(), list[str]()
    entered, leave = anyio.Event(), anyio.Event()

    @tool(approval_mode="always_require")
    async def wire(amount: int, note: str) -> str:
        """Send money."""
        ran.append(note)
        if len(ran) == 1:
            entered.set()
            await leave.wait()
        return "sent"

    agent = Agent(
        client=ScriptedChatClient([Call("wire", {"amount": 1, "note": "a"}), "Sent."]),
        tools=[wire],
        store=store,
    )
    paused = await agent.run("Send it.", session=AgentSession("s"))
    dead = await _rebuilt(store, "s")
    await claim_resume(store, dead, dead.history, [_answer(dead)], run_id="run_killed", at=1)
    first, second = await _rebuilt(store, "s"), await _rebuilt(store, "s")
    for session in (first, second):
        with pytest.raises(ApprovalError, match="run_killed"):
            await agent.run(_answer(session), session=session)
        session.allow_rerun(*session.paused_runs)
        assert session.rerun_holders == dict.fromkeys(session.paused_runs, "run_killed")
    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:

            async def take_over() -> None:
                await agent.run(_answer(first), session=first)

            group.start_soon(take_over)
            await entered.wait()
            with pytest.raises(ApprovalError) as caught:
                await agent.run(_answer(second), session=second)
            leave.set()
    assert "run_killed" not in str(caught.value)  # it names the run that holds the batch now
    assert ran == ["a"]
    assert (second.rerun_allowed, second.rerun_holders) == (set(), {})  # the stale word is dropped
    claims = [e for e in await store.read(paused.run_id) if type(e) is BatchClaimed]
    assert [c.after_run_id for c in claims] == [None, "run_killed"]

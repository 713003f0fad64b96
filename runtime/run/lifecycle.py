"""AgentRun: one run from ``RunStarted`` to how it ended, with agent middleware around the loop.

``execute`` records ``RunStarted`` (built by the spec), binds the session and the run context,
runs agent middleware around the local driver's loop (``agent_layers.around_loop``), and has
the machine record the end:
``RunCompleted`` with the run's response (or what agent middleware answered instead), or
``RunFailed``. Then the session's history grows by the one rule every driver applies
(``AgentSession.after_run``). A resume first claims the paused batch in the store
(``claim_resume``), before anything of it is recorded; it then runs its calls one at a time,
each stored as started before its tool runs (the store's log says how far a resume got, so a
process killed in the middle is never repeated). A resume whose claim says to continue the run
holding the batch (it stopped part way) finishes that run from its stored log instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from ..chat import ChatResponseUpdate, normalize_messages
from ..context import SessionSink
from ..core.approvals import approval_responses
from ..core.commands import FinishRun
from ..core.events import (
    ApprovalRequested,
    ArgumentsRejected,
    CallsSkipped,
    Event,
    MiddlewareShortCircuit,
    RunStarted,
    ToolFailed,
    ToolNotFound,
    ToolReturned,
)
from ..core.machine import RunMachine
from ..core.messages import Content, Message, result_text
from ..core.projections import LIMIT_REACHED, error_text
from ..errors import (
    RunError,
    StoreError,
    UnknownToolError,
    UnpricedCallError,
)
from ..providers import provide_after, provide_before
from ..response import AgentResponse, AgentResponseUpdate
from ..session import AgentSession
from .agent_layers import answer_text, around_loop
from .binding import RunBinding
from .claims import Claims, claim_resume
from .driver import LocalDriver
from .recorder import RunRecorder, capture_sinks
from .spec import RunSpec, check_approvals

__all__ = ("AgentRun",)


class AgentRun:
    """One call of ``Agent.run`` (or of a sub-agent tool, or a rerun) in this process."""

    __slots__ = ("_binding", "_machine", "_recorder", "on_update", "parent_sink", "run_id", "session", "spec")

    def __init__(
        self,
        spec: RunSpec,
        session: AgentSession | None,
        *,
        run_id: str,
        parent_sink: SessionSink | None = None,
    ) -> None:
        self.spec = spec
        self.session = session
        self.run_id = run_id
        self.parent_sink = parent_sink
        self.on_update: Callable[[AgentResponseUpdate], None] | None = None
        self._machine: RunMachine | None = None  # the run's machine, once it starts
        self._binding: RunBinding | None = None  # what its steps share, once it starts
        self._recorder: RunRecorder | None = None  # its recorder, once it starts

    async def execute(self, messages: Any, *, stream: bool = False) -> AgentResponse:
        """The run from its input to its end, in this one coroutine (a run waiting on its model
        keeps no other of the run's own): opened as a new run or a resume, then driven with its
        session and run context bound (``_around`` for what wraps the loop), then its end
        recorded (``_end``) and stored (``_stored``). Whatever raises before the end is recorded
        fails the run here, and only here (``_failed``)."""
        session = self.session
        self.spec = spec = self.spec.on_session(session)
        history: Sequence[Message] = session.history if session is not None and spec.share_history else ()
        # The agent's sinks see this run and, through the context, its sub-agents' runs too.
        token = capture_sinks.set((*capture_sinks.get(), *spec.sinks)) if spec.sinks else None
        release: Callable[[], None] | None = None
        try:
            inputs = normalize_messages(messages)
            # Locals that live as long as the run hold nothing when there is nothing to hold.
            answers = approval_responses(inputs) or ()
            if answers or history:  # a new conversation without answers has nothing to refuse
                check_approvals(history, inputs, spec, answers=answers)
            if answers and session is not None and spec.share_history:
                release = session.claim((c.call_id for c in answers), self.run_id)
                driver, given = await self._resume(inputs, history)
            else:
                driver, given = self._started(inputs, history, None), inputs
            del inputs, answers  # the run holds its input until it is recorded, this frame does not
            binding = driver.binding
            binding.enter()  # held for the whole run (``bound()`` without an object to keep)
            try:
                try:
                    own: AgentResponse | None
                    if given is not None and not (spec.layers["agent"] or spec.context_providers):
                        given = None  # recorded: a run waiting on its model keeps no list of its input
                        driver.recorder.begin()  # the loop alone: nothing can change the run's input
                        result = own = self._respond(await driver.drive())
                    else:
                        result, own = await self._around(driver, given, stream)
                    response = self._end(driver.recorder, result, own)
                except BaseException as exc:
                    await self._failed(driver, exc)
                    raise
                return await self._stored(binding, driver, response)
            finally:
                binding.leave()
        finally:
            if release is not None:
                release()
            if token is not None:
                capture_sinks.reset(token)
            if self._recorder is not None:
                self._recorder.release()

    async def _resume(
        self, inputs: list[Message], history: Sequence[Message]
    ) -> tuple[LocalDriver, list[Message] | None]:
        """The driver of a resume, once its paused batch is claimed in the store
        (``claim_resume``), with the input to run it on: a new run that resumes the batch, or
        (input None) the run that holds the batch and stopped part way, opened on its log."""
        session = self.session
        assert session is not None
        claims = await claim_resume(
            self.spec.store, session, history, inputs,
            run_id=self.run_id, at=self.spec.clock(), sinks=capture_sinks.get(),
        )  # fmt: skip
        if claims.continues is not None:
            return await self._reopen(claims.continues, history), None
        return self._started(inputs, history, claims), inputs

    def _open(self, machine: RunMachine, log: Sequence[Event] = ()) -> LocalDriver:
        """The run's recorder around ``machine`` (holding ``log``, the run's stored events, when
        it carries on), what its steps share, and the local driver that runs them."""
        self._machine = machine
        recorder = RunRecorder(
            machine,
            self.run_id,
            self.spec.clock,
            [self._stream_sink] if self.on_update else [],
            session=self.session,
            parent=self.parent_sink,
            log=log,
        )
        self._recorder = recorder
        on_update = self._model_update if self.on_update is not None else None
        self._binding = binding = RunBinding(self.spec, recorder, self.session, on_update=on_update)
        return LocalDriver(binding, recorder, self.spec.store, stored=len(log))

    async def _reopen(self, run_id: str, history: Sequence[Message]) -> LocalDriver:
        """The driver of the run ``run_id``, which holds the resumed batch and stopped part way,
        opened on its stored log: the machine folds the log and carries out what it waits on,
        every call the log has an outcome for is answered by it, and the first new append is
        made at the log's version (a run still appending refuses it)."""
        assert self.spec.store is not None
        log = await self.spec.store.read(run_id)
        started = log[0]
        assert isinstance(started, RunStarted), started
        self.run_id = run_id
        driver = self._open(RunMachine.from_events(log, history[: started.history_length]), log)
        driver.write_ahead()
        return driver

    def _started(
        self, inputs: list[Message], history: Sequence[Message], claims: Claims | None
    ) -> LocalDriver:
        """The driver of a new run, with ``RunStarted`` (as the spec builds it) recorded; where
        the run resumes a batch, each call is stored as started before its tool runs (a resume
        could otherwise repeat it)."""
        driver = self._open(RunMachine(history))
        session_id = self.session.session_id if self.session is not None else None
        fields = self.spec.started_fields(messages=inputs, session_id=session_id, history_length=len(history))
        driver.recorder.record(RunStarted, **fields)
        if claims is not None and claims.claims:
            driver.write_ahead()
        return driver

    async def _around(
        self, driver: LocalDriver, inputs: list[Message] | None, stream: bool
    ) -> tuple[Any, AgentResponse | None]:
        """The loop with what wraps it: what the run answered and its own response. Agent
        middleware around the loop, context providers before and after it, or (``inputs`` None)
        the loop carried on from the run's stored log, whose agent middleware and context
        providers ran already."""
        recorder = driver.recorder
        if inputs is None:
            recorder.carry_on()
            own = self._respond(await driver.drive())
            return own, own
        if self.spec.layers["agent"]:
            return await around_loop(
                self.spec, driver, inputs, self._respond,
                session=self.session, run_id=self.run_id, stream=stream,
            )  # fmt: skip
        provided = await provide_before(driver.binding, inputs)
        del inputs  # recorded: a run waiting on its model keeps no list of its input
        recorder.begin()
        own = self._respond(await driver.drive())
        if provided is not None:
            await provide_after(provided, own)
        return own, own

    def _respond(self, finish: FinishRun) -> AgentResponse:
        """The run's own response, as the loop ended it (``finish``)."""
        recorder = self._recorder
        assert recorder is not None
        machine = recorder.machine
        return AgentResponse(
            messages=machine.response_messages(),
            run_id=self.run_id,
            events=recorder.log,
            usage=machine.usage,
            user_input_requests=machine.approval_requests(),
            finish_reason=finish.reason,
            session_id=self.session.session_id if self.session is not None else None,
            response_format=self._binding.options.get("response_format") if self._binding else None,
        )

    def _end(self, recorder: RunRecorder, result: Any, own: AgentResponse | None) -> AgentResponse | None:
        """Record the run's end: ``RunFailed`` where the machine failed it (None, then), else
        ``RunCompleted`` with the run's own response or with what agent middleware answered in
        its place (an answer the log could not give back raises ``UnrecordableError``)."""
        if self.session is not None:
            self.session.state.checkpoint(every=True)
        if recorder.machine.failure is not None:
            recorder.finish()  # the machine records the failure as RunFailed
            return None
        response = result if isinstance(result, AgentResponse) else self._coerce(recorder, result)
        if response is own:
            recorder.finish()
        else:  # agent middleware answered in the run's place
            recorder.finish(messages=response.messages, text=response.text, usage=response.usage)
        return response

    async def _stored(
        self, binding: RunBinding, driver: LocalDriver, response: AgentResponse | None
    ) -> AgentResponse:
        """The ended run stored and the session's history grown: its response, or the error the
        machine failed it with (raised once the failure is stored, if the store can)."""
        if response is not None:
            await driver.flush()
            self._grow_history()
            return response
        failure = driver.recorder.machine.failure
        assert failure is not None
        self._grow_history()
        with anyio.CancelScope(shield=True), contextlib.suppress(StoreError):
            await driver.flush()
        seq = driver.log[-1].seq
        kind = UnpricedCallError if failure[0] == "UnpricedCallError" else UnknownToolError
        raise binding.raised_error() or kind(failure[1], run_id=self.run_id, seq=seq)

    def _coerce(self, recorder: RunRecorder, result: Any) -> AgentResponse:
        """The response for an answer agent middleware gave in the run's place that is not one."""
        text = answer_text(result)
        messages = [Message("assistant", (Content.from_text(text),))] if text else []
        reason = recorder.machine.finish_reason or "short_circuit"
        return AgentResponse(messages=messages, run_id=self.run_id, events=recorder.log, finish_reason=reason)

    async def _failed(self, driver: LocalDriver, exc: BaseException) -> None:
        """``exc`` ended the run: record ``RunFailed`` (unless the run's end is recorded already),
        grow the history, and store what was recorded, shielded from cancellation."""
        with anyio.CancelScope(shield=True):
            cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
            error_type = "Cancelled" if cancelled else type(exc).__name__
            message = str(exc) if not isinstance(exc, RunError) else str(exc.__cause__ or exc)
            try:
                if driver.recorder.fail(error_type, message):
                    self._grow_history()
            finally:  # a sink that raised on the way still leaves every recorded event stored
                with contextlib.suppress(StoreError):  # the store is what failed: the error says so
                    await driver.flush()

    def _grow_history(self) -> None:
        """The run ended: the session's history grows by the one rule every driver applies
        (``AgentSession.after_run``); a failed resume keeps the results of the batch it ran, so
        a retry of the same answers is refused instead of running the calls again."""
        machine, session, recorder = self._machine, self.session, self._recorder
        if machine is None or session is None or recorder is None or not self.spec.share_history:
            return
        log = recorder.log
        session.after_run(log, transcript=machine.transcript.messages, input_count=machine.input_count)

    def _model_update(self, update: ChatResponseUpdate) -> None:
        assert self.on_update is not None
        self.on_update(
            AgentResponseUpdate(
                contents=update.contents,
                role=update.role,
                run_id=self.run_id,
                usage=update.usage,
                finish_reason=update.finish_reason,
                response_id=update.response_id,
            )
        )

    def _stream_sink(self, event: Event) -> None:
        """Each call's result as the model will see it, the moment it is recorded; the approval
        requests of a paused run; the answer that stands for calls dropped at a limit."""
        assert self.on_update is not None
        call_id: str | None
        machine = self._machine
        assert machine is not None
        if isinstance(event, ApprovalRequested):
            waiting = set(event.call_ids)
            requests = tuple(r for r in machine.approval_requests() if r.call_id in waiting)
            self.on_update(AgentResponseUpdate(contents=requests, run_id=event.run_id))
            return
        if isinstance(event, CallsSkipped):
            if machine.last_text() == LIMIT_REACHED:
                answer = Content.from_text(LIMIT_REACHED)
                update = AgentResponseUpdate(contents=(answer,), run_id=event.run_id, finish_reason="stop")
                self.on_update(update)
            return
        if isinstance(event, ToolReturned | MiddlewareShortCircuit):
            call_id, text = event.call_id, result_text(event.result)
        elif isinstance(event, ToolFailed | ArgumentsRejected | ToolNotFound):
            call_id, text = event.call_id, error_text(event, self.spec.config.detailed_errors)
        else:
            return
        if call_id is None:
            return
        content = Content.from_function_result(call_id, result=text)
        self.on_update(AgentResponseUpdate(contents=(content,), role="tool", run_id=event.run_id))


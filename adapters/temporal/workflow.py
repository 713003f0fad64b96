"""The agent-run workflow: the pure run machine, driven by activities, inside Temporal's sandbox.

Theory of operation. The workflow is the run's owner: it runs the loop every driver shares
(``RunLoop.drive`` of ``agentledger.core``) and is its executor, with an activity for each
command (a model call, one activity per tool call). The loop feeds the input events an activity
reports back to the machine, stamped with the next ``seq`` and the workflow's clock, in the
model's order of the calls; it decides whether a batch waits for approval, as it does in a local
run. Everything the workflow does is deterministic: time is ``workflow.time_ns()``, the run id
comes from ``workflow.uuid4()`` when the caller gave none, and the machine reads neither clock
nor randomness, so a replay of the history rebuilds the same run.

The events are written to the event store by activities, with ``expected_version``: each
model-call activity first appends the events produced since the last append, so the store holds
the run's log up to that call; the finishing step appends the rest and ``RunCompleted`` (store
steps are local activities, on the worker running the workflow task).
Payloads stay small: a model call is sent a reference (the run id and version), not the
transcript, and reads the log from the store; events waiting to be appended go out in chunks when
they outgrow the payload budget. The history stays bounded: past ``Limits.history_events`` (or
when the server suggests it) the workflow stores its events and continues as new at the next
model call; the new execution reads the log back and refolds the machine from it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    import msgspec

    from agentledger.core.commands import CallModel, Command, FinishRun, InvokeTools
    from agentledger.core.events import Event, ToolCalled
    from agentledger.core.loop import RunLoop, StepLog
    from agentledger.core.machine import RunMachine
    from agentledger.core.messages import Content
    from agentledger.core.projections import SessionProjection

    from .types import (
        APPEND_EVENTS,
        CALL_MODEL,
        FINISH_RUN,
        INVOKE_TOOL,
        LOAD_EVENTS,
        RUN_SUBAGENT,
        START_RUN,
        WORKFLOW,
        AppendRequest,
        FinishOutcome,
        FinishRequest,
        LoadRequest,
        ModelRequest,
        Resume,
        RunInput,
        RunResult,
        RunView,
        StartOutcome,
        StartRequest,
        StepOutcome,
        ToolRequest,
    )

__all__ = ("AgentRunWorkflow",)

T = TypeVar("T")
_encode = msgspec.json.Encoder().encode


@workflow.defn(name=WORKFLOW)
class AgentRunWorkflow:
    """One agent run; its input names a registered agent (see ``AgentRegistry``)."""

    @workflow.run
    async def run(self, job: RunInput) -> RunResult:
        return await _WorkflowRun(job).execute()


def _error_type(cause: BaseException | None) -> str:
    if isinstance(cause, ApplicationError) and cause.type:
        return cause.type
    return type(cause).__name__


def _started(run_id: str, call: Content) -> ToolCalled:
    """``ToolCalled`` for a call whose activity was cut off, with its arguments as sent."""
    arguments: Any = call.arguments
    if isinstance(arguments, str):
        try:
            arguments = msgspec.json.decode(arguments) if arguments else {}
        except msgspec.DecodeError:
            arguments = {"raw": arguments}
    if not isinstance(arguments, dict):
        arguments = {"raw": arguments}
    return ToolCalled(
        run_id=run_id, seq=0, at=0, call_id=call.call_id or "", name=call.name or "", arguments=arguments
    )


def _error_message(cause: BaseException | None) -> str:
    """The failure's own message, as a local run records it (without the type in front)."""
    if isinstance(cause, ApplicationError) and cause.type:
        return cause.message
    return str(cause)


class _WorkflowRun:
    """The run's owner on Temporal: the shared loop, with activities for IO and the workflow's
    clock for time (the ``Executor`` of ``RunLoop``)."""

    def __init__(self, job: RunInput) -> None:
        self.job = job
        self.run_id = job.run_id or f"run_{workflow.uuid4().hex}"
        self.history = job.session.history if job.session is not None else ()
        self.session = SessionProjection(job.session.session_id if job.session is not None else None)
        if job.session is not None:
            self.session.state = dict(job.session.state)
        self.loop = self._loop(RunMachine(self.history))
        self.version = 0  # how many of the log's events the store holds
        self.sequential = False
        self.subagents: frozenset[str] = frozenset()
        self.executions = job.resume.executions if job.resume is not None else 1
        self.model_calls = 0

    def _loop(self, machine: RunMachine, log: Sequence[Event] = ()) -> RunLoop:
        return RunLoop(
            machine, self.run_id, workflow.time_ns, observer=self._observe, restamp=True, live=False, log=log
        )

    @property
    def machine(self) -> RunMachine:
        return self.loop.machine

    @property
    def pending(self) -> list[Event]:
        """The events the store does not hold yet."""
        return self.loop.log[self.version :]

    async def execute(self) -> RunResult:
        try:
            if self.job.resume is None:
                await self._start()
            else:
                await self._resume(self.job.resume)
            finish = await self.loop.drive(self)
            return await self._finish(finish)
        except (ActivityError, asyncio.CancelledError) as exc:
            if is_cancelled_exception(exc):
                await self._record_failure("Cancelled", "the run's workflow was cancelled")
            elif isinstance(exc, ActivityError):
                await self._record_failure(_error_type(exc.cause), _error_message(exc.cause))
            raise

    async def _record_failure(self, error_type: str, message: str) -> None:
        """The run cannot go on: its log ends with RunFailed, then the workflow fails."""
        if self.loop.fail(error_type, message):
            await self._flush()

    def _observe(self, events: Sequence[Event]) -> None:
        for event in events:
            self.session.apply(event)

    # -- starting -----------------------------------------------------------------------------

    async def _start(self) -> None:
        session = self.job.session
        request = StartRequest(
            view=self._view(),
            messages=self.job.messages,
            pending=session.pending if session is not None else (),
            at=workflow.time_ns(),
            paused=dict(session.paused) if session is not None else {},
            rerun=session.rerun if session is not None else (),
            rerun_holders=dict(session.rerun_holders) if session is not None else {},
        )
        outcome = await self._store_step(START_RUN, request, StartOutcome)
        self.loop.adopt(outcome.events)  # numbered and stored by the start step
        self.version = len(outcome.events)
        self.sequential = outcome.sequential
        self.subagents = frozenset(outcome.subagents)
        self.loop.begin()

    async def _resume(self, resume: Resume) -> None:
        """Refold the machine from the stored log and ask the model again."""
        events: list[Event] = []
        while len(events) < resume.version:
            request = LoadRequest(
                run_id=self.run_id,
                after=len(events) - 1,
                upto=resume.version,
                max_bytes=self.job.limits.payload_bytes,
            )
            events.extend(await self._store_step(LOAD_EVENTS, request, list[Event]))
        self.loop = self._loop(RunMachine.from_events(events, self.history), events)
        self._observe(events)
        self.version = len(events)
        self.sequential = resume.sequential
        self.subagents = frozenset(resume.subagents)
        command = self.machine.pending()
        assert isinstance(command, CallModel), self.machine.phase
        self.loop.commands.append(command)

    def _should_continue(self) -> bool:
        if self.model_calls == 0:
            return False
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= self.job.limits.history_events
        )

    async def _continue_as_new(self) -> None:
        await self._flush()
        resume = Resume(
            version=self.version,
            executions=self.executions + 1,
            sequential=self.sequential,
            subagents=tuple(sorted(self.subagents)),
        )
        workflow.continue_as_new(msgspec.structs.replace(self.job, run_id=self.run_id, resume=resume))

    # -- the executor: model calls and tool calls ----------------------------------------------

    def before(self, command: Command) -> Coroutine[Any, Any, None] | None:
        if isinstance(command, CallModel) and self._should_continue():
            return self._continue_as_new()
        return None

    async def call_model(self, command: CallModel, step: StepLog) -> None:
        if sum(len(_encode(e)) for e in self.pending) > self.job.limits.payload_bytes:
            await self._flush()
        pending = tuple(self.pending)
        request = ModelRequest(
            view=self._view(), iteration=command.iteration, pending=pending, version=self.version
        )
        outcome = await self._activity(CALL_MODEL, request, StepOutcome, self.job.timeouts.model)
        self.version += len(pending)  # the model step stored them first
        self.model_calls += 1
        step.extend(outcome.events)

    async def awaiting_approval(self, command: InvokeTools) -> Sequence[str]:
        """A worker checks each gated call's arguments (the rule a local run applies)."""
        gated = [c for c in command.calls if (c.call_id or "") in command.gated]
        outcomes = await asyncio.gather(*(self._tool(command.iteration, c, gated=True) for c in gated))
        return [c.call_id or "" for c, o in zip(gated, outcomes, strict=True) if o.awaits_approval]

    def tool_calls(self, command: InvokeTools) -> Sequence[Callable[[StepLog], Awaitable[None]]]:
        approved = set(command.approved)
        return [
            functools.partial(self._run_call, command.iteration, call, call.call_id in approved)
            for call in command.calls
        ]

    async def gather(self, calls: Sequence[Awaitable[None]]) -> None:
        await asyncio.gather(*calls)

    async def _run_call(self, iteration: int, call: Content, approved: bool, step: StepLog) -> None:
        try:
            step.extend((await self._tool(iteration, call, approved=approved)).events)
        except BaseException:
            if approved and not step.events:
                # Cut off while its activity may have been running it (the workflow cancelled, or
                # the activity failed for good): the log says the approved call started, so a
                # later resume reports its outcome as unknown instead of running it again.
                step.extend([_started(self.run_id, call)])
            raise

    async def _tool(
        self, iteration: int, call: Content, *, gated: bool = False, approved: bool = False
    ) -> StepOutcome:
        subagent = call.name in self.subagents
        name = RUN_SUBAGENT if subagent else INVOKE_TOOL
        timeouts = self.job.timeouts
        request = ToolRequest(
            view=self._view(),
            iteration=iteration,
            call=call,
            tools=self.machine.tools.names,
            gated=gated,
            approved=approved,
        )
        seconds = timeouts.subagent if subagent else timeouts.tool
        return await self._activity(
            name, request, StepOutcome, seconds, summary=f"{call.name} {call.call_id}"
        )

    # -- finishing ----------------------------------------------------------------------------

    async def _finish(self, finish: FinishRun) -> RunResult:
        """Have a worker record how the run ended (the machine refolded from the stored log
        decides: ``RunCompleted``, or ``RunFailed`` after a failed model call)."""
        request = FinishRequest(
            view=self._view(),
            pending=tuple(self.pending),
            version=self.version,
            reason=finish.reason,
            at=workflow.time_ns(),
        )
        outcome = await self._store_step(FINISH_RUN, request, FinishOutcome)
        self.version = outcome.version
        usage = self.machine.usage
        if self.machine.failure is not None:  # RunFailed, as the finishing step recorded it
            error_type, message = self.machine.failure
            return RunResult(
                run_id=self.run_id,
                status="failed",
                reason=finish.reason,
                usage=usage,
                events=self.version,
                error_type=error_type,
                error_message=message,
                executions=self.executions,
            )
        return RunResult(
            run_id=self.run_id,
            status="completed",
            reason=finish.reason,
            text=outcome.text,
            usage=usage,
            events=self.version,
            user_input_requests=tuple(self.machine.approval_requests()),
            executions=self.executions,
        )

    async def _flush(self) -> None:
        """Append every pending event, in chunks that fit the payload budget."""
        budget = self.job.limits.payload_bytes
        while self.pending:
            chunk: list[Event] = []
            size = 0
            for event in self.pending:
                size += len(_encode(event))
                if chunk and size > budget:
                    break
                chunk.append(event)
            request = AppendRequest(run_id=self.run_id, events=tuple(chunk), version=self.version)
            self.version = await self._store_step(APPEND_EVENTS, request, int)

    # -- helpers ------------------------------------------------------------------------------

    def _view(self) -> RunView:
        job = self.job
        return RunView(
            agent=job.agent,
            run_id=self.run_id,
            options=job.options,
            function_invocation_kwargs=job.function_invocation_kwargs,
            client_kwargs=job.client_kwargs,
            session_id=job.session.session_id if job.session is not None else None,
            session_state=dict(self.session.state),
            history=self.history,
            limits=job.limits,
        )

    async def _activity(
        self, name: str, argument: Any, result_type: type[T], seconds: float, *, summary: str | None = None
    ) -> T:
        """A model or tool call: a regular activity, on any worker, heartbeating."""
        timeouts = self.job.timeouts
        result: T = await workflow.execute_activity(
            name,
            argument,
            result_type=result_type,
            start_to_close_timeout=timedelta(seconds=seconds),
            heartbeat_timeout=timedelta(seconds=timeouts.heartbeat),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=timeouts.retry_interval)),
            summary=summary,
        )
        return result

    async def _store_step(self, name: str, argument: Any, result_type: type[T]) -> T:
        """A short, idempotent store step: a local activity, on the worker running the workflow."""
        timeouts = self.job.timeouts
        result: T = await workflow.execute_local_activity(
            name,
            argument,
            result_type=result_type,
            start_to_close_timeout=timedelta(seconds=timeouts.store),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=timeouts.retry_interval)),
        )
        return result

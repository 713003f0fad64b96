"""Running agents on Temporal from a client: connecting, workers, and ``TemporalRunner``."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio

try:
    from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
    from temporalio.worker import Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
except ImportError:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "agentledger on Temporal needs temporalio: pip install 'agentledger[temporal]'"
    ) from None

from agentledger.clients import normalize_messages
from agentledger.core.events import BatchClaimed, Event, ModelFailed, RunCompleted
from agentledger.core.messages import Content, Message
from agentledger.errors import (
    ApprovalError,
    ApprovalMismatchError,
    CallOutcomeUnknownError,
    MiddlewareFailure,
    ModelCallError,
    ModelResponseError,
    RunError,
    UnknownToolError,
    UnpricedCallError,
)
from agentledger.response import AgentResponse
from agentledger.run import check_approvals
from agentledger.session import AgentSession
from agentledger.store import EventStore

from .types import (
    DATA_CONVERTER,
    WORKFLOW,
    Limits,
    RunInput,
    RunResult,
    SessionInput,
    Timeouts,
)
from .worker import Activities, AgentRegistry, CallLedger
from .workflow import AgentRunWorkflow

__all__ = (
    "PASSTHROUGH_MODULES",
    "TASK_QUEUE",
    "TemporalRunner",
    "connect",
    "create_worker",
    "serve",
    "workflow_runner",
)

TASK_QUEUE = "agentledger"
PASSTHROUGH_MODULES = ("agentledger", "msgspec")
"""Modules the workflow sandbox shares with the worker instead of reimporting per run."""


async def connect(address: str = "localhost:7233", *, namespace: str = "default", **options: Any) -> Client:
    """A Temporal client with agentledger's data converter (clients and workers must share it)."""
    return await Client.connect(address, namespace=namespace, data_converter=DATA_CONVERTER, **options)


def workflow_runner() -> SandboxedWorkflowRunner:
    """Temporal's sandbox, with agentledger's pure modules passed through."""
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    return SandboxedWorkflowRunner(restrictions=restrictions)


def create_worker(
    client: Client,
    registry: AgentRegistry,
    store: EventStore,
    *,
    task_queue: str = TASK_QUEUE,
    ledger: CallLedger | None = None,
    rerun_interrupted: bool = False,
    **options: Any,
) -> Worker:
    """A worker for agentledger runs; ``options`` go to ``temporalio.worker.Worker``."""
    activities = Activities(registry, store, ledger, rerun_interrupted=rerun_interrupted)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentRunWorkflow],
        activities=activities.functions(),
        workflow_runner=workflow_runner(),
        **options,
    )


async def serve(
    client: Client,
    registry: AgentRegistry,
    store: EventStore,
    *,
    on_ready: Callable[[], None] | None = None,
    **options: Any,
) -> None:
    """Run a worker until SIGINT or SIGTERM, then shut it down gracefully."""
    worker = create_worker(client, registry, store, **options)

    async def stop_on_signal() -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                await worker.shutdown()
                return

    async with anyio.create_task_group() as group:
        group.start_soon(stop_on_signal)
        if on_ready is not None:
            on_ready()
        await worker.run()
        group.cancel_scope.cancel()


class TemporalRunner:
    """Submits runs of registered agents to Temporal and reads their logs back from the store.

    ``run`` mirrors ``Agent.run``: it returns an ``AgentResponse`` (messages, events, usage,
    approval requests), raises ``ModelCallError`` when the model call failed, and updates the
    ``session`` it was given, as a local run does.
    """

    def __init__(
        self,
        client: Client,
        store: EventStore,
        *,
        task_queue: str = TASK_QUEUE,
        timeouts: Timeouts | None = None,
        limits: Limits | None = None,
        task_timeout: float | None = None,
    ) -> None:
        self.client = client
        self.store = store
        self.task_queue = task_queue
        self.timeouts = timeouts or Timeouts()
        self.limits = limits or Limits()
        self.task_timeout = task_timeout

    async def start(
        self,
        agent: str,
        messages: str | Content | Message | Sequence[Any] | None = None,
        *,
        session: AgentSession | None = None,
        options: Mapping[str, Any] | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        run_id: str | None = None,
    ) -> WorkflowHandle[Any, RunResult]:
        """Start a run; its workflow id is its run id."""
        inputs = normalize_messages(messages)
        check_approvals(session.history if session is not None else [], inputs)
        run_id = run_id or f"run_{uuid.uuid4().hex}"
        job = RunInput(
            agent=agent,
            messages=tuple(inputs),
            run_id=run_id,
            session=_session_input(session) if session is not None else None,
            options=_with_conversation(options, session),
            function_invocation_kwargs=dict(function_invocation_kwargs or {}),
            client_kwargs=dict(client_kwargs or {}),
            timeouts=self.timeouts,
            limits=self.limits,
        )
        handle: WorkflowHandle[Any, RunResult] = await self.client.start_workflow(
            WORKFLOW,
            job,
            id=run_id,
            task_queue=self.task_queue,
            result_type=RunResult,
            task_timeout=_seconds(self.task_timeout),
        )
        if session is not None:
            session.take_pending()  # now recorded by the run, as Agent.run records them
        return handle

    async def result(
        self, handle: WorkflowHandle[Any, RunResult], *, session: AgentSession | None = None
    ) -> AgentResponse:
        """Wait for the run, read its log, update ``session``; see the class docstring."""
        granted = _granted_reruns(session)
        try:
            result = await handle.result()
        except WorkflowFailureError as exc:
            cause: BaseException = exc
            while cause.__cause__ is not None or getattr(cause, "cause", None) is not None:
                cause = getattr(cause, "cause", None) or cause.__cause__  # type: ignore[assignment]
            refused = _APPROVAL_ERRORS.get(getattr(cause, "type", None) or "")
            if refused is not None:  # the run was refused before anything of it was recorded
                raise refused(getattr(cause, "message", None) or str(cause)) from exc
            if session is not None:  # a cancelled or failed run: what it recorded still counts
                await self._spend_reruns(session, granted, handle.id)
                _apply_session(session, await self.store.read(handle.id))
            if getattr(cause, "type", None) == "MiddlewareFailure":  # raised as a local run raises it
                raise MiddlewareFailure(getattr(cause, "message", None) or str(cause)) from exc
            raise RunError(f"run {handle.id} failed on Temporal: {cause}", run_id=handle.id) from exc
        events = await self.store.read(result.run_id)
        if session is not None:
            await self._spend_reruns(session, granted, result.run_id)
            _apply_session(session, events)
        if result.status == "failed":
            raise _run_error(result, events)
        completed = events[-1]
        assert isinstance(completed, RunCompleted), completed
        return AgentResponse(
            messages=completed.messages,
            run_id=result.run_id,
            events=events,
            usage=completed.usage,
            user_input_requests=result.user_input_requests,
            finish_reason=result.reason,
            session_id=session.session_id if session is not None else None,
        )

    async def _spend_reruns(self, session: AgentSession, granted: set[str], run_id: str) -> None:
        """A permission to run a call again (``allow_rerun``) is used once: the ones the run's
        claim took (``BatchClaimed.rerun`` in the paused run's stream) leave the session, as
        after a local resume."""
        for paused_run in granted:
            for event in reversed(await self.store.read(paused_run)):
                if type(event) is BatchClaimed and event.by_run_id == run_id:
                    session.spend_rerun(event.rerun)
                    break

    async def run(
        self,
        agent: str,
        messages: str | Content | Message | Sequence[Any] | None = None,
        *,
        session: AgentSession | None = None,
        **kwargs: Any,
    ) -> AgentResponse:
        """Start a run and wait for it: ``Agent.run``, on Temporal."""
        handle = await self.start(agent, messages, session=session, **kwargs)
        return await self.result(handle, session=session)


def _seconds(value: float | None) -> Any:
    from datetime import timedelta

    return timedelta(seconds=value) if value is not None else None


def _with_conversation(options: Mapping[str, Any] | None, session: AgentSession | None) -> dict[str, Any]:
    """The run's options; a session whose conversation a service keeps continues it there,
    unless the run was given a conversation id of its own (``RunSpec.on_session``)."""
    merged = dict(options or {})
    if session is not None and session.service_session_id and not merged.get("conversation_id"):
        merged["conversation_id"] = session.service_session_id
    return merged


def _granted_reruns(session: AgentSession | None) -> set[str]:
    """The paused runs whose calls the session allows to run again."""
    if session is None or not session.rerun_allowed:
        return set()
    return {session.paused_runs[c] for c in session.rerun_allowed if c in session.paused_runs}


def _session_input(session: AgentSession) -> SessionInput:
    session.state.checkpoint()  # in-place edits since the last run become pending changes
    return SessionInput(
        session_id=session.session_id,
        history=tuple(session.history),
        state=session.state.snapshot(),
        pending=tuple(session.pending_changes),
        paused=dict(session.paused_runs),
        rerun=tuple(sorted(session.rerun_allowed)),
        rerun_holders=dict(session.rerun_holders),
    )


def _apply_session(session: AgentSession, events: Sequence[Event]) -> None:
    """Bring the caller's session up to the run's writes without recording them again, and
    grow its history by the rule every driver applies (``AgentSession.after_run``)."""
    for event in events:
        session.apply(event)
    session.after_run(events)


_APPROVAL_ERRORS: dict[str, type[ApprovalError]] = {
    cls.__name__: cls for cls in (ApprovalError, CallOutcomeUnknownError, ApprovalMismatchError)
}


def _run_error(result: RunResult, events: Sequence[Event]) -> RunError:
    failed = next((e for e in reversed(events) if type(e) is ModelFailed), None)
    if result.error_type in ("UnknownToolError", "UnpricedCallError"):
        typed = UnknownToolError if result.error_type == "UnknownToolError" else UnpricedCallError
        return typed(result.error_message or "", run_id=result.run_id, seq=len(events) - 1)
    kind = {"ModelCallError": ModelCallError, "ModelResponseError": ModelResponseError}.get(
        result.error_type or "", RunError
    )
    if failed is None:
        return kind(f"run {result.run_id} failed: {result.error_message}", run_id=result.run_id)
    message = f"model call {failed.iteration} failed: {failed.error_type}: {failed.message}"
    return kind(message, run_id=result.run_id, seq=failed.seq)


# -- the worker command ---------------------------------------------------------------------------

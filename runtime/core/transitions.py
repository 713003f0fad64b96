"""The run's transitions: one handler per (phase, input event type), and the table of them.

``RunMachine`` (``machine.py``) is the interface drivers use; the rules it applies live here, in
one table: which inputs each phase accepts, and what each input makes the run do next.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .approvals import approval_responses, resumed_batch
from .commands import CallModel, Command, FinishRun, InvokeTools, Phase
from .events import (
    ApprovalRequested,
    ApprovalResolved,
    ArgumentsRejected,
    BatchClaimed,
    BatchResumed,
    CallsSkipped,
    ChildRunStarted,
    ContextProvided,
    Event,
    EventBase,
    IterationLimitReached,
    MiddlewareShortCircuit,
    ModelCalled,
    ModelFailed,
    ModelRequestRewritten,
    ModelResponded,
    RunConfig,
    RunInputRewritten,
    RunStarted,
    RunTerminated,
    SessionUpdated,
    ToolCalled,
    ToolChoice,
    ToolChoiceReset,
    ToolFailed,
    ToolNotFound,
    ToolReturned,
    ToolsAdded,
    ToolsRemoved,
)
from .messages import Content, Message, MessageView, Usage
from .projections import ToolsProjection, TranscriptProjection
from .provided import on_provided

__all__ = ("BY_PHASE", "TRANSITIONS", "Transitions")


_GATED = "always_require"


def _is_required(choice: ToolChoice | None) -> bool:
    if isinstance(choice, dict):
        return choice.get("mode") == "required"
    return choice == "required"


def _last_text(messages: list[Message] | tuple[Message, ...]) -> str:
    for message in reversed(messages):
        if message.role == "assistant":
            return message.text
    return ""


class Transitions:
    """The handlers of ``TRANSITIONS``; ``RunMachine`` holds the state they work on."""

    run_id: str
    next_seq: int
    iteration: int
    history: tuple[Message, ...]
    tools: ToolsProjection
    transcript: TranscriptProjection
    config: RunConfig
    tool_choice: ToolChoice | None
    usage: Usage
    cost: float
    calls_made: int
    error_streak: int
    final_call: bool
    model_calls: int
    limit_reason: str
    terminated: bool
    finish_reason: str
    input_count: int
    awaiting_approval: tuple[str, ...]
    failure: tuple[str, str] | None
    approvals: tuple[Content, ...]
    claimed_by: str | None
    conversation_id: str | None
    held: int
    _phase: Phase
    _batch: InvokeTools | None
    _batch_failed: bool
    _commands: list[Command]

    def _phase_to(self, phase: Phase) -> None:
        raise NotImplementedError

    def _derive(self, cls: type[EventBase], **fields: Any) -> None:
        raise NotImplementedError

    def last_text(self) -> str:
        return _last_text(self.transcript.messages)

    # -- decisions ----------------------------------------------------------------------------

    def _call_model(self, *, final: bool = False) -> None:
        self.iteration += 1
        self.model_calls += 1
        self.final_call = final
        choice = "none" if final else self.tool_choice
        count = self.transcript.history_length + len(self.transcript.messages)  # as RunStarted says
        names = self.tools.names
        conversation_id = self.conversation_id
        if conversation_id is None:
            self._derive(
                ModelCalled, iteration=self.iteration, tools=names, tool_choice=choice, message_count=count
            )
        else:
            self._derive(
                ModelCalled,
                iteration=self.iteration,
                tools=names,
                tool_choice=choice,
                message_count=count,
                conversation_id=conversation_id,
                held=self.held,
            )
        self._commands.append(
            CallModel(
                iteration=self.iteration,
                messages=self.request_messages(),
                tools=names,
                tool_choice=choice,
                conversation_id=conversation_id,
                final=final,
            )
        )
        self._phase_to(Phase.AWAITING_MODEL)

    def request_messages(self) -> MessageView:
        """What the next model call sends: the history and the run's messages, or in a
        service-side conversation only the run's messages the service does not hold yet (a
        view, made in O(1) however long the conversation)."""
        messages = self.transcript.messages
        if self.conversation_id is None:
            return MessageView(self.history, messages)
        return MessageView((), messages, self.held - self.transcript.history_length)

    def _continue_conversation(self, conversation_id: Any) -> None:
        """From here on the service keeps the conversation: it holds every message so far."""
        if isinstance(conversation_id, str) and conversation_id:
            self.conversation_id = conversation_id
            self.held = self.transcript.history_length + len(self.transcript.messages)
        else:
            self.conversation_id = None
            self.held = 0

    def _invoke(self, calls: tuple[Content, ...], *, approved: frozenset[str | None] = frozenset()) -> None:
        """Issue the batch; calls of tools that require approval are gated unless ``approved``."""
        specs = self.tools.specs
        gated: tuple[str, ...] = ()
        if self.tools.gated:
            gated = tuple(
                [
                    c.call_id or ""
                    for c in calls
                    if specs[c.name or ""].approval_mode == _GATED and c.call_id not in approved
                ]
            )
        self.calls_made += len(calls)
        answered = tuple(c.call_id or "" for c in calls if c.call_id in approved) if approved else ()
        self._batch = InvokeTools(iteration=self.iteration, calls=calls, gated=gated, approved=answered)
        self._commands.append(self._batch)

    def _finish(self, reason: str) -> None:
        self.finish_reason = reason
        self._commands.append(FinishRun(reason=reason, text=self.last_text()))
        self._phase_to(Phase.FINISHING)

    # -- transitions --------------------------------------------------------------------------

    def _on_started(self, event: RunStarted) -> None:
        """Take the run id, limits and tool_choice; wait for agent middleware to hand over."""
        self.run_id = event.run_id
        self.config = event.config
        self.tool_choice = event.options.get("tool_choice")
        self.input_count = len(self.transcript.messages)  # the input as conversation
        self.approvals = tuple(approval_responses(event.messages))
        conversation_id = event.options.get("conversation_id")
        if conversation_id:  # the service holds the history; the input is sent
            self.conversation_id = conversation_id
            self.held = self.transcript.history_length
        self._phase_to(Phase.STARTED)

    def _on_rewritten(self, event: RunInputRewritten) -> None:
        """Agent middleware replaced the input; a new tool_choice takes effect."""
        self.input_count = len(self.transcript.messages)
        # Answers are not conversation: middleware rewriting the messages does not withdraw them.
        self.approvals = tuple(approval_responses(event.messages)) or self.approvals
        if "tool_choice" in event.options:
            self.tool_choice = event.options["tool_choice"]
        if "conversation_id" in event.options:
            conversation_id = event.options["conversation_id"]
            usable = isinstance(conversation_id, str) and conversation_id
            self.conversation_id = conversation_id if usable else None
            self.held = self.transcript.history_length if self.conversation_id else 0

    def _on_noop(self, event: Event) -> None:
        """Recorded facts (session writes, tool list changes, calls starting) the loop needn't act on."""

    def _on_agent_short_circuit(self, event: MiddlewareShortCircuit) -> None:
        """Agent middleware answered for the run (call_id None): finish; else just recorded."""
        if event.call_id is None:
            self._finish("short_circuit")

    def _on_model_responded(self, event: ModelResponded) -> None:
        """No calls: finish. Calls: reset a required tool_choice, refuse unknown tools, run the rest.

        Calls of tools that require approval are gated: when one of them has valid arguments the
        whole batch waits for the answer. On the final call after a limit, calls are dropped.
        With ``terminate_on_unknown_calls``, an unknown tool fails the run before any call runs."""
        if event.usage is not None:
            self.usage = self.usage + event.usage
        if event.cost is not None:
            self.cost += event.cost
        if event.conversation_id:
            self._continue_conversation(event.conversation_id)
        calls = event.message.function_calls
        if self.final_call:
            if calls:
                skipped = tuple(c.call_id or "" for c in calls)
                self._derive(
                    CallsSkipped, iteration=self.iteration, call_ids=skipped, reason=self.limit_reason
                )
            self._finish("limit_reached")
            return
        if not calls:
            self._finish("completed")
            return
        if self.model_calls == 1 and _is_required(self.tool_choice):
            previous = self.tool_choice
            self.tool_choice = None
            self._derive(ToolChoiceReset, iteration=self.iteration, previous=previous)
        self._batch_failed = False
        self._batch = None
        self._phase_to(Phase.RUNNING_TOOLS)
        known = self.tools.specs
        runnable = []
        for call in calls:
            if call.name in known:
                runnable.append(call)
            else:
                self._batch_failed = True
                reason = "not in the tools offered" if known else "no tools are offered"
                self._derive(ToolNotFound, call_id=call.call_id, name=call.name, reason=reason)
                if self.config.terminate_on_unknown_calls and self.failure is None:
                    self.failure = ("UnknownToolError", f'Error: Requested function "{call.name}" not found.')
        if self.failure is not None:
            self._finish("failed")
            return
        if runnable:
            self._invoke(tuple(runnable))
        self._after_result()

    def _on_model_failed(self, event: ModelFailed) -> None:
        """Finish as failed: ``finish`` then records RunFailed."""
        kind = "ModelResponseError" if event.error_type == "ModelResponseError" else "ModelCallError"
        self.failure = (kind, event.message)
        self._finish("failed")

    def _on_call_failed(self, event: ToolFailed | ArgumentsRejected) -> None:
        """Mark the batch as erroring; when it is whole, count it and go on or stop."""
        self._batch_failed = True
        self._after_result()

    def _on_call_done(self, event: ToolReturned | MiddlewareShortCircuit) -> None:
        """When the batch is whole: call the model again, or make the final call at a limit."""
        self._after_result()

    def _on_terminated(self, event: RunTerminated) -> None:
        """Finish after the current batch (at once outside a batch)."""
        self.terminated = True
        if self._phase is not Phase.RUNNING_TOOLS:
            self._finish("terminated")
        else:
            self._after_result()

    def _on_approval_requested(self, event: ApprovalRequested) -> None:
        """Hold these gated calls; when the rest of the batch is done, pause the run for approval."""
        self.awaiting_approval = (*self.awaiting_approval, *event.call_ids)
        self._after_result()

    def _after_result(self) -> None:
        """When every call of the batch is answered, decide what the loop does next."""
        if self._phase is not Phase.RUNNING_TOOLS or self.transcript.batch:
            return  # the batch is open until every call not held for approval has its result
        self._batch = None
        if self.awaiting_approval:
            self._finish("awaiting_approval")
            return
        self.error_streak = self.error_streak + 1 if self._batch_failed else 0
        if self.terminated:
            self._finish("terminated")
        elif self._limit_reached():
            self._call_model(final=True)
        else:
            self._call_model()

    def _limit_reached(self) -> bool:
        config = self.config
        checks = (
            ("max_iterations", self.iteration, config.max_iterations),
            ("max_consecutive_errors", self.error_streak, config.max_consecutive_errors),
            ("max_function_calls", self.calls_made, config.max_function_calls),
            ("max_input_tokens", self.usage.input_tokens, config.max_input_tokens),
        )
        for reason, value, limit in checks:
            if limit is not None and value >= limit:
                self.limit_reason = reason
                self._derive(IterationLimitReached, iteration=self.iteration, reason=reason, limit=limit)
                return True
        if config.max_cost is not None and self.cost >= config.max_cost:
            self.limit_reason = "max_cost"
            self._derive(
                IterationLimitReached, iteration=self.iteration, reason="max_cost", cost_limit=config.max_cost
            )
            return True
        return False

    def _resume_approvals(self, approvals: Sequence[Content]) -> None:
        """A run that carries approval responses resumes the batch they answer: rejected calls
        get the rejection, the others run (approved ones without asking again)."""
        self.iteration = 1
        self._phase_to(Phase.RUNNING_TOOLS)
        self._batch_failed = False
        responses = {c.call_id: bool(c.approved) for c in approvals}
        batch = resumed_batch((*self.history, *self.transcript.messages), responses)
        if any(c.call_id not in responses for c in batch):
            self._derive(BatchResumed, call_ids=tuple(c.call_id or "" for c in batch))
        for call in batch:
            if call.call_id in responses:
                self._derive(ApprovalResolved, call_id=call.call_id or "", approved=responses[call.call_id])
        offered = self.tools.specs
        runnable = []
        for call in batch:
            if not responses.get(call.call_id, True):
                continue  # rejected: answered with the rejection
            if call.name in offered:
                runnable.append(call)
            else:  # its tool is not offered in this run (it was added at run time)
                self._batch_failed = True
                reason = "not in the tools offered to this run"
                self._derive(ToolNotFound, call_id=call.call_id or "", name=call.name or "", reason=reason)
        if runnable:
            self._invoke(tuple(runnable), approved=frozenset(c for c, ok in responses.items() if ok))
        self._after_result()

    def _on_claimed(self, event: BatchClaimed) -> None:
        """A later run claimed the paused batch to resume it: the run stays done, now resumed."""
        self.claimed_by = event.by_run_id

    def _on_session_updated(self, event: SessionUpdated) -> None:
        """Session writes between the end of the loop and the end of the run: recorded."""


def _table() -> dict[tuple[Phase, type], Any]:
    m = Transitions
    table: dict[tuple[Phase, type], Any] = {
        (Phase.NEW, RunStarted): m._on_started,
        (Phase.STARTED, RunInputRewritten): m._on_rewritten,
        (Phase.STARTED, ContextProvided): on_provided,
        (Phase.STARTED, SessionUpdated): m._on_noop,
        (Phase.STARTED, MiddlewareShortCircuit): m._on_agent_short_circuit,
        (Phase.STARTED, RunTerminated): m._on_terminated,
        (Phase.AWAITING_MODEL, ModelResponded): m._on_model_responded,
        (Phase.AWAITING_MODEL, ModelFailed): m._on_model_failed,
        (Phase.AWAITING_MODEL, SessionUpdated): m._on_noop,
        (Phase.AWAITING_MODEL, RunTerminated): m._on_terminated,
        (Phase.AWAITING_MODEL, MiddlewareShortCircuit): m._on_noop,
        (Phase.AWAITING_MODEL, ModelRequestRewritten): m._on_noop,
        (Phase.RUNNING_TOOLS, ToolCalled): m._on_noop,
        (Phase.RUNNING_TOOLS, ToolReturned): m._on_call_done,
        (Phase.RUNNING_TOOLS, MiddlewareShortCircuit): m._on_call_done,
        (Phase.RUNNING_TOOLS, ToolFailed): m._on_call_failed,
        (Phase.RUNNING_TOOLS, ArgumentsRejected): m._on_call_failed,
        (Phase.RUNNING_TOOLS, ToolsAdded): m._on_noop,
        (Phase.RUNNING_TOOLS, ToolsRemoved): m._on_noop,
        (Phase.RUNNING_TOOLS, SessionUpdated): m._on_noop,
        (Phase.RUNNING_TOOLS, ChildRunStarted): m._on_noop,
        (Phase.RUNNING_TOOLS, RunTerminated): m._on_terminated,
        (Phase.RUNNING_TOOLS, ApprovalRequested): m._on_approval_requested,
        (Phase.FINISHING, SessionUpdated): m._on_session_updated,
        (Phase.DONE, BatchClaimed): m._on_claimed,
    }
    return table


TRANSITIONS = _table()
"""(phase, input event type) -> handler. Anything not listed raises ``TransitionError``."""

BY_PHASE: dict[Phase, dict[type, Any]] = {
    phase: {kind: handler for (p, kind), handler in TRANSITIONS.items() if p is phase} for phase in Phase
}

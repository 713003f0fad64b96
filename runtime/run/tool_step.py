"""Tool calls: function middleware around each tool, each outcome recorded as an input event.

``invoke_call`` runs one call of a batch (the run loop runs a batch's calls, each in its own
step; a Temporal activity runs just one): arguments checked, function middleware, the tool (sync
tools in a worker thread), and then one mapping from how the call ended to the events that
record it (``record_outcome``).
"""

from __future__ import annotations

import contextvars
from typing import Any

from ..context import FunctionInvocationContext
from ..core.errors import UnrecordableError
from ..core.events import (
    ArgumentsRejected,
    MiddlewareShortCircuit,
    RunTerminated,
    ToolCalled,
    ToolFailed,
    ToolReturned,
)
from ..core.limits import safe_text
from ..core.loop import StepLog
from ..core.messages import Content
from ..errors import ApprovalMismatchError, MiddlewareFailure, MiddlewareTermination, StoreError
from ..middleware import ChainOutcome, run_chain
from ..session import writer
from ..tools import ArgumentsError, FunctionTool, arguments_valid
from .binding import RunBinding
from .values import to_recorded

__all__ = (
    "CallOutcome",
    "arguments_valid",
    "invoke_call",
    "record_outcome",
)


class CallOutcome:
    """How one call ended: what the tool returned, what middleware did, or what was raised."""

    __slots__ = ("chain", "context", "error", "middleware", "returned", "tool_raised", "value")

    def __init__(self, context: FunctionInvocationContext | None, *, middleware: bool = False) -> None:
        self.context = context
        self.middleware = middleware  # the call ran inside function middleware
        self.returned = False
        self.tool_raised = not middleware  # whether an error came from the tool, not middleware
        self.value: Any = None
        self.chain: ChainOutcome | None = None
        self.error: BaseException | None = None

    @property
    def result(self) -> Any:
        """What the model is answered with: middleware's final word, else the tool's value."""
        return self.context.result if self.middleware and self.context is not None else self.value


async def invoke_call(
    binding: RunBinding,
    iteration: int,
    call: Content,
    function: FunctionTool | None = None,
    *,
    approved: bool = False,
    step: StepLog | None = None,
    current: contextvars.ContextVar[StepLog | None] | None = None,
) -> None:
    """Run one call through function middleware and its tool (``function``, else the run's tool
    of that name), and record how it ended. An ``approved`` call runs only with the arguments
    the approval answered: middleware that changed them has the call refused
    (``ApprovalMismatchError``, recorded as ``ToolFailed``). With ``step`` and ``current`` (the
    run's current-step variable), the call records into ``step``: the variable is set for the
    call and reset after."""
    step_token = current.set(step) if current is not None else None
    call_id = call.call_id or ""
    function = function or binding.registry.by_name[call.name or ""]
    layers = binding.spec.layers["function"]
    token = writer.set(call_id) if layers or binding.session is not None else None  # only sessions ask
    try:
        try:
            arguments = function.arguments_from(call.arguments) if not layers else _as_sent(function, call)
        except ArgumentsError as exc:
            binding.recorder.record(ArgumentsRejected, call_id=call_id, name=function.name, reason=str(exc))
            return
        context = None
        if layers or function.needs_context:
            context = FunctionInvocationContext(
                function=function,
                arguments=arguments,
                kwargs=dict(binding.kwargs),
                session=binding.session,
                tools=None,
                call_id=call_id,
                run_id=binding.run_id,
                iteration=iteration,
            )
            context.bind_registry(binding, call_id)
        if not layers:  # whatever is raised comes from the tool itself
            try:
                binding.recorder.record(
                    ToolCalled, call_id=call_id, name=function.name, arguments=to_recorded(arguments)
                )
                if binding.write_ahead is not None:  # stored as started before the tool runs
                    await _written_ahead(binding)
                value = await function.execute(arguments, context)
            except _NotWrittenAhead as exc:
                raise exc.store_error from None  # the run stops with the store's own error
            except MiddlewareFailure:
                raise  # fail closed: never an answer to the model; the run ends with RunFailed
            except Exception as exc:
                outcome = CallOutcome(context)
                outcome.error = exc
                record_outcome(binding, iteration, call_id, function.name, outcome)
                return
            _record_returned(binding, call_id, function.name, value)  # the common case: no outcome
            return
        outcome = CallOutcome(context, middleware=True)
        try:
            await _run_chain(binding, function, call_id, outcome, call if approved else None)
        except MiddlewareFailure:
            if isinstance(outcome.error, _NotWrittenAhead):
                raise outcome.error.store_error from None
            raise
        except Exception as exc:
            outcome.error = exc
        if isinstance(outcome.error, _NotWrittenAhead):  # whatever middleware made of it
            raise outcome.error.store_error from None
        record_outcome(binding, iteration, call_id, function.name, outcome)
    finally:
        if token is not None:
            writer.reset(token)
        if current is not None and step_token is not None:
            current.reset(step_token)


class _NotWrittenAhead(MiddlewareFailure):
    """The store did not take a call's start: the tool does not run and the run stops (a
    ``MiddlewareFailure`` on its way, so nothing answers the model), raising ``store_error``."""

    def __init__(self, store_error: StoreError) -> None:
        super().__init__(f"the store did not record the call as started: {store_error}")
        self.store_error = store_error


async def _written_ahead(binding: RunBinding) -> None:
    """Store what the run recorded so far (the call's ``ToolCalled`` last), before its tool runs."""
    assert binding.write_ahead is not None
    try:
        await binding.write_ahead()
    except StoreError as exc:
        raise _NotWrittenAhead(exc) from exc


def _as_sent(function: FunctionTool, call: Content) -> dict[str, Any]:
    """The arguments function middleware sees: what the model sent, typed where it is valid, with
    no defaults filled in; as sent (to be repaired) where it is not, text that is no JSON object
    as ``{"raw": text}``. Only text nested too deep to record is rejected before middleware."""
    sent = function.sent_arguments(call.arguments)
    try:
        valid = function.validate(sent)
    except ArgumentsError:
        return sent
    return {key: valid[key] for key in sent if key in valid}


async def _run_chain(
    binding: RunBinding,
    function: FunctionTool,
    call_id: str,
    outcome: CallOutcome,
    approved: Content | None = None,
) -> None:
    """Function middleware around the call; the arguments it hands on are checked before the tool
    (for an ``approved`` call: against the arguments the approval answered, ``_as_approved``)."""
    context, layers = outcome.context, binding.spec.layers["function"]
    assert context is not None

    async def final() -> None:
        # The tool gets the defaults filled in; context.arguments stays what middleware handed on.
        values = function.validate(context.arguments)
        if approved is not None and not _as_approved(function, approved, values):
            raise ApprovalMismatchError(
                f"call {call_id!r} was approved with other arguments than middleware hands on: "
                "an approval answers one call with its arguments"
            )
        binding.recorder.record(
            ToolCalled, call_id=call_id, name=function.name, arguments=to_recorded(values)
        )
        if binding.write_ahead is not None:  # stored as started before the tool runs
            try:
                await _written_ahead(binding)
            except _NotWrittenAhead as exc:
                outcome.error = exc  # kept even if middleware swallows it: the run stops
                raise
        try:
            outcome.value = context.result = await function.execute(values, context)
        except Exception:
            outcome.tool_raised = True  # the tool's own error, not middleware's or validation's
            raise
        outcome.returned = True

    outcome.chain = await run_chain(layers, context, final, binding.checkpoint)


def _as_approved(function: FunctionTool, call: Content, values: dict[str, Any]) -> bool:
    """Whether ``values`` carry every argument ``call`` was approved with, unchanged (typed as
    middleware first saw them); an argument the call did not carry may be added (a default)."""
    approved = _as_sent(function, call)
    return all(
        key in values and to_recorded(values[key]) == to_recorded(value) for key, value in approved.items()
    )


def record_outcome(
    binding: RunBinding, iteration: int, call_id: str, name: str, outcome: CallOutcome
) -> None:
    """The one mapping from how a call ended to the events that record it.

    A value the log could not give back (``UnrecordableError``) is answered with an error
    result, ``ToolFailed``, instead of what the call produced.
    """
    if binding.session is not None:  # in-place session changes of this call, while the writer is it
        binding.session.state.checkpoint()
    try:
        _record_outcome(binding, iteration, call_id, name, outcome)
    except UnrecordableError as exc:
        message = safe_text(str(exc))
        binding.recorder.record(
            ToolFailed, call_id=call_id, name=name, error_type=type(exc).__name__, message=message
        )


def _record_returned(binding: RunBinding, call_id: str, name: str, value: Any) -> None:
    """``record_outcome`` of a call without middleware whose tool returned ``value``."""
    if binding.session is not None:
        binding.session.state.checkpoint()
    record = binding.recorder.record
    try:
        record(ToolReturned, call_id=call_id, name=name, result=to_recorded(value))
    except UnrecordableError as exc:
        record(
            ToolFailed, call_id=call_id, name=name, error_type=type(exc).__name__, message=safe_text(str(exc))
        )


def _record_outcome(
    binding: RunBinding, iteration: int, call_id: str, name: str, outcome: CallOutcome
) -> None:
    record, error = binding.recorder.record, outcome.error
    if error is None and outcome.chain is None:  # the common case first: the tool returned
        record(ToolReturned, call_id=call_id, name=name, result=to_recorded(outcome.value))
    elif isinstance(error, MiddlewareTermination):
        record(RunTerminated, iteration=iteration, reason=str(error), by=call_id)
        if outcome.returned or outcome.tool_raised:
            result = outcome.result if outcome.returned else error.result
            record(ToolReturned, call_id=call_id, name=name, result=to_recorded(result))
        else:
            result = error.result if error.result is not None else outcome.result
            record(
                MiddlewareShortCircuit, call_id=call_id, middleware="termination", result=to_recorded(result)
            )
    elif isinstance(error, ArgumentsError) and not outcome.tool_raised:
        record(ArgumentsRejected, call_id=call_id, name=name, reason=str(error))
    elif error is not None:
        message = binding.scrub(safe_text(str(error)))
        record(ToolFailed, call_id=call_id, name=name, error_type=type(error).__name__, message=message)
    elif outcome.chain is not None and outcome.chain.short_circuited_by is not None:
        result = to_recorded(outcome.result)
        record(
            MiddlewareShortCircuit,
            call_id=call_id,
            middleware=outcome.chain.short_circuited_by,
            result=result,
        )
    elif outcome.chain is not None and outcome.chain.overridden_by is not None:
        record(
            ToolReturned,
            call_id=call_id,
            name=name,
            result=to_recorded(outcome.result),
            overridden_by=outcome.chain.overridden_by,
            tool_result=to_recorded(outcome.value),
        )
    else:
        record(ToolReturned, call_id=call_id, name=name, result=to_recorded(outcome.result))

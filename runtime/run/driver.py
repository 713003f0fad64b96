"""The local driver: the run loop's executor in this process.

``RunLoop.drive`` (``agentledger.core.loop``) is the loop every driver shares; ``LocalDriver``
carries its commands out here. Before each command it stores what was recorded so far; a model
call runs ``call_model``, each tool call ``invoke_call`` (the steps every driver shares), each
inside its own step (``RunRecorder.into``), concurrently unless the run is sequential. It
decides nothing: whether a batch waits, the order of the log and what comes next are the loop's
and the machine's.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import sys
import typing
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

import anyio

from ..core.commands import CallModel, Command, FinishRun, InvokeTools
from ..core.loop import StepLog
from ..core.messages import Content
from ..errors import ConflictError, MiddlewareFailure, RunIdTakenError
from ..store import EventStore, SupportsAppendNowait
from ..tools import FunctionTool
from .binding import RunBinding
from .model_step import call_model
from .recorder import RunRecorder
from .tool_step import invoke_call

__all__ = ("LocalDriver",)


@functools.cache
def _appends_nowait(kind: type) -> bool:
    """Whether stores of this type are ``SupportsAppendNowait`` (asked once per type: a protocol
    check walks the protocol's members each time)."""
    return issubclass(kind, SupportsAppendNowait)


class LocalDriver:
    """Carries out one run's commands in this process and appends its log to the run's store
    as it goes (an ``Executor`` of ``RunLoop``)."""

    __slots__ = ("_in_doubt", "_nowait", "binding", "log", "recorder", "sequential", "store", "stored")

    def __init__(
        self, binding: RunBinding, recorder: RunRecorder, store: EventStore | None, *, stored: int = 0
    ) -> None:
        self.binding = binding
        self.recorder = recorder
        self.store = store
        self.stored = stored
        """How many events of the log the store holds (a run continued from its log: all it had)."""
        self.sequential = binding.spec.config.sequential_tools
        """Whether a batch's calls run one after another (``RunConfig.sequential_tools``)."""
        self.log = recorder.log  # the run's log (one list for the whole run)
        self._in_doubt = False  # an append that may have been written without saying so
        # Whether the store appends without IO (``append_nowait``): a flag, not the bound method,
        # which would be one more object for the collector per run in flight.
        self._nowait = store is not None and _appends_nowait(type(store))

    def drive(self) -> Coroutine[Any, Any, FinishRun]:
        """Run the loop until the machine says it is over (``RunLoop.drive`` with this driver,
        awaited by the caller: no coroutine of its own between the two).

        What happened so far is stored before each model call and each batch of tool calls, so
        a crash in either loses nothing already decided; the end of the run stores the rest.
        """
        return self.recorder.drive(self)

    def write_ahead(self) -> None:
        """Store each call as started (its ``ToolCalled``) before its tool runs, for a run that a
        later resume could otherwise repeat (it resumes a batch): its calls then run one at a
        time, since a call's start is stored in the model's order of the calls. The log is the
        same as when they run at once; only the store learns of each call earlier."""
        if self.store is not None:
            self.sequential = True
            self.binding.write_ahead = self.flush

    # -- the executor ---------------------------------------------------------------------------

    def before(self, command: Command) -> Coroutine[Any, Any, None] | None:
        # Nothing new, or nowhere to store it: no flush to await (a coroutine that did nothing
        # would stay in the loop's frame while the run waits on its model).
        if self.store is not None and self.stored < len(self.log):
            if not self._nowait:
                return self.flush()
            self._store_now()  # an in-memory store: done, nothing to await
        return None

    def call_model(self, command: CallModel, step: StepLog) -> Coroutine[Any, Any, None]:
        # The call sets the run's current step itself (``RunRecorder.into`` without a layer).
        return call_model(self.binding, command, step, self.recorder.current_step)

    async def awaiting_approval(self, command: InvokeTools) -> Sequence[str]:
        by_name, awaits = self.binding.by_name, self.binding.spec.awaits_approval
        gated = command.gated
        return [
            c.call_id or "" for c in command.calls if c.call_id in gated and awaits(by_name[c.name or ""], c)
        ]

    def tool_calls(self, command: InvokeTools) -> Sequence[Callable[[StepLog], Awaitable[None]]]:
        by_name, approved, binding = self.binding.by_name, command.approved, self.binding
        current = self.recorder.current_step
        return [
            functools.partial(
                _invoke,
                binding,
                command.iteration,
                call,
                by_name[call.name or ""],
                current,
                call.call_id in approved,
            )
            for call in command.calls
        ]

    async def gather(self, calls: Sequence[Awaitable[None]]) -> None:
        if _on_asyncio():
            await _all_on_asyncio(typing.cast("list[Coroutine[Any, Any, None]]", list(calls)))
            return
        try:
            async with anyio.create_task_group() as group:
                for call in calls:
                    group.start_soon(_awaited, call)
        except* MiddlewareFailure as failed:  # the first one aborts the run, as on asyncio
            raise failed.exceptions[0] from None

    # -- the store -----------------------------------------------------------------------------

    async def flush(self) -> None:
        """Append the events not yet stored.

        An append that did not return (cancelled while the store committed it, or failed with an
        outcome the store could not know) may have been written all the same: the next flush
        first reads the stream back and counts what of the run's own events is there, instead of
        appending them again at a version the stream has left behind.
        """
        log = self.log
        if self.store is None or self.stored >= len(log):
            return
        if self._nowait:  # an in-memory store: no IO to wait for, nothing in doubt
            self._store_now()
            return
        if self._in_doubt:
            await self._read_back()
            if self.stored >= len(log):
                return
        self._in_doubt = True  # until the store says how the append went
        try:
            self.stored = await self.store.append(self.recorder.run_id, log[self.stored :], self.stored)
            self._in_doubt = False
            return
        except ConflictError as exc:
            self._in_doubt = False  # a refusal: nothing of it was written
            conflict = exc
        self._refused(conflict)

    def _store_now(self) -> None:
        """``flush`` to a store that does no IO: nothing to await (``before`` makes no coroutine)."""
        store: Any = self.store  # a ``SupportsAppendNowait`` (``_nowait``)
        try:
            self.stored = store.append_nowait(self.recorder.run_id, self.log[self.stored :], self.stored)
            return
        except ConflictError as exc:
            conflict = exc
        self._refused(conflict)

    def _refused(self, conflict: ConflictError) -> typing.NoReturn:
        if self.stored == 0 and type(conflict) is ConflictError:
            # The run's first append found its stream there: another run holds the id. One
            # error, raised outside the store's handler so it does not carry the store's along.
            raise RunIdTakenError(self.recorder.run_id, conflict.actual)
        raise conflict

    async def _read_back(self) -> None:
        """Count as stored what of the run's own unstored events the stream holds."""
        assert self.store is not None
        held = await self.store.read(self.recorder.run_id, after=self.stored - 1)
        log = self.recorder.log
        if held and held == log[self.stored : self.stored + len(held)]:
            self.stored += len(held)
        self._in_doubt = False


def _invoke(
    binding: RunBinding,
    iteration: int,
    call: Content,
    function: FunctionTool,
    current: contextvars.ContextVar[StepLog | None],
    approved: bool,
    step: StepLog,
) -> Coroutine[Any, Any, None]:
    """One call of a batch, recording into ``step`` (the call sets the run's current step)."""
    return invoke_call(binding, iteration, call, function, approved=approved, step=step, current=current)


async def _awaited(call: Awaitable[None]) -> None:
    await call


async def _all_on_asyncio(calls: list[Coroutine[Any, Any, None]]) -> None:
    """Run a batch's calls as asyncio tasks and wait for all of them.

    Starting a task through an anyio task group costs several times more, and a batch of quick
    calls is dominated by it. This is safe without a task group: each call records its own
    failure and raises only to abort the run (``MiddlewareFailure``, or a bug in the call's own
    handling), which cancels the other calls at once, as cancelling the waiting task does; both
    wait for every call to finish before the exception goes on.
    """
    loop = asyncio.get_running_loop()
    tasks = _started(loop, calls)
    if all(task.done() for task in tasks):  # every call ran to its end without waiting
        _raise_first(tasks)
        return
    finished = loop.create_future()
    remaining = len(tasks)

    def one_done(task: asyncio.Task[None]) -> None:
        nonlocal remaining
        remaining -= 1
        if finished.done():
            return
        error = None if task.cancelled() else task.exception()
        if error is not None:  # a call that raises (MiddlewareFailure) stops the others at once
            finished.set_exception(error)
        elif remaining == 0:
            finished.set_result(None)

    for task in tasks:
        task.add_done_callback(one_done)
    try:
        await finished
    except BaseException:
        for task in tasks:
            task.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait(tasks)
        raise
    _raise_first(tasks)


def _raise_first(tasks: list[asyncio.Task[None]]) -> None:
    """Raise the first error a call's task ended with (a bug in the call's own handling, or a
    ``MiddlewareFailure``: a tool's own failure is recorded, never raised)."""
    errors = [task.exception() for task in tasks if not task.cancelled()]  # each one retrieved
    error = next((e for e in errors if e is not None), None)
    if error is not None:
        raise error


if sys.version_info >= (3, 12):

    def _started(
        loop: asyncio.AbstractEventLoop, calls: list[Coroutine[Any, Any, None]]
    ) -> list[asyncio.Task[None]]:
        """One task per call, each started at once (eagerly): a call that finishes without
        waiting (most tool calls) never goes through the event loop's queue. Each still runs as
        its own task, in a copy of the context, as a task started later would."""
        return [asyncio.Task(call, loop=loop, eager_start=True) for call in calls]

else:

    def _started(
        loop: asyncio.AbstractEventLoop, calls: list[Coroutine[Any, Any, None]]
    ) -> list[asyncio.Task[None]]:
        """One task per call, scheduled (Python 3.11 starts no task eagerly)."""
        return [loop.create_task(call) for call in calls]


def _on_asyncio() -> bool:
    """Whether the running event loop is asyncio's (anyio also runs on trio)."""
    try:
        return asyncio.current_task() is not None
    except RuntimeError:  # no asyncio loop in this thread
        return False

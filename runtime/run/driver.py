"""The local driver: the narrow loop around the run machine, in this process.

It takes the machine's next command, stores what was recorded so far, carries the command out
through the steps every driver shares (``call_model``, ``invoke_tools``) and goes round again,
until the machine says the loop is over. It decides nothing: the steps record what happened, the
``LiveRecorder`` feeds it to the machine, and the machine's answer is the next command.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable, Sequence

from ..core.commands import CallModel, FinishRun, InvokeTools
from ..core.events import Event
from ..errors import ConflictError, RunIdTakenError
from ..store import EventStore, SupportsAppendNowait
from .binding import RunBinding
from .model_step import call_model
from .recorder import LiveRecorder
from .tool_step import invoke_tools

__all__ = ("LocalDriver",)


@functools.cache
def _appends_nowait(kind: type) -> bool:
    """Whether stores of this type are ``SupportsAppendNowait`` (asked once per type: a protocol
    check walks the protocol's members each time)."""
    return issubclass(kind, SupportsAppendNowait)


class LocalDriver:
    """Drives one run's loop and appends its log to the run's store as it goes."""

    def __init__(self, binding: RunBinding, recorder: LiveRecorder, store: EventStore | None) -> None:
        self.binding = binding
        self.recorder = recorder
        self.store = store
        self.stored = 0
        self._append_nowait: Callable[[str, Sequence[Event], int], int] | None = (
            typing.cast(SupportsAppendNowait, store).append_nowait
            if store is not None and _appends_nowait(type(store))
            else None
        )

    async def drive(self) -> FinishRun:
        """Run the loop until the machine says it is over.

        What happened so far is stored before each model call and each batch of tool calls, so
        a crash in either loses nothing already decided; the end of the run stores the rest.
        """
        next_command = self.recorder.commands.popleft
        while True:
            command = next_command()
            if type(command) is FinishRun:
                return command
            await self.flush()
            if type(command) is CallModel:
                await call_model(self.binding, command)
            else:
                assert type(command) is InvokeTools
                await invoke_tools(self.binding, command)

    async def flush(self) -> None:
        """Append the events not yet stored."""
        log = self.recorder.log
        if self.store is None or self.stored >= len(log):
            return
        pending: Sequence[Event] = log[self.stored :]
        try:
            if self._append_nowait is not None:  # an in-memory store: no IO to wait for
                self.stored = self._append_nowait(self.recorder.run_id, pending, self.stored)
            else:
                self.stored = await self.store.append(self.recorder.run_id, pending, self.stored)
            return
        except ConflictError as exc:
            if self.stored != 0 or type(exc) is not ConflictError:
                raise
            taken = exc.actual
        # The run's first append found its stream there: another run holds the id (one error,
        # raised outside the handler so it does not carry the store's ConflictError along).
        raise RunIdTakenError(self.recorder.run_id, taken)

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
        self._in_doubt = False  # an append that may have been written without saying so
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
        """Append the events not yet stored.

        An append that did not return (cancelled while the store committed it, or failed with an
        outcome the store could not know) may have been written all the same: the next flush
        first reads the stream back and counts what of the run's own events is there, instead of
        appending them again at a version the stream has left behind.
        """
        log = self.recorder.log
        if self.store is None or self.stored >= len(log):
            return
        run_id = self.recorder.run_id
        if self._append_nowait is not None:  # an in-memory store: no IO to wait for, nothing in doubt
            try:
                self.stored = self._append_nowait(run_id, log[self.stored :], self.stored)
                return
            except ConflictError as exc:
                conflict = exc
        else:
            if self._in_doubt:
                await self._read_back()
                if self.stored >= len(log):
                    return
            self._in_doubt = True  # until the store says how the append went
            try:
                self.stored = await self.store.append(run_id, log[self.stored :], self.stored)
                self._in_doubt = False
                return
            except ConflictError as exc:
                self._in_doubt = False  # a refusal: nothing of it was written
                conflict = exc
        if self.stored == 0 and type(conflict) is ConflictError:
            # The run's first append found its stream there: another run holds the id. One
            # error, raised outside the handler so it does not carry the store's along.
            raise RunIdTakenError(run_id, conflict.actual)
        raise conflict

    async def _read_back(self) -> None:
        """Count as stored what of the run's own unstored events the stream holds."""
        assert self.store is not None
        held = await self.store.read(self.recorder.run_id, after=self.stored - 1)
        log = self.recorder.log
        if held and held == log[self.stored : self.stored + len(held)]:
            self.stored += len(held)
        self._in_doubt = False

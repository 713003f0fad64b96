"""RunStream: the updates of one streamed run, as an async iterator."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncGenerator
from typing import Any

import anyio
import anyio.abc

from .errors import RunError
from .response import AgentResponse, AgentResponseUpdate
from .run.lifecycle import AgentRun

__all__ = ("RunStream",)


class RunStream:
    """The updates of one streamed run, as an async iterator (``agent.run_stream(...)``).

    The run is driven by a task of its own, started at the first ``__anext__``, so the code
    iterating it keeps its own cancel scopes. Leaving early is safe: ``aclose()`` (or ``async
    with``, or ``contextlib.aclosing``) cancels the run at once and waits for it; a stream that
    is simply dropped after a ``break`` cancels its run when it is collected. Either way the run
    is recorded as ``RunFailed`` with ``error_type="Cancelled"``. A failed run raises its error
    (``ModelCallError``...) to the iterating code. ``await stream.get_final_response()`` gives
    the run's ``AgentResponse`` once it has ended (iterating the rest first).
    """

    def __init__(self, run: AgentRun, messages: Any) -> None:
        self._run = run
        self._messages = messages
        self._send, self._receive = anyio.create_memory_object_stream[AgentResponseUpdate](math.inf)
        run.on_update = self._send.send_nowait
        self._failure: list[Exception] = []
        self._response: list[AgentResponse] = []
        self._ended = False
        self._task: asyncio.Task[None] | None = None
        self._fallback: AsyncGenerator[AgentResponseUpdate, None] | None = None

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> AgentResponseUpdate:
        if self._ended:
            raise StopAsyncIteration
        if self._task is None and self._fallback is None:
            self._start()
        if self._fallback is not None:
            return await self._fallback.__anext__()
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            self._ended = True
            self._receive.close()
            if self._failure:
                failure = self._failure[0]
                # Not "from None": that would also drop the cause (the client's error behind a
                # ModelCallError); only the EndOfStream context is hidden.
                raise failure from failure.__cause__
            raise StopAsyncIteration from None

    def _start(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another event loop (trio): a structured fallback
            self._fallback = _stream_in_group(
                self._run, self._messages, self._send, self._receive, self._response
            )
            return
        self._task = loop.create_task(self._produce())

    async def _produce(self) -> None:
        async with self._send:
            try:
                self._response.append(await self._run.execute(self._messages, stream=True))
            except Exception as exc:  # handed to the consumer at the end of the stream
                self._failure.append(exc)

    async def get_final_response(self) -> AgentResponse:
        """The run's response: the updates not yet taken are consumed first; a failed run raises."""
        async for _ in self:
            pass
        if self._failure:
            raise self._failure[0]
        if not self._response:
            raise RunError(
                "the stream was closed before its run ended: the run was cancelled "
                "(recorded as RunFailed, Cancelled), so it has no response",
                run_id=self._run.run_id,
            )
        return self._response[0]

    async def aclose(self) -> None:
        """Stop the run (if it is still going) and wait until it has recorded how it ended."""
        if self._fallback is not None:
            await self._fallback.aclose()
            return
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with anyio.CancelScope(shield=True), contextlib.suppress(asyncio.CancelledError):
                await task
        self._receive.close()
        self._ended = True  # iterating a closed stream ends at once

    async def __aenter__(self) -> RunStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()  # dropped after a break: the run stops instead of going on unseen
        self._receive.close()
        if task is None:
            self._send.close()  # never iterated: nothing will send


async def _stream_in_group(
    run: AgentRun,
    messages: Any,
    send: anyio.abc.ObjectSendStream[AgentResponseUpdate],
    receive: anyio.abc.ObjectReceiveStream[AgentResponseUpdate],
    response: list[AgentResponse],
) -> AsyncGenerator[AgentResponseUpdate, None]:
    """Streaming on event loops other than asyncio's: iterate it inside ``aclosing``."""
    failure: list[Exception] = []

    async def produce() -> None:
        async with send:
            try:
                response.append(await run.execute(messages, stream=True))
            except Exception as exc:
                failure.append(exc)

    closed = False
    async with anyio.create_task_group() as group:
        group.start_soon(produce)
        try:
            async with receive:
                async for update in receive:
                    yield update
        except GeneratorExit:
            closed = True
            group.cancel_scope.cancel()
    if failure and not closed:
        raise failure[0]

"""Agent: the public surface of a run (``run``, ``run_stream``, sessions, sub-agents as tools).

``Agent.run`` records ``RunStarted``, runs the agent middleware around the tool loop, and records
how the run ended. The tool loop itself is the ``RunDriver`` around a ``RunMachine``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import warnings
from collections.abc import AsyncGenerator, Callable, Coroutine, Mapping, Sequence
from typing import Any, Literal, overload

import anyio
import anyio.abc
import msgspec

from . import __version__
from ._sources import Clock, IdSource, RandomIds
from .clients import BaseChatClient, ChatResponseUpdate, normalize_messages
from .context import AgentContext, RunContext, _current
from .core.events import (
    ArgumentsRejected,
    Event,
    MiddlewareShortCircuit,
    RunCompleted,
    RunConfig,
    RunFailed,
    RunInputRewritten,
    RunStarted,
    RunTerminated,
    SessionUpdated,
    StateChange,
    ToolFailed,
    ToolNotFound,
    ToolReturned,
)
from .core.machine import FinishRun, RunMachine
from .core.messages import Content, Message, Usage, result_text
from .core.projections import error_text
from .driver import Recorder, RunDriver, ToolRegistry, capture_sinks, to_json
from .errors import ApprovalError, MiddlewareError, MiddlewareTermination, RunError, StoreError
from .middleware import Layer, run_chain, split_middleware
from .redaction import Redactor, default_redactor
from .session import AgentSession, writer
from .store import EventStore, MemoryEventStore
from .tools import FunctionTool, normalize_tools

__all__ = ("Agent", "AgentResponse", "AgentResponseUpdate", "RunStream")

_RUN_OPTION_KEYS = ("tools", "instructions")
MirrorSink = Callable[..., None]
"""A session sink: ``(by, changes, origin=None)``; ``origin`` names the write a copy repeats."""


class AgentResponse:
    """What a run produced: its text, its new messages, its id and its events."""

    __slots__ = (
        "events",
        "finish_reason",
        "messages",
        "run_id",
        "session_id",
        "usage",
        "user_input_requests",
    )

    def __init__(
        self,
        *,
        messages: Sequence[Message] = (),
        run_id: str = "",
        events: list[Event] | None = None,
        usage: Usage | None = None,
        user_input_requests: Sequence[Content] = (),
        finish_reason: str = "completed",
        session_id: str | None = None,
    ) -> None:
        self.messages = list(messages)
        self.run_id = run_id
        self.events: list[Event] = events if events is not None else []
        self.usage = usage or Usage()
        self.user_input_requests = list(user_input_requests)
        self.finish_reason = finish_reason
        self.session_id = session_id

    @property
    def text(self) -> str:
        """The text of the last assistant message."""
        for message in reversed(self.messages):
            if message.role == "assistant" and message.text:
                return message.text
        return ""

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"AgentResponse(text={self.text!r}, run_id={self.run_id!r}, events={len(self.events)})"


class AgentResponseUpdate(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A piece of a streamed run: model text deltas, function calls and function results."""

    contents: tuple[Content, ...] = ()
    role: str = "assistant"
    run_id: str = ""

    @property
    def text(self) -> str:
        return "".join(c.text or "" for c in self.contents if c.type == "text")


def _options_record(options: Mapping[str, Any]) -> dict[str, Any]:
    return {k: to_json(v) for k, v in options.items() if k not in _RUN_OPTION_KEYS and v is not None}


class Agent:
    """An LLM agent: a chat client, instructions, tools and middleware.

    Every run is recorded: ``agent.store`` (a ``MemoryEventStore`` unless another store is given,
    ``store=False`` for none) receives each run's events as the run goes, and
    ``AgentResponse.events`` holds them too. ``event_sinks`` are called with every event the
    moment it is recorded (live logging, tracing); they must not block.

    Arguments:
        client: the chat client (required); ``instructions``: the system instructions.
        name, id, description: how the agent is known (``id`` defaults to ``name``).
        tools: tools or plain callables; middleware: function, agent and chat middleware.
        default_options: ``ChatOptions`` for every run (a run's ``options`` override them).
        store: where events go (see above).
        clock, ids: the sources of time (ns) and ids; inject fixed ones for reproducible logs.
        redact: what of ``function_invocation_kwargs`` a log keeps (``agentledger.redaction``).
        max_iterations: model calls with tools before one last call with ``tool_choice="none"``.
        max_consecutive_errors: erroring batches in a row before that last call.
        max_function_calls: an optional cap on tool calls per run.
        include_detailed_errors: tell the model the exception of a failed tool, not just that it failed.
        sequential_tools: run a batch's calls one after another instead of concurrently.
        event_sinks: live consumers of every event (also of sub-agent runs).
    """

    def __init__(
        self,
        client: BaseChatClient | None = None,
        instructions: str | None = None,
        *,
        name: str | None = None,
        id: str | None = None,
        description: str | None = None,
        tools: Any = None,
        middleware: Sequence[Any] | None = None,
        default_options: Mapping[str, Any] | None = None,
        store: EventStore | bool | None = True,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        redact: Redactor | None = None,
        max_iterations: int = 40,
        max_consecutive_errors: int = 3,
        max_function_calls: int | None = None,
        include_detailed_errors: bool = False,
        sequential_tools: bool = False,
        event_sinks: Sequence[Callable[[Event], None]] = (),
    ) -> None:
        if client is None:
            raise TypeError("Agent needs a chat client: Agent(client=...)")
        self.client = client
        self.instructions = instructions
        self.name = name
        self.description = description or ""
        self.ids: IdSource = ids or RandomIds()
        self.clock: Clock = clock or time.time_ns  # the wall clock (SystemClock), without a wrapper call
        self.id = id or (name or "agent")
        self.tools = normalize_tools(tools)
        self.middleware = list(middleware or ())
        self._layers = split_middleware(self.middleware)
        self.default_options = dict(default_options or {})
        if store is True:
            store = MemoryEventStore()
        self.store: EventStore | None = None if store is False else store
        self.redact = redact or default_redactor
        self.event_sinks = tuple(event_sinks)
        self.config = RunConfig(
            max_iterations=max_iterations,
            max_consecutive_errors=max_consecutive_errors,
            max_function_calls=max_function_calls,
            detailed_errors=include_detailed_errors,
            sequential_tools=sequential_tools,
        )

    def create_session(self, *, session_id: str | None = None) -> AgentSession:
        """A new conversation for this agent (pass it to ``run(session=...)``)."""
        return AgentSession(session_id or self.ids("session"))

    @overload
    def run(
        self,
        messages: str | Content | Message | Sequence[Any] | None = None,
        *,
        stream: Literal[False] = False,
        session: AgentSession | None = None,
        options: Mapping[str, Any] | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        middleware: Sequence[Any] | None = None,
        tools: Any = None,
        **kwargs: Any,
    ) -> Coroutine[Any, Any, AgentResponse]: ...
    @overload
    def run(
        self,
        messages: str | Content | Message | Sequence[Any] | None = None,
        *,
        stream: Literal[True],
        session: AgentSession | None = None,
        options: Mapping[str, Any] | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        middleware: Sequence[Any] | None = None,
        tools: Any = None,
        **kwargs: Any,
    ) -> RunStream: ...
    def run(
        self,
        messages: str | Content | Message | Sequence[Any] | None = None,
        *,
        stream: bool = False,
        session: AgentSession | None = None,
        options: Mapping[str, Any] | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        middleware: Sequence[Any] | None = None,
        tools: Any = None,
        **kwargs: Any,
    ) -> Coroutine[Any, Any, AgentResponse] | RunStream:
        """Run the agent once: model, tools, model... until it answers, and record every step.

        ``await agent.run(...)`` gives the ``AgentResponse``; ``agent.run(..., stream=True)`` is
        ``agent.run_stream(...)``: iterate it for updates as they happen.
        """
        fik = self._legacy_kwargs(function_invocation_kwargs, kwargs)
        _check_session(session)
        run = _Run(self, session, options, fik, client_kwargs, middleware, tools)
        if stream:
            return RunStream(run, messages)
        return run.execute(messages)

    def run_stream(
        self,
        messages: str | Content | Message | Sequence[Any] | None = None,
        *,
        session: AgentSession | None = None,
        options: Mapping[str, Any] | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        middleware: Sequence[Any] | None = None,
        tools: Any = None,
        **kwargs: Any,
    ) -> RunStream:
        """Run the agent, yielding model text deltas, calls and results as they happen.

        Returns a ``RunStream``: leaving early (``break``, or better ``aclose()``/``async with``)
        cancels the run, which is recorded as ``RunFailed`` with ``error_type="Cancelled"``.
        """
        fik = self._legacy_kwargs(function_invocation_kwargs, kwargs)
        _check_session(session)
        return RunStream(_Run(self, session, options, fik, client_kwargs, middleware, tools), messages)

    def _legacy_kwargs(self, fik: Mapping[str, Any] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
        if not kwargs:
            return dict(fik or {})
        warnings.warn(
            "passing runtime values as **kwargs to run() is deprecated; "
            "use function_invocation_kwargs= (tools) or client_kwargs= (the chat client)",
            DeprecationWarning,
            stacklevel=3,
        )
        return {**kwargs, **(fik or {})}

    def as_tool(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        arg_name: str = "task",
        arg_description: str | None = None,
        approval_mode: str = "never_require",
        propagate_session: bool = False,
    ) -> FunctionTool:
        """This agent as a tool of another agent; see ``agentledger.subagents``."""
        from .subagents import agent_tool

        return agent_tool(
            self,
            name=name,
            description=description,
            arg_name=arg_name,
            arg_description=arg_description,
            approval_mode=approval_mode,
            propagate_session=propagate_session,
        )

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, tools={[t.name for t in self.tools]!r})"


class _Run:
    """One call of ``Agent.run``: builds the machine and driver, runs agent middleware."""

    def __init__(
        self,
        agent: Agent,
        session: AgentSession | None,
        options: Mapping[str, Any] | None,
        fik: dict[str, Any],
        client_kwargs: Mapping[str, Any] | None,
        middleware: Sequence[Any] | None,
        tools: Any,
        *,
        parent: tuple[str, str] | None = None,
        share_history: bool = True,
        run_id: str | None = None,
        parent_sink: MirrorSink | None = None,
    ) -> None:
        self.agent = agent
        self.session = session
        self.options = {**agent.default_options, **(options or {})}
        if agent.instructions and "instructions" not in self.options:
            self.options["instructions"] = agent.instructions
        self.fik = fik
        self.client_kwargs = dict(client_kwargs or {})
        layers = split_middleware(middleware) if middleware else None
        self.layers: dict[str, list[Layer]] = {
            kind: agent._layers[kind] + (layers[kind] if layers else []) for kind in agent._layers
        }
        self.tools = agent.tools + normalize_tools(tools) if tools is not None else agent.tools
        self.parent = parent
        self.share_history = share_history
        self.run_id = run_id
        self.parent_sink = parent_sink
        self.on_update: Callable[[AgentResponseUpdate], None] | None = None
        self.finished = False
        self.input_count: int | None = None
        self.machine: RunMachine | None = None

    def _input_count(self) -> int:
        """How many of the transcript's messages are the run's input (the rest it produced)."""
        if self.input_count is None:
            assert self.machine is not None
            self.input_count = len(self.machine.transcript.messages)
        return self.input_count

    async def execute(self, messages: Any, *, stream: bool = False) -> AgentResponse:
        agent, session = self.agent, self.session
        history = session.history if session is not None and self.share_history else []
        run_id = self.run_id or agent.ids("run")
        machine = self.machine = RunMachine(history)
        # The agent's sinks see this run and, through the context, its sub-agents' runs too.
        sinks_token = (
            capture_sinks.set((*capture_sinks.get(), *agent.event_sinks)) if agent.event_sinks else None
        )
        sinks = [self._stream_sink] if self.on_update is not None else []
        recorder = Recorder(machine, run_id, agent.clock, sinks)
        registry = ToolRegistry(self.tools, recorder)
        inputs = normalize_messages(messages)
        _check_approvals(history, inputs)
        recorder.emit(
            RunStarted,
            agent_id=agent.id,
            agent_name=agent.name,
            instructions=self.options.get("instructions"),
            messages=tuple(inputs),
            tools=tuple(t.spec for t in self.tools),
            options=_options_record(self.options),
            function_invocation_kwargs=agent.redact(self.fik),
            client_kwargs_keys=tuple(self.client_kwargs),
            session_id=session.session_id if session is not None else None,
            history_length=len(history),
            config=agent.config,
            parent_run_id=self.parent[0] if self.parent else None,
            parent_call_id=self.parent[1] if self.parent else None,
            session_history=self.share_history,
            provider_name=agent.client.provider_name,
            library_version=__version__,
        )
        driver = RunDriver(
            recorder=recorder,
            registry=registry,
            client=agent.client,
            session=session,
            options=self.options,
            function_invocation_kwargs=self.fik,
            client_kwargs=self.client_kwargs,
            function_layers=self.layers["function"],
            chat_layers=self.layers["chat"],
            store=agent.store,
            on_update=self._model_update if self.on_update is not None else None,
        )
        sink = self._session_sink(recorder, session) if session is not None else None
        unbind = session.bind(sink) if session is not None and sink is not None else None
        context = RunContext(
            agent=agent, run_id=run_id, session=session, options=self.options, kwargs=self.fik
        )
        context._recorder = recorder
        context._session_sink = sink
        token = _current.set(context)
        try:
            return await self._run_agent_layers(recorder, driver, inputs, stream)
        finally:
            self.finished = True
            _current.reset(token)
            if sinks_token is not None:
                capture_sinks.reset(sinks_token)
            if unbind is not None:
                unbind()

    async def _run_agent_layers(
        self, recorder: Recorder, driver: RunDriver, inputs: list[Message], stream: bool
    ) -> AgentResponse:
        context = AgentContext(
            agent=self.agent,
            messages=list(inputs),
            session=self.session,
            options=dict(self.options),
            kwargs=dict(self.fik),
            client_kwargs=dict(self.client_kwargs),
            run_id=recorder.run_id,
            stream=stream,
        )
        finish: list[FinishRun] = []

        async def inner() -> None:
            if finish:
                raise MiddlewareError("agent middleware called call_next() twice: a run runs once")
            self._rewritten(recorder, driver, context, inputs)
            self.input_count = len(recorder.machine.transcript.messages)
            recorder.begin()
            finish.append(await driver.drive())
            context.result = self._response(recorder, driver, finish[0])

        token = writer.set("agent_middleware")
        try:
            if self.layers["agent"]:
                outcome = await run_chain(self.layers["agent"], context, inner, driver._checkpoint)
            else:
                await inner()
                outcome = None
        except MiddlewareTermination as exc:
            if not finish:
                recorder.emit(RunTerminated, iteration=0, reason=str(exc), by="agent_middleware")
                finish.append(_finish_command(recorder))
            context.result = (
                exc.result if exc.result is not None else self._response(recorder, driver, finish[0])
            )
            outcome = None
        except BaseException as exc:
            await self._failed(recorder, driver, exc)
            raise
        finally:
            writer.reset(token)
        if outcome is not None and outcome.short_circuited_by is not None and not finish:
            recorder.emit(
                MiddlewareShortCircuit,
                call_id=None,
                middleware=outcome.short_circuited_by,
                result=to_json(_text_of(context.result)),
                scope="run",
            )
            finish.append(_finish_command(recorder))
        return await self._complete(recorder, driver, context.result, finish[0] if finish else None)

    def _rewritten(
        self, recorder: Recorder, driver: RunDriver, context: AgentContext, inputs: list[Message]
    ) -> None:
        """Record what agent middleware changed before handing over, and use it from here on."""
        changed = {k: v for k, v in context.options.items() if self.options.get(k) != v}
        changed.update({k: None for k in self.options if k not in context.options})
        kwargs_changed = context.kwargs != self.fik
        client_changed = list(context.client_kwargs) != list(self.client_kwargs)
        if context.client_kwargs != self.client_kwargs:
            self.client_kwargs = driver.client_kwargs = dict(context.client_kwargs)
        if kwargs_changed:
            self.fik = driver.fik = dict(context.kwargs)
        if context.messages == inputs and not changed and not kwargs_changed and not client_changed:
            return
        self.options = driver.options = dict(context.options)
        ambient = _current.get()
        if ambient is not None:
            ambient.options, ambient.kwargs = self.options, self.fik
        recorder.emit(
            RunInputRewritten,
            by="agent_middleware",
            messages=tuple(normalize_messages(context.messages)),
            options=_options_record(changed),
            function_invocation_kwargs=self.agent.redact(self.fik) if kwargs_changed else None,
            client_kwargs_keys=tuple(self.client_kwargs) if client_changed else None,
        )

    def _response(self, recorder: Recorder, driver: RunDriver, finish: FinishRun) -> AgentResponse:
        machine = recorder.machine
        transcript = machine.transcript
        messages = transcript.messages[self._input_count() :]
        requests = [
            Content("function_approval_request", call_id=c.call_id, name=c.name, arguments=c.arguments)
            for m in messages
            for c in m.contents
            if c.type == "function_call" and c.call_id in machine.awaiting_approval
        ]
        return AgentResponse(
            messages=messages,
            run_id=recorder.run_id,
            events=recorder.log,
            usage=machine.usage,
            user_input_requests=requests,
            finish_reason=finish.reason,
            session_id=self.session.session_id if self.session is not None else None,
        )

    async def _complete(
        self, recorder: Recorder, driver: RunDriver, result: Any, finish: FinishRun | None
    ) -> AgentResponse:
        if self.session is not None:
            self.session.state.checkpoint(every=True)
        if driver.error is not None:
            await self._failed(recorder, driver, driver.error)
            raise driver.error
        response = result if isinstance(result, AgentResponse) else self._coerce(recorder, result, finish)
        recorder.emit(
            RunCompleted,
            messages=tuple(response.messages),
            text=response.text,
            usage=response.usage,
            reason=finish.reason if finish is not None else "completed",
        )
        await driver.flush()
        if self.session is not None and self.share_history:
            self.session.history.extend(recorder.machine.transcript.messages[: self._input_count()])
            self.session.history.extend(response.messages)
        return response

    def _coerce(self, recorder: Recorder, result: Any, finish: FinishRun | None) -> AgentResponse:
        text = _text_of(result)
        messages = [Message("assistant", (Content.from_text(text),))] if text else []
        return AgentResponse(
            messages=messages,
            run_id=recorder.run_id,
            events=recorder.log,
            finish_reason=finish.reason if finish is not None else "short_circuit",
        )

    async def _failed(self, recorder: Recorder, driver: RunDriver, exc: BaseException) -> None:
        with anyio.CancelScope(shield=True):
            if recorder.machine.phase.value not in ("done", "new"):
                error_type = (
                    "Cancelled" if isinstance(exc, anyio.get_cancelled_exc_class()) else type(exc).__name__
                )
                message = str(exc) if not isinstance(exc, RunError) else str(exc.__cause__ or exc)
                recorder.emit(RunFailed, error_type=error_type, message=message)
            with contextlib.suppress(StoreError):  # the store is what failed: the error below says so
                await driver.flush()

    def _session_sink(self, recorder: Recorder, session: AgentSession) -> MirrorSink:
        """Record session changes in this run, and copy them to the caller that shares the session."""
        session_id = session.session_id
        parent = self.parent_sink

        def sink(by: str, changes: tuple[StateChange, ...], origin: tuple[str, int] | None = None) -> None:
            with recorder.lock:
                fields = {"origin_run_id": origin[0], "origin_seq": origin[1]} if origin else {}
                event = recorder.emit(SessionUpdated, session_id=session_id, by=by, changes=changes, **fields)
                if parent is not None:
                    source = origin or (event.run_id, event.seq)
                    parent(f"{event.run_id}/{by}", changes, source)

        return sink

    def _model_update(self, update: ChatResponseUpdate) -> None:
        assert self.on_update is not None
        assert self.machine is not None
        self.on_update(
            AgentResponseUpdate(contents=update.contents, role=update.role, run_id=self.machine.run_id)
        )

    def _stream_sink(self, event: Event) -> None:
        """Each call's result as the model will see it, the moment it is recorded."""
        assert self.on_update is not None
        call_id: str | None
        if isinstance(event, ToolReturned | MiddlewareShortCircuit):
            call_id, text = event.call_id, result_text(event.result)
        elif isinstance(event, ToolFailed | ArgumentsRejected | ToolNotFound):
            call_id, text = event.call_id, error_text(event, self.agent.config.detailed_errors)
        else:
            return
        if call_id is None:
            return
        content = Content.from_function_result(call_id, result=text)
        self.on_update(AgentResponseUpdate(contents=(content,), role="tool", run_id=event.run_id))


class RunStream:
    """The updates of one streamed run, as an async iterator (``agent.run_stream(...)``).

    The run is driven by a task of its own, started at the first ``__anext__``, so the code
    iterating it keeps its own cancel scopes. Leaving early is safe: ``aclose()`` (or ``async
    with``, or ``contextlib.aclosing``) cancels the run at once and waits for it; a stream that
    is simply dropped after a ``break`` cancels its run when it is collected. Either way the run
    is recorded as ``RunFailed`` with ``error_type="Cancelled"``. A failed run raises its error
    (``ModelCallError``...) to the iterating code.
    """

    def __init__(self, run: _Run, messages: Any) -> None:
        self._run = run
        self._messages = messages
        self._send, self._receive = anyio.create_memory_object_stream[AgentResponseUpdate](math.inf)
        run.on_update = self._send.send_nowait
        self._failure: list[Exception] = []
        self._task: asyncio.Task[None] | None = None
        self._fallback: AsyncGenerator[AgentResponseUpdate, None] | None = None

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> AgentResponseUpdate:
        if self._task is None and self._fallback is None:
            self._start()
        if self._fallback is not None:
            return await self._fallback.__anext__()
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            self._receive.close()
            if self._failure:
                raise self._failure[0] from None
            raise StopAsyncIteration from None

    def _start(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another event loop (trio): a structured fallback
            self._fallback = _stream_in_group(self._run, self._messages, self._send, self._receive)
            return
        self._task = loop.create_task(self._produce())

    async def _produce(self) -> None:
        async with self._send:
            try:
                await self._run.execute(self._messages, stream=True)
            except Exception as exc:  # handed to the consumer at the end of the stream
                self._failure.append(exc)

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
    run: _Run,
    messages: Any,
    send: anyio.abc.ObjectSendStream[AgentResponseUpdate],
    receive: anyio.abc.ObjectReceiveStream[AgentResponseUpdate],
) -> AsyncGenerator[AgentResponseUpdate, None]:
    """Streaming on event loops other than asyncio's: iterate it inside ``aclosing``."""
    failure: list[Exception] = []

    async def produce() -> None:
        async with send:
            try:
                await run.execute(messages, stream=True)
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


def _check_session(session: Any) -> None:
    if session is not None and not isinstance(session, AgentSession):
        raise TypeError(
            f"session= takes an AgentSession (agent.create_session()), not {type(session).__name__}"
        )


def _finish_command(recorder: Recorder) -> FinishRun:
    """The FinishRun the machine just issued (agent middleware ended the run before the loop)."""
    command = recorder.commands.pop()
    assert isinstance(command, FinishRun), command
    return command


def _check_approvals(history: Sequence[Message], inputs: Sequence[Message]) -> None:
    """Refuse approval responses that answer no call awaiting approval in this conversation."""
    answers = [c.call_id for m in inputs for c in m.contents if c.type == "function_approval_response"]
    if not answers:
        return
    messages = [*history, *inputs]
    calls = {c.call_id for m in messages for c in m.contents if c.type == "function_call"}
    done = {c.call_id for m in messages for c in m.contents if c.type == "function_result"}
    unmatched = [a for a in answers if a not in calls or a in done]
    if unmatched:
        raise ApprovalError(
            f"approval responses for {unmatched} match no call awaiting approval; "
            "resume on the session of the run that asked for them"
        )


def _text_of(result: Any) -> str:
    if result is None:
        return ""
    if isinstance(result, AgentResponse):
        return result.text
    return result if isinstance(result, str) else result_text(to_json(result))

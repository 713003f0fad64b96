"""The driver: the narrow anyio loop around the run machine.

It asks the machine for the next command, does that one piece of IO (a model call, a batch of tool
calls), turns what happened into input events and feeds them back. It decides nothing: which
tools are offered, when the loop stops, what a failure becomes for the model are the machine's
rules. Foreign errors are translated where they happen, into recorded events.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import anyio
import anyio.to_thread
import msgspec

from .clients import BaseChatClient, ChatOptions, ChatResponse, merge_updates
from .context import ChatContext, FunctionInvocationContext
from .core.events import (
    ApprovalRequested,
    ArgumentsRejected,
    Event,
    EventBase,
    MiddlewareShortCircuit,
    ModelFailed,
    ModelRequestRewritten,
    ModelResponded,
    RunTerminated,
    ToolCalled,
    ToolFailed,
    ToolReturned,
    ToolsAdded,
    ToolsRemoved,
)
from .core.machine import CallModel, Command, FinishRun, InvokeTools, RunMachine
from .core.messages import Content, Message, Usage
from .errors import MiddlewareTermination, ModelCallError, ModelResponseError, RunError, ToolDefinitionError
from .middleware import Layer, run_chain
from .session import AgentSession, writer
from .store import EventStore, MemoryEventStore
from .tools import ArgumentsError, FunctionTool, normalize_tools

__all__ = ("Recorder", "RunDriver", "ToolRegistry", "capture_sinks", "to_json")

Sink = Callable[[Event], None]
capture_sinks: contextvars.ContextVar[tuple[Sink, ...]] = contextvars.ContextVar(
    "agentledger_capture", default=()
)


def to_json(value: Any) -> Any:
    """A value as JSON-ready builtins (msgspec's rules, mapping keys as strings), or its ``str``
    when it has none (too deep, or of a type msgspec does not know)."""
    try:
        return msgspec.to_builtins(value, str_keys=True)
    except (TypeError, ValueError, RecursionError):
        try:
            return str(value)
        except RecursionError:
            return f"<{type(value).__name__}>"


class Recorder:
    """Stamps input events, feeds them to the machine and keeps the run's log (thread-safe)."""

    def __init__(self, machine: RunMachine, run_id: str, clock: Callable[[], int], sinks: Sequence[Sink]):
        self.machine = machine
        self.run_id = run_id
        self.clock = clock
        self.sinks = tuple(sinks) + capture_sinks.get()
        self.log: list[Event] = []
        self.commands: collections.deque[Command] = collections.deque()
        self.lock = threading.RLock()

    def emit(self, cls: type[EventBase], **fields: Any) -> Event:
        with self.lock:
            machine = self.machine
            event: Any = cls(run_id=self.run_id, seq=machine.next_seq, at=self.clock(), **fields)
            events, commands = machine.handle(event)
            self.log.extend(events)
            if commands:
                self.commands.extend(commands)
            for sink in self.sinks:
                for each in events:
                    sink(each)
        return event  # type: ignore[no-any-return]

    def begin(self) -> None:
        with self.lock:
            self._take(self.machine.begin())

    def _take(self, step: tuple[list[Event], list[Command]]) -> None:
        events, commands = step
        self.log.extend(events)
        if commands:
            self.commands.extend(commands)
        for sink in self.sinks:
            for event in events:
                sink(event)


class ToolRegistry:
    """The run's live tools by name; changes are recorded before they take effect."""

    def __init__(self, tools: Sequence[FunctionTool], recorder: Recorder) -> None:
        self.by_name: dict[str, FunctionTool] = {}
        for item in tools:
            if self.by_name.setdefault(item.name, item) is not item:
                raise ToolDefinitionError(f"two different tools are named {item.name!r}")
        self.recorder = recorder

    @property
    def tools(self) -> list[FunctionTool]:
        return list(self.by_name.values())

    def add(self, items: Any, by_call_id: str | None) -> None:
        """All-or-nothing: a clash anywhere in ``items`` adds none of them."""
        with self.recorder.lock:
            batch: dict[str, FunctionTool] = {}
            for item in normalize_tools(items):
                existing = self.by_name.get(item.name) or batch.get(item.name)
                if existing is None:
                    batch[item.name] = item
                elif existing is not item and existing.func is not item.func:
                    raise ToolDefinitionError(
                        f"a different tool named {item.name!r} is already available in this run"
                    )
            if batch:
                specs = tuple(t.spec for t in batch.values())
                self.recorder.emit(ToolsAdded, by_call_id=by_call_id, tools=specs)
                self.by_name.update(batch)

    def remove(self, items: Any, by_call_id: str | None) -> None:
        """Remove by name, tool or callable; names not in the list are ignored."""
        if isinstance(items, str | FunctionTool) or callable(items):
            items = [items]
        with self.recorder.lock:
            names = [n for n in dict.fromkeys(self._name_of(i) for i in items) if n in self.by_name]
            if names:
                self.recorder.emit(ToolsRemoved, by_call_id=by_call_id, names=tuple(names))
                for name in names:
                    del self.by_name[name]

    def _name_of(self, item: Any) -> str:
        if isinstance(item, str):
            return item
        if isinstance(item, FunctionTool):
            return item.name
        for existing in self.by_name.values():
            if existing.func is item:
                return existing.name
        return str(getattr(item, "__name__", ""))


class _Call:
    """What the innermost handler of one call saw."""

    __slots__ = ("returned", "value")

    def __init__(self) -> None:
        self.returned = False
        self.value: Any = None


class RunDriver:
    """Carries out the machine's commands for one run."""

    def __init__(
        self,
        *,
        recorder: Recorder,
        registry: ToolRegistry,
        client: BaseChatClient,
        session: AgentSession | None,
        options: dict[str, Any],
        function_invocation_kwargs: dict[str, Any],
        client_kwargs: dict[str, Any],
        function_layers: Sequence[Layer],
        chat_layers: Sequence[Layer],
        store: EventStore | None,
        on_update: Callable[[Any], None] | None = None,
    ) -> None:
        self.recorder = recorder
        self.registry = registry
        self.client = client
        self.session = session
        self.options = options
        self.fik = function_invocation_kwargs
        self.client_kwargs = client_kwargs
        self.function_layers = tuple(function_layers)
        self.chat_layers = tuple(chat_layers)
        self.store = store
        self.stored = 0
        self.on_update = on_update
        self.error: RunError | None = None
        self.sequential = recorder.machine.config.sequential_tools
        self._append_nowait: Callable[[str, Sequence[Event], int], int] | None = (
            store.append_nowait if isinstance(store, MemoryEventStore) else None
        )

    async def flush(self) -> None:
        """Append the events not yet stored."""
        log = self.recorder.log
        if self.store is None or self.stored >= len(log):
            return
        pending = log[self.stored :]
        if self._append_nowait is not None:  # an in-memory store: no IO to wait for
            self.stored = self._append_nowait(self.recorder.run_id, pending, self.stored)
        else:
            self.stored = await self.store.append(self.recorder.run_id, pending, self.stored)

    async def drive(self) -> FinishRun:
        """Run the loop until the machine says it is over.

        What happened so far is stored before each model call and each batch of tool calls, so
        a crash in either loses nothing already decided; the end of the run stores the rest.
        """
        commands = self.recorder.commands
        while True:
            command = commands.popleft()
            if type(command) is FinishRun:
                return command
            await self.flush()
            if type(command) is CallModel:
                await self._call_model(command)
            else:
                assert type(command) is InvokeTools
                await self._invoke_tools(command)

    def _checkpoint(self, name: str = "") -> None:
        if self.session is not None:
            self.session.state.checkpoint()

    # -- model calls --------------------------------------------------------------------------

    async def _call_model(self, command: CallModel) -> None:
        options: dict[str, Any] = dict(self.options)
        options["tools"] = [self.registry.by_name[name].spec for name in command.tools]
        options["tool_choice"] = command.tool_choice
        context = ChatContext(
            client=self.client,
            messages=list(command.messages),
            options=options,  # type: ignore[arg-type]
            client_kwargs=dict(self.client_kwargs),
            run_id=self.recorder.run_id,
            iteration=command.iteration,
        )

        original = dict(options) if self.chat_layers else options

        async def final() -> None:
            if self.chat_layers:
                self._rewritten(command, context, original)
            context.result = await self._get_response(context)

        token = writer.set("chat_middleware")
        try:
            if self.chat_layers:
                outcome = await run_chain(self.chat_layers, context, final, self._checkpoint)
                if outcome.short_circuited_by is not None:
                    text = context.result.text if isinstance(context.result, ChatResponse) else None
                    self.recorder.emit(
                        MiddlewareShortCircuit,
                        call_id=None,
                        middleware=outcome.short_circuited_by,
                        result=text,
                        scope="model",
                    )
            else:
                await final()
        except MiddlewareTermination as exc:
            self.recorder.emit(
                RunTerminated, iteration=command.iteration, reason=str(exc), by="chat_middleware"
            )
            return
        except Exception as exc:
            self._model_failed(command.iteration, exc, ModelCallError)
            return
        finally:
            writer.reset(token)
        self._responded(command.iteration, context.result)

    def _rewritten(self, command: CallModel, context: ChatContext, sent: dict[str, Any]) -> None:
        """Record what chat middleware changed in the request before it goes out."""
        now: dict[str, Any] = dict(context.options)
        tools = tuple(getattr(t, "name", str(t)) for t in now.pop("tools", None) or ())
        before = {k: v for k, v in sent.items() if k != "tools"}
        changed = {k: v for k, v in now.items() if before.get(k, _MISSING) != v}
        changed.update({k: None for k in before if k not in now})
        messages = tuple(context.messages)
        if messages == command.messages and tools == command.tools and not changed:
            return
        self.recorder.emit(
            ModelRequestRewritten,
            iteration=command.iteration,
            by="chat_middleware",
            messages=messages,
            tools=tools,
            options={k: to_json(v) for k, v in changed.items()},
        )

    async def _get_response(self, context: ChatContext) -> ChatResponse:
        options: ChatOptions = context.options
        if self.on_update is None:
            return await self.client.get_response(
                context.messages, options=options, client_kwargs=context.client_kwargs
            )
        updates = []
        async for update in self.client.get_streaming_response(
            context.messages, options=options, client_kwargs=context.client_kwargs
        ):
            updates.append(update)
            self.on_update(update)
        return merge_updates(updates)

    def _responded(self, iteration: int, response: Any) -> None:
        if not isinstance(response, ChatResponse):
            error = TypeError(f"the chat client returned {type(response).__name__}, not a ChatResponse")
            self._model_failed(iteration, error, ModelResponseError)
            return
        try:
            contents = tuple(_content(c) for m in response.messages for c in m.contents)
            usage = (
                None
                if response.usage is None
                else msgspec.convert(response.usage, Usage, from_attributes=True)
            )
        except (msgspec.ValidationError, TypeError, ValueError) as exc:
            self._model_failed(
                iteration, ValueError(f"the response cannot be recorded: {exc}"), ModelResponseError
            )
            return
        problem = _malformed(contents)
        if problem is not None:
            self._model_failed(iteration, ValueError(problem), ModelResponseError)
            return
        self.recorder.emit(
            ModelResponded,
            iteration=iteration,
            message=Message("assistant", contents),
            usage=usage,
            finish_reason=_text_or_none(response.finish_reason),
            model=_text_or_none(response.model),
            response_id=_text_or_none(response.response_id),
        )

    def _model_failed(self, iteration: int, exc: Exception, kind: type[RunError]) -> None:
        name = kind.__name__ if kind is ModelResponseError else type(exc).__name__
        event = self.recorder.emit(ModelFailed, iteration=iteration, error_type=name, message=str(exc))
        error = kind(
            f"model call {iteration} failed: {type(exc).__name__}: {exc}",
            run_id=self.recorder.run_id,
            seq=event.seq,
        )
        error.__cause__ = exc
        self.error = error

    # -- tool calls ---------------------------------------------------------------------------

    async def _invoke_tools(self, command: InvokeTools) -> None:
        calls = [(call, self.registry.by_name[call.name or ""]) for call in command.calls]
        if not command.approved and any(t.approval_mode == "always_require" for _, t in calls):
            calls = self._hold_for_approval(calls)
        if self.sequential or len(calls) < 2:
            for call, function in calls:
                await self._invoke_one(command.iteration, call, function)
        elif _on_asyncio():
            await _all_on_asyncio([self._invoke_one(command.iteration, c, f) for c, f in calls])
        else:
            async with anyio.create_task_group() as group:
                for call, function in calls:
                    group.start_soon(self._invoke_one, command.iteration, call, function)

    def _hold_for_approval(
        self, calls: list[tuple[Content, FunctionTool]]
    ) -> list[tuple[Content, FunctionTool]]:
        """Ask approval for the gated calls whose arguments are valid; return the calls to run now.

        Arguments are checked first: a human is never asked to approve a call that cannot run,
        and such a call is rejected (and answered to the model) at once.
        """
        gated: list[str] = []
        runnable = []
        for call, function in calls:
            if function.approval_mode != "always_require":
                runnable.append((call, function))
                continue
            try:
                function.arguments_from(call.arguments)
            except ArgumentsError:
                runnable.append((call, function))  # rejected with its reason when it "runs"
            else:
                gated.append(call.call_id or "")
        if gated:
            self.recorder.emit(ApprovalRequested, call_ids=tuple(gated))
        return runnable

    async def _invoke_one(self, iteration: int, call: Content, function: FunctionTool) -> None:
        call_id = call.call_id or ""
        name = function.name
        emit = self.recorder.emit
        try:
            arguments = function.arguments_from(call.arguments)
        except ArgumentsError as exc:
            emit(ArgumentsRejected, call_id=call_id, name=name, reason=str(exc))
            return
        if not self.function_layers and not function.needs_context:
            await self._invoke_plain(iteration, call_id, function, arguments, None)
            return
        context = FunctionInvocationContext(
            function=function,
            arguments=arguments,
            kwargs=dict(self.fik),
            session=self.session,
            tools=None,
            call_id=call_id,
            run_id=self.recorder.run_id,
            iteration=iteration,
        )
        context._live = (self.registry, call_id)
        if not self.function_layers:
            await self._invoke_plain(iteration, call_id, function, arguments, context)
            return
        state = _Call()
        snapshot = dict(arguments) if self.function_layers else None

        async def final() -> None:
            values = context.arguments
            if snapshot is not None and (values is not arguments or values != snapshot):
                values = function.validate(values)  # middleware changed them: check them again
                context.arguments = values
            emit(ToolCalled, call_id=call_id, name=name, arguments=to_json(values))
            value = function.bind_call(values, context)
            result = await (value() if function.is_async else anyio.to_thread.run_sync(value))
            if function.is_async is False and hasattr(result, "__await__"):
                result = await result
            state.returned, state.value = True, result
            context.result = result

        token = writer.set(call_id)
        try:
            await self._run_function_chain(context, final, state, iteration)
        finally:
            writer.reset(token)

    async def _invoke_plain(
        self,
        iteration: int,
        call_id: str,
        function: FunctionTool,
        arguments: dict[str, Any],
        context: FunctionInvocationContext | None,
    ) -> None:
        """A call without function middleware: the same events as the chain, fewer steps.

        ``context`` is None when the tool takes no context, so none is built.
        """
        emit = self.recorder.emit
        token = writer.set(call_id) if self.session is not None else None  # only sessions ask who wrote
        try:
            emit(ToolCalled, call_id=call_id, name=function.name, arguments=to_json(arguments))
            value = function.bind_call(arguments, context)
            result = await (value() if function.is_async else anyio.to_thread.run_sync(value))
            if function.is_async is False and hasattr(result, "__await__"):
                result = await result
        except MiddlewareTermination as exc:  # raised by the tool itself
            self._checkpoint()
            emit(RunTerminated, iteration=iteration, reason=str(exc), by=call_id)
            emit(ToolReturned, call_id=call_id, name=function.name, result=to_json(exc.result))
        except Exception as exc:
            self._checkpoint()
            error, message = type(exc).__name__, str(exc)
            emit(ToolFailed, call_id=call_id, name=function.name, error_type=error, message=message)
        else:
            if self.session is not None:
                self.session.state.checkpoint()  # while the writer is still this call
            emit(ToolReturned, call_id=call_id, name=function.name, result=to_json(result))
        finally:
            if token is not None:
                writer.reset(token)

    async def _run_function_chain(
        self, context: FunctionInvocationContext, final: Callable[[], Any], state: _Call, iteration: int
    ) -> None:
        call_id, name, emit = context.call_id or "", context.function.name, self.recorder.emit
        try:
            if self.function_layers:
                outcome = await run_chain(self.function_layers, context, final, self._checkpoint)
            else:
                await final()
                outcome = None
        except MiddlewareTermination as exc:
            self._checkpoint()
            emit(RunTerminated, iteration=iteration, reason=str(exc), by=call_id)
            if state.returned:
                emit(ToolReturned, call_id=call_id, name=name, result=to_json(context.result))
            else:
                result = exc.result if exc.result is not None else context.result
                emit(
                    MiddlewareShortCircuit, call_id=call_id, middleware="termination", result=to_json(result)
                )
            return
        except ArgumentsError as exc:
            self._checkpoint()
            emit(ArgumentsRejected, call_id=call_id, name=name, reason=str(exc))
            return
        except Exception as exc:
            self._checkpoint()
            emit(ToolFailed, call_id=call_id, name=name, error_type=type(exc).__name__, message=str(exc))
            return
        self._checkpoint()
        if outcome is not None and outcome.short_circuited_by is not None:
            emit(
                MiddlewareShortCircuit,
                call_id=call_id,
                middleware=outcome.short_circuited_by,
                result=to_json(context.result),
            )
        elif outcome is not None and outcome.overridden_by is not None:
            emit(
                ToolReturned,
                call_id=call_id,
                name=name,
                result=to_json(context.result),
                overridden_by=outcome.overridden_by,
                tool_result=to_json(state.value),
            )
        else:
            emit(ToolReturned, call_id=call_id, name=name, result=to_json(context.result))


_MISSING = object()


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


_TEXT_OR_NONE = frozenset({str, type(None)})


def _content(content: Any) -> Content:
    """A response content as the log can hold it: raw argument text, JSON results, known fields.

    Clients ported from elsewhere hand over arguments as mappings or results as objects; they
    are turned into what the model actually sent (JSON text) rather than stored as they are.
    """
    if not isinstance(content, Content):
        content = msgspec.convert(content, Content, from_attributes=True)
    elif (
        content.result is None
        and type(content.arguments) in _TEXT_OR_NONE
        and type(content.name) is str
        and type(content.call_id) in _TEXT_OR_NONE
        and type(content.text) in _TEXT_OR_NONE
        and content.exception is None
    ):
        return content  # what every well-behaved client sends: nothing to change
    fields: dict[str, Any] = {}
    if content.arguments is not None and not isinstance(content.arguments, str):
        fields["arguments"] = msgspec.json.encode(to_json(content.arguments)).decode()
    if content.result is not None:
        fields["result"] = to_json(content.result)
    for name in ("text", "call_id", "name", "exception"):
        value = getattr(content, name)
        if value is not None and not isinstance(value, str):
            fields[name] = str(value)
    if content.type == "function_call" and content.name is None:
        fields["name"] = ""  # answered as an unknown tool, like any name not offered
    return msgspec.structs.replace(content, **fields) if fields else content  # type: ignore[no-any-return]


async def _all_on_asyncio(calls: list[Coroutine[Any, Any, None]]) -> None:
    """Run a batch's calls as asyncio tasks and wait for all of them.

    Starting a task through an anyio task group costs several times more, and a batch of quick
    calls is dominated by it. This is safe without a task group: each call records its own
    failure and never raises, and cancelling the waiting task cancels every call and waits for
    them to finish before the cancellation goes on.
    """
    loop = asyncio.get_running_loop()
    finished = loop.create_future()
    remaining = len(calls)

    def one_done(_: object) -> None:
        nonlocal remaining
        remaining -= 1
        if remaining == 0 and not finished.done():
            finished.set_result(None)

    tasks = [loop.create_task(call) for call in calls]
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
    for task in tasks:
        error = None if task.cancelled() else task.exception()
        if error is not None:  # a bug in the call's own handling, not a tool's failure
            raise error


def _on_asyncio() -> bool:
    """Whether the running event loop is asyncio's (anyio also runs on trio)."""
    try:
        return asyncio.current_task() is not None
    except RuntimeError:  # no asyncio loop in this thread
        return False


def _malformed(contents: Sequence[Content]) -> str | None:
    """Why a response's function calls cannot be run, or None."""
    seen: set[str] = set()
    for content in contents:
        if content.type != "function_call":
            continue
        if not content.call_id:
            return "a function call has no call id"
        if content.call_id in seen:
            return f"call id {content.call_id!r} appears twice in one response"
        seen.add(content.call_id)
    return None

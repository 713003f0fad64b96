"""One model call: chat middleware around the client, its answer recorded as an input event.

``call_model(binding, command)`` carries out a ``CallModel``: it builds the request the machine
asked for, runs chat middleware and the client (streaming when the run streams), and records what
came back: ``ModelResponded``, or ``ModelFailed`` for a failed call or an answer the log cannot
hold. What chat middleware changed or answered is recorded too. Foreign errors stop here.

The answer is normalised here, at the boundary: token counts must be integers in 0..2**63-1 and
approval flags booleans (else ``ModelResponseError``); a value the log could not give back (text
that is not UTF-8, nesting deeper than ``MAX_DEPTH``) is refused by the recorder's check and
recorded as ``ModelFailed`` the same way.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Sequence
from typing import Any

import msgspec

from ..chat import ChatResponse, merge_updates
from ..context import ChatContext
from ..core.commands import CallModel
from ..core.errors import UnrecordableError
from ..core.events import (
    MiddlewareShortCircuit,
    ModelFailed,
    ModelRequestRewritten,
    ModelResponded,
    RunTerminated,
)
from ..core.limits import INT64_MAX, safe_text
from ..core.loop import StepLog
from ..core.messages import Content, Message, Usage, malformed_calls
from ..errors import MiddlewareFailure, MiddlewareTermination, ModelCallError, ModelResponseError, RunError
from ..middleware import ChainOutcome, run_chain
from ..session import writer
from .binding import RunBinding
from .spec import RUN_LIMITS
from .values import to_recorded

__all__ = ("call_model",)

_MISSING = object()
_TEXT_OR_NONE = frozenset({str, type(None)})
_BOOL_OR_NONE = frozenset({bool, type(None)})


async def call_model(
    binding: RunBinding,
    command: CallModel,
    step: StepLog | None = None,
    current: contextvars.ContextVar[StepLog | None] | None = None,
) -> None:
    """Carry out ``command``; a failure is recorded and kept in ``binding.error``. With ``step``
    and ``current`` (the run's current-step variable), the call records into ``step``: the
    variable is set for the call and reset after."""
    options: dict[str, Any] = {k: v for k, v in binding.options.items() if k not in RUN_LIMITS}
    # The lookups as the comprehension's iterable: a comprehension that named ``binding`` would
    # make it a cell, one more object for the collector for the length of the call.
    options["tools"] = [tool.spec for tool in map(binding.by_name.__getitem__, command.tools)]
    options["tool_choice"] = command.tool_choice
    if command.conversation_id is not None:
        options["conversation_id"] = command.conversation_id
    else:
        options.pop("conversation_id", None)
    layers = binding.spec.layers["chat"]
    # No chat middleware and no stream: the client is called directly (no context to build).
    context = (
        ChatContext(
            client=binding.spec.client,
            messages=command.messages,
            options=options,  # type: ignore[arg-type]
            client_kwargs=dict(binding.client_kwargs) if layers else binding.client_kwargs,
            run_id=binding.run_id,
            iteration=command.iteration,
            session=binding.session,
            stream=binding.on_update is not None,
        )
        if layers or binding.on_update is not None
        else None
    )
    step_token = current.set(step) if current is not None else None
    # The writer names who changed session values: without a session or middleware, no one asks.
    token = writer.set("chat_middleware") if layers or binding.session is not None else None
    result: ChatResponse | None
    try:
        try:
            if context is None:  # every model call of a plain run: no closure, no copies
                result = await binding.spec.client.get_response(
                    command.messages,
                    options=options,  # type: ignore[arg-type]
                    client_kwargs=binding.client_kwargs,
                    **binding.spec.legacy_kwargs,
                )
            elif layers:
                await _through_middleware(binding, command, context, layers)
                result = context.result
            else:
                result = context.result = await _get_response(binding, context, command.final)
        except MiddlewareTermination as exc:
            binding.recorder.record(
                RunTerminated, iteration=command.iteration, reason=str(exc), by="chat_middleware"
            )
            return
        except MiddlewareFailure:
            raise  # fail closed: not a failed model call; the run ends with RunFailed
        except Exception as exc:
            _model_failed(binding, command.iteration, exc, ModelCallError)
            return
        finally:
            if token is not None:
                writer.reset(token)
        _responded(binding, command.iteration, result)
    finally:
        if current is not None and step_token is not None:
            current.reset(step_token)


async def _through_middleware(
    binding: RunBinding, command: CallModel, context: ChatContext, layers: Sequence[Any]
) -> None:
    """Chat middleware around the client; what it changed or answered is recorded.

    ``MiddlewareTermination`` with an answer (``context.result``, or the exception's ``result``,
    a ``ChatResponse``) makes that the model call's answer, as in the reference framework;
    without one it ends the run (the caller records ``RunTerminated``)."""
    sent = dict(context.options)
    called: list[bool] = []

    async def final() -> None:
        _record_request_changes(binding, command, context, sent)
        called.append(True)
        context.result = await _get_response(binding, context, command.final)

    outcome = ChainOutcome()
    try:
        await run_chain(layers, context, final, binding.checkpoint, outcome=outcome)
    except MiddlewareTermination as exc:
        answer = exc.result if isinstance(exc.result, ChatResponse) else context.result
        if not isinstance(answer, ChatResponse):
            raise
        context.result = answer
        if not called:  # answered in the model's place
            outcome.short_circuited_by = outcome.terminated_by
    if outcome.short_circuited_by is not None:
        text = context.result.text if isinstance(context.result, ChatResponse) else None
        binding.recorder.record(
            MiddlewareShortCircuit,
            call_id=None,
            middleware=outcome.short_circuited_by,
            result=text,
            scope="model",
        )


def _record_request_changes(
    binding: RunBinding, command: CallModel, context: ChatContext, sent: dict[str, Any]
) -> None:
    """Record what chat middleware changed in the request before it goes out."""
    now: dict[str, Any] = dict(context.options)
    tools = tuple(getattr(t, "name", str(t)) for t in now.pop("tools", None) or ())
    before = {k: v for k, v in sent.items() if k != "tools"}
    changed = {k: v for k, v in now.items() if before.get(k, _MISSING) != v}
    changed.update({k: None for k in before if k not in now})
    outgoing = context.outgoing
    same = outgoing is command.messages or outgoing == command.messages
    if same and tools == command.tools and not changed:
        return
    messages = tuple(outgoing)
    binding.recorder.record(
        ModelRequestRewritten,
        iteration=command.iteration,
        by="chat_middleware",
        messages=messages,
        tools=tools,
        options={k: to_recorded(v) for k, v in changed.items()},
    )


async def _get_response(binding: RunBinding, context: ChatContext, final: bool) -> ChatResponse:
    client, on_update, legacy = binding.spec.client, binding.on_update, binding.spec.legacy_kwargs
    if on_update is None:
        return await client.get_response(
            context.outgoing, options=context.options, client_kwargs=context.client_kwargs, **legacy
        )
    updates = []
    async for update in client.get_streaming_response(
        context.outgoing, options=context.options, client_kwargs=context.client_kwargs, **legacy
    ):
        updates.append(update)  # the response recorded is every update, calls included
        shown = _without_calls(update) if final else update
        if shown is not None:
            on_update(shown)
    return merge_updates(updates)


_METADATA = ("response_id", "model", "usage", "finish_reason", "conversation_id")


def _without_calls(update: Any) -> Any:
    """An update of the last call, whose calls are not run, as the stream shows it: without its
    calls, and not at all when it held nothing else (as in the reference framework)."""
    contents = getattr(update, "contents", ())
    if not any(c.type == "function_call" for c in contents):
        return update
    kept = tuple(c for c in contents if c.type != "function_call")
    if not kept and all(getattr(update, name, None) is None for name in _METADATA):
        return None
    return msgspec.structs.replace(update, contents=kept)


def _responded(binding: RunBinding, iteration: int, response: Any) -> None:
    if not isinstance(response, ChatResponse):
        wrong = TypeError(f"the chat client returned {type(response).__name__}, not a ChatResponse")
        _model_failed(binding, iteration, wrong, ModelResponseError)
        return
    try:
        contents, problem = _contents(response.messages)
        usage = None if response.usage is None else _usage(response.usage)
    except (msgspec.ValidationError, TypeError, ValueError) as exc:
        error = ValueError(f"the response cannot be recorded: {exc}")
        _model_failed(binding, iteration, error, ModelResponseError)
        return
    if problem is not None:
        _model_failed(binding, iteration, ValueError(problem), ModelResponseError)
        return
    model = response.model
    if model is not None and type(model) is not str:
        model = str(model)
    try:
        cost = _cost(binding, model, usage)
    except Exception as exc:  # the price table is user code: its failure is the call's, recorded
        _model_failed(binding, iteration, ValueError(f"the price table failed: {exc}"), ModelResponseError)
        return
    try:
        binding.recorder.record(
            ModelResponded,
            iteration=iteration,
            message=Message("assistant", contents),
            usage=usage,
            finish_reason=_text_or_none(response.finish_reason),
            model=model,
            response_id=_text_or_none(response.response_id),
            conversation_id=_text_or_none(getattr(response, "conversation_id", None)) or None,
            cost=cost,
        )
    except UnrecordableError as exc:
        _model_failed(
            binding, iteration, ValueError(f"the response cannot be recorded: {exc}"), ModelResponseError
        )


def _cost(binding: RunBinding, model: str | None, usage: Usage | None) -> float | None:
    """The call's price from the run's price table, priced at the time of the answer; None
    without a table, a model name or a usage, or for a model the table does not know."""
    price = binding.spec.price
    if price is None or model is None or usage is None:
        return None
    cost = price(model, usage, binding.spec.clock())
    if cost is None:
        return None
    if type(cost) not in (int, float) or not 0 <= cost < math.inf:
        raise ValueError(f"a price must be a finite number of USD >= 0 or None, not {safe_text(repr(cost))}")
    return float(cost)


_REQUIRED_COUNTS = frozenset({"input_tokens", "output_tokens", "total_tokens"})


def _usage(value: Any) -> Usage:
    """Token counts as the log holds them: integers in 0..2**63-1 (None where the client reported
    none), or a ``ValueError``."""
    usage = msgspec.convert(value, Usage, from_attributes=True)
    for name in usage.__struct_fields__:
        count = getattr(usage, name)
        if count is None and name not in _REQUIRED_COUNTS:
            continue
        if type(count) is not int or not 0 <= count <= INT64_MAX:
            raise ValueError(f"usage.{name} must be an integer in 0..2**63-1, not {safe_text(repr(count))}")
    return usage


def _model_failed(binding: RunBinding, iteration: int, exc: Exception, kind: type[RunError]) -> None:
    name = kind.__name__ if kind is ModelResponseError else safe_text(type(exc).__name__)
    message = binding.scrub(safe_text(str(exc)))
    event = binding.recorder.record(ModelFailed, iteration=iteration, error_type=name, message=message)
    # The caller's message is the log's, scrubbed alike; the client's own error is its cause.
    error = kind(f"model call {iteration} failed: {type(exc).__name__}: {message}", run_id=binding.run_id)
    error.__cause__ = exc
    binding.fail_with(error, event)


def _text_or_none(value: Any) -> str | None:
    return value if value is None or type(value) is str else str(value)


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
        and (type(content.name) is str or (content.name is None and content.type != "function_call"))
        and type(content.call_id) in _TEXT_OR_NONE
        and type(content.text) in _TEXT_OR_NONE
        and content.exception is None
        and type(content.approved) in _BOOL_OR_NONE
        and type(content.type) is str
    ):
        return content  # what every well-behaved client sends: nothing to change
    if type(content.approved) not in _BOOL_OR_NONE:
        raise ValueError(
            f"a content's approved must be true, false or null, not {safe_text(repr(content.approved))}"
        )
    if type(content.type) is not str:
        raise ValueError(f"a content's type must be a str, not {type(content.type).__name__}")
    fields: dict[str, Any] = {}
    if content.arguments is not None and not isinstance(content.arguments, str):
        fields["arguments"] = msgspec.json.encode(to_recorded(content.arguments)).decode()
    if content.result is not None:
        fields["result"] = to_recorded(content.result)
    for name in ("text", "call_id", "name", "exception"):
        value = getattr(content, name)
        if value is not None and not isinstance(value, str):
            fields[name] = str(value)
    if content.type == "function_call" and content.name is None:
        fields["name"] = ""  # answered as an unknown tool, like any name not offered
    return msgspec.structs.replace(content, **fields) if fields else content  # type: ignore[no-any-return]


def _contents(messages: Sequence[Any]) -> tuple[tuple[Content, ...], str | None]:
    """A response's contents as the log can hold them (``_content``), and why its function
    calls cannot be run (None when they can: the core's rule, ``malformed_calls``)."""
    contents = tuple(_content(each) for message in messages for each in message.contents)
    return contents, malformed_calls(contents)

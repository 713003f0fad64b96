"""Agent middleware around a run's loop: what it changed, how it ended the run, what it answered.

``around_loop`` runs the agent's middleware chain with the loop as its innermost step
(``call_next``). Before the loop starts, what the middleware changed of the run's input
(messages, options, kwargs, client kwargs) is recorded as ``RunInputRewritten`` and used from
there on; an unchanged input records nothing. A middleware may end the run before the loop
(``MiddlewareTermination``: ``RunTerminated``), answer in its place without calling
``call_next`` (``MiddlewareShortCircuit``), or replace the loop's answer after it. What it
answered and the run's own response (if the loop ran) go back to the run, which records its
end; a record that fails on the way raises, and the run fails like any other record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..chat import normalize_messages
from ..context import AgentContext
from ..core.commands import FinishRun
from ..core.events import MiddlewareShortCircuit, RunInputRewritten, RunTerminated
from ..core.messages import Message, result_text
from ..errors import MiddlewareError, MiddlewareTermination
from ..middleware import run_chain
from ..providers import provide_after, provide_before
from ..response import AgentResponse
from ..session import AgentSession, writer
from .driver import LocalDriver
from .spec import RunSpec, check_tool_choice, options_record
from .values import to_recorded

__all__ = ("answer_text", "around_loop")


async def around_loop(
    spec: RunSpec,
    driver: LocalDriver,
    inputs: list[Message],
    respond: Callable[[FinishRun], AgentResponse],
    *,
    session: AgentSession | None,
    run_id: str,
    stream: bool,
) -> tuple[Any, AgentResponse | None]:
    """The agent's middleware around the loop ``driver`` runs: what it answered, and the run's
    own response (made by ``respond`` from how the loop ended) if the loop ran."""
    binding, recorder = driver.binding, driver.recorder
    context = AgentContext(
        agent=spec.agent,
        messages=list(inputs),
        session=session,
        options=dict(binding.options),
        kwargs=dict(binding.kwargs),
        client_kwargs=dict(binding.client_kwargs),
        run_id=run_id,
        stream=stream,
    )
    finish: list[FinishRun] = []
    own: list[AgentResponse] = []

    async def inner() -> None:
        if finish:
            raise MiddlewareError("agent middleware called call_next() twice: a run runs once")
        _use_input(spec, driver, context, inputs)
        provided = await provide_before(binding, normalize_messages(context.messages))
        recorder.begin()
        finish.append(await driver.drive())
        own.append(respond(finish[0]))
        await provide_after(provided, own[0])
        context.result = own[0]

    token = writer.set("agent_middleware")
    try:
        outcome = await run_chain(spec.layers["agent"], context, inner, binding.checkpoint)
    except MiddlewareTermination as exc:
        if not finish:  # a reason the log cannot hold fails the run like any other record
            reason = str(exc)
            recorder.record(
                RunTerminated, iteration=0, reason=reason, by="agent_middleware", leaves_history=True
            )
            finish.append(recorder.take_finish())
        # The answer: the exception's result, else what context.result holds (the run's own
        # response after call_next(), or what the middleware set), else the empty response.
        given = exc.result if exc.result is not None else context.result
        context.result = given if given is not None else respond(finish[0])
        outcome = None
    finally:
        writer.reset(token)
    if outcome is not None and outcome.short_circuited_by is not None and not finish:
        # an answer the log cannot hold fails the run like any other record
        recorder.record(
            MiddlewareShortCircuit,
            call_id=None,
            middleware=outcome.short_circuited_by,
            result=to_recorded(answer_text(context.result)),
            scope="run",
            leaves_history=True,
        )
        finish.append(recorder.take_finish())
    return context.result, own[0] if own else None


def answer_text(result: Any) -> str:
    """The text of what agent middleware answered: a response's text, a string, or the text of
    the value as the log records it ("" for None)."""
    if result is None:
        return ""
    if isinstance(result, AgentResponse):
        return result.text
    return result if isinstance(result, str) else result_text(to_recorded(result))


def _use_input(spec: RunSpec, driver: LocalDriver, context: AgentContext, inputs: list[Message]) -> None:
    """Record what agent middleware changed before handing over, and use it from here on."""
    binding = driver.binding
    before = binding.options
    changed = {k: v for k, v in context.options.items() if before.get(k) != v}
    changed.update({k: None for k in before if k not in context.options})
    kwargs_changed = context.kwargs != binding.kwargs
    client_changed = list(context.client_kwargs) != list(binding.client_kwargs)
    kwargs = dict(context.kwargs) if kwargs_changed else binding.kwargs
    client_kwargs = dict(context.client_kwargs)
    if context.messages == inputs and not changed and not kwargs_changed and not client_changed:
        binding.use_input(before, kwargs, client_kwargs)
        return
    check_tool_choice(context.options.get("tool_choice"), spec.tools)
    binding.use_input(dict(context.options), kwargs, client_kwargs)
    driver.recorder.record(
        RunInputRewritten,
        by="agent_middleware",
        messages=tuple(normalize_messages(context.messages)),
        options=options_record(changed),
        function_invocation_kwargs=spec.redact(kwargs) if kwargs_changed else None,
        client_kwargs_keys=tuple(client_kwargs) if client_changed else None,
    )

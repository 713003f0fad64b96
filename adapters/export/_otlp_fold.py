"""The fold from events to span operations: one table of handlers, one per event type.

Theory of operation. Each run is an ``invoke_agent`` span; each model call (``ModelCalled`` up
to ``ModelResponded``/``ModelFailed``) a ``chat`` span under it; each tool call the model made an
``execute_tool`` span under it (``ToolCalled`` up to ``ToolReturned``/``ToolFailed``). A call
settled before its tool ran (``ArgumentsRejected``, ``ToolNotFound``, a middleware short-circuit)
is a span of zero duration at the event that settled it, with ``agentledger.tool.executed``
false. A sub-agent run's span is a child of the ``execute_tool`` span of the call that started
it, in the root run's trace. Everything else (tools added or removed, session changes,
short-circuits, tool choice resets, approvals, limits) is a span event on the innermost open
span it belongs to: the call named in the event, else the open model call, else the run.

The fold is pure: ``apply(event)`` returns operations and never looks at a clock. Content
(messages, arguments, results, instructions, session values) is added only when asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agentledger.core.events import (
    ArgumentsRejected,
    ChildRunStarted,
    Event,
    MiddlewareShortCircuit,
    ModelCalled,
    ModelFailed,
    ModelResponded,
    RunCompleted,
    RunFailed,
    RunInputRewritten,
    RunStarted,
    SessionUpdated,
    ToolCalled,
    ToolChoiceReset,
    ToolFailed,
    ToolNotFound,
    ToolReturned,
    ToolsAdded,
    ToolsRemoved,
)
from agentledger.core.messages import result_text

from ._otlp_attrs import (
    dumps,
    fact_attributes,
    genai_instructions,
    genai_messages,
    input_text,
    openinference_messages,
    response_attributes,
    result_attributes,
    scalar_options,
    session_attributes,
    snake,
    tool_attributes,
    usage_attributes,
)
from ._otlp_model import (
    SPAN_KIND_CLIENT,
    SPAN_KIND_INTERNAL,
    STATUS_ERROR,
    Attributes,
    Op,
    Opened,
    SpanKey,
)
from ._otlp_run import RunSpans, note

__all__ = ("SpanFold",)


class SpanFold:
    """Turns events (any runs, each in seq order) into span operations; see the module docstring."""

    def __init__(
        self,
        *,
        include_content: bool = False,
        provider_name: str | None = None,
        roots: Mapping[str, str] | None = None,
    ) -> None:
        self.content = include_content
        self.provider: Attributes = {}
        if provider_name is not None:
            self.provider = {"gen_ai.provider.name": provider_name, "gen_ai.system": provider_name}
        self.roots = dict(roots or {})
        self.runs: dict[str, RunSpans] = {}

    def apply(self, event: Event) -> list[Op]:
        """The operations one event causes; events of runs whose start was not seen are ignored."""
        if type(event) is RunStarted:
            return self._started(event)
        run = self.runs.get(event.run_id)
        if run is None:
            return []
        handler = _HANDLERS.get(type(event), SpanFold._fact)
        run.last_at = max(run.last_at, event.at)
        if run.transcript is not None:
            run.transcript.apply(event)  # a model call's input is the transcript before its response
        ops: list[Op] = handler(self, run, event)
        if type(event) in (RunCompleted, RunFailed):
            del self.runs[event.run_id]  # a live fold keeps only running runs
        return ops

    def finish(self) -> list[Op]:
        """Close the spans still open (a log that ends mid-run) at their run's last event."""
        ops: list[Op] = []
        for run in list(self.runs.values()):
            ops.extend(run.abandon(run.last_at))
        return ops

    # -- the run ---------------------------------------------------------------------------------

    def _started(self, event: RunStarted) -> list[Op]:
        parent = None
        root = self.roots.get(event.run_id, event.run_id)
        if event.parent_run_id is not None and event.parent_call_id is not None:
            parent = SpanKey(event.parent_run_id, "tool", event.parent_call_id)
            known = self.runs.get(event.parent_run_id)
            root = self.roots.get(event.run_id, known.root if known else event.parent_run_id)
        run = self.runs[event.run_id] = RunSpans(event, root, self.content)
        if self.provider:
            run.provider = self.provider
        elif event.provider_name:  # recorded by the run: the chat client's provider
            run.provider = {"gen_ai.provider.name": event.provider_name, "gen_ai.system": event.provider_name}
        name = event.agent_name or event.agent_id
        attributes: Attributes = {
            "gen_ai.operation.name": "invoke_agent",
            **run.provider,
            "gen_ai.agent.id": event.agent_id,
            **scalar_options(run.options),
            "openinference.span.kind": "AGENT",
            "agentledger.tools.offered": tuple(spec.name for spec in event.tools),
            "agentledger.function_invocation_kwargs.keys": tuple(event.function_invocation_kwargs),
            "agentledger.client_kwargs.keys": event.client_kwargs_keys,
        }
        if event.agent_name is not None:
            attributes["gen_ai.agent.name"] = attributes["agent.name"] = event.agent_name
        if event.parent_run_id is not None:
            attributes["agentledger.parent_run_id"] = event.parent_run_id
        if event.library_version:
            attributes["agentledger.library_version"] = event.library_version
        if self.content:
            attributes.update(self._started_content(run, event))
        return [run.open(run.agent, parent, f"invoke_agent {name}", SPAN_KIND_INTERNAL, event.at,
                           attributes)]  # fmt: skip

    def _started_content(self, run: RunSpans, event: RunStarted) -> Attributes:
        assert run.transcript is not None
        run.transcript.apply(event)
        attributes: Attributes = {
            "gen_ai.input.messages": genai_messages(event.messages),
            "input.value": input_text(event),
            "agentledger.function_invocation_kwargs": dumps(event.function_invocation_kwargs),
        }
        if event.instructions:
            attributes["gen_ai.system_instructions"] = genai_instructions(event.instructions)
        return attributes

    def _rewritten(self, run: RunSpans, event: RunInputRewritten) -> list[Op]:
        run.options.update(event.options)
        attributes: Attributes = {"agentledger.by": event.by, "agentledger.options": tuple(event.options)}
        if run.transcript is not None:
            attributes["agentledger.messages"] = genai_messages(event.messages)
        return [note(run.agent, event, "run_input_rewritten", attributes)]

    def _ended(self, run: RunSpans, event: RunCompleted | RunFailed) -> list[Op]:
        ops: list[Op] = [*run.abandon(event.at, keep=run.agent)]
        if type(event) is RunFailed:
            attributes: Attributes = {"error.type": event.error_type}
            ops.append(run.close(run.agent, event.at, attributes, status_code=STATUS_ERROR,
                                   status_message=event.message))  # fmt: skip
            return ops
        assert type(event) is RunCompleted
        attributes = {"agentledger.run.reason": event.reason, **usage_attributes(event.usage)}
        if self.content:
            attributes["gen_ai.output.messages"] = genai_messages(event.messages)
            attributes["output.value"] = event.text
        ops.append(run.close(run.agent, event.at, attributes))
        return ops

    # -- model calls -----------------------------------------------------------------------------

    def _model_called(self, run: RunSpans, event: ModelCalled) -> list[Op]:
        key = SpanKey(event.run_id, "chat", str(event.seq))
        model = run.options.get("model")
        attributes: Attributes = {
            "gen_ai.operation.name": "chat",
            **run.provider,
            **scalar_options(run.options),
            "openinference.span.kind": "LLM",
            "agentledger.iteration": event.iteration,
            "agentledger.tools.offered": event.tools,
        }
        if isinstance(model, str):
            attributes["llm.model_name"] = model
        if event.tool_choice is not None:
            choice = event.tool_choice
            attributes["agentledger.tool_choice"] = choice if isinstance(choice, str) else dumps(choice)
        if run.transcript is not None:
            seen = run.transcript.messages[: max(0, event.message_count - run.transcript.history_length)]
            attributes["gen_ai.input.messages"] = genai_messages(seen)
            attributes.update(openinference_messages("llm.input_messages", seen))
        run.chat = key
        name = f"chat {model}" if isinstance(model, str) else "chat"
        return [run.open(key, run.agent, name, SPAN_KIND_CLIENT, event.at, attributes)]

    def _model_responded(self, run: RunSpans, event: ModelResponded) -> list[Op]:
        for call in event.message.function_calls:
            call_id = call.call_id or ""
            run.requested[call_id] = call.name or ""
        if run.chat is None:
            return []
        key, run.chat = run.chat, None
        attributes = response_attributes(event, self.content)
        name = f"chat {event.model}" if event.model and "model" not in run.options else None
        return [run.close(key, event.at, attributes, name=name)]

    def _model_failed(self, run: RunSpans, event: ModelFailed) -> list[Op]:
        if run.chat is None:
            return []
        key, run.chat = run.chat, None
        return [run.close(key, event.at, {"error.type": event.error_type}, status_code=STATUS_ERROR,
                            status_message=event.message)]  # fmt: skip

    # -- tool calls ------------------------------------------------------------------------------

    def _tool_opened(self, run: RunSpans, call_id: str, name: str, at: int, executed: bool) -> Opened:
        key = run.tool_key(call_id)
        run.calls[call_id] = key
        attributes = tool_attributes(name, call_id, run.specs.get(name), executed)
        return run.open(key, run.agent, f"execute_tool {name}", SPAN_KIND_INTERNAL, at, attributes)

    def _tool_called(self, run: RunSpans, event: ToolCalled) -> list[Op]:
        opened = self._tool_opened(run, event.call_id, event.name, event.at, True)
        if self.content:
            arguments = dumps(event.arguments)
            opened.attributes.update({"gen_ai.tool.call.arguments": arguments, "input.value": arguments,
                                      "input.mime_type": "application/json"})  # fmt: skip
        return [opened]

    def _settled(self, run: RunSpans, call_id: str, name: str, at: int) -> tuple[list[Op], SpanKey]:
        """The call's open span, opened here (zero duration) when its tool never ran."""
        if call_id in run.calls:
            return [], run.calls[call_id]
        opened = self._tool_opened(run, call_id, name, at, False)
        return [opened], opened.key

    def _tool_returned(self, run: RunSpans, event: ToolReturned) -> list[Op]:
        ops, key = self._settled(run, event.call_id, event.name, event.at)
        run.calls.pop(event.call_id, None)
        attributes: Attributes = {}
        if event.overridden_by is not None:
            attributes["agentledger.overridden_by"] = event.overridden_by
        if self.content:
            attributes.update(result_attributes(event.result))
        return [*ops, run.close(key, event.at, attributes)]

    def _tool_failed(self, run: RunSpans, event: ToolFailed | ArgumentsRejected | ToolNotFound) -> list[Op]:
        ops, key = self._settled(run, event.call_id, event.name, event.at)
        run.calls.pop(event.call_id, None)
        if type(event) is ToolFailed:  # the tool's own exception text is content: it may hold data
            error, message = event.error_type, event.message if self.content else event.error_type
        else:
            error, message = type(event).__name__, event.reason  # type: ignore[union-attr]
        return [*ops, run.close(key, event.at, {"error.type": error}, status_code=STATUS_ERROR,
                                  status_message=message)]  # fmt: skip

    def _short_circuit(self, run: RunSpans, event: MiddlewareShortCircuit) -> list[Op]:
        attributes: Attributes = {"agentledger.middleware": event.middleware}
        if self.content and event.result is not None:
            attributes["agentledger.result"] = result_text(event.result)
        if event.call_id is None:
            return [note(run.target(None), event, "middleware_short_circuit", attributes)]
        name = run.requested.get(event.call_id, "")
        ops, key = self._settled(run, event.call_id, name, event.at)
        run.calls.pop(event.call_id, None)
        closing: Attributes = {"agentledger.short_circuited_by": event.middleware}
        if self.content:
            closing.update(result_attributes(event.result))
        noted = note(key, event, "middleware_short_circuit", attributes)
        return [*ops, noted, run.close(key, event.at, closing)]

    # -- facts recorded as span events -----------------------------------------------------------

    def _tools_added(self, run: RunSpans, event: ToolsAdded) -> list[Op]:
        run.specs.update({spec.name: spec for spec in event.tools})
        attributes: Attributes = {"agentledger.tools": tuple(spec.name for spec in event.tools)}
        if event.by_call_id is not None:
            attributes["agentledger.by_call_id"] = event.by_call_id
        return [note(run.target(event.by_call_id), event, "tools_added", attributes)]

    def _tools_removed(self, run: RunSpans, event: ToolsRemoved) -> list[Op]:
        attributes: Attributes = {"agentledger.tools": event.names}
        if event.by_call_id is not None:
            attributes["agentledger.by_call_id"] = event.by_call_id
        return [note(run.target(event.by_call_id), event, "tools_removed", attributes)]

    def _session_updated(self, run: RunSpans, event: SessionUpdated) -> list[Op]:
        call_id = event.by if event.origin_run_id is None else run.children.get(event.by.split("/", 1)[0])
        attributes = session_attributes(event, self.content)
        return [note(run.target(call_id), event, "session_updated", attributes)]

    def _child_started(self, run: RunSpans, event: ChildRunStarted) -> list[Op]:
        run.children[event.child_run_id] = event.call_id
        attributes: Attributes = {
            "agentledger.child_run_id": event.child_run_id,
            "agentledger.propagate_session": event.propagate_session,
        }
        if event.agent_name is not None:
            attributes["gen_ai.agent.name"] = event.agent_name
        return [note(run.target(event.call_id), event, "child_run_started", attributes)]

    def _tool_choice_reset(self, run: RunSpans, event: ToolChoiceReset) -> list[Op]:
        attributes: Attributes = {"agentledger.iteration": event.iteration}
        if event.previous is not None:
            previous = event.previous
            attributes["agentledger.previous"] = previous if isinstance(previous, str) else dumps(previous)
        return [note(run.agent, event, "tool_choice_reset", attributes)]

    def _fact(self, run: RunSpans, event: Event) -> list[Op]:
        """Any other event (approvals, limits, terminations, types added later): a span event with
        the event's scalar fields, on the innermost open span it belongs to."""
        target = run.target(getattr(event, "call_id", None))
        return [note(target, event, snake(type(event).__name__), fact_attributes(event))]


_HANDLERS: dict[type, Callable[[SpanFold, RunSpans, Any], list[Op]]] = {
    RunInputRewritten: SpanFold._rewritten,
    ModelCalled: SpanFold._model_called,
    ModelResponded: SpanFold._model_responded,
    ModelFailed: SpanFold._model_failed,
    ToolCalled: SpanFold._tool_called,
    ToolReturned: SpanFold._tool_returned,
    ToolFailed: SpanFold._tool_failed,
    ArgumentsRejected: SpanFold._tool_failed,
    ToolNotFound: SpanFold._tool_failed,
    MiddlewareShortCircuit: SpanFold._short_circuit,
    ToolsAdded: SpanFold._tools_added,
    ToolsRemoved: SpanFold._tools_removed,
    SessionUpdated: SpanFold._session_updated,
    ChildRunStarted: SpanFold._child_started,
    ToolChoiceReset: SpanFold._tool_choice_reset,
    RunCompleted: SpanFold._ended,
    RunFailed: SpanFold._ended,
}

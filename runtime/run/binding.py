"""RunBinding: what the steps of one run work with, wherever they execute.

A binding joins a ``RunSpec`` to a ``Recorder``: the run's live tools (``ToolRegistry``), its
session, the options and kwargs in force (agent middleware may replace them before the loop
starts). It is also the ambient ``RunContext`` tools and sub-agents see (a subclass: one object
for both). ``bound()`` makes the session
record into this run and the context current for the code inside the block: the local driver
holds it for the whole run, a Temporal step for one model or tool call.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..context import Recorder, RunContext, SessionSink, enter_run, leave_run
from ..core.events import Event, SessionUpdated, StateChange
from ..errors import RunError
from ..redaction import hidden_values, mask_values, scrub_text
from ..session import AgentSession
from ..tools import FunctionTool
from .recorder import RunRecorder
from .registry import ToolRegistry, tools_by_name
from .spec import RunSpec

__all__ = ("RunBinding",)

_MAKING = threading.Lock()
"""Held while a binding makes its registry (rare: once per run that changes its tools)."""


class RunBinding(RunContext):
    """One run's spec and recorder, with the live state its steps share; the run's
    ``RunContext`` too (what ``current_run_context()`` gives inside it), so a run in flight
    keeps one object for both."""

    __slots__ = (
        "_configured", "_error_event", "_previous", "_registry", "_unbind", "client_kwargs", "error",
        "on_update", "spec", "write_ahead",
    )  # fmt: skip

    def __init__(
        self,
        spec: RunSpec,
        recorder: Recorder,
        session: AgentSession | None,
        *,
        on_update: Callable[[Any], None] | None = None,
    ) -> None:
        super().__init__(
            agent=spec.agent,
            run_id=recorder.run_id,
            session=session,
            options=dict(spec.options),
            kwargs=dict(spec.function_invocation_kwargs),
            recorder=recorder,
            session_sink=self._session_sink(session, recorder) if session is not None else None,
            store=spec.store,
        )
        self.spec = spec
        self.recorder: Recorder = recorder
        self._configured = tools_by_name(spec.tools)  # shared by the runs of the same tools
        self._registry: ToolRegistry | None = None  # made on the first change of the tools
        self.client_kwargs: dict[str, Any] = dict(spec.client_kwargs)
        self.on_update = on_update
        self.write_ahead: Callable[[], Awaitable[None]] | None = None
        """Stores what the run recorded so far; awaited once a call is recorded as started and
        before its tool runs (``None``: a run nothing could repeat, whose calls are stored after)."""
        self.error: RunError | None = None
        """The model failure that ended the run, raised to the caller once the run is recorded."""
        self._error_event: Event | None = None
        self._previous: RunContext | None = None  # the run current before ``enter``
        self._unbind: Callable[[], None] | None = None

    @property
    def by_name(self) -> Mapping[str, FunctionTool]:
        """The tools the run can call now, by name (to read: change them through ``registry``)."""
        registry = self._registry
        return self._configured if registry is None else registry.by_name

    @property
    def registry(self) -> ToolRegistry:
        """The run's live tools, made the first time they are asked for (a run that changes no
        tools, most runs, makes none); a run recorded in this process follows it from then on
        (``RunRecorder.follow``: each kept ``ToolsAdded`` or ``ToolsRemoved`` settles it)."""
        registry = self._registry
        if registry is None:
            with _MAKING:  # a sync tool's worker thread may ask at the same time as the run
                registry = self._registry
                if registry is None:
                    registry = self._registry = ToolRegistry(self.spec.tools, self.recorder)
                    if isinstance(self.recorder, RunRecorder):
                        self.recorder.follow(registry)
        return registry

    def scrub(self, text: str) -> str:
        """An error text as the log may keep it: every value the run was given that its log must
        not show (kwargs its redaction policy hides, any ``client_kwargs`` value) is cut out, in
        each form it takes on the wire, then credentials are hidden (``scrub_text``)."""
        hidden = hidden_values(self.kwargs, self.spec.redact(self.kwargs)) if self.kwargs else []
        hidden += _strings(self.client_kwargs, 0)
        return scrub_text(mask_values(text, hidden, shortest=4) if hidden else text)

    def use_input(
        self, options: dict[str, Any], kwargs: dict[str, Any], client_kwargs: dict[str, Any]
    ) -> None:
        """Agent middleware replaced the run's options or kwargs: the loop uses these."""
        self.options, self.kwargs, self.client_kwargs = options, kwargs, client_kwargs

    def fail_with(self, error: RunError, event: Event) -> None:
        """Keep the model failure ``error``, recorded as ``event``, for the driver to raise."""
        self.error, self._error_event = error, event

    def raised_error(self) -> RunError | None:
        """The model failure to raise, naming the ``seq`` its event got in the run's log (a
        step's events are numbered when the run's owner keeps them)."""
        error, event = self.error, self._error_event
        if error is not None and event is not None:
            error.seq = event.seq
        return error

    def checkpoint(self) -> None:
        """Record in-place changes the current writer made to session values."""
        if self.session is not None:
            self.session.state.checkpoint()

    def bound(self) -> contextlib.AbstractContextManager[RunContext]:
        """The session records into this run, and the run is the current one, inside the block
        (``enter`` and ``leave`` around it; a binding is held once)."""
        return _Bound(self)

    def enter(self) -> RunContext:
        """Hold the binding: the session records into this run and the run is the current one,
        until ``leave``. A driver that holds it for a whole run calls the two itself (no context
        manager object for the run to keep while it waits); ``bound()`` wraps them for a block."""
        session, sink = self.session, self.session_sink
        if session is not None and sink is not None:
            self._unbind = session.bind(sink)
        self._previous = enter_run(self)
        return self

    def leave(self) -> None:
        """Undo ``enter``: the run current before is current again, the session unbound."""
        previous, unbind = self._previous, self._unbind
        self._previous = self._unbind = None
        leave_run(previous)
        if unbind is not None:
            unbind()

    @staticmethod
    def _session_sink(session: AgentSession, recorder: Recorder) -> SessionSink:
        """Record session changes in this run (a caller sharing the session is given a copy of
        each as the run's owner keeps it: ``RunRecorder.copy_session_writes``)."""
        session_id = session.session_id

        def sink(by: str, changes: tuple[StateChange, ...], origin: tuple[str, int] | None = None) -> None:
            if origin is None:
                recorder.record(SessionUpdated, session_id=session_id, by=by, changes=changes)
            else:
                recorder.record(
                    SessionUpdated,
                    session_id=session_id,
                    by=by,
                    changes=changes,
                    origin_run_id=origin[0],
                    origin_seq=origin[1],
                )

        return sink


class _Bound:
    """``RunBinding.bound()``: ``enter`` and ``leave`` as a plain context manager."""

    __slots__ = ("binding",)

    def __init__(self, binding: RunBinding) -> None:
        self.binding = binding

    def __enter__(self) -> RunContext:
        return self.binding.enter()

    def __exit__(self, *exc_info: object) -> None:
        self.binding.leave()


def _strings(value: Any, depth: int) -> list[str]:
    """The text leaves of a JSON-like value (the values of ``client_kwargs``, never recorded)."""
    if isinstance(value, str):
        return [value]
    if depth > 32:
        return []
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v, depth + 1)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v, depth + 1)]
    return []

"""The run's live tools by name; every change is recorded before it takes effect."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from ..context import Recorder
from ..core.events import Event, ToolsAdded, ToolsRemoved
from ..errors import ToolDefinitionError
from ..tools import FunctionTool, normalize_tools

__all__ = ("ToolRegistry", "tools_by_name")

_CHANGES = threading.RLock()
"""Held for a change of any run's tools: sync tools run in worker threads, and a change is all or
nothing. One for all registries, since changes are rare and brief (a lock per run would be
made by every run, most of which change nothing)."""


_last: tuple[Sequence[FunctionTool], dict[str, FunctionTool]] | None = None
"""The tools of the last registry made from a tuple, and their mapping by name: runs of an agent
whose tools did not change share one tuple (``Agent.run_spec``), so they share its mapping too
until one of them changes its tools (a run waiting on its model holds one mapping fewer)."""


def tools_by_name(tools: Sequence[FunctionTool]) -> dict[str, FunctionTool]:
    """``tools`` by name, shared with every registry made from the same tuple (never changed in
    place: a registry copies it before its first change)."""
    global _last
    last = _last
    if last is not None and last[0] is tools:
        return last[1]
    by_name: dict[str, FunctionTool] = {}
    for item in tools:
        if by_name.setdefault(item.name, item) is not item:
            raise ToolDefinitionError(f"two different tools are named {item.name!r}")
    if type(tools) is tuple:  # immutable: the same object means the same tools
        _last = (tools, by_name)
    return by_name


class ToolRegistry:
    """The tools a run can call now: its configured tools, then what tools added or removed.

    ``by_name`` is the run's live mapping; read it, and change it only through the methods
    here (it starts shared with other runs of the same tools and is copied on the first change).
    """

    def __init__(self, tools: Sequence[FunctionTool], recorder: Recorder) -> None:
        self.by_name = tools_by_name(tools)
        self._shared = True  # ``by_name`` is not this run's own yet
        self.recorder = recorder
        self._configured = tools
        # Tools added while the run went on, by name, the latest under each (made by the first
        # add: most runs change no tools, and a run in flight then holds no second mapping).
        self._added: dict[str, FunctionTool] | None = None

    @property
    def tools(self) -> list[FunctionTool]:
        return list(self.by_name.values())

    def add(self, items: Any, by_call_id: str | None) -> None:
        """All-or-nothing: a clash anywhere in ``items`` adds none of them."""
        with _CHANGES:
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
                self.recorder.record(ToolsAdded, by_call_id=by_call_id, tools=specs)
                self._own().update(batch)
                if self._added is None:
                    self._added = {}
                self._added.update(batch)

    def remove(self, items: Any, by_call_id: str | None) -> None:
        """Remove by name, tool or callable; names not in the list are ignored."""
        if isinstance(items, str | FunctionTool) or callable(items):
            items = [items]
        with _CHANGES:
            names = [n for n in dict.fromkeys(self._name_of(i) for i in items) if n in self.by_name]
            if names:
                self.recorder.record(ToolsRemoved, by_call_id=by_call_id, names=tuple(names))
                by_name = self._own()
                for name in names:  # recording may have settled the removal already (a replay)
                    by_name.pop(name, None)

    def __call__(self, events: Sequence[Event]) -> None:
        """Settle each tool change among ``events`` as the run's owner keeps them: the registry
        is the owner's observer in a run with no other live state to follow (no object made
        for it, as a bound method would be)."""
        for event in events:
            if type(event) is ToolsAdded or type(event) is ToolsRemoved:
                self.settle(event)

    def settle(self, event: ToolsAdded | ToolsRemoved) -> None:
        """Follow the log: apply a kept change again, so the live tools are the log's. Changes
        of concurrent calls reach the log in the model's order of the calls, not in the order
        they happened (one call removing a tool another adds); settling each as it is kept
        leaves the tools the next model call is offered, as a rebuild from the log has them."""
        with _CHANGES:
            by_name = self._own()
            if isinstance(event, ToolsAdded):
                for spec in event.tools:
                    tool = self._known(spec.name)
                    if tool is not None:
                        by_name[spec.name] = tool
            else:
                for name in event.names:
                    by_name.pop(name, None)

    def provide(self, tools: Sequence[FunctionTool]) -> None:
        """Tools a context provider offers this run (recorded by the caller as
        ``ContextProvided``): each is kept under its name unless the run has a tool of that name."""
        with _CHANGES:
            by_name = self._own()
            for tool in tools:
                by_name.setdefault(tool.name, tool)

    def _own(self) -> dict[str, FunctionTool]:
        """``by_name``, made this run's own first if it is still shared (call under ``_CHANGES``)."""
        if self._shared:
            self.by_name = dict(self.by_name)
            self._shared = False
        return self.by_name

    def _known(self, name: str) -> FunctionTool | None:
        """The tool the run last had under ``name`` (what a kept change refers to)."""
        if self._added is not None and name in self._added:
            return self._added[name]
        for tool in self._configured:
            if tool.name == name:
                return tool
        return None

    def _name_of(self, item: Any) -> str:
        if isinstance(item, str):
            return item
        if isinstance(item, FunctionTool):
            return item.name
        for existing in self.by_name.values():
            if existing.func is item:
                return existing.name
        return str(getattr(item, "__name__", ""))

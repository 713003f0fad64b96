"""The run's live tools by name; every change is recorded before it takes effect."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from ..context import Recorder
from ..core.events import ToolsAdded, ToolsRemoved
from ..errors import ToolDefinitionError
from ..tools import FunctionTool, normalize_tools

__all__ = ("ToolRegistry",)


class ToolRegistry:
    """The tools a run can call now: its configured tools, then what tools added or removed."""

    def __init__(self, tools: Sequence[FunctionTool], recorder: Recorder) -> None:
        self.by_name: dict[str, FunctionTool] = {}
        for item in tools:
            if self.by_name.setdefault(item.name, item) is not item:
                raise ToolDefinitionError(f"two different tools are named {item.name!r}")
        self.known: dict[str, FunctionTool] = dict(self.by_name)
        """Every tool the run has had under each name (what a kept change refers to)."""
        self.recorder = recorder
        self.lock = threading.RLock()  # sync tools run in worker threads: a change is all or nothing

    @property
    def tools(self) -> list[FunctionTool]:
        return list(self.by_name.values())

    def add(self, items: Any, by_call_id: str | None) -> None:
        """All-or-nothing: a clash anywhere in ``items`` adds none of them."""
        with self.lock:
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
                self.by_name.update(batch)
                self.known.update(batch)

    def remove(self, items: Any, by_call_id: str | None) -> None:
        """Remove by name, tool or callable; names not in the list are ignored."""
        if isinstance(items, str | FunctionTool) or callable(items):
            items = [items]
        with self.lock:
            names = [n for n in dict.fromkeys(self._name_of(i) for i in items) if n in self.by_name]
            if names:
                self.recorder.record(ToolsRemoved, by_call_id=by_call_id, names=tuple(names))
                for name in names:
                    del self.by_name[name]

    def settle(self, event: ToolsAdded | ToolsRemoved) -> None:
        """Follow the log: apply a kept change again, so the live tools are the log's. Changes
        of concurrent calls reach the log in the model's order of the calls, not in the order
        they happened (one call removing a tool another adds); settling each as it is kept
        leaves the tools the next model call is offered, as a rebuild from the log has them."""
        with self.lock:
            if isinstance(event, ToolsAdded):
                for spec in event.tools:
                    tool = self.known.get(spec.name)
                    if tool is not None:
                        self.by_name[spec.name] = tool
            else:
                for name in event.names:
                    self.by_name.pop(name, None)

    def _name_of(self, item: Any) -> str:
        if isinstance(item, str):
            return item
        if isinstance(item, FunctionTool):
            return item.name
        for existing in self.by_name.values():
            if existing.func is item:
                return existing.name
        return str(getattr(item, "__name__", ""))

"""An MCP tool's input-schema ``pattern`` cannot hold the event loop for long.

The pattern is the server's and the string the model's: ``^(a+)+$`` against 29 characters
backtracks for about 25 seconds in ``re``, during which no other run of the process moves. A
pattern that may backtrack is matched in a worker process within ``PATTERN_TIMEOUT``; past it the
arguments are refused like any that fail the schema (``ArgumentsRejected`` in a run), and the
next check gets a new worker.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentledger import ArgumentsError
from agentledger.adapters.mcp import MCPFunctionTool, _patterns


class Server:
    name = "patterns"

    async def call_tool(self, tool_name: str, **kwargs: Any) -> Any:
        return "called"


def tool(pattern: str) -> MCPFunctionTool:
    schema = {"type": "object", "properties": {"v": {"type": "string", "pattern": pattern}}}
    return MCPFunctionTool(Server(), name="t", remote_name="t", description="d", input_schema=schema)


@pytest.mark.parametrize(
    ("pattern", "simple"),
    [("^[a-z]+$", True), (r"^\d{4}-\d{2}-\d{2}$", True), (r"^a\+b+$", True), ("^(a+)+$", False),
     ("^(ab)*c$", False), ("^a+b+$", False), (r"^(a)\1$", False), (r"^(?P<x>a)(?P=x)$", False)],
)  # fmt: skip
def test_patterns_that_may_backtrack_far_are_told_apart(pattern: str, simple: bool) -> None:
    assert _patterns.simple(pattern) is simple


def test_a_backtracking_pattern_is_stopped_and_the_arguments_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_patterns, "PATTERN_TIMEOUT", 0.5)
    checked = tool("^(a+)+$")
    with pytest.raises(ArgumentsError, match=r"took longer than 0.5 s.* at \$\.v"):
        checked.validate({"v": "a" * 40 + "!"})  # hours of backtracking in re
    assert checked.validate({"v": "aaaa"}) == {"v": "aaaa"}  # a new worker answers the next check


def test_patterns_checked_in_the_worker_still_accept_and_refuse() -> None:
    checked = tool("^(ab)+$")
    assert checked.validate({"v": "abab"}) == {"v": "abab"}
    with pytest.raises(ArgumentsError, match="'aba' does not match"):
        checked.validate({"v": "aba"})
    simple = tool("^[a-z]+$")
    with pytest.raises(ArgumentsError, match="'AB' does not match"):
        simple.validate({"v": "AB"})

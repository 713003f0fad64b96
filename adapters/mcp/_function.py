"""One tool of an MCP server as a ``FunctionTool``: the server's schema, checked locally.

The tool offers the model the server's input schema as it was listed, checks the model's
arguments against it with ``jsonschema`` before anything is sent (a refusal is an
``ArgumentsRejected`` like for any tool), and runs a call by sending ``tools/call`` through the
server it came from. Nothing but the call itself needs the connection: the schema and the
checks are the tool's own, so a rerun's stand-in (``FunctionTool.with_body``), which keeps a
tool's checks and replaces its body, works with the server stopped.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import msgspec

from agentledger.errors import ArgumentsError, ToolDefinitionError
from agentledger.tools import ApprovalMode, FunctionTool

from ._patterns import PatternTimeout, search

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = ("MCPFunctionTool", "ToolCaller")


class ToolCaller(Protocol):
    """What a tool needs of its server: a way to call a tool by its name on the server."""

    name: str

    async def call_tool(self, tool_name: str, **kwargs: Any) -> Any: ...


class _RemoteCall:
    """The body of an MCP tool: the validated arguments, sent to the server as they are."""

    # The arguments are the server's: its schema describes them, not this signature.
    __signature__ = inspect.Signature()

    def __init__(self, server: ToolCaller, remote_name: str) -> None:
        self.server = server
        self.remote_name = remote_name

    async def __call__(self, /, **arguments: Any) -> Any:
        return await self.server.call_tool(self.remote_name, **arguments)

    def __repr__(self) -> str:
        return f"<tool {self.remote_name!r} of MCP server {self.server.name!r}>"


def mcp_origin(server_name: str) -> str:
    """What ``ToolSpec.origin`` says of a tool that MCP server ``server_name`` lists."""
    return f"mcp:{server_name}"


class MCPFunctionTool(FunctionTool):
    """A tool listed by an MCP server (``server``), called there under ``remote_name``.

    ``name`` is what the model sees (``remote_name`` with the server's ``tool_name_prefix``, and
    ``-`` for characters a tool name cannot hold). ``parameters`` is the server's input schema.
    """

    def __init__(
        self,
        server: ToolCaller,
        *,
        name: str,
        remote_name: str,
        description: str,
        input_schema: Mapping[str, Any],
        approval_mode: ApprovalMode = "never_require",
    ) -> None:
        schema = copy.deepcopy(dict(input_schema))
        checker: type[Validator] = jsonschema.validators.validator_for(
            schema, default=jsonschema.Draft202012Validator
        )
        try:
            checker.check_schema(schema)
        except jsonschema.exceptions.SchemaError as exc:
            raise ToolDefinitionError(
                f"tool {remote_name!r} of MCP server {server.name!r} has an invalid input schema: "
                f"{exc.message}"
            ) from exc
        super().__init__(
            _RemoteCall(server, remote_name),
            name=name,
            description=description,
            approval_mode=approval_mode,
            schema=schema,
        )
        # The spec names its server, so a rerun restores each server's own tools from the log.
        self.spec = msgspec.structs.replace(self.spec, origin=mcp_origin(server.name))
        self.server = server
        self.remote_name = remote_name
        self.input_schema = schema
        bounded = jsonschema.validators.extend(checker, {"pattern": _bounded_pattern})  # type: ignore[no-untyped-call]
        self._checker = bounded(schema, format_checker=checker.FORMAT_CHECKER)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as they are, if the server's input schema accepts them; else
        ``ArgumentsError`` naming each problem and where it is (``$.path``)."""
        values = dict(arguments)
        problems = sorted(self._checker.iter_errors(values), key=lambda e: [str(p) for p in e.absolute_path])
        if problems:
            raise ArgumentsError("; ".join(_describe(problem) for problem in problems))
        return values

    def same_as(self, description: str, input_schema: Mapping[str, Any], approval_mode: str) -> bool:
        """Whether a new listing describes this tool unchanged (it is then kept as it is)."""
        return (
            self.description == description
            and self.input_schema == dict(input_schema)
            and self.approval_mode == approval_mode
        )

    def __repr__(self) -> str:
        return f"MCPFunctionTool(name={self.name!r}, server={self.server.name!r})"


def _bounded_pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Any:
    """The ``pattern`` keyword, matched within a time budget (``_patterns``): a server's pattern
    and a model's string cannot hold the event loop for longer than ``PATTERN_TIMEOUT``."""
    if not validator.is_type(instance, "string") or not isinstance(pattern, str):
        return
    try:
        matched = search(pattern, instance)
    except PatternTimeout as exc:
        yield jsonschema.exceptions.ValidationError(f"{exc}: the value was not accepted")
        return
    if not matched:
        yield jsonschema.exceptions.ValidationError(f"{instance!r} does not match {pattern!r}")


def _describe(problem: jsonschema.exceptions.ValidationError) -> str:
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in problem.absolute_path)
    return f"{problem.message} - at ${where}" if where else problem.message

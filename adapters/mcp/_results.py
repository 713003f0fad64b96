"""What an MCP tool call answers, as the value an agentledger tool returns, and tool names.

A result carries content blocks, structured content (a JSON object), or both. Which of them the
call returns is ``tool_result_content`` (the reference framework's modes):

- ``structured_first`` (the default): the structured content when there is some, else the blocks;
- ``content_first``: the blocks when there are any, else the structured content;
- ``content_only`` / ``structured_only``: only the one (``None`` when it is absent);
- ``both``: the blocks as a list, the structured content last.

Blocks that are all text (text blocks, embedded text resources) are their text, newline-joined:
the model reads it as it is and the log keeps a string. Other blocks (images, audio, resource
links, binary resources) are a list of the blocks as the MCP specification writes them in JSON
(``{"type": "image", "data": ..., "mimeType": ...}``). A result with ``isError`` is not a value:
it raises ``MCPToolError`` with its text.
"""

from __future__ import annotations

import re
import typing
from typing import Any, Literal

from mcp import types

from ._errors import MCPToolError

__all__ = ("RESULT_MODES", "ResultMode", "exposed_name", "result_text", "result_value")

ResultMode = Literal["structured_first", "content_first", "content_only", "structured_only", "both"]
RESULT_MODES: tuple[ResultMode, ...] = typing.get_args(ResultMode)

_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]")


def exposed_name(remote: str, prefix: str | None) -> str:
    """The name the model sees for the server's tool ``remote``: characters a tool name cannot
    hold become ``-``, ``prefix`` (if any) comes first joined by ``_``, at most 64 characters."""
    name = _NOT_ALLOWED.sub("-", remote) or "tool"
    if prefix:
        name = f"{_NOT_ALLOWED.sub('-', prefix).rstrip('_-')}_{name.lstrip('_-')}"
    return name[:64]


def _text_of(block: types.ContentBlock) -> str | None:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.EmbeddedResource) and isinstance(block.resource, types.TextResourceContents):
        return block.resource.text
    return None


def result_text(result: types.CallToolResult) -> str:
    """The text of a result's blocks (what an error result says), newline-joined."""
    texts = [text for text in (_text_of(block) for block in result.content) if text]
    return "\n".join(texts)


def result_value(result: types.CallToolResult, server: str, tool: str, mode: ResultMode) -> Any:
    """What the call returns to the run (see the module docstring)."""
    if result.is_error:
        text = result_text(result) or "the tool reported an error without a message"
        raise MCPToolError(f"tool {tool!r} of MCP server {server!r} failed: {text}", server=server)
    structured, blocks = result.structured_content, result.content
    if mode == "both":
        listed: list[Any] = [_as_json(block) for block in blocks]
        return [*listed, structured] if structured is not None else listed
    if mode == "structured_only" or (mode == "structured_first" and structured is not None):
        return structured
    if blocks or mode == "content_only" or structured is None:
        return _content(blocks)
    return structured


def _content(blocks: list[types.ContentBlock]) -> Any:
    if not blocks:
        return None
    texts = [_text_of(block) for block in blocks]
    if all(text is not None for text in texts):
        return "\n".join(text for text in texts if text is not None)
    return [_as_json(block) for block in blocks]


def _as_json(block: types.ContentBlock) -> dict[str, Any]:
    return block.model_dump(mode="json", by_alias=True, exclude_none=True)

"""What an MCP tool call answers, as the value an agentledger tool returns, and tool names.

A result whose blocks are all text (text blocks, embedded text resources) is their text, joined
by newlines: the model reads it as it is and the log keeps it as a string. A result with no
content blocks but structured content is that JSON object. Any other result (images, audio,
resource links, binary resources) is the list of its blocks as the MCP specification writes
them in JSON (``{"type": "image", "data": ..., "mimeType": ...}``). A result with ``isError``
is not a value: it raises ``MCPToolError`` with its text.
"""

from __future__ import annotations

import re
from typing import Any

from mcp import types

from ._errors import MCPToolError

__all__ = ("exposed_name", "result_value")

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


def result_value(result: types.CallToolResult, server: str, tool: str) -> Any:
    """What the call returns to the run (see the module docstring)."""
    if result.is_error:
        text = result_text(result) or "the tool reported an error without a message"
        raise MCPToolError(f"tool {tool!r} of MCP server {server!r} failed: {text}", server=server)
    if not result.content:
        return result.structured_content if result.structured_content is not None else ""
    texts = [_text_of(block) for block in result.content]
    if all(text is not None for text in texts):
        return "\n".join(text for text in texts if text is not None)
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content]

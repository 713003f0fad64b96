"""Chat clients: OpenAI (chat completions and responses), Azure OpenAI, Anthropic, and a scripted
client for tests and demos.

Each client lives in its module (``agentledger.adapters.chat.openai``, ...) with its errors and
constants; the clients themselves are also importable from here, each module imported on first
use."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .anthropic import AnthropicClient
    from .azure import AzureOpenAIChatClient, AzureOpenAIResponsesClient
    from .openai import OpenAIChatClient, OpenAIResponsesClient
    from .scripted import Call, ScriptedChatClient

__all__ = (
    "AnthropicClient",
    "AzureOpenAIChatClient",
    "AzureOpenAIResponsesClient",
    "Call",
    "OpenAIChatClient",
    "OpenAIResponsesClient",
    "ScriptedChatClient",
)

_HOMES = {
    "AnthropicClient": "anthropic",
    "AzureOpenAIChatClient": "azure",
    "AzureOpenAIResponsesClient": "azure",
    "Call": "scripted",
    "OpenAIChatClient": "openai",
    "OpenAIResponsesClient": "openai",
    "ScriptedChatClient": "scripted",
}
"""Where each name lives: its module is imported on first use, so an optional dependency
is needed only by the adapter that uses it."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)

"""``agentledger.anthropic``: the Anthropic client under a short import path (the reference
framework ships it as ``agent_framework.anthropic``); it lives in
``agentledger.adapters.chat.anthropic``."""

from .adapters.chat.anthropic import *  # noqa: F403
from .adapters.chat.anthropic import __all__ as __all__

"""``agentledger.openai``: the OpenAI-compatible clients under the import path the reference
framework uses (``agent_framework.openai``); they live in ``agentledger.adapters.chat.openai``."""

from .adapters.chat.openai import *  # noqa: F403
from .adapters.chat.openai import __all__ as __all__

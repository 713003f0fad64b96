"""``agentledger.azure``: the Azure OpenAI clients under the import path the reference framework
uses (``agent_framework.azure``); they live in ``agentledger.adapters.chat.azure``."""

from .adapters.chat.azure import *  # noqa: F403
from .adapters.chat.azure import __all__ as __all__

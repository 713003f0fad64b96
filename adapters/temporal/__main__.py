"""``python -m agentledger.adapters.temporal worker ...``."""

from .cli import main

main()

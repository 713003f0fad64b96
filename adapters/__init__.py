"""agentledger.adapters: chat clients, stores and exporters around the core.

Optional dependencies are imported only inside the adapter that needs them.
"""

"""agentledger.adapters: chat clients, stores and exporters around the core.

Optional dependencies are imported only inside the adapter that needs them.
"""

__all__: tuple[str, ...] = ()
"""The adapters are in the packages below: chat, stores, export, mcp, serve, temporal."""

"""The ``EventStore`` contract: the tests every store passes, from the memory reference on.

Subclass ``StoreContract`` in a test module and implement ``open_store``; pytest collects the
inherited tests. A durable store subclasses ``DurableStoreContract``, which adds what only a store
outside the process can show: reopening, closing, damaged records, and other processes that race,
contend, or are killed in the middle of an append (``python -m agentledger.testing._store_child``).

::

    import pytest

    pytest.register_assert_rewrite("agentledger.testing")  # detailed assertion messages
    from agentledger.testing.stores import StoreContract


    class TestMyStore(StoreContract):
        def open_store(self, location):
            return MyStore(location)

The tests are async (``@pytest.mark.anyio``): they need anyio's pytest plugin, which anyio
installs, and pytest itself, which ``agentledger`` does not depend on.
"""

from __future__ import annotations

from ._durable_contract import CrashOutcome, DurableStoreContract
from ._store_child import make_events
from ._store_contract import StoreContract
from ._store_runs import record_runs

__all__ = ("CrashOutcome", "DurableStoreContract", "StoreContract", "make_events", "record_runs")

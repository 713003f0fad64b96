"""Shared fixtures: a fixed clock and sequential ids make every run's events reproducible."""

from __future__ import annotations

import pytest

from agentledger.testing import FixedClock, SequentialIds


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def ids() -> SequentialIds:
    return SequentialIds()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"

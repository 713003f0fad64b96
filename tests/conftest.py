"""Shared fixtures: a fixed clock and sequential ids make every run's events reproducible."""

from __future__ import annotations

import pytest

# The shipped contract suites assert with plain ``assert``: have pytest explain their failures.
# This must happen before any test module imports them, so here rather than in those modules.
pytest.register_assert_rewrite("agentledger.testing")

from agentledger.testing import FixedClock, SequentialIds  # noqa: E402


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def ids() -> SequentialIds:
    return SequentialIds()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"

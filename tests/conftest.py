"""Shared fixtures: a fixed clock and sequential ids make every run's events reproducible."""

from __future__ import annotations

from collections.abc import Generator

import pytest

# The shipped contract suites assert with plain ``assert``; agentledger's pytest plugin (loaded
# before this file) marks them for pytest to explain their failures. Marking the package here
# would warn (an error under this suite's filters): the plugin has imported it by now.
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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failing test that used a running llama-server shows what the server printed last.

    A request that times out says little; the server's own lines say whether it crashed, ran out
    of context or was still loading.
    """
    report = yield
    if call.when == "call" and report.failed:
        from ._llama import LlamaServer
        from ._servers import machine_state, tail

        funcargs = getattr(item, "funcargs", {})
        for value in funcargs.values():
            if isinstance(value, LlamaServer):
                report.sections.append(("llama-server's last lines", f"{machine_state()}\n{tail(value.log)}"))
    return report

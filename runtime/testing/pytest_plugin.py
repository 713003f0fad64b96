"""The pytest plugin: recorded runs as tests, through the ``agent_cassette`` fixture.

Installed with agentledger (the ``pytest11`` entry point), so nothing needs enabling::

    async def test_weather_agent(agent_cassette):
        response = await agent_cassette.run(build_agent(), "Weather in Lisbon?")
        assert "Lisbon" in response.text

``pytest --agentledger-record`` runs the agent for real (its own chat client) and writes the run
tree's log to ``cassettes/<test module>/<test name>.jsonl`` beside the test file. Without the
flag, the model answers come from that cassette while the tools and middleware run for real
(they are the code under test), sub-agents included; the agent's chat client is never called.
A difference from the cassette fails the test with every finding; so does drift (the agent's
instructions, options, tool specs or middleware changed: re-record to accept it). A missing
cassette fails the test with a message naming the flag.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from ..chat import normalize_messages
from ..errors import AgentLedgerError, LogCorruptError
from ..replay.cassette import read_cassette, tree_events, tree_of, write_cassette
from ..replay.findings import ReplayReport
from ..replay.rerun import replay
from ..replay.state import RecordedRun
from ..response import AgentResponse
from . import capture_events

__all__ = ("RECORD_FLAG", "AgentCassette", "agent_cassette", "pytest_addoption")

RECORD_FLAG = "--agentledger-record"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agentledger", "agentledger cassettes")
    group.addoption(
        RECORD_FLAG,
        action="store_true",
        default=False,
        help="run agent_cassette runs against their real chat clients and write their cassettes",
    )


def _report_text(path: Path, report: ReplayReport) -> str:
    lines = [f"the run differs from its cassette {path} (re-record with {RECORD_FLAG} if that is intended):"]
    for finding in report.findings:
        lines.append("  " + finding.describe())
        if finding.detail and finding.kind != "cannot_replay":
            lines.extend("      " + line for line in finding.detail.splitlines())
    return "\n".join(lines)


class AgentCassette:
    """Runs an agent for a test: for real while recording, else against its cassette."""

    def __init__(self, path: Path, *, record: bool) -> None:
        self.path = path
        """The first run's cassette; a second run in the same test uses ``<name>-2.jsonl``, ..."""
        self.record = record
        self.runs = 0

    def _next_path(self) -> Path:
        self.runs += 1
        if self.runs == 1:
            return self.path
        return self.path.with_name(f"{self.path.stem}-{self.runs}{self.path.suffix}")

    async def run(self, agent: Any, messages: Any = None, **run_kwargs: Any) -> AgentResponse:
        """``agent.run(messages, **run_kwargs)``: recorded to the cassette, or replayed from it.

        Replayed, the response is the rerun's; the run's input must be the one recorded.
        """
        path = self._next_path()
        if self.record:
            with capture_events() as events:
                response: AgentResponse = await agent.run(messages, **run_kwargs)
            write_cassette(path, tree_events(tree_of(events, response.run_id)))
            return response
        if not path.is_file():
            missing = f"no cassette at {path}: run this test once with {RECORD_FLAG} to record it"
            pytest.fail(missing, pytrace=False)
        try:
            recorded = read_cassette(path)
        except LogCorruptError as exc:
            pytest.fail(
                f"the cassette does not read back: {exc}; re-record it with {RECORD_FLAG}", pytrace=False
            )
        if not recorded.ended:
            cut = f"the run in {path} is incomplete (it has no end event): re-record it with {RECORD_FLAG}"
            pytest.fail(cut, pytrace=False)
        if list(recorded.started.messages) != normalize_messages(messages):
            pytest.fail(
                f"the test's input differs from the one recorded in {path}: re-record with {RECORD_FLAG}",
                pytrace=False,
            )
        # The test's own run() arguments, not the recorded ones: its session (a test of several
        # turns runs them on one), its options (a changed prompt is drift), the tools it gives
        # (their bodies run, like the agent's) and its middleware.
        try:
            report: ReplayReport | str = await self._replay(recorded, agent, run_kwargs)
        except AgentLedgerError as exc:  # the test's run cannot even start as the recorded one did
            report = f"the run recorded in {path} does not replay with this test's run(): {exc}"
        if isinstance(report, str):
            pytest.fail(report, pytrace=False)
        if not report.passed() or report.response is None:
            if report.passed():
                pytest.fail(f"the run recorded in {path} failed again", pytrace=False)
            pytest.fail(_report_text(path, report), pytrace=False)
        return report.response

    @staticmethod
    async def _replay(recorded: RecordedRun, agent: Any, run_kwargs: dict[str, Any]) -> ReplayReport:
        return await replay(
            recorded,
            agent,
            tools="live",
            function_invocation_kwargs=run_kwargs.get("function_invocation_kwargs"),
            # No session given: the one the recording ran on, rebuilt from the cassette (an agent
            # may make its own in run(), which a replay does not call).
            session=run_kwargs.get("session"),
            options=run_kwargs.get("options") or {},
            run_tools=run_kwargs.get("tools") or [],
            middleware=run_kwargs.get("middleware") or [],
        )


def _file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:150] or "test"


@pytest.fixture
def agent_cassette(request: pytest.FixtureRequest) -> AgentCassette:
    """An ``AgentCassette`` for this test: ``cassettes/<module>/<test>.jsonl`` beside the test."""
    test_file = Path(str(request.node.path))
    path = test_file.parent / "cassettes" / test_file.stem / f"{_file_name(request.node.name)}.jsonl"
    return AgentCassette(path, record=bool(request.config.getoption("agentledger_record")))

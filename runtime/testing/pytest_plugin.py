"""The pytest plugin: recorded runs as tests, through the ``agent_cassette`` fixture.

Installed with agentledger (the ``pytest11`` entry point), so nothing needs enabling::

    async def test_weather_agent(agent_cassette):
        response = await agent_cassette.run(build_agent(), "Weather in Lisbon?")
        assert "Lisbon" in response.text

``pytest --agentledger-record`` runs the agent for real (its own chat client) and writes the run
tree's log to ``cassettes/<test module>/<test name>.jsonl`` beside the test file;
``--agentledger-record-missing`` does so only for the tests that have no cassette yet and
replays the others. Without either flag, the model answers come from that cassette while every
tool and middleware runs its current code (they are the code under test), sub-agents and calls
a human approved included (``tools="test"``); a tool marked ``@tool(replay="recorded")`` is
answered from the cassette and one marked with a double runs the double; the agent's chat client
is never called. A difference from the cassette fails the test with every finding and how each
call was answered; so does drift (the agent's instructions, options, tool specs or middleware
changed: re-record to accept it). A missing cassette fails the test with a message naming the
flags.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

# The contract suites shipped beside this plugin assert with plain ``assert``: have pytest
# explain their failures. They are marked here, before anything imports them, since this module
# is imported as a plugin before any conftest runs (and so before a conftest could mark them).
pytest.register_assert_rewrite(
    "agentledger.testing.clients",
    "agentledger.testing.stores",
    "agentledger.testing._store_contract",
    "agentledger.testing._durable_contract",
    "agentledger.testing._store_runs",
    "agentledger.testing._store_process",
    "agentledger.testing._store_child",
)

from ..chat import normalize_messages  # noqa: E402
from ..errors import AgentLedgerError, LogCorruptError  # noqa: E402
from ..replay.cassette import read_cassette, tree_events, tree_of, write_cassette  # noqa: E402
from ..replay.findings import ReplayReport, describe_input  # noqa: E402
from ..replay.rerun import replay  # noqa: E402
from ..replay.state import RecordedRun  # noqa: E402
from ..response import AgentResponse  # noqa: E402
from . import capture_events  # noqa: E402

__all__ = ("RECORD_FLAG", "RECORD_MISSING_FLAG", "AgentCassette", "agent_cassette", "pytest_addoption")

RECORD_FLAG = "--agentledger-record"
RECORD_MISSING_FLAG = "--agentledger-record-missing"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agentledger", "agentledger cassettes")
    group.addoption(
        RECORD_FLAG,
        action="store_true",
        default=False,
        help="run agent_cassette runs against their real chat clients and write their cassettes",
    )
    group.addoption(
        RECORD_MISSING_FLAG,
        action="store_true",
        default=False,
        help="record the agent_cassette runs that have no cassette yet; replay the others",
    )


def _report_text(path: Path, report: ReplayReport) -> str:
    lines = [f"the run differs from its cassette {path} (re-record with {RECORD_FLAG} if that is intended):"]
    for finding in report.findings:
        lines.append("  " + finding.describe())
        if finding.detail and finding.kind != "cannot_replay":
            lines.extend("      " + line for line in finding.detail.splitlines())
    lines.append(_calls_text(report))
    return "\n".join(lines)


def _calls_text(report: ReplayReport) -> str:
    """How the replay answered each tool call: which ran their current code, which a double
    answered, which the log did (and which were refused)."""
    if not report.calls:
        return "tool calls: none"
    shown = ", ".join(f"{call.call_id} {call.tool}: {_HOW[call.how]}" for call in report.calls)
    return f"tool calls: {shown}"


_HOW = {"ran": "ran", "double": "its double ran", "recorded": "from the log", "refused": "refused"}


class AgentCassette:
    """Runs an agent for a test: for real while recording, else against its cassette."""

    def __init__(self, path: Path, *, record: bool, record_missing: bool = False) -> None:
        self.path = path
        """The first run's cassette; a second run in the same test uses ``<name>-2.jsonl``, ..."""
        self.record = record
        self.record_missing = record_missing
        """Record a run whose cassette does not exist yet; replay the others."""
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
        if self.record or (self.record_missing and not path.exists()):
            with capture_events() as events:
                response: AgentResponse = await agent.run(messages, **run_kwargs)
            write_cassette(path, tree_events(tree_of(events, response.run_id)))
            return response
        if not path.is_file():
            missing = (
                f"no cassette at {path}: run this test once with {RECORD_FLAG} to record it "
                f"(or {RECORD_MISSING_FLAG} to record only the cassettes that are missing)"
            )
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
        given = normalize_messages(messages)
        if list(recorded.started.messages) != given:
            pytest.fail(
                f"the test's input differs from the one recorded in {path}: the test gives "
                f"{describe_input(given)!r}, the cassette holds {describe_input(recorded.started.messages)!r}"
                f"{_other_parts(given, recorded)}; re-record with {RECORD_FLAG}",
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
            tools="test",
            function_invocation_kwargs=run_kwargs.get("function_invocation_kwargs"),
            # No session given: the one the recording ran on, rebuilt from the cassette (an agent
            # may make its own in run(), which a replay does not call).
            session=run_kwargs.get("session"),
            options=run_kwargs.get("options") or {},
            run_tools=run_kwargs.get("tools") or [],
            middleware=run_kwargs.get("middleware") or [],
        )


def _other_parts(given: list[Any], recorded: RecordedRun) -> str:
    """What else tells two inputs of the same text apart: their roles or number of messages."""
    if describe_input(given) != describe_input(recorded.started.messages):
        return ""
    roles = [m.role for m in given], [m.role for m in recorded.started.messages]
    return f" (messages with roles {roles[0]} against {roles[1]}, or other contents)"


def _file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:150] or "test"


@pytest.fixture
def agent_cassette(request: pytest.FixtureRequest) -> AgentCassette:
    """An ``AgentCassette`` for this test: ``cassettes/<module>/<test>.jsonl`` beside the test."""
    test_file = Path(str(request.node.path))
    path = test_file.parent / "cassettes" / test_file.stem / f"{_file_name(request.node.name)}.jsonl"
    return AgentCassette(
        path,
        record=bool(request.config.getoption("agentledger_record")),
        record_missing=bool(request.config.getoption("agentledger_record_missing")),
    )

"""The pytest plugin: ``agent_cassette`` records a run tree once, then replays it as a test.

Each test writes a small test module into a temporary folder and runs pytest on it in a
subprocess, as a user's project would: the plugin comes from agentledger's ``pytest11`` entry
point, nothing is enabled by hand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentledger.core.events import ChildRunStarted, RunStarted
from agentledger.replay.cassette import read_cassette, tree_events, write_cassette

USER_TEST = '''
import os
from typing import Annotated

from agentledger import Agent, BaseChatClient, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient


class Refuses(BaseChatClient):
    provider_name = "scripted"

    async def get_response(self, messages, **kwargs):
        raise AssertionError("the real client was called")


def model(script):
    return ScriptedChatClient(script) if os.environ.get("LIVE_MODEL") == "1" else Refuses()


@tool
def lookup(city: Annotated[str, "City."]) -> str:
    """Look the weather up."""
    return f"{city}: " + os.environ.get("WEATHER", "sunny")


def build() -> Agent:
    helper_model = model([Call("lookup", {"city": "Oslo"}), "Oslo is fine."])
    helper = Agent(client=helper_model, name="helper", tools=[lookup])
    return Agent(
        client=model([Call("ask_helper", {"task": "Oslo"}), "All good."]),
        name="lead",
        tools=[helper.as_tool(name="ask_helper")],
    )


async def test_weather(agent_cassette):
    response = await agent_cassette.run(build(), "How is Oslo?")
    assert response.text == "All good."
'''


def _pytest(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, **env}
    environment.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        # Phoenix's own pytest plugin (when it is installed) imports its whole server: not needed.
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:phoenix", *args],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "test_weather.py").write_text("import pytest\n\npytestmark = pytest.mark.anyio\n" + USER_TEST)
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n\n@pytest.fixture\ndef anyio_backend():\n    return 'asyncio'\n"
    )
    return tmp_path


def test_record_then_replay_then_catch_a_change(project: Path) -> None:
    """Recorded once with the real client; replayed with a client that fails if called; a changed
    tool result inside the sub-agent then fails the test, naming the difference."""
    recorded = _pytest(project, "--agentledger-record", LIVE_MODEL="1")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    cassette = project / "cassettes" / "test_weather" / "test_weather.jsonl"
    assert cassette.is_file()
    lines = [json.loads(line) for line in cassette.read_text().splitlines()]
    assert len({line["run_id"] for line in lines}) == 2  # the lead's run and its sub-agent's

    replayed = _pytest(project)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr

    changed = _pytest(project, WEATHER="stormy")
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert "differs from its cassette" in changed.stdout
    assert "(helper)" in changed.stdout
    assert "ToolReturned.result: 'Oslo: sunny' -> 'Oslo: stormy'" in changed.stdout


def test_a_missing_cassette_names_the_flag(project: Path) -> None:
    run = _pytest(project)
    assert run.returncode == 1
    assert "no cassette at" in run.stdout
    assert "--agentledger-record" in run.stdout


def test_a_cassette_round_trips_a_tree(project: Path) -> None:
    """What the plugin writes reads back as the same tree, lead first."""
    assert _pytest(project, "--agentledger-record", LIVE_MODEL="1").returncode == 0
    path = project / "cassettes" / "test_weather" / "test_weather.jsonl"
    tree = read_cassette(path)
    assert isinstance(tree.started, RunStarted)
    assert tree.started.parent_run_id is None
    [link] = tree.child_links()
    assert isinstance(link, ChildRunStarted)
    assert tree.children[link.call_id].started.parent_run_id == tree.run_id
    again = write_cassette(project / "copy.jsonl", tree_events(tree))
    assert again.read_bytes() == path.read_bytes()


def test_a_corrupt_cassette_is_a_typed_error(tmp_path: Path) -> None:
    from agentledger import LogCorruptError

    path = tmp_path / "bad.jsonl"
    path.write_text('{"type": "RunStarted"}\n')
    with pytest.raises(LogCorruptError, match=r"bad\.jsonl:1"):
        read_cassette(path)


@pytest.mark.parametrize("damage", ["truncated", "cut short", "empty"])
def test_a_damaged_cassette_fails_the_test_plainly(project: Path, damage: str) -> None:
    """A cassette that does not read back, or whose run stops early, fails the test with one
    message naming the flag, not a traceback through the library."""
    assert _pytest(project, "--agentledger-record", LIVE_MODEL="1").returncode == 0
    path = project / "cassettes" / "test_weather" / "test_weather.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    damaged = {"truncated": "".join(lines)[:-20], "cut short": "".join(lines[:3]), "empty": ""}[damage]
    path.write_text(damaged)
    run = _pytest(project)
    assert run.returncode == 1
    assert "--agentledger-record" in run.stdout
    assert "Traceback" not in run.stdout
    assert "site-packages" not in run.stdout
    assert "runtime/" not in run.stdout


TURNS_TEST = '''
import os

import pytest

from agentledger import Agent, BaseChatClient, FunctionInvocationContext, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient

pytestmark = pytest.mark.anyio
SEEN = []


class Refuses(BaseChatClient):
    provider_name = "scripted"

    async def get_response(self, messages, **kwargs):
        raise AssertionError("the real client was called")


@tool
def keep(note: str, ctx: FunctionInvocationContext) -> str:
    """Keep a note."""
    ctx.session.state["note"] = note
    return "kept"


@tool
def price(item: str) -> str:
    """The price of an item."""
    SEEN.append(item)
    return f"{item}: " + os.environ.get("PRICE", "3 EUR")


def build(script):
    live = os.environ.get("LIVE_MODEL") == "1"
    return Agent(client=ScriptedChatClient(script) if live else Refuses(), name="shop", tools=[keep])


async def test_turns(agent_cassette):
    agent = build([Call("keep", {"note": "tea"}), "Kept.", Call("price", {"item": "tea"}), "Tea is 3 EUR."])
    session = agent.create_session()
    await agent_cassette.run(agent, "Remember tea.", session=session)
    assert session.state["note"] == "tea"
    prompt = os.environ.get("PROMPT", "Answer briefly.")
    answer = await agent_cassette.run(
        agent, "What does it cost?", session=session, tools=[price], options={"instructions": prompt}
    )
    assert answer.text == "Tea is 3 EUR."
    assert SEEN == ["tea"]
    assert len(session.history) == 8
'''


def test_a_test_of_two_turns_replays_on_its_own_session_with_its_own_arguments(tmp_path: Path) -> None:
    """The replay runs on the test's session (its second turn sees the first's state and
    history), the tools the test gives run for real, and its options are compared: a changed
    prompt is drift, a changed tool result a divergence."""
    (tmp_path / "test_turns.py").write_text(TURNS_TEST)
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n\n@pytest.fixture\ndef anyio_backend():\n    return 'asyncio'\n"
    )
    recorded = _pytest(tmp_path, "--agentledger-record", LIVE_MODEL="1")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    replayed = _pytest(tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    prompt = _pytest(tmp_path, PROMPT="Answer in French.")
    assert prompt.returncode == 1
    assert (
        "drift at seq 0, RunStarted.run_instructions: 'Answer briefly.' -> 'Answer in French.'"
        in prompt.stdout
    )
    body = _pytest(tmp_path, PRICE="9 EUR")
    assert body.returncode == 1
    assert "ToolReturned.result: 'tea: 3 EUR' -> 'tea: 9 EUR'" in body.stdout


def test_a_cassette_with_the_sessions_earlier_runs_reads_them_as_prior(tmp_path: Path) -> None:
    """``agentledger export --cassette`` of a session's later run writes the earlier runs after
    the tree; reading it gives them back as ``prior``, and a run of another session is refused."""
    import anyio

    from agentledger import Agent, AgentSession, LogCorruptError
    from agentledger.adapters.chat.scripted import ScriptedChatClient

    async def record() -> tuple[list[object], list[object], list[object]]:
        agent = Agent(client=ScriptedChatClient(["One.", "Two.", "Other."]))
        session = AgentSession("s1")
        first = await agent.run("1", session=session)
        second = await agent.run("2", session=session)
        other = await agent.run("3", session=AgentSession("s2"))
        return list(first.events), list(second.events), list(other.events)

    first, second, other = anyio.run(record)
    path = write_cassette(tmp_path / "turn2.jsonl", [*second, *first])  # type: ignore[list-item]
    tree = read_cassette(path)
    assert tree.run_id == second[0].run_id  # type: ignore[attr-defined]
    assert tree.prior == first
    assert len(tree.history()) == 2
    mixed = write_cassette(tmp_path / "mixed.jsonl", [*second, *other])  # type: ignore[list-item]
    with pytest.raises(LogCorruptError, match="one run tree"):
        read_cassette(mixed)


def test_the_callers_run_arguments_replace_the_recorded_ones(tmp_path: Path) -> None:
    """``replay(session=, middleware=)``: a fresh session is brought to where the cassette's
    earlier runs leave it; ``session=False`` replays without one (a difference the report names);
    run middleware given again runs and matches."""
    import anyio

    from agentledger import Agent, AgentSession, FunctionInvocationContext, function_middleware, tool
    from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
    from agentledger.replay import replay

    @tool
    def keep(note: str, ctx: FunctionInvocationContext) -> str:
        """Keep a note."""
        if ctx.session is None:
            return "nowhere to keep it"
        ctx.session.state["note"] = note
        return "kept"

    @function_middleware
    async def audit(context: object, call_next: object) -> None:
        await call_next()  # type: ignore[operator]

    def agent(script: list[object]) -> Agent:
        return Agent(client=ScriptedChatClient(script), tools=[keep])  # type: ignore[arg-type]

    async def scenario() -> None:
        recording = agent(
            [Call("keep", {"note": "tea"}), "Kept.", Call("keep", {"note": "jam"}), "Kept too."]
        )
        session = AgentSession("s1")
        first = await recording.run("Tea.", session=session)
        second = await recording.run("Jam.", session=session, middleware=[audit])
        path = write_cassette(tmp_path / "turn2.jsonl", [*second.events, *first.events])
        recorded = read_cassette(path)
        fresh = AgentSession("another id")
        report = await replay(recorded, agent([]), tools="live", session=fresh, middleware=[audit])
        assert report.findings == []
        assert fresh.state["note"] == "jam"
        assert len(fresh.history) == 8  # the first turn, caught up, and the second
        without = await replay(recorded, agent([]), tools="live", session=False, middleware=[audit])
        assert any(f.field == "session_id" for f in without.findings)
        no_middleware = await replay(recorded, agent([]), tools="live", session=AgentSession("x"))
        assert [f.field for f in no_middleware.drift] == ["middleware"]

    anyio.run(scenario)


def test_a_fresh_session_with_the_callers_own_writes_is_caught_up_under_them(tmp_path: Path) -> None:
    """The test makes the writes the recorded caller made before its second turn, on a fresh
    session: the earlier runs' history and state come first, its writes stay on top as they
    are (an edit in place included) and are the ones recorded."""
    import anyio

    from agentledger import Agent, AgentSession, FunctionInvocationContext, tool
    from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
    from agentledger.replay import replay

    @tool
    def keep(ctx: FunctionInvocationContext) -> str:
        """Keep."""
        assert ctx.session is not None
        state = ctx.session.state
        return (
            f"{','.join(state)} user={state.get('user')} n={state.get('n')} hist={len(ctx.session.history)}"
        )

    def agent(script: list[object]) -> Agent:
        return Agent(client=ScriptedChatClient(script), tools=[keep])  # type: ignore[arg-type]

    async def scenario() -> None:
        recording = agent([Call("keep"), "One.", Call("keep"), "Two."])
        session = AgentSession("s1")
        session.state["user"] = "bob"
        first = await recording.run("t1", session=session)
        session.state["n"] = 2
        session.state["q"] = {"k": 1}
        session.state["q"]["k"] = 5  # an edit in place, noticed when the run starts
        second = await recording.run("t2", session=session)
        recorded = read_cassette(write_cassette(tmp_path / "t2.jsonl", [*second.events, *first.events]))
        fresh = AgentSession("new")
        fresh.state["n"] = 2
        fresh.state["q"] = {"k": 1}
        fresh.state["q"]["k"] = 5
        report = await replay(recorded, agent([]), tools="live", session=fresh)
        assert report.findings == []
        assert fresh.state.snapshot() == {"user": "bob", "n": 2, "q": {"k": 5}}
        assert list(fresh.state.snapshot()) == list(session.state.snapshot())  # the same order
        assert fresh.pending_changes == []

    anyio.run(scenario)


def test_values_compare_as_the_log_tells_them_apart() -> None:
    """``True`` is not ``1``; NaN matches NaN, and a null a JSON log made of NaN or infinity."""
    import math

    from agentledger.core.events import RunStarted, SessionUpdated, StateChange
    from agentledger.replay import differences

    def write(value: object) -> list[object]:
        started = RunStarted(run_id="r", seq=0, at=0, agent_id="a")
        return [
            started,
            SessionUpdated(
                run_id="r", seq=1, at=0, session_id="s", by="c", changes=(StateChange("k", "set", value),)
            ),
        ]

    assert [f.field for f in differences(write(1), write(True))] == ["changes[0].value"]  # type: ignore[arg-type]
    assert differences(write({"r": None}), write({"r": math.nan})) == []  # type: ignore[arg-type]
    assert differences(write({"r": math.nan}), write({"r": math.nan})) == []  # type: ignore[arg-type]
    assert [f.field for f in differences(write(1), write(1.5))] == ["changes[0].value"]  # type: ignore[arg-type]
    # a key the log does not have is a change, whatever its value
    assert [f.field for f in differences(write({}), write({"max": math.inf}))] == ["changes[0].value.max"]  # type: ignore[arg-type]


GATED_TEST = '''
import os

import pytest

from agentledger import Agent, BaseChatClient, Message, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient

pytestmark = pytest.mark.anyio
REFUNDS = []


class Refuses(BaseChatClient):
    provider_name = "scripted"

    async def get_response(self, messages, **kwargs):
        raise AssertionError("the real client was called")


@tool(approval_mode="always_require")
def refund(amount: int) -> str:
    """Give money back (a person approves)."""
    REFUNDS.append(amount)
    return os.environ.get("REFUND_WORD", "refunded") + f" {amount} EUR"


async def test_refund(agent_cassette):
    live = os.environ.get("LIVE_MODEL") == "1"
    script = [Call("refund", {"amount": 5}), "Done."]
    agent = Agent(client=ScriptedChatClient(script) if live else Refuses(), name="till", tools=[refund])
    session = agent.create_session()
    paused = await agent_cassette.run(agent, "Refund 5 EUR.", session=session)
    answers = [request.to_approval_response(True) for request in paused.user_input_requests]
    assert len(answers) == 1
    resumed = await agent_cassette.run(agent, Message("user", answers), session=session)
    assert resumed.text == "Done."
    assert REFUNDS == [5]  # the approved call ran once, in the replay as when it was recorded
'''


def test_a_changed_approval_gated_tool_fails_its_cassette_test(tmp_path: Path) -> None:
    """The approved call of a gated tool runs its current code when the cassette replays: the
    unchanged tool passes, a changed one fails the test and names the call's result."""
    (tmp_path / "test_refund.py").write_text(GATED_TEST)
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n\n@pytest.fixture\ndef anyio_backend():\n    return 'asyncio'\n"
    )
    recorded = _pytest(tmp_path, "--agentledger-record", LIVE_MODEL="1")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    replayed = _pytest(tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    changed = _pytest(tmp_path, REFUND_WORD="gave back")
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert "ToolReturned.result: 'refunded 5 EUR' -> 'gave back 5 EUR'" in changed.stdout

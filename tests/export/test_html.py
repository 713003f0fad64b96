"""The HTML run viewer: one self-contained page, safe against its content, states equal to state_at.

The tests named ``..._in_chromium`` open the page in headless Chromium over the DevTools protocol
(see ``tests/_browser.py``). Without Chromium or the ``websockets`` package they skip, except under
``CI=true``, where a missing browser is a failure.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from agentledger import (
    Agent,
    ChatContext,
    ContextProvider,
    FunctionInvocationContext,
    MemoryEventStore,
    Message,
    chat_middleware,
    tool,
)
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.export._html_states import expand
from agentledger.adapters.export.html import HIDDEN, render_html, write_html
from agentledger.core.events import ChildRunStarted, Event, RunStarted, SessionUpdated, ToolsAdded
from agentledger.demo import run_demo
from agentledger.replay import RecordedRun, load
from agentledger.testing import FixedClock, SequentialIds, capture_events
from tests._browser import Browser, Page, find_chromium, launch

pytestmark = pytest.mark.anyio

HOSTILE_RESULT = "</script><script>window.__pwned = 1</script><!--"
HOSTILE_MESSAGE = '<img src=x onerror="window.__pwned = 2"> & </SCRIPT >\u2028\u2029 ]]>'
HOSTILE_TITLE = "<b>title</b></title><script>window.__pwned = 3</script>"
CLIENT_SECRET = "sk-live-CLIENT-SECRET-81723"
TOOL_SECRET = "tok-TOOL-SECRET-55120"


@pytest.fixture(autouse=True)
def _quiet_experimental() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # add_tools/remove_tools are experimental
        yield


# -- runs to look at -------------------------------------------------------------------------------


async def demo_events() -> list[Event]:
    """The demo run, read back from a memory store."""
    store = MemoryEventStore()
    response, _ = await run_demo(store)
    return await store.read(response.run_id)


@tool(description="Store findings for later steps.")
def store_findings(findings: str, ctx: FunctionInvocationContext) -> str:
    if ctx.session is not None:
        ctx.session.state["findings"] = findings
    return "stored"


async def subagent_events() -> list[Event]:
    """A lead agent whose two calls run sub-agents: one shares its session, one has its own."""
    clock, ids = FixedClock(), SequentialIds()

    def child(name: str, findings: str) -> Agent:
        client = ScriptedChatClient([Call("store_findings", {"findings": findings}), f"{name} done."])
        return client.as_agent(name=name, tools=[store_findings], clock=clock, ids=ids)

    research = child("ResearchAgent", "tides are lunar").as_tool(
        name="research", arg_name="query", propagate_session=True
    )
    review = child("ReviewAgent", "sources agree").as_tool(name="review", arg_name="query")
    lead_client = ScriptedChatClient(
        [[Call("research", {"query": "tides"}), Call("review", {"query": "tides"})], "Research done."]
    )
    lead = lead_client.as_agent(name="Lead", tools=[research, review], clock=clock, ids=ids)
    session = lead.create_session()
    session.state["topic"] = "oceans"
    with capture_events() as events:
        await lead.run("Look into tides.", session=session, options={"tool_choice": "required"})
    return events


@tool
def leak() -> str:
    """Return markup that tries to end the data block."""
    return HOSTILE_RESULT


@tool
def explode(reason: str) -> str:
    """Fail with the reason as the message."""
    raise ValueError(reason)


@tool
def retire(ctx: FunctionInvocationContext) -> str:
    """Remove this tool and write hostile session state."""
    ctx.remove_tools("retire")
    if ctx.session is not None:
        ctx.session.state["</script>"] = HOSTILE_MESSAGE
    return "retired"


async def hostile_events() -> list[Event]:
    """A run whose messages, arguments, results, errors and session state are markup."""
    client = ScriptedChatClient(
        [[Call("leak"), Call("explode", {"reason": HOSTILE_MESSAGE}), Call("retire")], HOSTILE_MESSAGE]
    )
    agent = client.as_agent(
        name="Mallory",
        tools=[leak, explode, retire],
        clock=FixedClock(),
        ids=SequentialIds(),
        include_detailed_errors=True,
    )
    with capture_events() as events:
        await agent.run(HOSTILE_MESSAGE, session=agent.create_session())
    return events


async def secret_events() -> list[Event]:
    """A run given a secret client kwarg and a secret tool kwarg (the log redacts the latter)."""
    client = ScriptedChatClient([Call("leak"), "ok"])
    agent = client.as_agent(name="Keeper", tools=[leak], clock=FixedClock(), ids=SequentialIds())
    with capture_events() as events:
        await agent.run(
            "hello",
            client_kwargs={"api_key": CLIENT_SECRET},
            function_invocation_kwargs={"api_token": TOOL_SECRET, "user_id": "u-7"},
        )
    return events


@tool
def step(index: int, ctx: FunctionInvocationContext) -> str:
    """One small unit of work that also writes session state."""
    if ctx.session is not None:
        ctx.session.state[f"slot-{index % 40}"] = {"step": index}
    return f"step {index} done"


async def long_events(iterations: int = 32, width: int = 10) -> list[Event]:
    """About a thousand events: iterations of ``width`` parallel calls, each writing the session."""
    script: list[Any] = [
        [Call("step", {"index": i * width + j}) for j in range(width)] for i in range(iterations)
    ]
    client = ScriptedChatClient([*script, "All steps done."])
    agent = client.as_agent(name="Worker", tools=[step], clock=FixedClock(), ids=SequentialIds())
    with capture_events() as events:
        await agent.run("Do the steps.", session=agent.create_session())
    return events


@tool(approval_mode="always_require")
def wire_money(amount: int) -> str:
    """Send money (needs a human's approval)."""
    return f"sent {amount}"


async def approval_runs() -> tuple[list[Event], list[Event]]:
    """A run that pauses for approval, and the run on the same session that resumes it."""
    client = ScriptedChatClient([[Call("wire_money", {"amount": 5}), Call("leak")], "Sent 5."])
    agent = client.as_agent(name="Teller", tools=[wire_money, leak], clock=FixedClock(), ids=SequentialIds())
    session = agent.create_session()
    paused = await agent.run("send 5", session=session)
    answer = paused.user_input_requests[0].to_approval_response(True)
    resumed = await agent.run(Message("user", (answer,)), session=session)
    return list(paused.events), list(resumed.events)


async def limit_events() -> list[Event]:
    """A run with an unknown tool, rejected arguments and an iteration limit."""
    script: list[Any] = [[Call("missing"), Call("explode", {"reason": 7})], Call("leak"), "Stopped."]
    client = ScriptedChatClient(script)
    agent = client.as_agent(
        name="Looper", tools=[explode, leak], clock=FixedClock(), ids=SequentialIds(), max_iterations=2
    )
    with capture_events() as events:
        await agent.run("loop")
    return events


async def keep_last_message(context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
    """Chat middleware that sends the model only the latest message."""
    context.messages = context.messages[-1:]
    await call_next()


async def rewritten_events() -> list[Event]:
    """A run whose model requests chat middleware rewrites, and whose last answer still asks for calls."""
    client = ScriptedChatClient([Call("leak"), Call("leak"), Call("leak")])
    agent = client.as_agent(
        name="Trimmer",
        tools=[leak],
        middleware=[chat_middleware(keep_last_message)],
        clock=FixedClock(),
        ids=SequentialIds(),
        max_iterations=2,
    )
    with capture_events() as events:
        await agent.run("trim")
    return events


# -- helpers ----------------------------------------------------------------------------------------


def by_run(events: list[Event]) -> dict[str, list[Event]]:
    runs: dict[str, list[Event]] = {}
    for event in events:
        runs.setdefault(event.run_id, []).append(event)
    return runs


def expected_runs(events: list[Event], prior: list[Event] | None = None) -> dict[str, RecordedRun]:
    """Each run as a RecordedRun; a sub-agent's prior log is its caller's up to the starting call."""
    runs = by_run(events)
    recorded: dict[str, RecordedRun] = {}
    for run_id, log in runs.items():
        start = log[0]
        assert isinstance(start, RunStarted)
        if start.parent_run_id is None:
            recorded[run_id] = RecordedRun(log, prior=prior or [])
            continue
        parent = recorded[start.parent_run_id]
        cut = next(
            i
            for i, e in enumerate(parent.events)
            if isinstance(e, ChildRunStarted) and e.child_run_id == run_id
        )
        recorded[run_id] = RecordedRun(log, prior=[*parent.prior, *parent.events[: cut + 1]])
    return recorded


def plain(value: Any) -> Any:
    """A value as JSON would carry it (tuples become lists)."""
    return msgspec.json.decode(msgspec.json.encode(value))


def embedded(page: str) -> Any:
    """The JSON document inside the page's data block."""
    match = re.search(r'<script type="application/json" id="agentledger-log">(.*?)</script>', page, re.S)
    assert match is not None
    return json.loads(match.group(1))


def outside_data(page: str) -> str:
    """The page without its data block: the markup, the stylesheet and the script."""
    return re.sub(
        r'(<script type="application/json" id="agentledger-log">).*?(</script>)', r"\1\2", page, flags=re.S
    )


# -- without a browser ------------------------------------------------------------------------------


async def test_page_is_self_contained() -> None:
    """The page names no URL to fetch: no http(s), no src/href but data:, no url() or @import."""
    page = render_html(await demo_events())
    assert "http://" not in page
    assert "https://" not in page
    markup = outside_data(page)
    assert re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]+)""", markup) == ["data:,"]
    assert "url(" not in markup
    assert "@import" not in markup
    assert "default-src 'none'" in page
    assert markup.count("<script") == 2


async def test_hostile_content_cannot_escape_the_data_block() -> None:
    """Markup in results, messages, errors, session state and the title stays inert JSON text."""
    events = await hostile_events()
    page = render_html(events, title=HOSTILE_TITLE)
    assert page.count("</script>") == 2
    assert page.lower().count("<script") == 2
    assert "<img" not in page
    assert "\u2028" not in page
    assert "&lt;b&gt;title&lt;/b&gt;&lt;/title&gt;" in page
    data = embedded(page)
    assert data["title"] == HOSTILE_TITLE
    text = json.dumps(data)
    for hostile in (HOSTILE_RESULT, HOSTILE_MESSAGE):
        assert json.dumps(hostile)[1:-1] in text
    types = {e["type"] for e in data["runs"]["run_1"]["events"]}
    assert {"ToolFailed", "ToolsRemoved", "SessionUpdated"} <= types


@pytest.mark.parametrize(
    "scenario", [demo_events, subagent_events, hostile_events, limit_events, rewritten_events]
)
async def test_embedded_states_equal_state_at(scenario: Any) -> None:
    """For every run and every seq, the embedded state expands to exactly RecordedRun.state_at."""
    events = await scenario()
    data = embedded(render_html(events))
    for run_id, recorded in expected_runs(events).items():
        states = expand(data["runs"][run_id]["states"])
        assert len(states) == len(recorded.events)
        for seq, state in enumerate(states):
            assert state == plain(recorded.state_at(seq)), (run_id, seq)


async def test_prior_runs_of_the_session_feed_the_states() -> None:
    """With the session's earlier runs as prior, history and session match load()'s state_at."""
    store = MemoryEventStore()
    client = ScriptedChatClient([Call("store_findings", {"findings": "first"}), "one", "two"])
    agent = client.as_agent(
        name="Twice", tools=[store_findings], store=store, clock=FixedClock(), ids=SequentialIds()
    )
    session = agent.create_session()
    await agent.run("first", session=session)
    second = await agent.run("second", session=session)
    recorded = await load(store, second.run_id)
    data = embedded(render_html(recorded.events, prior=recorded.prior))
    states = expand(data["runs"][second.run_id]["states"])
    assert states == [plain(recorded.state_at(i)) for i in range(len(recorded.events))]
    assert states[-1]["session"] == {"findings": "first"}
    assert len(states[-1]["transcript"]) == 6


async def test_approval_runs_fold_like_state_at() -> None:
    """A paused run and its resumption (with the paused run as prior) embed state_at's states."""
    paused, resumed = await approval_runs()
    for events, prior in ((paused, []), (resumed, paused)):
        data = embedded(render_html(events, prior=prior))
        recorded = RecordedRun(events, prior=prior)
        states = expand(data["runs"][recorded.run_id]["states"])
        assert states == [plain(recorded.state_at(i)) for i in range(len(events))]
    assert expand(embedded(render_html(paused))["runs"]["run_1"]["states"])[-1]["pending_calls"] != []


async def test_subagent_links_are_embedded() -> None:
    """Each sub-agent run names its caller's run and call; only the lead run is a root."""
    data = embedded(render_html(await subagent_events()))
    assert data["roots"] == ["run_1"]
    links = {rid: (run["parent_run_id"], run["parent_call_id"]) for rid, run in data["runs"].items()}
    assert links == {"run_1": (None, None), "run_2": ("run_1", "call_1"), "run_3": ("run_1", "call_2")}


async def test_without_content_nothing_said_is_shown() -> None:
    """include_content=False hides messages, arguments, results, errors and session values."""
    page = render_html(await demo_events(), include_content=False)
    for said in ("Lisbon", "quiet", "traveller-7", "HTL-LIS", "a booking needs", "Plan trips"):
        assert said not in page, said
    for name in (
        "get_weather",
        "book_hotel",
        "remember_preference",
        "require_positive_nights",
        "preferences",
    ):
        assert name in page
    data = embedded(page)
    assert data["content"] is False
    writes = [e for e in data["runs"]["run_1"]["events"] if e["type"] == "SessionUpdated"]
    assert writes
    assert all(c["value"] == HIDDEN for e in writes for c in e["changes"] if c["op"] == "set")
    states = expand(data["runs"]["run_1"]["states"])
    assert states[-1]["session"] == {"preferences": HIDDEN}
    assert len(states[-1]["transcript"]) == 10
    assert all(c.get("text") in (None, HIDDEN) for m in states[-1]["transcript"] for c in m["contents"])


async def test_without_content_errors_and_markup_are_hidden() -> None:
    """Error messages and tool results are hidden too; error types and tool names stay."""
    page = render_html(await hostile_events(), include_content=False)
    assert "__pwned" not in page
    assert "ValueError" in page
    assert "explode" in page


async def test_secrets_never_appear() -> None:
    """Secret client_kwargs values and redacted function_invocation_kwargs are in no page."""
    events = await secret_events()
    start = events[0]
    assert isinstance(start, RunStarted)
    assert start.client_kwargs_keys == ("api_key",)
    for include_content in (True, False):
        page = render_html(events, include_content=include_content)
        assert CLIENT_SECRET not in page
        assert TOOL_SECRET not in page
        assert "api_token" in page
    assert "u-7" in render_html(events)
    assert "u-7" not in render_html(events, include_content=False)


async def test_thousand_event_page_stays_small() -> None:
    """About 1,000 events with a growing transcript and session make a page under 1 MB."""
    events = await long_events()
    assert len(events) >= 1000
    page = render_html(events)
    assert len(page.encode()) < 1_000_000
    assert len(render_html(events, include_content=False).encode()) < 1_000_000
    recorded = RecordedRun(events)
    states = expand(embedded(page)["runs"][recorded.run_id]["states"])
    for seq in range(0, len(events), 97):
        assert states[seq] == plain(recorded.state_at(seq)), seq


async def test_log_without_its_start_renders_without_states() -> None:
    """A log cut before RunStarted still renders; it has no states to fold."""
    events = (await demo_events())[5:]
    data = embedded(render_html(events))
    assert data["runs"]["run_1"]["states"] is None
    assert len(data["runs"]["run_1"]["events"]) == len(events)


async def test_write_html_writes_the_page(tmp_path: Path) -> None:
    """write_html writes the same page render_html returns, as UTF-8, and returns the path."""
    events = await demo_events()
    path = write_html(events, tmp_path / "run.html", title="Trip")
    assert path == tmp_path / "run.html"
    assert path.read_text(encoding="utf-8") == render_html(events, title="Trip")
    assert "<title>Trip</title>" in path.read_text(encoding="utf-8")


def test_no_events_is_an_error() -> None:
    """An empty log is refused with a clear message."""
    with pytest.raises(ValueError, match="at least one run"):
        render_html([])


# -- in Chromium ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    executable = find_chromium()
    missing = None
    if executable is None:
        missing = "Chromium is not installed (apt-get install chromium)"
    else:
        try:
            import websockets.sync.client  # noqa: F401  # the DevTools connection needs it
        except ImportError:
            missing = "the websockets package is not installed (pip install websockets)"
    if missing is not None or executable is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"browser tests must run in CI: {missing}")
        pytest.skip(str(missing))
    with launch(executable, tmp_path_factory.mktemp("chromium") / "profile") as running:
        yield running


def open_page(browser: Browser, path: Path, *, dark: bool = False) -> Page:
    """Open a viewer page and wait until its script has built the timeline."""
    page = browser.new_page()
    page.prefer_dark(dark)
    page.goto(path.as_uri())
    page.wait_for("window.agentledgerViewer && window.agentledgerViewer.ready")
    return page


def panel(page: Page, section: str) -> Any:
    return page.evaluate(f"document.querySelector('#panel [data-section={section}]').innerText")


def selected(page: Page) -> Any:
    return page.evaluate("window.agentledgerViewer.selected()")


def js_states_equal(page: Page, events: list[Event], prior: list[Event] | None = None) -> None:
    """The page's own fold gives state_at for every event of every run."""
    for run_id, recorded in expected_runs(events, prior).items():
        count, quoted = len(recorded.events), json.dumps(run_id)
        got = page.evaluate(
            f"Array.from({{length: {count}}}, (_, i) => window.agentledgerViewer.stateAt({quoted}, i))"
        )
        assert got == [plain(recorded.state_at(seq)) for seq in range(count)], run_id


async def test_demo_in_chromium(browser: Browser, tmp_path: Path) -> None:
    """Clicking the ToolsAdded event shows the four tools offered and the session after it."""
    events = await demo_events()
    added = next(e for e in events if isinstance(e, ToolsAdded))
    page = open_page(browser, write_html(events, tmp_path / "demo.html"))
    page.click(f'button.ev[data-run="run_1"][data-seq="{added.seq}"]')
    page.wait_for(f"document.querySelector('#panel h2').textContent.includes('#{added.seq} ToolsAdded')")
    page.screenshot(tmp_path / "demo.png")
    names = page.evaluate("Array.from(document.querySelectorAll('#panel .tool-name'), n => n.textContent)")
    assert names == ["get_weather", "remember_preference", "load_booking_tools", "book_hotel"]
    assert "NEW" in panel(page, "tools").upper()
    assert "preferences" in panel(page, "session")
    assert '"room":"quiet"' in panel(page, "session")
    assert "load_booking_tools" in panel(page, "pending")
    assert selected(page) == {"run": "run_1", "seq": added.seq}
    js_states_equal(page, events)
    assert page.errors() == []
    assert page.requests() == [(tmp_path / "demo.html").as_uri()]
    page.close()


@pytest.mark.parametrize("fragment", ["#%E0%A4%A", "#%", "#run_1:%ZZ", "#%C0%80:1"])
async def test_a_malformed_fragment_still_builds_the_timeline_in_chromium(
    browser: Browser, tmp_path: Path, fragment: str
) -> None:
    """A fragment that is not valid percent-encoding selects the last event, as no fragment does."""
    events = await demo_events()
    path = write_html(events, tmp_path / "demo.html")
    page = browser.new_page()
    page.goto(path.as_uri() + fragment)
    page.wait_for("window.agentledgerViewer && window.agentledgerViewer.ready")
    assert selected(page) == {"run": "run_1", "seq": events[-1].seq}
    assert page.evaluate("document.querySelectorAll('button.ev').length") == len(events)


async def test_keyboard_moves_between_events_in_chromium(browser: Browser, tmp_path: Path) -> None:
    """Events are buttons: Tab reaches them, arrow keys move the selection, the panel follows."""
    page = open_page(browser, write_html(await demo_events(), tmp_path / "demo.html"))
    page.press("Tab", "Tab", 9)
    page.wait_for("document.activeElement.matches('button.ev')")
    page.evaluate("document.querySelector('button.ev[data-seq=\"11\"]').focus()")
    page.press("ArrowDown", "ArrowDown", 40)
    page.wait_for("window.agentledgerViewer.selected().seq === 12")
    assert page.evaluate("document.activeElement.dataset.seq") == "12"
    assert page.evaluate("document.activeElement.getAttribute('aria-pressed')") == "true"
    assert "book_hotel" in panel(page, "tools")
    page.press("ArrowUp", "ArrowUp", 38)
    page.wait_for("window.agentledgerViewer.selected().seq === 11")
    assert "book_hotel" not in panel(page, "tools")
    page.press("Enter", "Enter", 13)
    assert selected(page) == {"run": "run_1", "seq": 11}
    assert page.errors() == []
    page.close()


async def test_subagents_nest_in_chromium(browser: Browser, tmp_path: Path) -> None:
    """Each sub-agent run sits inside the call that started it; its states are its own."""
    events = await subagent_events()
    page = open_page(browser, write_html(events, tmp_path / "team.html"))
    nested = page.evaluate(
        "Array.from(document.querySelectorAll('section.run.nested'), n => [n.dataset.runId,"
        " n.closest('.call').dataset.callId, n.parentElement.closest('section.run').dataset.runId])"
    )
    assert nested == [["run_2", "call_1", "run_1"], ["run_3", "call_2", "run_1"]]
    write = next(e for e in events if isinstance(e, SessionUpdated) and e.run_id == "run_2")
    page.click(f'button.ev[data-run="run_2"][data-seq="{write.seq}"]')
    page.wait_for("window.agentledgerViewer.selected().run === 'run_2'")
    session = panel(page, "session")
    assert "findings" in session
    assert "tides are lunar" in session
    assert "oceans" in session  # the caller's state, shared
    page.screenshot(tmp_path / "team.png")
    assert page.evaluate("document.querySelectorAll('button.ev[data-type=ToolChoiceReset]').length") == 1
    js_states_equal(page, events)
    assert page.errors() == []
    page.close()


async def test_hostile_page_stays_inert_in_chromium(browser: Browser, tmp_path: Path) -> None:
    """Markup from the log shows as text, runs nothing, and raises no console error."""
    events = await hostile_events()
    page = open_page(browser, write_html(events, tmp_path / "hostile.html", title=HOSTILE_TITLE))
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.evaluate("document.querySelectorAll('img, iframe, object, embed').length") == 0
    assert page.evaluate("document.title") == HOSTILE_TITLE
    text = page.evaluate("document.getElementById('timeline').textContent")
    assert HOSTILE_RESULT in text
    assert "<img src=x" in text
    js_states_equal(page, events)
    assert page.errors() == []
    page.close()


async def test_approvals_and_limits_in_chromium(browser: Browser, tmp_path: Path) -> None:
    """Approvals, unknown tools, rejected arguments, limits and rewritten requests raise no console error."""
    paused, resumed = await approval_runs()
    limited = await limit_events()
    for name, events, prior in (
        ("paused", paused, []),
        ("resumed", resumed, paused),
        ("limited", limited, []),
    ):
        page = open_page(browser, write_html(events, tmp_path / f"{name}.html", prior=prior))
        shown = page.evaluate("Array.from(document.querySelectorAll('button.ev'), n => n.dataset.type)")
        assert sorted(shown) == sorted(type(e).__name__ for e in events), name
        js_states_equal(page, events, prior)
        assert page.errors() == [], name
        page.close()
    kinds = {type(e).__name__ for e in [*paused, *resumed, *limited]}
    assert {"ApprovalRequested", "ApprovalResolved", "IterationLimitReached", "ToolNotFound"} <= kinds
    assert "ArgumentsRejected" in kinds


async def test_dark_scheme_in_chromium(browser: Browser, tmp_path: Path) -> None:
    """With a dark preference the page turns dark and stays readable."""
    page = open_page(browser, write_html(await subagent_events(), tmp_path / "team.html"), dark=True)
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    foreground = page.evaluate("getComputedStyle(document.body).color")
    dark = [int(x) for x in re.findall(r"\d+", background)[:3]]
    light = [int(x) for x in re.findall(r"\d+", foreground)[:3]]
    assert sum(dark) < 120 < 600 < sum(light)
    page.screenshot(tmp_path / "dark.png")
    assert page.errors() == []
    page.close()


async def test_thousand_events_in_chromium(browser: Browser, tmp_path: Path) -> None:
    """A run of about 1,000 events renders every event as a button and folds states like state_at."""
    events = await long_events()
    page = open_page(browser, write_html(events, tmp_path / "long.html"))
    assert page.evaluate("document.querySelectorAll('button.ev').length") == len(events)
    recorded = RecordedRun(events)
    for seq in (0, 500, len(events) - 1):
        got = page.evaluate(f"window.agentledgerViewer.stateAt('run_1', {seq})")
        assert got == plain(recorded.state_at(seq)), seq
    page.click('button.ev[data-run="run_1"][data-seq="500"]')
    page.wait_for("window.agentledgerViewer.selected().seq === 500")
    assert page.errors() == []
    page.close()


def test_page_data_has_every_field_of_every_event() -> None:
    """Events on the page carry their default values too (the log leaves them out)."""
    events = anyio.run(_demo_events)
    page = render_html(events)
    assert '"reason":"completed"' in page
    assert '"scope":"call"' in page


async def _demo_events() -> list[Event]:
    response, _ = await run_demo(MemoryEventStore())
    return list(response.events)


async def _claimed_paused_run() -> list[Event]:
    """A paused run's log as its store holds it after another run resumed it (BatchClaimed last)."""
    client = ScriptedChatClient([Call("wire_money", {"amount": 5}), "Sent 5."])
    agent = client.as_agent(name="Teller", tools=[wire_money], clock=FixedClock(), ids=SequentialIds())
    session = agent.create_session()
    paused = await agent.run("send 5", session=session)
    answer = paused.user_input_requests[0].to_approval_response(True)
    await agent.run(Message("user", (answer,)), session=session)
    assert agent.store is not None
    return await agent.store.read(paused.run_id)


async def test_a_resumed_paused_run_links_to_its_resumer_in_chromium(
    browser: Browser, tmp_path: Path
) -> None:
    """The paused run's header says which run resumed it; its claim is an event like the others."""
    events = await _claimed_paused_run()
    assert type(events[-1]).__name__ == "BatchClaimed"
    page = open_page(browser, write_html(events, tmp_path / "claimed.html"))
    header = page.evaluate("document.querySelector('section.run .run-meta').innerText")
    assert "resumed by run_2" in header
    shown = page.evaluate("Array.from(document.querySelectorAll('button.ev'), n => n.dataset.type)")
    assert sorted(shown) == sorted(type(e).__name__ for e in events)
    js_states_equal(page, events)
    assert page.errors() == []
    page.close()


class _Memory(ContextProvider):
    """Adds a remembered message and an instruction to each run."""

    async def before_run(self, *, agent: Any, session: Any, context: Any, state: dict[str, Any]) -> None:
        context.extend_messages(self.source_id, [Message("user", ["Remember: the user likes <b>tea</b>."])])
        context.extend_instructions(self.source_id, "Answer in one line.")


async def provided_events() -> list[Event]:
    """A run with a context provider's contribution (ContextProvided)."""
    client = ScriptedChatClient(["Tea it is."])
    agent = client.as_agent(
        name="Host", context_providers=[_Memory("memory")], clock=FixedClock(), ids=SequentialIds()
    )
    response = await agent.run("What do I drink?", session=agent.create_session())
    return list(response.events)


async def test_a_context_provider_shows_what_it_added_in_chromium(browser: Browser, tmp_path: Path) -> None:
    """ContextProvided shows its provider, its messages and its instructions as text, not as the
    event's JSON."""
    events = await provided_events()
    provided = next(e for e in events if type(e).__name__ == "ContextProvided")
    page = open_page(browser, write_html(events, tmp_path / "provided.html"))
    body = page.evaluate(
        f"document.querySelector('button.ev[data-seq=\"{provided.seq}\"] .ev-body').innerText"
    )
    assert "Remember: the user likes <b>tea</b>." in body
    assert "Answer in one line." in body
    assert '"contents"' not in body
    assert "{" not in body
    title = page.evaluate(f"document.querySelector('button.ev[data-seq=\"{provided.seq}\"]').innerText")
    assert "added by memory" in title
    assert page.errors() == []
    page.close()


async def test_the_cost_chart_names_the_agent_of_each_bar() -> None:
    """Each stretch of bars of one run is labelled with its agent, so a lead's calls and its
    sub-agents' calls are told apart."""
    page = render_html(await subagent_events())
    chart = page[page.index('<section class="cost-chart"') :]
    chart = chart[: chart.index("</section>")]
    labels = re.findall(r'<g class="chart-agent"><title>([^<]*)</title>', chart)
    agents = [label.split(" · ")[0] for label in labels]
    assert {"Lead", "ResearchAgent", "ReviewAgent"} <= set(agents)
    assert len(labels) >= 3

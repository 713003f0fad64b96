"""``agentledger serve`` in headless Chromium: every page renders without a console error, a run
appended by another connection arrives live, a decision made in the page is in the store and runs
the call once, markup from any recorded field stays text, and writes are refused without the
token and from a page on another origin.

Chromium maps ``evil.example`` to 127.0.0.1 (``--host-resolver-rules``), so a page on another
origin, and a rebound name for the server itself, can be tried on loopback. Without Chromium or
the ``websockets`` package these tests skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentledger import Agent, AgentSession, FunctionInvocationContext, tool
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.core.events import BatchClaimed, ToolCalled
from tests import cli_agents
from tests._browser import Browser, Page, find_chromium, launch, wait_until

from ._support import TOKEN, bank_for, pause, read, record, running

EVIL = "evil.example"
HOSTILE = '</script><img src=x onerror="window.__pwned=1"><b>"\'&amp;</b>\u2028<!--'
"""Markup that would run, or break out of an attribute or a script, if any page failed to escape it."""


@pytest.fixture(autouse=True)
def _fresh_ledger() -> None:
    cli_agents.WIRED.clear()


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
    rules = f"--host-resolver-rules=MAP {EVIL} 127.0.0.1"
    with launch(executable, tmp_path_factory.mktemp("chromium") / "profile", [rules]) as running_browser:
        yield running_browser


def _open(browser: Browser, url: str) -> Page:
    page = browser.new_page()
    page.goto(url)
    return page


def _text(page: Page, selector: str = "main") -> str:
    return str(page.evaluate(f"document.querySelector({json.dumps(selector)}).innerText"))


def _inert(page: Page) -> None:
    """Nothing from the log ran or became an element."""
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert (
        page.evaluate("document.querySelectorAll('main img, main iframe, main object, main embed').length")
        == 0
    )
    assert page.errors() == []


def test_every_page_renders_and_a_new_run_arrives_live(browser: Browser, tmp_path: Path) -> None:
    """The runs list, a run, the inbox and a diff render with no console error; a run appended
    while the list is open shows up in it without a reload."""
    path = tmp_path / "runs.db"
    done = record(path, ["Sent.", "Sent twice."], ["Send 1.", "Send 2."])
    waiting = pause(path)
    with running(path) as served:
        runs = _open(browser, served.url + "/")
        runs.wait_for("window.agentledgerServe && window.agentledgerServe.connected")
        listed = runs.evaluate(
            "Array.from(document.querySelectorAll('#runs tbody tr')).map(r => r.dataset.run)"
        )
        assert listed == [waiting, done[1], done[0]]
        assert runs.errors() == []

        [late] = record(path, ["Late."], ["A later run."])
        runs.wait_for(f"document.querySelector('#runs tr[data-run={json.dumps(late)}]') !== null")
        assert runs.evaluate("window.agentledgerServe.updates") >= 1
        assert runs.evaluate("document.querySelector('#runs tbody tr').dataset.run") == late
        assert runs.errors() == []
        runs.close()

        run = _open(browser, f"{served.url}/runs/{done[0]}")
        run.wait_for("window.agentledgerViewer && window.agentledgerViewer.ready")
        assert "Send 1." in _text(run, "body")
        assert run.errors() == []
        run.close()

        inbox = _open(browser, served.url + "/approvals")
        assert waiting in _text(inbox)
        assert '"amount": 5' in _text(inbox) or '"amount":5' in _text(inbox)
        assert inbox.evaluate("document.querySelectorAll('form.decide').length") == 0  # read-only
        assert inbox.errors() == []
        inbox.close()

        diff = _open(browser, f"{served.url}/diff?a={done[0]}&b={done[1]}")
        assert int(_text(diff, "#difference-count")) >= 1
        assert "Sent twice." in _text(diff)
        assert diff.errors() == []
        diff.close()


def test_a_decision_in_the_page_runs_the_call_once(browser: Browser, tmp_path: Path) -> None:
    """Approving in the inbox (token from the address's fragment) resumes the run: the call ran
    once, the store holds one claim, the list empties; a second tab where a reason was being
    typed keeps its form through the update, and its decision of the same call is refused."""
    path = tmp_path / "runs.db"
    run = pause(path, amount=7)
    with running(path, agent_for=bank_for(path)) as served:
        page = _open(browser, f"{served.url}/approvals#token={TOKEN}")
        assert page.evaluate("location.hash") == ""  # the token left the address
        stale = _open(
            browser, f"{served.url}/approvals#token={TOKEN}"
        )  # a second tab, where a reason is typed
        stale.wait_for("window.agentledgerServe.connected")
        stale.evaluate("document.querySelector('form.decide textarea[name=reason]').value = 'me too'")
        page.evaluate(
            "document.querySelector('form.decide textarea[name=reason]').value = 'checked the invoice'"
        )
        page.click("form.decide button.approve")
        answer = page.wait_for("window.agentledgerServe.last")
        assert answer["status"] == 200, answer
        assert answer["answers"][0]["reason"] == "checked the invoice"
        page.wait_for("document.getElementById('waiting-count').innerText.startsWith('0 calls')")
        assert page.errors() == []

        # The second tab keeps the half-written decision while the store changes under it.
        stale.wait_for("document.getElementById('status').innerText.includes('once this decision is sent')")
        stale.click("form.decide button.approve")
        again = stale.wait_for("window.agentledgerServe.last")
        assert again["status"] == 409
        assert again["type"] == "DecidedElsewhereError"
        assert "Refused" in _text(stale, "#status")
        page.close()
        stale.close()
    assert cli_agents.WIRED == [7]
    events = read(path, run)
    assert sum(isinstance(e, BatchClaimed) for e in events) == 1


def test_writes_are_refused_without_the_token_and_from_another_origin(
    browser: Browser, tmp_path: Path
) -> None:
    """A tab that never had the token is refused (403) and decides nothing; a page on another
    origin cannot post a decision even with the token, and the server does not answer to a
    name rebound to loopback."""
    path = tmp_path / "runs.db"
    run = pause(path)
    with running(path, agent_for=bank_for(path)) as served, _evil_site(served.port, run) as evil:
        page = _open(browser, served.url + "/approvals")  # no #token=
        page.click("form.decide button.approve")
        answer = page.wait_for("window.agentledgerServe.last")
        assert answer["status"] == 403
        assert "needs the token" in answer["error"]
        page.close()

        other = _open(browser, evil)
        other.wait_for("window.tried === true")
        assert other.evaluate("window.outcome") in ("blocked", "opaque")
        other.close()

        rebound = _open(browser, f"http://{EVIL}:{served.port}/")
        assert "loopback names only" in _text(rebound, "body")
        rebound.close()
    assert cli_agents.WIRED == []
    assert not any(isinstance(e, BatchClaimed | ToolCalled) for e in read(path, run))


class _Mallory:
    """An agent whose every recorded field can carry markup: its prompt, session, tool results,
    errors, session state, and the arguments of a call that waits for approval."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def build(self, script: list[Any]) -> Agent:
        answer = self.answer

        @tool
        def leak(ctx: FunctionInvocationContext) -> str:
            """Return markup."""
            if ctx.session is not None:
                ctx.session.state[HOSTILE] = HOSTILE
            return answer

        @tool
        def explode(reason: str) -> str:
            """Fail with the reason as the message."""
            raise ValueError(reason)

        @tool(approval_mode="always_require")
        def publish(text: str) -> str:
            """Publish a text (a person approves)."""
            return text

        return Agent(
            client=ScriptedChatClient(script),
            name="mallory",
            tools=[leak, explode, publish],
            include_detailed_errors=True,
        )


def _record_hostile(path: Path) -> list[str]:
    async def go() -> list[str]:
        store = SqliteEventStore(path)
        ids = []
        for answer in (HOSTILE, HOSTILE + " changed"):
            agent = _Mallory(answer).build([[Call("leak"), Call("explode", {"reason": HOSTILE})], HOSTILE])
            agent.store = store
            ids.append((await agent.run(HOSTILE, session=AgentSession(HOSTILE + answer[-7:]))).run_id)
        waiting = _Mallory(HOSTILE).build([Call("publish", {"text": HOSTILE})])
        waiting.store = store
        ids.append((await waiting.run(HOSTILE, session=AgentSession(HOSTILE))).run_id)
        await store.aclose()
        return ids

    return anyio.run(go)


def test_markup_from_every_recorded_field_stays_text(browser: Browser, tmp_path: Path) -> None:
    """Prompts, session ids, tool results, errors, session state and waiting arguments that are
    markup show as text on every page: nothing runs, no element appears, no console error."""
    path = tmp_path / "runs.db"
    first, second, waiting = _record_hostile(path)
    with running(path, agent_for=bank_for(path)) as served:
        for url, needle in (
            (f"{served.url}/#token={TOKEN}", waiting),
            (f"{served.url}/?agent=mallory", first),
            (f"{served.url}/approvals#token={TOKEN}", HOSTILE),
            (f"{served.url}/diff?a={first}&b={second}", HOSTILE + " changed"),
        ):
            page = _open(browser, url)
            assert needle in _text(page), url
            _inert(page)
            page.close()
        viewer = _open(browser, f"{served.url}/runs/{first}")
        viewer.wait_for("window.agentledgerViewer && window.agentledgerViewer.ready")
        assert HOSTILE in str(viewer.evaluate("document.getElementById('timeline').textContent"))
        assert viewer.evaluate("typeof window.__pwned") == "undefined"
        assert viewer.errors() == []
        viewer.close()


class _evil_site:
    """A page on ``evil.example`` that posts a decision, token and all, to the server on
    ``port``: as a JSON fetch (the browser must refuse it for want of CORS approval) and as a
    simple ``no-cors`` request (which reaches the server with the page's Origin)."""

    def __init__(self, port: int, run_id: str) -> None:
        target = f"http://127.0.0.1:{port}/api/decisions"
        body = json.dumps(
            {"run_id": run_id, "answers": [{"call_id": "call_1", "approved": True}], "reason": "r"}
        )
        script = (
            "<script>window.tried=false;(async()=>{try{"
            f"await fetch({json.dumps(target)},{{method:'POST',body:{json.dumps(body)},"
            f"headers:{{'Content-Type':'application/json','X-Agentledger-Token':{json.dumps(TOKEN)}}}}});"
            "window.outcome='sent'}catch(e){window.outcome='blocked'}"
            f"try{{await fetch({json.dumps(target)},"
            f"{{method:'POST',mode:'no-cors',body:{json.dumps(body)}}});"
            "if(window.outcome!=='sent')window.outcome='opaque'}catch(e){}"
            "window.tried=true})()</script>"
        )
        page = f"<!doctype html><title>elsewhere</title>{script}".encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://{EVIL}:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return self.url

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=30)
        wait_until(lambda: not self.thread.is_alive(), "the other site to stop")

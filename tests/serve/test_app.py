"""``agentledger serve``'s app over HTTP: pages, filters and pages of runs, live events, and who
may write (the token, a loopback origin, decisions allowed at start)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentledger.adapters.chat.scripted import Call
from agentledger.adapters.serve._guard import host_is_loopback, refuse_write
from agentledger.adapters.serve._queries import FilterError, Filters
from agentledger.core.events import BatchClaimed
from tests import cli_agents

from ._support import TOKEN, bank_for, pause, read, record, running


@pytest.fixture(autouse=True)
def _fresh_ledger() -> None:
    cli_agents.WIRED.clear()


def _decide(url: str, run_id: str, *, headers: dict[str, str] | None = None, **answer: Any) -> httpx.Response:
    body = {"run_id": run_id, "answers": [{"call_id": "call_1", "approved": True, **answer}], "reason": "ok"}
    sent = {"content-type": "application/json", "x-agentledger-token": TOKEN, **(headers or {})}
    return httpx.post(f"{url}/api/decisions", content=json.dumps(body), headers=sent)


def test_pages_answer(tmp_path: Path) -> None:
    """The runs list, a run (the viewer's page), the inbox and a diff all render from the store;
    an unknown run is a 404 page."""
    path = tmp_path / "runs.db"
    done = record(path, ["Sent.", "Sent twice."], ["Send 1.", "Send 2."])
    waiting = pause(path)
    with running(path) as served:
        runs = httpx.get(served.url + "/")
        assert runs.status_code == 200
        assert runs.text.index(waiting) < runs.text.index(done[1]) < runs.text.index(done[0])  # newest first
        assert "default-src 'none'" in runs.headers["content-security-policy"]
        page = httpx.get(f"{served.url}/runs/{done[0]}")
        assert 'id="agentledger-log"' in page.text
        assert 'href="/"' in page.text
        inbox = httpx.get(served.url + "/approvals")
        assert waiting in inbox.text
        assert "&quot;amount&quot;:5" in inbox.text or '{"amount":5}' in inbox.text
        diff = httpx.get(f"{served.url}/diff", params={"a": done[0], "b": done[1]})
        assert 'id="difference-count"' in diff.text
        assert "Sent twice." in diff.text
        assert httpx.get(f"{served.url}/runs/run_nope").status_code == 404


def test_filters_and_pages(tmp_path: Path) -> None:
    """Runs are paged 50 at a time, newest first; agent, outcome, tool and error filters select."""
    path = tmp_path / "runs.db"
    many = record(path, ["Sent."] * 52, [f"n{i}" for i in range(52)])
    [called] = record(path, [Call("nope"), "Done."], ["call a tool that is not there"], name="other")
    with running(path) as served:
        first = httpx.get(served.url + "/api/runs").json()
        assert [r["run_id"] for r in first["runs"]] == [called, *reversed(many)][:50]
        assert first["more"] is True
        second = httpx.get(served.url + "/api/runs", params={"page": 2}).json()
        assert [r["run_id"] for r in second["runs"]] == list(reversed(many))[49:]
        assert second["more"] is False
        by_agent = httpx.get(served.url + "/api/runs", params={"agent": "other"}).json()
        assert [r["run_id"] for r in by_agent["runs"]] == [called]
        errors = httpx.get(served.url + "/api/runs", params={"error": "any"}).json()
        assert [r["run_id"] for r in errors["runs"]] == [called]
        assert errors["scanned"] == 53
        assert httpx.get(served.url + "/api/runs", params={"tool": "wire"}).json()["runs"] == []
        bad = httpx.get(served.url + "/", params={"min_cost": "cheap"})
        assert bad.status_code == 400
        assert "min_cost must be a number" in bad.text


def test_filter_values_are_checked() -> None:
    """Outcomes, numbers and times that do not read are errors naming the filter."""
    assert Filters.parse({"since": "2026-05-01"}).since == 1777593600 * 10**9
    assert Filters.parse({"until": "2026-05-01T02:00+02:00"}).until == 1777593600 * 10**9
    for params, message in (
        ({"outcome": "done"}, "outcome must be one of"),
        ({"min_tokens": "1.5"}, "whole number"),
        ({"min_cost": "nan"}, "0 or more"),
        ({"since": "yesterday"}, "since must be a date"),
    ):
        with pytest.raises(FilterError, match=message):
            Filters.parse(params)


def test_a_decision_over_http_runs_the_call_once(tmp_path: Path) -> None:
    """With decisions allowed and the token, a decision resumes the run; the same decision again
    is refused as decided elsewhere (409), and the call ran once."""
    path = tmp_path / "runs.db"
    run = pause(path)
    with running(path, agent_for=bank_for(path)) as served:
        done = _decide(served.url, run, expected_arguments='{"amount":5}')
        assert done.status_code == 200, done.text
        assert done.json()["answers"][0]["reason"] == "ok"
        again = _decide(served.url, run)
        assert again.status_code == 409
        assert again.json()["type"] == "DecidedElsewhereError"
    assert cli_agents.WIRED == [5]
    assert isinstance(read(path, run)[-1], BatchClaimed)


@pytest.mark.parametrize(
    ("headers", "allowed", "error"),
    [
        ({"x-agentledger-token": ""}, True, "needs the token"),
        ({"x-agentledger-token": "wrong"}, True, "needs the token"),
        ({"origin": "http://evil.example"}, True, "loopback pages only"),
        ({"origin": "null"}, True, "loopback pages only"),
        ({"sec-fetch-site": "cross-site"}, True, "cross-site"),
        ({"content-type": "text/plain"}, True, "sent as JSON"),
        ({}, False, "read-only"),
    ],
)
def test_writes_are_refused_without_what_they_need(
    tmp_path: Path, headers: dict[str, str], allowed: bool, error: str
) -> None:
    """A write without the token, from a page that is not loopback, across sites, not as JSON,
    or to a read-only server is refused (403) and decides nothing."""
    path = tmp_path / "runs.db"
    run = pause(path)
    with running(path, agent_for=bank_for(path) if allowed else None) as served:
        refused = _decide(served.url, run, headers=headers)
        assert refused.status_code == 403
        assert error in refused.json()["error"]
    assert cli_agents.WIRED == []
    assert not isinstance(read(path, run)[-1], BatchClaimed)


def test_a_rejection_needs_a_reason_and_other_arguments_are_refused(tmp_path: Path) -> None:
    """A rejection without a reason (422), and arguments other than the ones the run holds
    (422, ApprovalMismatchError), decide nothing."""
    path = tmp_path / "runs.db"
    run = pause(path)
    with running(path, agent_for=bank_for(path)) as served:
        body = {"run_id": run, "answers": [{"call_id": "call_1", "approved": False}], "reason": " "}
        headers = {"content-type": "application/json", "x-agentledger-token": TOKEN}
        refused = httpx.post(f"{served.url}/api/decisions", content=json.dumps(body), headers=headers)
        assert (refused.status_code, refused.json()["error"]) == (422, "a rejection needs a reason")
        other = _decide(served.url, run, expected_arguments={"amount": 50})
        assert other.status_code == 422
        assert other.json()["type"] == "ApprovalMismatchError"
        broken = httpx.post(f"{served.url}/api/decisions", content=b"{", headers=headers)
        assert broken.status_code == 400
    assert cli_agents.WIRED == []


def test_names_other_than_loopback_are_not_served(tmp_path: Path) -> None:
    """A request naming another host (a DNS name rebound to 127.0.0.1) is refused, reads too."""
    path = tmp_path / "runs.db"
    pause(path)
    with running(path) as served:
        assert httpx.get(served.url + "/", headers={"host": "evil.example"}).status_code == 403
        assert httpx.get(served.url + "/", headers={"host": f"localhost:{served.port}"}).status_code == 200


def test_loopback_and_write_rules() -> None:
    """Loopback names and addresses are recognised; the rules hold without a server too."""
    assert all(host_is_loopback(h) for h in ("localhost", "127.0.0.1", "127.8.0.1", "[::1]", "a.localhost"))
    assert not any(host_is_loopback(h) for h in ("", "10.0.0.1", "example.com", "localhost.example.com"))
    good = {"content-type": "application/json", "x-agentledger-token": TOKEN, "origin": "http://127.0.0.1:9"}
    assert refuse_write(good, token=TOKEN, allowed=True) is None
    assert refuse_write({**good, "origin": "http://[::1]:9"}, token=TOKEN, allowed=True) is None


def test_a_change_is_pushed_as_an_event(tmp_path: Path) -> None:
    """``/events`` says hello, then ``changed`` once a run is appended by another connection."""
    path = tmp_path / "runs.db"
    record(path, ["Sent."], ["first"])
    with running(path) as served, httpx.stream("GET", served.url + "/events", timeout=30) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = stream.iter_lines()
        assert "event: hello" in [next(lines) for _ in range(3)]
        record(path, ["Sent."], ["second"])
        deadline = time.monotonic() + 30  # keepalives every 15 s bound each wait for a line
        for line in lines:
            if line == "event: changed":
                break
            assert time.monotonic() < deadline, "no change was pushed within 30 s"

"""The server's own pages (runs, approvals, diff), rendered as HTML on the server.

Every value from the store goes through ``html.escape`` (attributes quoted), so nothing a run
recorded is ever markup. The pages share one stylesheet and one script, allowed by their hashes
in the Content-Security-Policy (``policy``); nothing else may run, and the script only talks to
this server (``connect-src 'self'``). The live parts of a page are inside ``#live``: on a change
the script fetches the same address and swaps that element for the fresh one, so one renderer
serves the first load and every update.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import html
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import quote, urlencode

import msgspec

from agentledger.decisions import WaitingCall
from agentledger.listing import OUTCOMES, RunSummary

from ._diff import DiffRow
from ._queries import RunsPage
from ._script import SCRIPT
from ._style import STYLE

__all__ = ("approvals_page", "diff_page", "error_page", "policy", "runs_page_html")

_encode = msgspec.json.Encoder(order="deterministic").encode


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _href(run_id: str | None) -> str:
    """The address of a run's page, its id percent-encoded (a stored id may hold any character)."""
    return _e("/runs/" + quote(run_id or "", safe=""))


def _digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def policy() -> str:
    """The Content-Security-Policy of the server's own pages."""
    return "; ".join(
        (
            "default-src 'none'",
            f"style-src {_digest(STYLE)}",
            f"script-src {_digest(SCRIPT)}",
            "connect-src 'self'",
            "img-src data:",
            "form-action 'self'",
            "base-uri 'none'",
            "frame-ancestors 'none'",
        )
    )


def when(ns: int) -> str:
    """A time in ns since the epoch, as UTC text (``?`` when it is no time)."""
    try:
        moment = datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return "?"
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return _encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return repr(value)


def _layout(title: str, body: str, *, active: str, live: str = "", decisions: bool = False) -> str:
    links = [("/", "Runs"), ("/approvals", "Approvals"), ("/diff", "Diff")]
    nav = " ".join(
        f'<a href="{href}"{" aria-current=page" if name == active else ""}>{name}</a>' for href, name in links
    )
    mode = "decisions allowed" if decisions else "read-only"
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<link rel="icon" href="data:,">\n<title>{_e(title)} · agentledger</title>\n'
        f"<style>{STYLE}</style>\n</head>\n"
        f'<body data-live="{_e(live)}" data-decisions="{"on" if decisions else "off"}">\n'
        f'<header class="top"><b>agentledger</b><nav aria-label="Pages">{nav}</nav>'
        f'<span class="muted small">{mode}</span>'
        '<span id="live-state" class="muted small"></span></header>\n'
        f'<main>\n<h1>{_e(title)}</h1>\n<p id="status" class="status" role="status"></p>\n{body}\n</main>\n'
        f"<script>{SCRIPT}</script>\n</body>\n</html>\n"
    )


# -- runs -------------------------------------------------------------------------------------------


def _outcome(run: RunSummary) -> str:
    if run.resumed_by:
        by = _e(run.resumed_by)
        return f'<span class="chip ok">resumed by <a href="{_href(run.resumed_by)}">{by}</a></span>'
    kind = {"completed": "ok", "failed": "err", "awaiting_approval": "warn"}.get(run.outcome, "warn")
    reason = f" ({_e(run.reason)})" if run.reason and run.reason not in (run.outcome, "completed") else ""
    return f'<span class="chip {kind}">{_e(run.outcome)}{reason}</span>'


def _run_row(run: RunSummary) -> str:
    answer = run.answer if len(run.answer) <= 90 else run.answer[:89] + "…"
    parent = f' <span class="muted">← {_e(run.parent_run_id)}</span>' if run.parent_run_id else ""
    rid = _e(run.run_id)
    return (
        f'<tr data-run="{rid}"><td><input type="radio" name="a" value="{rid}" aria-label="diff A">'
        f'<input type="radio" name="b" value="{rid}" aria-label="diff B"></td>'
        f'<td class="nowrap">{when(run.started_at)}</td>'
        f'<td><a class="run-link" href="{_href(run.run_id)}">{rid}</a>{parent}</td>'
        f"<td>{_e(run.agent)}</td><td>{_e(run.session_id)}</td><td>{_outcome(run)}</td>"
        f'<td class="num">{run.events}</td><td class="answer">{_e(answer)}</td></tr>'
    )


def _field(name: str, label: str, value: str, kind: str = "text", hint: str = "") -> str:
    return (
        f'<label>{label}<input type="{kind}" name="{name}" value="{_e(value)}"'
        f"{f' placeholder={chr(34)}{_e(hint)}{chr(34)}' if hint else ''}></label>"
    )


def _filters_form(params: dict[str, str]) -> str:
    options = "".join(
        f'<option value="{o}"{" selected" if params.get("outcome") == o else ""}>{o}</option>'
        for o in OUTCOMES
    )
    return (
        '<form class="filters" method="get" action="/">'
        + _field("agent", "agent", params.get("agent", ""))
        + f'<label>outcome<select name="outcome"><option value="">any</option>{options}</select></label>'
        + _field("tool", "called tool", params.get("tool", ""))
        + _field("error", "error", params.get("error", ""), hint="any, or a type")
        + _field("min_cost", "cost ≥ USD", params.get("min_cost", ""), hint="0.01")
        + _field("min_tokens", "tokens ≥", params.get("min_tokens", ""))
        + _field("since", "since (UTC)", params.get("since", ""), "datetime-local")
        + _field("until", "until (UTC)", params.get("until", ""), "datetime-local")
        + '<button type="submit">Filter</button> <a href="/">clear</a></form>'
    )


def _pager(params: dict[str, str], page: int, more: bool) -> str:
    def link(to: int, label: str) -> str:
        query = urlencode({**{k: v for k, v in params.items() if v and k != "page"}, "page": str(to)})
        return f'<a href="/?{_e(query)}" data-page="{to}">{label}</a>'

    parts = [
        link(page - 1, "← newer") if page > 1 else "",
        f"page {page}",
        link(page + 1, "older →") if more else "",
    ]
    return '<nav class="pager" aria-label="Pages of runs">' + " ".join(p for p in parts if p) + "</nav>"


def runs_page_html(
    listing: RunsPage | None, params: dict[str, str], page: int, *, decisions: bool, error: str = ""
) -> str:
    """The runs list: filters, one page of runs newest first, links to each run and to a diff."""
    note = ""
    if error:
        note = f'<p class="error">{_e(error)}</p>'
    elif listing is not None and listing.scanned:
        cut = " (the search stops there: narrow it by agent, outcome or time)" if listing.cut else ""
        note = f'<p class="muted small">read the logs of {listing.scanned} runs for these filters{cut}</p>'
    rows = "".join(_run_row(r) for r in listing.runs) if listing else ""
    empty = "" if rows else '<p class="empty">No runs match.</p>'
    table = (
        '<form method="get" action="/diff" class="runs"><table id="runs"><thead><tr>'
        '<th title="pick two runs to diff">A B</th><th>started (UTC)</th><th>run</th><th>agent</th>'
        "<th>session</th><th>outcome</th><th>events</th><th>answer</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>{empty}"
        '<button type="submit">Diff the runs picked as A and B</button></form>'
    )
    pager = _pager(params, page, bool(listing and listing.more))
    live = f'<section id="live">{note}{table}{pager}</section>'
    return _layout(
        "Runs",
        _filters_form(params) + live,
        active="Runs",
        live="runs" if page == 1 else "",
        decisions=decisions,
    )


# -- approvals --------------------------------------------------------------------------------------


def _batches(calls: Iterable[WaitingCall]) -> dict[str, list[WaitingCall]]:
    runs: dict[str, list[WaitingCall]] = {}
    for call in calls:
        runs.setdefault(call.run_id, []).append(call)
    return runs


def _call_row(call: WaitingCall, decisions: bool, several: bool) -> str:
    cid = _e(call.call_id)
    choice = ""
    if decisions and several:
        choice = (
            '<span class="choice">'
            f'<label><input type="radio" name="verdict:{cid}" value="approve"> approve</label>'
            f'<label><input type="radio" name="verdict:{cid}" value="reject"> reject</label></span>'
        )
    seen = f'<input type="hidden" name="arguments:{cid}" value="{_e(_encode(call.arguments).decode())}">'
    return (
        f'<li class="waiting" data-call="{cid}"><span class="tool">{_e(call.tool)}</span>'
        f'<span class="muted small">{cid}</span>{choice}'
        f'<pre class="arguments">{_e(_json(call.arguments))}</pre>{seen if decisions else ""}</li>'
    )


def _batch(run_id: str, calls: Sequence[WaitingCall], decisions: bool) -> str:
    first = calls[0]
    rid = _e(run_id)
    head = (
        f'<header><a href="{_href(run_id)}">{rid}</a> '
        f'<span class="chip">session {_e(first.session_id)}</span>'
        f' <span class="muted small">waiting since {when(first.since)} UTC</span></header>'
    )
    items = "".join(_call_row(c, decisions, len(calls) > 1) for c in calls)
    if not decisions:
        return f'<article class="batch" data-run="{rid}">{head}<ul>{items}</ul></article>'
    marked = '<button type="submit" value="marked">Decide as marked</button>' if len(calls) > 1 else ""
    every = " all" if len(calls) > 1 else ""
    return (
        f'<article class="batch" data-run="{rid}"><form class="decide" data-run="{rid}">'
        f"{head}<ul>{items}</ul>"
        '<label class="reason">reason <textarea name="reason" rows="2" '
        'placeholder="why (needed to reject; kept in the log)"></textarea></label>'
        f'<button type="submit" value="approve" class="approve">Approve{every}</button> '
        f'<button type="submit" value="reject" class="reject">Reject{every}</button> {marked}'
        "</form></article>"
    )


def approvals_page(calls: Sequence[WaitingCall], *, decisions: bool) -> str:
    """The inbox: the calls that wait, grouped by run (a batch is decided as a whole)."""
    batches = _batches(calls)
    body = "".join(_batch(run_id, group, decisions) for run_id, group in batches.items())
    if not body:
        body = '<p class="empty">Nothing waits for a decision.</p>'
    note = (
        ""
        if decisions
        else '<p class="muted">Read-only: start <code>agentledger serve --allow-decisions --agent '
        "module:factory</code> to decide here, or use <code>agentledger approve</code>.</p>"
    )
    count = f'<p class="muted small" id="waiting-count">{len(calls)} calls in {len(batches)} runs</p>'
    return _layout(
        "Approvals",
        note + f'<section id="live">{count}{body}</section>',
        active="Approvals",
        live="approvals",
        decisions=decisions,
    )


# -- diff -------------------------------------------------------------------------------------------


def _place(place: Any) -> str:
    if place is None:
        return '<span class="muted">absent</span>'
    call = f" · {_e(place.call_id)}" if place.call_id else ""
    tool = f" ({_e(place.tool)})" if place.tool else ""
    return f"#{place.seq}{call}{tool}"


def _value(value: Any) -> str:
    text = _json(value)
    return f'<pre class="value">{_e(text if len(text) <= 2000 else text[:1999] + "…")}</pre>'


def diff_page(a: str, b: str, rows: Sequence[DiffRow] | None, *, decisions: bool, error: str = "") -> str:
    """Two runs side by side: every difference, grouped by iteration, with each side's place."""
    form = (
        '<form class="filters" method="get" action="/diff">'
        + _field("a", "run A", a)
        + _field("b", "run B", b)
        + '<button type="submit">Compare</button></form>'
    )
    if error:
        return _layout("Diff", form + f'<p class="error">{_e(error)}</p>', active="Diff", decisions=decisions)
    if rows is None:
        return _layout("Diff", form, active="Diff", decisions=decisions)
    if not rows:
        verdict = f'<p class="same">Runs {_e(a)} and {_e(b)}: no difference.</p>'
        return _layout("Diff", form + verdict, active="Diff", decisions=decisions)
    groups: dict[int, list[DiffRow]] = {}
    for row in rows:
        groups.setdefault(row.iteration, []).append(row)
    body = []
    for iteration, found in groups.items():
        title = "Start" if iteration == 0 else f"Iteration {iteration}"
        cells = "".join(
            f"<tr><td>{_place(r.a)}</td><td>{_place(r.b)}</td><td>{_e(r.event_type)}"
            f"{'.' + _e(r.field) if r.field else ''}</td>"
            f"<td>{_value(r.a_value)}</td><td>{_value(r.b_value)}</td></tr>"
            for r in found
        )
        body.append(
            f'<section class="iteration" data-iteration="{iteration}"><h2>{title}</h2><table class="diff">'
            f"<thead><tr><th>in A</th><th>in B</th><th>what</th><th>A</th><th>B</th></tr></thead>"
            f"<tbody>{cells}</tbody></table></section>"
        )
    summary = (
        f'<p>Runs <a href="{_href(a)}">{_e(a)}</a> and <a href="{_href(b)}">{_e(b)}</a>: '
        f'<b id="difference-count">{len(rows)}</b> differences</p>'
    )
    return _layout("Diff", form + summary + "".join(body), active="Diff", decisions=decisions)


def error_page(title: str, message: str, *, decisions: bool) -> str:
    return _layout(title, f'<p class="error">{_e(message)}</p>', active="", decisions=decisions)

"""A run as one self-contained HTML page: the timeline, the tools offered, session changes,
short-circuits, sub-agent runs, and the state after any event.

Theory of operation. ``_html_model.build_payload`` turns the events into one JSON document: each
run's events as recorded (content hidden unless ``include_content``), the link from a sub-agent
run to the call that started it, and the state after every event, folded once in Python with
the projections ``RecordedRun.state_at`` uses and stored as differences (``_html_states``). The
page embeds that document in a ``<script type="application/json">`` block, and its script builds
the timeline and the state panel with DOM calls, putting data in text nodes only, so nothing from
the log is ever parsed as markup. In the JSON text ``<``, ``>`` and ``&`` are written as ``\\u``
escapes, so no string in the log can close the block. A Content-Security-Policy forbids every
fetch and allows only the page's own stylesheet and script, by hash.

The page works offline from a ``file:`` URL: no fonts, scripts or images are loaded.
"""

from __future__ import annotations

import base64
import hashlib
import html
import os
from collections.abc import Sequence
from pathlib import Path

import msgspec

from agentledger.core.events import Event
from agentledger.cost import cost_report
from agentledger.redaction import redact_events

from ._html_chart import cost_chart
from ._html_model import HIDDEN, build_payload
from ._html_script import SCRIPT
from ._html_style import STYLE

__all__ = ("HIDDEN", "render_html", "write_html")

_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_TABLE = str.maketrans(_ESCAPES)


def _json_for_script(document: object) -> str:
    """JSON that cannot end its ``<script>`` block or open markup, whatever strings it holds."""
    return msgspec.json.encode(document).decode("utf-8").translate(_TABLE)


def _digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def _policy() -> str:
    return "; ".join(
        (
            "default-src 'none'",
            f"style-src {_digest(STYLE)}",
            f"script-src {_digest(SCRIPT)}",
            "img-src data:",
            "base-uri 'none'",
            "form-action 'none'",
        )
    )


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{policy}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="{generator}">
<link rel="icon" href="data:,">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
<header class="page-head">
{nav}<h1>{title}</h1>
<span class="muted small">{subtitle}</span>
<span class="hint muted small">Click an event, or move with <kbd>↑</kbd> <kbd>↓</kbd>,
to see the state after it.</span>
</header>
{chart}
<main class="layout">
<div id="timeline" aria-label="Timeline"></div>
<aside id="panel" tabindex="-1" aria-label="State after the selected event">
<noscript><p>This page builds its timeline with JavaScript; the run is in the JSON block below.</p></noscript>
</aside>
</main>
<p id="status" class="visually-hidden" role="status"></p>
<script type="application/json" id="agentledger-log">{data}</script>
<script>{script}</script>
</body>
</html>
"""


def render_html(
    events: Sequence[Event],
    *,
    title: str | None = None,
    include_content: bool = True,
    prior: Sequence[Event] = (),
    nav: Sequence[tuple[str, str]] = (),
) -> str:
    """One self-contained HTML page showing ``events`` (a run and its sub-agent runs).

    ``prior`` are the logs of the session's earlier runs (``RecordedRun.prior``), so the session
    state and the history at each event are the ones ``state_at`` gives. ``nav`` are links
    (address, label) shown before the title, as ``agentledger serve`` shows its pages. Without
    ``include_content`` message texts, arguments, results, error messages, instructions and
    session values are replaced by ``HIDDEN``; names, ids, tool specs and counts remain. The
    page shows the events as ``redact_events`` gives them: no credential reaches it.
    """
    events, prior = redact_events(events), redact_events(prior)
    payload = build_payload(events, prior=prior, title=title, include_content=include_content)
    runs = len(payload["runs"])
    count = sum(len(run["events"]) for run in payload["runs"].values())
    subtitle = f"{count} events in {runs} run{'s' if runs != 1 else ''} · {payload['generator']}"
    if not include_content:
        subtitle += " · content hidden"
    return _PAGE.format(
        policy=_policy(),
        generator=html.escape(payload["generator"]),
        title=html.escape(payload["title"]),
        subtitle=html.escape(subtitle),
        style=STYLE,
        data=_json_for_script(payload),
        script=SCRIPT,
        chart=cost_chart(cost_report(events)),
        nav=_nav(nav),
    )


def _nav(links: Sequence[tuple[str, str]]) -> str:
    if not links:
        return ""
    items = " ".join(
        f'<a href="{html.escape(href, quote=True)}">{html.escape(label)}</a>' for href, label in links
    )
    return f'<nav class="page-nav" aria-label="Pages">{items}</nav>\n'


def write_html(
    events: Sequence[Event],
    path: str | os.PathLike[str],
    *,
    title: str | None = None,
    include_content: bool = True,
    prior: Sequence[Event] = (),
) -> Path:
    """Write ``render_html(events, ...)`` to ``path`` (UTF-8) and return the path."""
    target = Path(path)
    page = render_html(events, title=title, include_content=include_content, prior=prior)
    target.write_text(page, encoding="utf-8")
    return target

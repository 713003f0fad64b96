"""The stylesheet of the server's own pages: system fonts, light and dark."""

from __future__ import annotations

__all__ = ("STYLE",)

STYLE = """
:root { color-scheme: light dark; --bg: #f4f5f7; --surface: #fff; --fg: #1a2030; --muted: #5a6375;
  --border: #d8dde5; --link: #2563eb; --ok: #15803d; --err: #c0262d; --warn: #a16207; --code: #f2f4f7; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #0f131a; --surface: #171c25; --fg: #e6e9ef; --muted: #9aa3b2; --border: #2b3341;
    --link: #7aa2ff; --ok: #4ade80; --err: #f87171; --warn: #facc15; --code: #1e2430; }
}
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
a { color: var(--link); }
header.top { display: flex; gap: 18px; align-items: baseline; padding: 10px 20px;
  background: var(--surface); border-bottom: 1px solid var(--border); }
header.top nav { display: flex; gap: 14px; }
header.top nav a[aria-current] { font-weight: 600; text-decoration: none; color: var(--fg); }
main { padding: 14px 20px 40px; max-width: 1400px; }
h1 { font-size: 20px; margin: 4px 0 10px; } h2 { font-size: 15px; margin: 14px 0 6px; }
.muted { color: var(--muted); } .small { font-size: 12px; }
.status:empty { display: none; } .status { padding: 6px 10px; border-radius: 6px; background: var(--surface);
  border: 1px solid var(--border); } .status.err { color: var(--err); } .status.ok { color: var(--ok); }
.error { color: var(--err); } .empty { color: var(--muted); font-style: italic; }
form.filters { display: flex; flex-wrap: wrap; gap: 10px; align-items: end; margin-bottom: 12px; }
form.filters label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); }
input, select, textarea, button { font: inherit; color: inherit; background: var(--surface);
  border: 1px solid var(--border); border-radius: 5px; padding: 4px 7px; }
button { cursor: pointer; }
button.approve { border-color: var(--ok); } button.reject { border-color: var(--err); }
table { border-collapse: collapse; width: 100%; background: var(--surface); }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid var(--border); vertical-align: top; }
th { font-size: 12px; color: var(--muted); font-weight: 600; }
td.num { text-align: right; } td.nowrap { white-space: nowrap; }
td.answer { max-width: 420px; overflow-wrap: anywhere; }
.chip { display: inline-block; padding: 0 7px; border-radius: 9px; border: 1px solid var(--border);
  font-size: 12px; }
.chip.ok { color: var(--ok); } .chip.err { color: var(--err); } .chip.warn { color: var(--warn); }
.pager { display: flex; gap: 14px; margin: 10px 0; }
form.runs button { margin-top: 8px; }
article.batch { background: var(--surface); border: 1px solid var(--border); border-radius: 8px;
  padding: 10px 14px; margin: 0 0 12px; }
article.batch ul { list-style: none; padding: 0; margin: 8px 0; }
li.waiting { border-left: 3px solid var(--warn); padding: 4px 10px; margin: 6px 0; }
li.waiting .tool { font-weight: 600; margin-right: 8px; } .choice { margin-left: 12px; }
pre { margin: 4px 0; padding: 6px 8px; background: var(--code); border-radius: 5px;
  white-space: pre-wrap; overflow-wrap: anywhere;
  font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; }
label.reason { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); margin: 6px 0; }
label.reason textarea { width: 100%; max-width: 640px; }
table.diff td:nth-child(4), table.diff td:nth-child(5) { width: 32%; }
.same { color: var(--ok); }
"""

"""The viewer page's stylesheet: system fonts only, light and dark through ``prefers-color-scheme``."""

from __future__ import annotations

__all__ = ("STYLE",)

STYLE = """
:root {
  color-scheme: light dark;
  --bg: #f4f5f7; --surface: #ffffff; --surface-2: #f1f3f6; --fg: #1a2030; --muted: #5a6375;
  --border: #d8dde5; --focus: #2563eb; --selected: #e7efff; --code-bg: #f2f4f7; --fresh: #fff6d6;
  --k-run: #475569; --k-model: #2563eb; --k-answer: #0f766e; --k-call: #334155; --k-ok: #15803d;
  --k-err: #c0262d; --k-short: #b45309; --k-tools: #7c3aed; --k-session: #be185d; --k-child: #0e7490;
  --k-approval: #a16207; --k-limit: #c2410c; --k-context: #4d7c0f;
  --sans: system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", "DejaVu Sans", sans-serif;
  --mono: ui-monospace, "SFMono-Regular", "Cascadia Mono", "DejaVu Sans Mono", Menlo, Consolas, monospace;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #0d1117; --surface: #161b22; --surface-2: #1c232d; --fg: #e6e9ef; --muted: #9aa5b5;
    --border: #2d3542; --focus: #7aa2ff; --selected: #1b2a45; --code-bg: #0f141b; --fresh: #3a3114;
    --k-run: #a3b1c6; --k-model: #7aa2ff; --k-answer: #2dd4bf; --k-call: #cbd5e1; --k-ok: #4ade80;
    --k-err: #f87171; --k-short: #fbbf24; --k-tools: #b197fc; --k-session: #f472b6; --k-child: #22d3ee;
    --k-approval: #facc15; --k-limit: #fb923c; --k-context: #a3e635;
  }
}
* { box-sizing: border-box; }
html, body { margin: 0; background: var(--bg); color: var(--fg); font: 14px/1.45 var(--sans); }
h1, h2, h3, h4, h5, h6 { margin: 0; font-weight: 600; }
.page-head {
  display: flex; flex-wrap: wrap; align-items: baseline; gap: 4px 16px; padding: 12px 24px;
  background: var(--surface); border-bottom: 1px solid var(--border);
}
.page-head h1 { font-size: 18px; }
.page-nav { display: flex; gap: 12px; font-size: 14px; }
.page-nav a { color: var(--focus); }
.page-head .hint { margin-left: auto; }
.muted { color: var(--muted); }
.small { font-size: 12px; }
kbd {
  font: 11px var(--mono); padding: 0 4px; border: 1px solid var(--border); border-bottom-width: 2px;
  border-radius: 4px; background: var(--surface-2);
}
.layout {
  display: grid; grid-template-columns: minmax(0, 1fr) minmax(360px, 40%);
  grid-template-rows: minmax(0, 1fr); flex: 1; min-height: 0;
}
#timeline { overflow: auto; padding: 16px 20px 48px 24px; min-width: 0; }
#panel {
  overflow: auto; padding: 14px 20px 48px; background: var(--surface); border-left: 1px solid var(--border);
}
#panel:focus { outline: none; }
@media (min-width: 901px) {
  body { display: flex; flex-direction: column; height: 100vh; overflow: hidden; }
  .page-head { flex: none; }
}
@media (max-width: 900px) {
  .layout { display: block; }
  #timeline, #panel { overflow: visible; }
  #panel { border-left: 0; border-top: 1px solid var(--border); }
}
.run {
  background: var(--surface); border: 1px solid var(--border); border-radius: 10px;
  padding: 12px 14px 14px; margin-bottom: 16px;
}
.run.nested { background: var(--surface-2); border-left: 4px solid var(--k-child); margin: 4px 0 2px; }
.run-head { display: flex; flex-wrap: wrap; align-items: center; gap: 4px 10px; }
.run-title { font-size: 16px; }
.run.nested .run-title { font-size: 14px; }
.run-meta { display: flex; flex-wrap: wrap; gap: 4px; }
.group { margin-top: 12px; }
.group-title {
  display: flex; gap: 10px; align-items: baseline; margin: 0 0 5px; font-size: 12px;
  text-transform: uppercase; letter-spacing: .06em; color: var(--muted);
}
.group-title .what { text-transform: none; letter-spacing: 0; font: 12px var(--mono); }
ol.items { list-style: none; margin: 0; padding: 0; display: grid; gap: 4px; }
.group > ol.items { border-left: 2px solid var(--border); padding-left: 10px; margin-left: 5px; }
button.ev {
  --kind: var(--k-run);
  display: block; width: 100%; margin: 0; padding: 5px 10px 6px; text-align: left; cursor: pointer;
  font: inherit; color: inherit; background: var(--surface);
  border: 1px solid var(--border); border-left: 4px solid var(--kind); border-radius: 6px;
}
.run.nested button.ev { background: var(--surface); }
button.ev:hover { background: var(--surface-2); }
button.ev:focus-visible { outline: 2px solid var(--focus); outline-offset: 1px; }
button.ev[aria-pressed="true"] {
  background: var(--selected); border-color: var(--focus); border-left-color: var(--kind);
  box-shadow: 0 0 0 1px var(--focus);
}
.k-run { --kind: var(--k-run); } .k-model { --kind: var(--k-model); } .k-answer { --kind: var(--k-answer); }
.k-call { --kind: var(--k-call); } .k-ok { --kind: var(--k-ok); } .k-err { --kind: var(--k-err); }
.k-short { --kind: var(--k-short); } .k-tools { --kind: var(--k-tools); }
.k-session { --kind: var(--k-session); } .k-child { --kind: var(--k-child); }
.k-approval { --kind: var(--k-approval); } .k-limit { --kind: var(--k-limit); }
.k-context { --kind: var(--k-context); }
.k-done { --kind: var(--k-ok); }
.ev-head { display: flex; align-items: baseline; gap: 8px; }
.seq { min-width: 2.4em; font: 12px var(--mono); color: var(--muted); }
.badge {
  font-size: 11px; font-weight: 700; letter-spacing: .04em; text-transform: uppercase;
  white-space: nowrap; color: var(--kind);
}
.ev-title { flex: 1; min-width: 0; overflow-wrap: anywhere; }
.time { font: 11px var(--mono); color: var(--muted); white-space: nowrap; }
.ev-body { display: block; margin: 2px 0 0 calc(2.4em + 8px); }
.field { display: flex; align-items: flex-start; gap: 8px; margin-top: 3px; }
.fname { flex: none; min-width: 5.5em; font-size: 12px; line-height: 19px; color: var(--muted); }
.fvalue { min-width: 0; }
.code {
  display: inline-block; max-width: 100%; padding: 1px 6px; border-radius: 4px;
  font: 12px/1.45 var(--mono); white-space: pre-wrap; overflow-wrap: anywhere; background: var(--code-bg);
}
.ev .code { max-height: 7.5em; overflow: hidden; }
pre.code { display: block; margin: 4px 0 0; padding: 8px 10px; }
.chip {
  display: inline-block; margin: 1px 4px 1px 0; padding: 0 7px; border-radius: 999px;
  font: 12px/1.6 var(--mono); border: 1px solid var(--border); background: var(--surface-2);
}
.chip.ok { color: var(--k-ok); border-color: var(--k-ok); }
.chip.err { color: var(--k-err); border-color: var(--k-err); }
.chip.warn { color: var(--k-short); border-color: var(--k-short); }
.chip.added { color: var(--k-ok); border-color: var(--k-ok); }
.chip.removed { color: var(--k-err); border-color: var(--k-err); text-decoration: line-through; }
.chip.choice { color: var(--k-tools); border-color: var(--k-tools); }
.hidden { font-style: italic; color: var(--muted); }
.call { border: 1px dashed var(--border); border-radius: 8px; padding: 6px 8px 8px; }
.call-head { display: flex; flex-wrap: wrap; align-items: baseline; gap: 8px; margin: 0 0 5px 2px; }
.call-name { font: 600 13px var(--mono); }
.msgs { display: block; }
.msg {
  display: block; margin: 4px 0; padding: 3px 8px 4px; border-left: 3px solid var(--border);
  background: var(--surface-2); border-radius: 0 4px 4px 0;
}
.msg[data-role="user"] { border-left-color: var(--k-model); }
.msg[data-role="assistant"] { border-left-color: var(--k-answer); }
.msg[data-role="tool"] { border-left-color: var(--k-ok); }
.msg[data-role="system"] { border-left-color: var(--k-run); }
.msg.fresh { background: var(--fresh); }
.role {
  display: block; font-size: 11px; font-weight: 700; letter-spacing: .04em; text-transform: uppercase;
  color: var(--muted);
}
.part { display: block; white-space: pre-wrap; overflow-wrap: anywhere; }
.part.call-part, .part.result-part { font: 12px/1.45 var(--mono); }
.panel-head { display: flex; flex-direction: column; gap: 2px; margin-bottom: 6px; }
.panel-head h2 { font-size: 16px; }
.ps { margin-top: 14px; }
.ps > h3 {
  display: flex; align-items: baseline; gap: 8px; margin-bottom: 5px; font-size: 12px;
  text-transform: uppercase; letter-spacing: .06em; color: var(--muted);
}
.ps > h3 .count { font: 12px var(--mono); text-transform: none; letter-spacing: 0; }
.pills { display: flex; flex-wrap: wrap; gap: 4px; }
ul.tools, ol.transcript, ul.pending { list-style: none; margin: 0; padding: 0; }
ul.tools li { padding: 4px 0; border-bottom: 1px solid var(--border); }
ul.tools li:last-child { border-bottom: 0; }
.tool-name { font: 600 13px var(--mono); }
.tool-desc { display: block; font-size: 12px; color: var(--muted); }
ul.tools li.removed .tool-name { text-decoration: line-through; color: var(--k-err); }
.tag {
  margin-left: 6px; padding: 0 5px; border-radius: 4px; font-size: 10px; font-weight: 700;
  letter-spacing: .04em; text-transform: uppercase;
}
.tag.new { color: var(--k-ok); border: 1px solid var(--k-ok); }
.tag.gone { color: var(--k-err); border: 1px solid var(--k-err); }
dl.session { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 4px 12px; margin: 0; }
dl.session dt { font: 600 12px/1.9 var(--mono); }
dl.session dd { margin: 0; min-width: 0; }
dl.session .changed { background: var(--fresh); border-radius: 4px; }
dl.session dt.deleted { text-decoration: line-through; color: var(--k-err); }
details.raw summary { cursor: pointer; color: var(--muted); font-size: 12px; }
details.raw summary:focus-visible { outline: 2px solid var(--focus); }
.empty { color: var(--muted); font-style: italic; }
.cost-chart { margin: 0 16px 12px; overflow-x: auto; }
.cost-chart h2 { margin: 4px 0; font-weight: 600; }
.cost-chart svg text { fill: var(--muted); }
.chart-key { margin-right: 10px; white-space: nowrap; }
.visually-hidden {
  position: absolute; width: 1px; height: 1px; margin: -1px; padding: 0; overflow: hidden;
  clip: rect(0 0 0 0); white-space: nowrap; border: 0;
}
"""

"""The viewer's cost chart: the tokens of each model call as a stacked bar, by where they came from.

A call's input is split as ``agentledger.cost`` estimates it: what the run's previous call was
already sent (``earlier input``), the previous answer sent back (``model's answer``), each tool
result of the batch in between (one segment per tool), and the rest (``new input``: the run's
input on its first call, and what the estimate leaves over). The call's output is the top
segment. A call that reported no usage has no bar. The chart is inline SVG drawn here, from
numbers and escaped names only, so the page's Content-Security-Policy needs nothing more.
"""

from __future__ import annotations

import html

from agentledger.cost import CallCost, CostReport, ToolShare

__all__ = ("cost_chart", "segments")

_FIXED = {
    "earlier input": "#9aa5b1",
    "model's answer": "#c3a6e0",
    "new input": "#7fb3d5",
    "output": "#f0b27a",
}
_TOOL_COLOURS = ("#82c99a", "#e6c85c", "#e38b8b", "#6fc3c3", "#b5cf6b", "#d69fc7")
_BAR, _GAP, _HEIGHT, _LEFT, _TOP = 28, 10, 160, 8, 8


def segments(report: CostReport) -> list[tuple[CallCost, list[tuple[str, int]]]]:
    """Per model call with a usage: its (origin, tokens) segments, bottom first."""
    shares: dict[tuple[str, int], list[ToolShare]] = {}
    for share in report.tool_shares:
        if share.next_call is not None:
            shares.setdefault((share.run_id, share.next_call), []).append(share)
    bars = []
    previous: dict[str, CallCost] = {}
    for call in sorted(report.calls, key=lambda c: (c.at, c.run_id, c.seq)):  # as they happened
        before = previous.get(call.run_id)
        previous[call.run_id] = call
        usage = call.usage
        if usage is None:
            continue
        parts: list[tuple[str, int]] = []
        left = usage.input_tokens
        if before is not None and before.usage is not None and before.usage.input_tokens:
            earlier = min(before.usage.input_tokens, left)
            answer = max(before.usage.output_tokens - (before.usage.reasoning_tokens or 0), 0)
            answer = min(answer, left - earlier)
            parts += [("earlier input", earlier), ("model's answer", answer)]
            left -= earlier + answer
            for share in shares.get((call.run_id, call.iteration), []):
                tokens = min(share.tokens or 0, left)
                parts.append((f"tool {share.name}", tokens))
                left -= tokens
        parts += [("new input", left), ("output", usage.output_tokens)]
        bars.append((call, [(origin, tokens) for origin, tokens in parts if tokens > 0]))
    return bars


def _colour(origin: str, tools: dict[str, str]) -> str:
    if origin in _FIXED:
        return _FIXED[origin]
    if origin not in tools:
        tools[origin] = _TOOL_COLOURS[len(tools) % len(_TOOL_COLOURS)]
    return tools[origin]


def _agent_labels(calls: list[CallCost]) -> list[str]:
    """Under the iteration numbers, each stretch of consecutive bars of one run: a rule and its
    agent's name (``call N`` is the run's own iteration, so two runs' bars are told apart)."""
    shapes: list[str] = []
    start = 0
    y = _TOP + _HEIGHT + 20
    for index in range(1, len(calls) + 1):
        if index < len(calls) and calls[index].run_id == calls[start].run_id:
            continue
        x0, x1 = _LEFT + start * (_BAR + _GAP), _LEFT + index * (_BAR + _GAP) - _GAP
        name = html.escape(calls[start].agent)
        title = html.escape(f"{calls[start].agent} · run {calls[start].run_id}")
        shapes.append(
            f'<g class="chart-agent"><title>{title}</title>'
            f'<line x1="{x0}" x2="{x1}" y1="{y}" y2="{y}" stroke="currentColor" stroke-width="1"/>'
            f'<text x="{x0}" y="{y + 12}">{name}</text></g>'
        )
        start = index
    return shapes


def cost_chart(report: CostReport) -> str:
    """The chart as an SVG element with a legend, or an empty string when no call has a usage."""
    bars = segments(report)
    if not bars:
        return ""
    tallest = max(sum(t for _, t in parts) for _, parts in bars) or 1
    tools: dict[str, str] = {}
    shapes: list[str] = []
    for index, (call, parts) in enumerate(bars):
        x = _LEFT + index * (_BAR + _GAP)
        y = float(_TOP + _HEIGHT)
        for origin, tokens in parts:
            height = tokens / tallest * _HEIGHT
            y -= height
            title = html.escape(f"{call.run_id} call {call.iteration}: {origin}, {tokens:,} tokens")
            shapes.append(
                f'<rect x="{x}" y="{y:.2f}" width="{_BAR}" height="{height:.2f}" '
                f'fill="{_colour(origin, tools)}"><title>{title}</title></rect>'
            )
        label = html.escape(str(call.iteration))
        shapes.append(
            f'<text x="{x + _BAR / 2}" y="{_TOP + _HEIGHT + 14}" text-anchor="middle">{label}</text>'
        )
    shapes += _agent_labels([call for call, _ in bars])
    width = max(_LEFT * 2 + len(bars) * (_BAR + _GAP), 120)
    height = _TOP + _HEIGHT + 40
    origins = [o for o in _FIXED if any(o == p for _, parts in bars for p, _ in parts)] + list(tools)
    legend = " ".join(
        f'<span class="chart-key"><svg width="10" height="10" aria-hidden="true">'
        f'<rect width="10" height="10" fill="{_colour(o, tools)}"/></svg> {html.escape(o)}</span>'
        for o in origins
    )
    summary = (
        f"{report.total.usage.input_tokens:,} input and {report.total.usage.output_tokens:,} output tokens"
    )
    return (
        f'<section class="cost-chart" aria-label="Tokens per model call">'
        f'<h2 class="small">Tokens per model call, by origin and agent '
        f'<span class="muted">({html.escape(summary)}; '
        f"tool shares are estimates)</span></h2>"
        f'<svg role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'font-size="10"><title>Tokens per model call</title>{"".join(shapes)}</svg>'
        f'<div class="small">{legend}</div></section>'
    )

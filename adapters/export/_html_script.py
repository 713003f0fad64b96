"""The viewer page's script: builds the timeline and the state panel from the embedded JSON.

It creates every node with DOM calls and puts data in with text nodes only, so nothing from the
log is ever parsed as markup. ``window.agentledgerViewer`` exposes ``stateAt(runId, seq)`` (the
state shaped like ``RecordedRun.state_at``) and ``select(runId, seq)`` for tests and scripts.
"""

from __future__ import annotations

from ._html_panel import PANEL

__all__ = ("SCRIPT",)

_TIMELINE = r"""
  "use strict";
  const DATA = JSON.parse(document.getElementById("agentledger-log").textContent);
  const RUNS = DATA.runs;
  const HIDDEN = DATA.hidden;
  const buttons = new Map();
  const rendered = new Set();
  const stateCache = new Map();
  let current = null;
  let t0 = null;
  const own = (table, key) => (Object.hasOwn(table, key) ? table[key] : undefined);

  // -- building blocks ------------------------------------------------------------------------
  const add = (node, kids) => {
    for (const kid of kids) {
      if (kid === null || kid === undefined || kid === false) continue;
      if (Array.isArray(kid)) add(node, kid);
      else node.append(kid instanceof Node ? kid : String(kid));
    }
    return node;
  };
  const el = (tag, cls, ...kids) => {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    return add(node, kids);
  };
  const heading = (level, cls, ...kids) => el("h" + Math.min(Math.max(level, 1), 6), cls, ...kids);
  const pretty = (v, indent) => {
    if (v === undefined) return "";
    if (typeof v === "string") return v;
    const flat = JSON.stringify(v);
    return flat.length <= 72 && !indent ? flat : JSON.stringify(v, null, 2);
  };
  const code = (v, tag) =>
    el(tag || "span", "code" + (v === HIDDEN ? " hidden" : ""), pretty(v, tag === "pre"));
  const chip = (label, cls) => el("span", "chip" + (cls ? " " + cls : ""), label);
  const chips = (names, cls) =>
    (names.length ? names.map((n) => chip(n, cls)) : el("span", "empty", "none"));
  const field = (name, ...value) =>
    el("span", "field", el("span", "fname", name), el("span", "fvalue", ...value));
  const plural = (n, word) => n + " " + word + (n === 1 ? "" : "s");
  const calls = (message) => (message.contents || []).filter((c) => c.type === "function_call");
  const isEmpty = (v) => v === null || v === undefined || (typeof v === "object" && !Object.keys(v).length);
  const millis = (at) => {
    if (t0 === null || typeof at !== "number") return null;
    const ms = Math.round((at - t0) / 1e5) / 10;
    return ms < 1000 ? "+" + ms.toFixed(1) + " ms" : "+" + (ms / 1000).toFixed(2) + " s";
  };
  const usageText = (u) =>
    (u ? "tokens in " + (u.input_tokens || 0) + " · out " + (u.output_tokens || 0) : null);

  const part = (c) => {
    switch (c.type) {
      case "text":
        return el("span", "part" + (c.text === HIDDEN ? " hidden" : ""), c.text || "");
      case "function_call":
        return el("span", "part call-part", "→ ", c.name || "?", "(", c.arguments || "", ")  ",
          el("span", "muted", c.call_id || ""));
      case "function_result":
        return el("span", "part result-part", el("span", "muted", (c.call_id || "") + " ← "),
          c.exception ? c.exception : pretty(c.result));
      case "function_approval_request":
        return el("span", "part", "approval requested for " + (c.call_id || ""));
      case "function_approval_response":
        return el("span", "part", (c.approved ? "approved " : "rejected ") + (c.call_id || ""));
      default:
        return el("span", "part", JSON.stringify(c));
    }
  };
  const messages = (list) => el("span", "msgs", list.map((m) => message(m)));
  const message = (m, fresh) => {
    const node = el("span", "msg" + (fresh ? " fresh" : ""), el("span", "role", m.role),
      (m.contents || []).map(part));
    node.dataset.role = m.role;
    return node;
  };

  // -- what each event says -------------------------------------------------------------------
  const KIND = {
    RunStarted: "run", RunInputRewritten: "run", ModelCalled: "model", ModelResponded: "answer",
    ModelFailed: "err", ToolCalled: "call", ToolReturned: "ok", ToolFailed: "err",
    ArgumentsRejected: "err", ToolNotFound: "err", MiddlewareShortCircuit: "short", ToolsAdded: "tools",
    ToolsRemoved: "tools", ToolChoiceReset: "tools", SessionUpdated: "session", ChildRunStarted: "child",
    ApprovalRequested: "approval", ApprovalResolved: "approval", IterationLimitReached: "limit",
    RunTerminated: "limit", RunCompleted: "done", RunFailed: "err", ModelRequestRewritten: "model",
    CallsSkipped: "limit", BatchClaimed: "approval", ContextProvided: "context",
  };
  const LABEL = {
    RunStarted: "run started", RunInputRewritten: "input rewritten", ModelCalled: "model call",
    ModelResponded: "model answer", ModelFailed: "model failed", ToolCalled: "call", ToolReturned: "returned",
    ToolFailed: "failed", ArgumentsRejected: "rejected", ToolNotFound: "not found",
    MiddlewareShortCircuit: "short-circuit", ToolsAdded: "tools added", ToolsRemoved: "tools removed",
    ToolChoiceReset: "choice reset", SessionUpdated: "session", ChildRunStarted: "sub-agent",
    ApprovalRequested: "approval", ApprovalResolved: "approval", IterationLimitReached: "limit",
    RunTerminated: "terminated", RunCompleted: "completed", RunFailed: "run failed",
    ModelRequestRewritten: "request rewritten", CallsSkipped: "calls skipped", BatchClaimed: "resumed",
    ContextProvided: "context",
  };
  const lines = (v) => (Array.isArray(v) ? el("span", "msgs", v.map((t) => el("span", "part", t))) : code(v));

  const DESCRIBE = {
    RunStarted: (e) => [
      ["agent ", el("b", null, e.agent_name || e.agent_id),
        e.parent_run_id ? " · sub-agent run of " + e.parent_run_id + " / " + e.parent_call_id : null],
      [
        e.instructions != null ? field("instructions", code(e.instructions)) : null,
        (e.messages || []).length ? field("input", messages(e.messages)) : null,
        field("tools", chips((e.tools || []).map((t) => t.name))),
        isEmpty(e.options) ? null : field("options", code(e.options)),
        isEmpty(e.function_invocation_kwargs)
          ? null : field("tool kwargs", code(e.function_invocation_kwargs)),
        (e.client_kwargs_keys || []).length ? field("client kwargs", chips(e.client_kwargs_keys)) : null,
        e.session_id ? field("session", chip(e.session_id)) : null,
        e.history_length ? field("history", plural(e.history_length, "message")) : null,
      ],
    ],
    RunInputRewritten: (e) => [["by ", el("b", null, e.by)], [
      field("input", messages(e.messages || [])),
      isEmpty(e.options) ? null : field("options", code(e.options)),
      isEmpty(e.function_invocation_kwargs) ? null : field("tool kwargs", code(e.function_invocation_kwargs)),
      e.client_kwargs_keys ? field("client kwargs", chips(e.client_kwargs_keys)) : null,
    ]],
    ModelRequestRewritten: (e) => [["by ", el("b", null, e.by), " for iteration " + e.iteration], [
      field("sends", messages(e.messages || [])),
      field("offers", chips(e.tools || [])),
      isEmpty(e.options) ? null : field("options", code(e.options)),
    ]],
    ContextProvided: (e) => [["added by ", el("b", null, e.provider)], [
      (e.instructions || []).length ? field("instructions", lines(e.instructions)) : null,
      (e.messages || []).length ? field("messages", messages(e.messages)) : null,
      (e.tools || []).length ? field("tools", chips(e.tools.map((t) => t.name), "added")) : null,
      (e.middleware || []).length ? field("middleware", chips(e.middleware)) : null,
    ]],
    CallsSkipped: (e) => [[(e.call_ids || []).join(", "), " not run"], [el("span", "muted", e.reason)]],
    BatchClaimed: (e) => [["batch resumed by run ", chip(e.by_run_id)],
      [e.after_run_id ? el("span", "muted", "after run " + e.after_run_id) : null]],
    ModelCalled: (e) => [
      ["sent " + plural((e.message_count || 0) - (e.held || 0), "message") + ", offered " +
        plural((e.tools || []).length, "tool")],
      [field("offered", chips(e.tools || [])),
        e.tool_choice != null ? field("tool_choice", chip(pretty(e.tool_choice), "choice")) : null,
        e.conversation_id ? field("continues", chip(e.conversation_id)) : null],
    ],
    ModelResponded: (e) => {
      const asked = calls(e.message);
      const texts = (e.message.contents || []).filter((c) => c.type !== "function_call");
      const meta = [e.model, e.finish_reason, usageText(e.usage)].filter(Boolean).join(" · ");
      return [
        asked.length ? ["asked for ", el("b", null, asked.map((c) => c.name).join(", "))] : ["answered"],
        [texts.length ? el("span", "msgs", texts.map(part)) : null,
          asked.map((c) => field(c.name, code(c.arguments === undefined ? "" : c.arguments))),
          meta ? field("model", el("span", "muted small", meta)) : null],
      ];
    },
    ModelFailed: (e) => [[e.error_type], [field("message", code(e.message))]],
    ToolCalled: (e) => [[el("b", null, e.name), " called"], [field("arguments", code(e.arguments))]],
    ToolReturned: (e) => [[el("b", null, e.name), " returned"], [
      field("result", code(e.result)),
      e.overridden_by ? field("replaced by", e.overridden_by) : null,
      e.overridden_by ? field("tool said", code(e.tool_result)) : null,
    ]],
    ToolFailed: (e) => [[el("b", null, e.name), " raised ", e.error_type],
      [field("message", code(e.message))]],
    ArgumentsRejected: (e) => [["arguments for ", el("b", null, e.name), " rejected"],
      [field("reason", code(e.reason))]],
    ToolNotFound: (e) => [["unknown tool ", el("b", null, e.name)], [el("span", "muted", e.reason)]],
    MiddlewareShortCircuit: (e) => [["answered by middleware ", el("b", null, e.middleware)],
      [field("the model sees", code(e.result))]],
    ToolsAdded: (e) => [["by ", e.by_call_id || "middleware"],
      [chips((e.tools || []).map((t) => t.name), "added")]],
    ToolsRemoved: (e) => [["by ", e.by_call_id || "middleware"], [chips(e.names || [], "removed")]],
    ToolChoiceReset: (e) => [["tool_choice reset at iteration " + e.iteration],
      [field("was", chip(pretty(e.previous), "choice"))]],
    SessionUpdated: (e) => [["by ", e.by, e.origin_run_id ? " (copied from " + e.origin_run_id + ")" : ""],
      (e.changes || []).map((c) =>
        field(c.key, c.op === "set" ? code(c.value) : el("span", "muted", "deleted")))],
    ChildRunStarted: (e) => [
      ["started ", el("b", null, e.agent_name || "agent"), " in run " + e.child_run_id],
      [el("span", "muted", e.propagate_session ? "shares the caller's session" : "in a session of its own")]],
    ApprovalRequested: (e) => [["waiting for approval of ", (e.call_ids || []).join(", ")], []],
    ApprovalResolved: (e) => [[e.call_id, e.approved ? " approved" : " rejected"], []],
    IterationLimitReached: (e) => [[e.reason + " = " + e.limit], []],
    RunTerminated: (e) => [["by ", e.by || "middleware"], [el("span", "muted", e.reason)]],
    RunCompleted: (e) => [[e.reason === "completed" ? "" : e.reason],
      [field("answer", code(e.text)), field("usage", el("span", "muted small", usageText(e.usage)))]],
    RunFailed: (e) => [[e.error_type], [field("message", code(e.message))]],
  };

  const eventButton = (runId, e) => {
    const describe = own(DESCRIBE, e.type) || ((x) => [[x.type], [code(x)]]);
    const [title, body] = describe(e);
    const hasBody = body.some((b) => b && (!Array.isArray(b) || b.length));
    const node = el("button", "ev k-" + (own(KIND, e.type) || "run"),
      el("span", "ev-head", el("span", "seq", "#" + e.seq), el("span", "badge", own(LABEL, e.type) || e.type),
        el("span", "ev-title", title), el("span", "time", millis(e.at))),
      hasBody ? el("span", "ev-body", body) : null);
    node.type = "button";
    node.dataset.run = runId;
    node.dataset.seq = String(e.seq);
    node.dataset.type = e.type;
    node.setAttribute("aria-pressed", "false");
    buttons.set(runId + ":" + e.seq, node);
    return node;
  };

  // -- the timeline: runs, iterations, calls ------------------------------------------------
  const laneOf = (e, children) => {
    switch (e.type) {
      case "ToolCalled": case "ToolReturned": case "ToolFailed": case "ArgumentsRejected":
      case "ToolNotFound": case "MiddlewareShortCircuit": case "ChildRunStarted": case "ApprovalResolved":
        return e.call_id;
      case "ToolsAdded": case "ToolsRemoved":
        return e.by_call_id;
      case "SessionUpdated":
        return e.origin_run_id == null ? e.by : children.get(String(e.by).split("/")[0]);
      default:
        return null;
    }
  };

  const groupsOf = (events) => {
    const children = new Map();
    for (const e of events) if (e.type === "ChildRunStarted") children.set(e.child_run_id, e.call_id);
    const groups = [];
    let group = { kind: "start", items: [] };
    let batch = null;
    const close = () => {
      if (batch) for (const block of batch.values()) if (!block.placed) group.items.push(block);
      batch = null;
    };
    groups.push(group);
    for (const e of events) {
      if (e.type === "ModelCalled" || e.type === "RunCompleted" || e.type === "RunFailed") {
        close();
        group = e.type === "ModelCalled"
          ? { kind: "iter", iteration: e.iteration, items: [] } : { kind: "end", items: [] };
        groups.push(group);
      }
      if (e.type === "ModelResponded" && calls(e.message).length) {
        close();
        group.items.push(e);
        group.asked = calls(e.message).map((c) => c.name);
        batch = new Map(calls(e.message).map((c) => [c.call_id, { call: c, events: [], placed: false }]));
        continue;
      }
      if (e.type === "ModelResponded") group.answered = true;
      if (e.type === "CallsSkipped" && batch) {
        for (const id of e.call_ids || []) if (batch.has(id)) batch.get(id).skipped = true;
      }
      const block = batch && batch.get(laneOf(e, children));
      if (!block) {
        group.items.push(e);
        continue;
      }
      if (!block.placed) {
        block.placed = true;
        group.items.push(block);
      }
      block.events.push(e);
    }
    close();
    return groups.filter((g) => g.items.length);
  };

  const appendEvent = (list, runId, e, depth) => {
    list.append(el("li", null, eventButton(runId, e)));
    if (e.type === "ChildRunStarted" && own(RUNS, e.child_run_id) && !rendered.has(e.child_run_id)) {
      list.append(el("li", "child", renderRun(e.child_run_id, depth + 1)));
    }
  };

  const outcomeOf = (events) => {
    for (const e of events) {
      if (e.type === "ToolReturned") return chip("returned", "ok");
      if (e.type === "MiddlewareShortCircuit") return chip("short-circuited", "warn");
      if (["ToolFailed", "ArgumentsRejected", "ToolNotFound"].includes(e.type)) {
        return chip(LABEL[e.type], "err");
      }
      if (e.type === "ApprovalResolved" && !e.approved) return chip("rejected", "err");
    }
    return chip("no outcome in this log", "warn");
  };

  const renderCall = (runId, block, depth) => {
    const box = el("div", "call",
      el("div", "call-head", el("span", "call-name", block.call.name || "?"),
        el("span", "muted small", block.call.call_id || ""),
        block.skipped ? chip("skipped", "warn") : outcomeOf(block.events)));
    box.dataset.callId = block.call.call_id || "";
    const list = el("ol", "items");
    for (const e of block.events) appendEvent(list, runId, e, depth);
    box.append(list);
    return box;
  };

  const groupTitle = (g) => {
    if (g.kind === "start") return ["Start"];
    if (g.kind === "end") return ["Outcome"];
    const what = g.asked ? "→ " + g.asked.join(", ") : g.answered ? "→ answer" : "";
    return ["Iteration " + g.iteration, el("span", "what", what)];
  };

  const renderRun = (runId, depth) => {
    rendered.add(runId);
    const run = RUNS[runId];
    const events = run.events;
    const first = events[0] || {};
    const last = events[events.length - 1] || {};
    const claim = last.type === "BatchClaimed" ? last : null;  // paused, then resumed by another run
    const ended = claim ? events.filter((e) => e.type === "RunCompleted").pop() || last : last;
    const outcome = claim ? chip("resumed by " + claim.by_run_id, "ok")
      : last.type === "RunFailed" ? chip("failed", "err")
      : last.type !== "RunCompleted" ? chip("running or torn", "warn")
      : chip(last.reason, last.reason === "completed" ? "ok" : "warn");
    const section = el("section", "run" + (depth ? " nested" : ""),
      el("header", "run-head",
        heading(depth + 2, "run-title", (depth ? "Sub-agent " : "") + (run.agent || "run " + runId)),
        el("span", "run-meta", chip(runId), first.session_id ? chip("session " + first.session_id) : null,
          chip(plural(events.length, "event")), outcome,
          ended.type === "RunCompleted" ? chip(usageText(ended.usage)) : null)));
    section.dataset.runId = runId;
    section.setAttribute("aria-label", (depth ? "sub-agent run " : "run ") + runId);
    for (const g of groupsOf(events)) {
      const list = el("ol", "items");
      for (const item of g.items) {
        if (item.call) list.append(el("li", null, renderCall(runId, item, depth)));
        else appendEvent(list, runId, item, depth);
      }
      const box = el("section", "group g-" + g.kind, heading(depth + 3, "group-title", groupTitle(g)), list);
      if (g.kind === "iter") box.dataset.iteration = String(g.iteration);
      section.append(box);
    }
    return section;
  };
"""

SCRIPT = "(() => {" + _TIMELINE + PANEL + "})();\n"
"""The whole script: one function run once, so nothing leaks into the global scope but
``window.agentledgerViewer``."""

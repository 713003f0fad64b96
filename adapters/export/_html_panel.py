"""The second half of the viewer page's script: states, the state panel, selection and start-up.

It runs in the same function as ``_html_script._TIMELINE`` and uses its helpers (``el``,
``code``, ``chip``, ``message``...). Each run's compact steps (see ``_html_states``) are applied
in order once, on the first look at that run, and kept.
"""

from __future__ import annotations

__all__ = ("PANEL",)

PANEL = r"""
  // -- states: the compact steps applied in order (see _html_states.py) ---------------------
  const indexOf = (runId, seq) => RUNS[runId].events.findIndex((e) => e.seq === seq);

  const statesOf = (runId) => {
    if (stateCache.has(runId)) return stateCache.get(runId);
    const compact = RUNS[runId].states;
    let out = null;
    if (compact) {
      out = [];
      let phase = "new", iteration = 0, toolset = -1, transcript = [], pending = [], session = new Map();
      for (const step of compact.steps) {
        if ("p" in step) phase = step.p;
        if ("i" in step) iteration = step.i;
        if ("t" in step) toolset = step.t;
        let fresh = 0;
        if ("k" in step || "m" in step) {
          const added = step.m || [];
          transcript = transcript.slice(0, "k" in step ? step.k : transcript.length).concat(added);
          fresh = added.length;
        }
        if ("c" in step) pending = step.c;
        const touched = [], gone = [];
        if ("s" in step || "x" in step) {
          session = new Map(session);
          for (const key of step.x || []) { session.delete(key); gone.push(key); }
          for (const [key, value] of step.s || []) { session.set(key, value); touched.push(key); }
        }
        out.push({ phase, iteration, toolset, transcript, fresh, pending, session, touched, gone });
      }
    }
    stateCache.set(runId, out);
    return out;
  };

  const stateAt = (runId, seq) => {
    const all = own(RUNS, runId) ? statesOf(runId) : null;
    const index = all ? indexOf(runId, seq) : -1;
    if (index < 0) return null;
    const s = all[index], c = RUNS[runId].states;
    return {
      seq: index, phase: s.phase, iteration: s.iteration,
      tools: s.toolset < 0 ? [] : c.toolsets[s.toolset].map((i) => c.specs[i]),
      session: Object.fromEntries(s.session),
      transcript: s.transcript.map((i) => c.messages[i]),
      pending_calls: s.pending.map((i) => c.contents[i]),
    };
  };

  // -- the state panel ------------------------------------------------------------------------
  const part_ = (name, title, count, ...body) => {
    const counted = count === null ? null : el("span", "count", String(count));
    const box = el("section", "ps", heading(3, null, title, counted), ...body);
    box.dataset.section = name;
    return box;
  };

  const toolsPart = (run, s, before) => {
    const c = run.states;
    const names = (t) => (t < 0 ? [] : c.toolsets[t].map((i) => c.specs[i].name));
    const now = names(s.toolset), then = before ? names(before.toolset) : now;
    const items = (s.toolset < 0 ? [] : c.toolsets[s.toolset]).map((i) => {
      const spec = c.specs[i];
      return el("li", null, el("span", "tool-name", spec.name),
        then.includes(spec.name) ? null : el("span", "tag new", "new"),
        spec.description ? el("span", "tool-desc", spec.description) : null);
    });
    for (const name of then) {
      if (!now.includes(name)) {
        const li = el("li", "removed", el("span", "tool-name", name), el("span", "tag gone", "removed"));
        items.push(li);
      }
    }
    const list = items.length ? el("ul", "tools", items) : el("p", "empty", "none");
    return part_("tools", "Tools offered", now.length, list);
  };

  const sessionPart = (first, s) => {
    const rows = [];
    for (const [key, value] of s.session) {
      const changed = s.touched.includes(key) ? " changed" : "";
      rows.push(el("dt", changed.trim() || null, key), el("dd", null, code(value)));
    }
    for (const key of s.gone) rows.push(el("dt", "deleted", key), el("dd", "muted", "deleted here"));
    const id = first.session_id ? first.session_id : "no session";
    return part_("session", "Session state", s.session.size, el("p", "muted small", id),
      rows.length ? el("dl", "session", rows) : el("p", "empty", "empty"));
  };

  const renderPanel = (runId, seq) => {
    const panel = document.getElementById("panel");
    const run = RUNS[runId];
    const index = indexOf(runId, seq);
    const e = run.events[index];
    const all = statesOf(runId);
    const s = all ? all[index] : null;
    const before = all && index > 0 ? all[index - 1] : null;
    const head = el("div", "panel-head", heading(2, null, "State after #" + seq + " " + e.type),
      el("span", "muted small", (run.agent ? run.agent + " · " : "") + "run " + runId));
    const raw = el("details", "raw", el("summary", null, "Event as recorded"), code(e, "pre"));
    if (!s) {
      const note = el("p", "empty", "This log does not start with RunStarted: no state to fold.");
      panel.replaceChildren(head, note, raw);
      return;
    }
    const c = run.states;
    panel.replaceChildren(
      head,
      el("div", "pills", chip("phase " + s.phase), chip("iteration " + s.iteration)),
      toolsPart(run, s, before),
      sessionPart(run.events[0], s),
      part_("pending", "Pending calls", s.pending.length, s.pending.length
        ? el("ul", "pending", s.pending.map((i) => el("li", null, part(c.contents[i]))))
        : el("p", "empty", "none")),
      part_("transcript", "Transcript", s.transcript.length, s.transcript.length
        ? el("ol", "transcript", s.transcript.map((i, n) => el("li", null,
          message(c.messages[i], n >= s.transcript.length - s.fresh))))
        : el("p", "empty", "empty")),
      part_("event", "Event", null, raw),
    );
  };

  const select = (runId, seq, focus) => {
    const node = buttons.get(runId + ":" + seq);
    if (!node) return false;
    if (current) current.setAttribute("aria-pressed", "false");
    current = node;
    node.setAttribute("aria-pressed", "true");
    if (focus) node.focus();
    renderPanel(runId, seq);
    document.getElementById("status").textContent = "Showing the state after event " + seq + ", " +
      node.dataset.type + ", of run " + runId + ".";
    try {
      history.replaceState(null, "", "#" + encodeURIComponent(runId) + ":" + seq);
    } catch (err) {
      // some file: pages refuse history changes; the selection works without the address
    }
    return true;
  };

  // -- start ------------------------------------------------------------------------------------
  const root = DATA.runs[DATA.roots[0]];
  t0 = root && root.events.length ? root.events[0].at : null;
  const timeline = document.getElementById("timeline");
  for (const runId of DATA.roots) timeline.append(renderRun(runId, 0));
  for (const runId of Object.keys(RUNS)) if (!rendered.has(runId)) timeline.append(renderRun(runId, 0));

  timeline.addEventListener("click", (event) => {
    const node = event.target.closest("button.ev");
    if (node) select(node.dataset.run, Number(node.dataset.seq), false);
  });
  timeline.addEventListener("keydown", (event) => {
    const node = event.target.closest("button.ev");
    if (!node || event.altKey || event.ctrlKey || event.metaKey) return;
    const all = Array.from(timeline.querySelectorAll("button.ev"));
    const at = all.indexOf(node);
    const moves = { ArrowDown: at + 1, ArrowUp: at - 1, j: at + 1, k: at - 1, Home: 0, End: all.length - 1 };
    const to = moves[event.key];
    if (to === undefined) return;
    event.preventDefault();
    const target = all[Math.max(0, Math.min(all.length - 1, to))];
    select(target.dataset.run, Number(target.dataset.seq), true);
  });

  // The fragment is whatever the address says: one that is not valid percent-encoding
  // (#%E0%A4%A) selects nothing, instead of stopping the script before the timeline is built.
  const fragment = (() => {
    try {
      return decodeURIComponent(location.hash.slice(1));
    } catch (error) {
      return "";
    }
  })();
  const wanted = fragment.match(/^(.*):(\d+)$/);
  if (!(wanted && select(wanted[1], Number(wanted[2]), false)) && root && root.events.length) {
    select(DATA.roots[0], root.events[root.events.length - 1].seq, false);
  }
  window.agentledgerViewer = Object.freeze({
    ready: true,
    stateAt,
    select: (runId, seq) => select(runId, seq, true),
    selected: () => (current ? { run: current.dataset.run, seq: Number(current.dataset.seq) } : null),
  });
"""

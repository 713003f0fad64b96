"""The script of the server's own pages: the token, live updates, and decisions.

The token comes in the address's fragment (``#token=...``, never sent to the server in a
request line or a log), is kept in this tab's ``sessionStorage`` and taken out of the address.
A page with a live part (``data-live``) listens to ``/events`` (server-sent events) and, on each
change, fetches its own address again and swaps its ``#live`` element for the fresh one (parsed
with ``DOMParser``, whose scripts never run). The approvals page waits while a decision is being
typed, so an update never takes a half-written reason away. A decision is a JSON ``POST`` to
``/api/decisions`` with the token in ``X-Agentledger-Token``. ``window.agentledgerServe`` says
how many updates arrived and what the last decision answered, for tests and scripts.
"""

from __future__ import annotations

__all__ = ("SCRIPT",)

SCRIPT = r"""(() => {
  "use strict";
  const KEY = "agentledger-token";
  const state = { updates: 0, connected: false, last: null };
  window.agentledgerServe = state;
  const found = location.hash.match(/(?:^#|&)token=([A-Za-z0-9_-]+)/);
  if (found) {
    sessionStorage.setItem(KEY, found[1]);
    history.replaceState(null, "", location.pathname + location.search);
  }
  const token = () => sessionStorage.getItem(KEY) || "";
  const status = (text, kind) => {
    const node = document.getElementById("status");
    node.textContent = text;
    node.className = "status" + (kind ? " " + kind : "");
  };

  let waiting = false;
  const busy = () => {
    const form = document.activeElement && document.activeElement.closest("form.decide");
    const typed = Array.from(document.querySelectorAll("form.decide textarea")).some((t) => t.value);
    return Boolean(form) || typed;
  };
  const refresh = async () => {
    if (document.body.dataset.live === "approvals" && busy()) {
      waiting = true;
      status("Something changed in the store: the list updates once this decision is sent or cleared.");
      return;
    }
    waiting = false;
    const reply = await fetch(location.href, { headers: { Accept: "text/html" }, cache: "no-store" });
    if (!reply.ok) return;
    const fresh = new DOMParser().parseFromString(await reply.text(), "text/html").getElementById("live");
    const now = document.getElementById("live");
    if (fresh && now) now.replaceWith(document.adoptNode(fresh));
    state.updates += 1;
  };

  if (document.body.dataset.live) {
    const source = new EventSource("/events");
    const shown = document.getElementById("live-state");
    source.addEventListener("open", () => { state.connected = true; shown.textContent = "live"; });
    source.addEventListener("error", () => { state.connected = false; shown.textContent = "reconnecting…"; });
    source.addEventListener("changed", () => { refresh(); });
    document.addEventListener("focusout", () => {
      if (waiting) setTimeout(() => { if (!busy()) refresh(); }, 0);
    });
  }

  const answersOf = (form, verdict) => {
    const answers = [];
    for (const item of form.querySelectorAll("li.waiting")) {
      const call = item.dataset.call;
      let choice = verdict;
      if (verdict === "marked") {
        const picked = Array.from(item.querySelectorAll("input[type=radio]")).find((r) => r.checked);
        if (!picked) throw new Error("mark every call approve or reject (call " + call + ")");
        choice = picked.value;
      }
      const seen = Array.from(item.querySelectorAll("input[type=hidden]")).find(
        (i) => i.name === "arguments:" + call);
      answers.push({ call_id: call, approved: choice === "approve",
        expected_arguments: seen ? JSON.parse(seen.value) : null });
    }
    return answers;
  };

  document.addEventListener("submit", async (event) => {
    const form = event.target.closest("form.decide");
    if (!form) return;
    event.preventDefault();
    const verdict = event.submitter ? event.submitter.value : "approve";
    let body;
    try {
      body = { run_id: form.dataset.run, answers: answersOf(form, verdict),
        reason: form.querySelector("textarea[name=reason]").value };
    } catch (error) {
      status(error.message, "err");
      return;
    }
    for (const button of form.querySelectorAll("button")) button.disabled = true;
    let answer;
    try {
      const reply = await fetch("/api/decisions", {
        method: "POST", body: JSON.stringify(body), cache: "no-store",
        headers: { "Content-Type": "application/json", "X-Agentledger-Token": token() },
      });
      answer = await reply.json();
      answer.status = reply.status;
    } catch (error) {
      answer = { status: 0, error: String(error) };
    }
    state.last = answer;
    for (const button of form.querySelectorAll("button")) button.disabled = false;
    if (answer.status === 200) {
      status("Decided: run " + answer.run_id + " was resumed by run " + answer.resumed_by + " (" +
        answer.finish_reason + ").", "ok");
      form.querySelector("textarea[name=reason]").value = "";
      document.activeElement && document.activeElement.blur();
      await refresh();
    } else {
      status("Refused: " + answer.error, "err");
    }
  });
})();
"""

// assent dashboard: count-downs, the live queue (SSE), and the arguments editor's check.
// No build step; served from /ui/static/app.js (the CSP allows no inline script).
(() => {
  "use strict";
  const left = (ms) => {
    if (ms <= 0) return "expired";
    const s = Math.floor(ms / 1000);
    return s >= 60 ? `${Math.floor(s / 60)}m ${s % 60}s left` : `${s}s left`;
  };
  const tick = () => {
    for (const t of document.querySelectorAll("time[data-expires-ms]")) {
      t.textContent = left(Number(t.dataset.expiresMs) - Date.now());
    }
  };
  setInterval(tick, 1000);
  tick();

  // The queue: re-read when the server says something changed; announce new approvals.
  const queue = document.getElementById("queue");
  const announce = document.getElementById("announce");
  if (queue && window.EventSource) {
    const ids = () => new Set([...queue.querySelectorAll("[data-approval-id]")].map((e) => e.dataset.approvalId));
    let known = ids();
    // A change announced while a read is in flight may not be in that read: remember it and
    // read again when the current one ends, so no approval is missed until a reload.
    let busy = false;
    let again = false;
    const refresh = async () => {
      if (busy) {
        again = true;
        return;
      }
      busy = true;
      again = false;
      try {
        const r = await fetch(queue.dataset.live, { credentials: "same-origin" });
        if (r.status === 401) { window.location.assign("/ui/login"); return; }
        if (!r.ok) return;
        queue.innerHTML = await r.text();
        const now = ids();
        const fresh = [...now].filter((i) => !known.has(i));
        if (fresh.length === 1) {
          const el = queue.querySelector(`[data-approval-id="${CSS.escape(fresh[0])}"]`);
          announce.textContent = `New approval: ${el ? el.dataset.summary : ""}`;
        } else if (fresh.length > 1) {
          announce.textContent = `${fresh.length} new approvals`;
        }
        known = now;
        tick();
      } finally {
        busy = false;
        if (again) refresh();
      }
    };
    const events = new EventSource("/ui/events");
    events.addEventListener("changed", refresh);
    events.addEventListener("open", refresh);
  }

  // The arguments editor: a JSON object, checked before the approval is sent.
  for (const editor of document.querySelectorAll("textarea[data-json]")) {
    const error = document.getElementById(`${editor.id}-error`);
    const check = () => {
      try {
        const v = JSON.parse(editor.value);
        if (v === null || typeof v !== "object" || Array.isArray(v)) throw new Error("the arguments must be a JSON object");
        editor.setAttribute("aria-invalid", "false");
        error.textContent = "";
        return true;
      } catch (e) {
        editor.setAttribute("aria-invalid", "true");
        error.textContent = `Not sent: ${e.message}`;
        return false;
      }
    };
    editor.addEventListener("input", check);
    editor.form.addEventListener("submit", (ev) => {
      if (!check()) {
        ev.preventDefault();
        editor.focus();
      }
    });
  }
})();

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
  // Passkeys (issue 14 §4): buffers travel as base64url; the gateway's forms and their CSRF
  // token carry every request.
  const b64u = (buf) => btoa(String.fromCharCode(...new Uint8Array(buf)))
    .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  const unb64u = (s) => Uint8Array.from(atob(s.replace(/-/g, "+").replace(/_/g, "/")), (c) => c.charCodeAt(0));
  const post = async (url, fields) => {
    const r = await fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams(fields),
    });
    const body = await r.json().catch(() => null);
    if (!r.ok) throw new Error((body && body.message) || `the gateway answered ${r.status}`);
    return body;
  };
  const assertion = (c) => ({
    id: c.id, rawId: b64u(c.rawId), type: c.type, extensions: {},
    response: {
      authenticatorData: b64u(c.response.authenticatorData),
      clientDataJSON: b64u(c.response.clientDataJSON),
      signature: b64u(c.response.signature),
      userHandle: c.response.userHandle ? b64u(c.response.userHandle) : null,
    },
  });

  // Approving with a passkey: ask the gateway for the vote's challenge, sign it, send the
  // assertion with the form.
  for (const form of document.querySelectorAll("form[data-passkey]")) {
    const status = document.getElementById("passkey-status");
    form.addEventListener("submit", async (ev) => {
      if (form.elements.passkey.value) return;
      ev.preventDefault();
      try {
        status.textContent = "Waiting for your passkey…";
        const ch = await post(form.dataset.passkey, { csrf: form.elements.csrf.value });
        const pk = ch.options.publicKey;
        pk.challenge = unb64u(pk.challenge);
        for (const a of pk.allowCredentials || []) a.id = unb64u(a.id);
        const c = await navigator.credentials.get({ publicKey: pk });
        form.elements.passkey.value = JSON.stringify({ ceremony: ch.ceremony, credential: assertion(c) });
        form.submit();
      } catch (e) {
        status.textContent = `Not approved: ${e.message}`;
      }
    });
  }

  // Registering a passkey.
  const reg = document.querySelector("form[data-passkey-register]");
  if (reg) {
    const status = document.getElementById("passkey-status");
    reg.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const base = reg.dataset.passkeyRegister;
      const csrf = reg.elements.csrf.value;
      try {
        status.textContent = "Waiting for your authenticator…";
        const ch = await post(`${base}/start`, { csrf, code: reg.elements.code.value });
        const pk = ch.options.publicKey;
        pk.challenge = unb64u(pk.challenge);
        pk.user.id = unb64u(pk.user.id);
        for (const e of pk.excludeCredentials || []) e.id = unb64u(e.id);
        const c = await navigator.credentials.create({ publicKey: pk });
        const credential = {
          id: c.id, rawId: b64u(c.rawId), type: c.type, extensions: {},
          response: {
            attestationObject: b64u(c.response.attestationObject),
            clientDataJSON: b64u(c.response.clientDataJSON),
            transports: c.response.getTransports ? c.response.getTransports() : [],
          },
        };
        await post(`${base}/finish`, {
          csrf, ceremony: ch.ceremony, label: reg.elements.label.value,
          credential: JSON.stringify(credential),
        });
        window.location.reload();
      } catch (e) {
        status.textContent = `Not registered: ${e.message}`;
      }
    });
  }
})();

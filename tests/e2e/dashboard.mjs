// The dashboard as an operator uses it, in Debian's Chromium driven by playwright-core, while
// an agent (plain HTTP calls with its key) proposes calls and waits for the decisions.
// Env: ASSENT_URL, OPERATOR_KEY, AGENT_KEY, CHROMIUM, PROFILE_DIR, and SCREENSHOTS (a folder:
// the queue and card screenshots are written there; docs/screenshots in the repository).
import { mkdirSync } from "node:fs";
import assert from "node:assert/strict";
import { apiAt, axe, launch, step } from "./kit.mjs";

const URL = process.env.ASSENT_URL;
const OP = process.env.OPERATOR_KEY;
const AGENT = process.env.AGENT_KEY;
const SHOTS = process.env.SCREENSHOTS;

const api = apiAt(URL);

// The agent: propose a payment; the gateway holds it for a human.
const propose = async (amount, to, session = "browser-e2e") => {
  const r = await api("POST", "/v1/tool-calls", AGENT, {
    agent: "pay_bot", session_id: session, tool: "send_payment", server: "bank",
    arguments: { amount, currency: "EUR", to },
  });
  assert.equal(r.status, 202, JSON.stringify(r.body));
  return r.body.approval_id;
};
// The agent's wait: long-polls until the approval is settled.
const wait = async (id) => {
  for (;;) {
    const r = await api("GET", `/v1/approvals/${id}?wait=30`, AGENT);
    if (r.body.status !== "pending") return r.body;
  }
};

const browser = await launch();

try {
  // bypassCSP: only so that axe-core can be injected; the pages themselves run under the CSP.
  const context = await browser.newContext({ viewport: { width: 1100, height: 900 }, bypassCSP: true });
  const page = await context.newPage();
  page.setDefaultTimeout(15000);

  step("the queue needs a sign-in; an agent's key is refused");
  await page.goto(`${URL}/ui`);
  assert.match(page.url(), /\/ui\/login$/);
  await page.fill("#key", AGENT);
  await page.click("button[type=submit]");
  await page.waitForSelector("p.error[role=alert]");
  assert.match(await page.textContent("p.error"), /not an operator's key/);

  step("sign in with the operator key: a session cookie, HttpOnly and SameSite=Strict");
  await page.fill("#key", OP);
  await page.click("button[type=submit]");
  await page.waitForURL(`${URL}/ui`);
  const session = (await context.cookies()).find((c) => c.name === "assent_ui");
  assert.ok(session, "session cookie set");
  assert.equal(session.httpOnly, true);
  assert.equal(session.sameSite, "Strict");
  await page.waitForSelector("text=Nothing is waiting for a decision.");

  step("a new approval appears without a reload, and is announced");
  const first = await propose(1500, "ACME GmbH");
  const firstWait = wait(first);
  await page.waitForSelector(`[data-approval-id="${first}"]`);
  await page.waitForFunction(() => document.getElementById("announce").textContent.startsWith("New approval:"));
  assert.match(await page.textContent("#announce"), /pay_bot wants bank\/send_payment/);
  assert.match(await page.textContent(`[data-approval-id="${first}"] time`), /left/);
  await axe(page, "queue");
  if (SHOTS) {
    mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: `${SHOTS}/queue.png`, fullPage: true });
  }

  step("the card shows every field seed 002 requires");
  await page.click(`[data-approval-id="${first}"] a.open`);
  await page.waitForURL(`${URL}/ui/approvals/${first}`);
  const text = async (sel) => (await page.textContent(sel)).trim();
  assert.equal(await text("#arguments"), '{"amount":1500,"currency":"EUR","to":"ACME GmbH"}');
  assert.match(await text("#risk"), /Risk tier R3 \(high\)/);
  assert.match(await text("#reasons"), /gov\/pay\.yaml|pay\.yaml/);
  assert.match(await text("#reasons"), /risk tier R3/);
  assert.equal(await text("#side-effects"), "Moves 1500 EUR out of the treasury account to ACME GmbH.");
  assert.match(await text("#rollback"), /recalled within 24 h/);
  assert.equal(await text("#message"), "Pay 1500 EUR to ACME GmbH?");
  assert.match(await text("#alternatives"), /Split the payment/);
  assert.match(await text("#call-hash"), /^[0-9a-f]{64}$/);
  for (const scope of ["once", "session", "duration", "workspace"]) {
    assert.equal(await page.locator(`input[name=scope][value=${scope}]`).count(), 1, `scope ${scope}`);
  }
  assert.match(await text("#workspace-warning"), /every session of every agent/);
  await page.waitForSelector("#arguments-editor");
  await page.waitForSelector("#deny-form #reason");
  await axe(page, "card");
  if (SHOTS) await page.screenshot({ path: `${SHOTS}/card.png`, fullPage: true });

  step("the JSON editor refuses what is not a JSON object before anything is sent");
  await page.fill("#arguments-editor", '{"amount": 900, ');
  await page.click("#approve-form button[type=submit]");
  await page.waitForFunction(() => document.getElementById("arguments-editor-error").textContent.startsWith("Not sent"));
  assert.equal(page.url(), `${URL}/ui/approvals/${first}`);
  assert.equal((await api("GET", `/v1/approvals/${first}`, OP)).body.status, "pending");

  step("approve with an edit: the agent's wait ends approved, bound to the edited call");
  await page.fill("#arguments-editor", '{"amount": 900, "currency": "EUR", "to": "ACME GmbH"}');
  await page.click("#approve-form button[type=submit]");
  await page.waitForSelector("#status.status-approved");
  assert.equal(await text("#edited"), '{"amount":900,"currency":"EUR","to":"ACME GmbH"}');
  const approved = await firstWait;
  assert.equal(approved.status, "approved");
  assert.equal(approved.arguments_changed, true);
  assert.deepEqual(approved.arguments, { amount: 900, currency: "EUR", to: "ACME GmbH" });
  assert.equal(approved.decisions[0].by, "alice");

  step("deny with a reason: the agent's wait ends rejected with that reason");
  await page.goto(`${URL}/ui`);
  const second = await propose(20000, "Unknown Ltd");
  const secondWait = wait(second);
  await page.waitForSelector(`[data-approval-id="${second}"]`);
  await page.click(`[data-approval-id="${second}"] a.open`);
  await page.fill("#reason", "Recipient not on the vendor list");
  await page.click("#deny-form button[type=submit]");
  await page.waitForSelector("#status.status-rejected");
  const denied = await secondWait;
  assert.equal(denied.status, "rejected");
  assert.match(denied.reason, /Recipient not on the vendor list/);

  step("a forged form post without the CSRF token is refused and decides nothing");
  const third = await propose(10, "Forged Inc");
  const cookie = `assent_ui=${session.value}`;
  const forged = await fetch(`${URL}/ui/approvals/${third}/decide`, {
    method: "POST", redirect: "manual",
    headers: { cookie, "content-type": "application/x-www-form-urlencoded" },
    body: "decision=approve&scope=once",
  });
  assert.equal(forged.status, 403);
  const wrong = await fetch(`${URL}/ui/approvals/${third}/decide`, {
    method: "POST", redirect: "manual",
    headers: { cookie, "content-type": "application/x-www-form-urlencoded" },
    body: "decision=approve&scope=once&csrf=" + "0".repeat(64),
  });
  assert.equal(wrong.status, 403);
  assert.equal((await api("GET", `/v1/approvals/${third}`, OP)).body.status, "pending");

  step("similar calls are shown together and decided one by one");
  const fourth = await propose(11, "Forged Inc");
  await page.goto(`${URL}/ui`);
  await page.waitForSelector(`[data-approval-id="${fourth}"]`);
  assert.match(await text("#queue"), /2 similar calls: pay_bot → bank\/send_payment/);
  assert.equal(await page.locator(`[data-approval-id="${third}"] a.open`).count(), 1);

  step("approve for the session, for any arguments: the next payment of the session is allowed at once");
  await page.click(`[data-approval-id="${fourth}"] a.open`);
  await page.check("input[name=scope][value=session]");
  await page.check("input[name=whole_tool]");
  await page.click("#approve-form button[type=submit]");
  await page.waitForSelector("#status.status-approved");
  const next = await api("POST", "/v1/tool-calls", AGENT, {
    agent: "pay_bot", session_id: "browser-e2e", tool: "send_payment", server: "bank",
    arguments: { amount: 12, currency: "EUR", to: "Other GmbH" },
  });
  assert.equal(next.status, 200, JSON.stringify(next.body));
  assert.equal(next.body.decision, "allow");
  await page.goto(`${URL}/ui`);

  step("an agent's question is answered in the same queue");
  const q = await api("POST", "/v1/clarifications", AGENT, {
    agent: "pay_bot", session_id: "browser-e2e", question: "Use the EUR account?",
    accepted_response_kinds: ["yes_no"],
  });
  assert.equal(q.status, 202, JSON.stringify(q.body));
  await page.waitForSelector(`[data-question-id="${q.body.id}"]`);
  await page.click(`[data-question-id="${q.body.id}"] button[value=yes]`);
  await page.waitForURL(`${URL}/ui`);
  const answered = await api("GET", `/v1/clarifications/${q.body.id}`, AGENT);
  assert.equal(answered.body.status, "answered", JSON.stringify(answered.body));
  assert.equal(answered.body.response, true);

  step("history filters and the audit view");
  await page.goto(`${URL}/ui/history?status=rejected`);
  assert.match(await text("#history tbody"), /bank\/send_payment/);
  assert.equal(await page.locator("#history tbody tr").count(), 1);
  await page.goto(`${URL}/ui/audit`);
  assert.match(await text("#chain"), /The chain verifies/);

  step("keyboard only: Tab reaches the first approval and Enter opens it");
  await page.goto(`${URL}/ui`);
  await page.waitForSelector(`[data-approval-id="${third}"]`);
  for (let i = 0; i < 12; i++) {
    await page.keyboard.press("Tab");
    const href = await page.evaluate(() => document.activeElement && document.activeElement.getAttribute("href"));
    if (href === `/ui/approvals/${third}`) break;
  }
  await page.keyboard.press("Enter");
  await page.waitForURL(`${URL}/ui/approvals/${third}`);

  step("the dry-run button runs the rule's dry_run_tool on the MCP upstream and shows its result");
  const post = await api("POST", "/v1/tool-calls", AGENT, {
    agent: "pay_bot", session_id: "browser-e2e", tool: "publish", server: "notes", arguments: { text: "draft post" },
  });
  assert.equal(post.status, 202, JSON.stringify(post.body));
  await page.goto(`${URL}/ui/approvals/${post.body.approval_id}`);
  await page.click("#dry-run-form button[type=submit]");
  await page.waitForSelector("#dry-run-result");
  assert.match(await text("#dry-run-result"), /draft post/);
  assert.match(await text("#status"), /pending/);

  step("a phone-sized screen shows the card without horizontal scrolling");
  await page.setViewportSize({ width: 390, height: 844 });
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
  const wide = await page.evaluate(() => [...document.querySelectorAll("body *")]
    .filter((e) => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
    .slice(0, 5).map((e) => `${e.tagName.toLowerCase()}${e.id ? "#" + e.id : ""}.${e.className}`));
  assert.ok(overflow <= 0, `horizontal overflow of ${overflow}px: ${wide.join(", ")}`);
  step("an approval created while the queue is being read appears without a reload");
  // The read in flight was answered before the new approval existed, and its `changed` event
  // arrives while that read is still out: the page must read again once it is done.
  await page.goto(`${URL}/ui`);
  await page.waitForSelector(`[data-approval-id="${third}"]`);
  let racing = null;
  await page.route("**/ui/queue", async (route) => {
    if (racing !== null) return route.continue();
    racing = "";
    const stale = await route.fetch();
    racing = await propose(13, "Race Ltd", "browser-race");
    await new Promise((res) => setTimeout(res, 700));
    await route.fulfill({ response: stale });
  });
  await propose(12, "Trigger Ltd", "browser-race");
  for (let i = 0; i < 50 && !racing; i++) await new Promise((res) => setTimeout(res, 100));
  assert.ok(racing, "the queue was never read after a change");
  await page.waitForSelector(`[data-approval-id="${racing}"]`, { timeout: 10000 });
  await page.unroute("**/ui/queue");

  console.log("dashboard: all checks passed");
} finally {
  await browser.close();
}

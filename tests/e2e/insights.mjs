// The insights page (issue 16 §4) in Debian's Chromium: an agent makes a small history over the
// API (prompts approved at once, approved and rejected after a wait, calls allowed outright),
// the operator opens /ui/insights, and the charts (inline SVG with accessible names), the
// tables' numbers and axe-core's check (no violation of any impact) are asserted.
// Env: ASSENT_URL, OPERATOR_KEY, AGENT_KEY, CHROMIUM; SCREENSHOTS (a folder) for a screenshot.
import { mkdirSync } from "node:fs";
import assert from "node:assert/strict";
import { apiAt, axe, launch, step } from "./kit.mjs";

const URL = process.env.ASSENT_URL;
const OP = process.env.OPERATOR_KEY;
const AGENT = process.env.AGENT_KEY;
const SHOTS = process.env.SCREENSHOTS;

const api = apiAt(URL);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The agent proposes `tool`; the gateway's answer status and body.
const propose = (tool, n) => api("POST", "/v1/tool-calls", AGENT, {
  agent: "pay_bot", session_id: "insights-e2e", tool, arguments: { n },
});
const held = async (tool, n) => {
  const r = await propose(tool, n);
  assert.equal(r.status, 202, JSON.stringify(r.body));
  return r.body.approval_id;
};
const decide = async (id, decision) => {
  const r = await api("POST", `/v1/approvals/${id}/decision`, OP, { decision, reason: "e2e" });
  assert.equal(r.status, 200, JSON.stringify(r.body));
};

step("history: pay approved at once twice and rejected at once, approved after a wait; ship rejected after a wait; lookup allowed three times");
for (const n of [1, 2]) await decide(await held("pay", n), "approve");
await decide(await held("pay", 3), "deny");
const slowPay = await held("pay", 4);
const slowShip = await held("ship", 5);
await sleep(2600); // past the two-second rubber-stamp line
await decide(slowPay, "approve");
await decide(slowShip, "deny");
for (const n of [6, 7, 8]) {
  const r = await propose("lookup", n);
  assert.equal(r.status, 200, JSON.stringify(r.body));
}

const browser = await launch();
try {
  // bypassCSP: only so that axe-core can be injected; the page itself runs under the CSP.
  const context = await browser.newContext({ viewport: { width: 1100, height: 900 }, bypassCSP: true });
  const page = await context.newPage();
  page.setDefaultTimeout(15000);
  await page.goto(`${URL}/ui/login`);
  await page.fill("#key", OP);
  await page.click("button[type=submit]");
  await page.waitForURL(`${URL}/ui`);

  step("the nav links the insights page");
  await page.click("nav >> text=Insights");
  await page.waitForURL(`${URL}/ui/insights`);

  step("three charts, each an SVG image with its accessible name and description");
  for (const [id, name] of [["chart-days", "Prompts per day"], ["chart-rate", "Approval rate by tool"],
                            ["chart-time", "Time to decision by tool"]]) {
    const img = page.getByRole("img", { name, exact: true });
    assert.equal(await img.count(), 1, name);
    assert.equal(await img.evaluate((e) => e.tagName.toLowerCase()), "svg");
    assert.equal(await img.getAttribute("id"), id);
    const desc = await page.textContent(`#${id}-desc`);
    assert.match(desc, /table/, `${name} points to its table`);
    assert.ok(await page.locator(`#${id} rect`).count() > 0, `${name} draws bars`);
  }
  assert.match(await page.textContent("#chart-rate-desc"), /pay 75%, ship 0%/);

  step("the tables hold the numbers the history made");
  const cells = async (table, key) => page.locator(`#${table} tbody tr`, { has: page.locator(`th:text-is("${key}")`) })
    .locator("td").allTextContents();
  // Prompts, approved, rejected, expired, cancelled, pending, rate, median, p90, rubber stamps.
  const pay = await cells("by-tool", "pay");
  assert.deepEqual(pay.slice(0, 7), ["4", "3", "1", "0", "0", "0", "75 %"]);
  assert.equal(pay[9], "3 (75 %)");
  const ship = await cells("by-tool", "ship");
  assert.deepEqual(ship.slice(0, 7), ["1", "0", "1", "0", "0", "0", "0 %"]);
  assert.equal(ship[9], "0 (0 %)");
  assert.ok(parseFloat(ship[7]) >= 2.6, `ship waited: ${ship[7]}`);
  const alice = await cells("by-operator", "alice");
  assert.deepEqual(alice.slice(0, 3), ["5", "3", "2"]);
  assert.equal(alice[9], "3 (60 %)");
  assert.deepEqual((await cells("by-agent", "pay_bot")).slice(0, 3), ["5", "3", "2"]);
  assert.deepEqual(await cells("outright", "lookup"), ["3", "0", "0"]);
  assert.equal((await page.locator("#overall tbody td").first().textContent()).trim(), "5");
  const perDay = (await page.locator("#per-day tbody td").allTextContents()).map(Number);
  assert.equal(perDay.reduce((a, b) => a + b, 0), 5, "the days add up to the prompts");
  assert.ok([30, 31].includes(perDay.length), `every day of the last 30: ${perDay.length}`);

  step("a planted pattern: ten refunds to five acct-… approved, one to ext-9 rejected, suggested with its YAML");
  for (let i = 0; i < 11; i++) {
    // Each account twice: a list is a pattern only where its values recur.
    const to = i < 10 ? `acct-${i % 5}` : "ext-9";
    const r = await api("POST", "/v1/tool-calls", AGENT, {
      agent: "pay_bot", session_id: `refund-${i}`, tool: "refund", arguments: { to },
    });
    assert.equal(r.status, 202, JSON.stringify(r.body));
    await decide(r.body.approval_id, i < 10 ? "approve" : "deny");
  }
  await page.reload();
  const first = page.locator("#suggestions > li").first();
  // Five values: listed, not generalised to every acct-… (a prefix only where too many to list).
  assert.match(await first.textContent(), /refund: ask unless to in \["acct-0","acct-1",/);
  const [, before, after] = (await first.textContent()).match(/prompts (\d+) → (\d+)/);
  assert.equal(before - after, 10, "exactly the ten planted prompts go");
  const href = await first.locator("a[download]").getAttribute("href");
  const exported = await page.request.get(`${URL}${href}`);
  assert.equal(exported.status(), 200);
  assert.match(exported.headers()["content-type"], /^application\/yaml/);
  assert.match(await exported.text(), /not_in:/);
  assert.match(await exported.text(), /acct-4/);

  step("axe-core: no violation at all");
  await axe(page, "insights");
  const all = await page.evaluate(async () => (await window.axe.run(document, { resultTypes: ["violations"] })).violations);
  assert.deepEqual(all.map((v) => `${v.id} (${v.impact})`), [], "axe-core: violations on the insights page");
  if (SHOTS) {
    mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: `${SHOTS}/insights.png`, fullPage: true });
  }
  step("done");
} finally {
  await browser.close();
}

// Passkey-signed approvals (issue 14 §4) in Debian's Chromium with a virtual WebAuthn
// authenticator (CDP `WebAuthn.addVirtualAuthenticator`): an operator registers a passkey in
// the dashboard, an R4 call is refused without one over the API, and approved from its card
// with the passkey; the receipt is written to RECEIPT for the Python side to verify offline.
// Env: ASSENT_URL (http://localhost:PORT), OPERATOR_KEY, AGENT_KEY, CHROMIUM, RECEIPT.
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import assert from "node:assert/strict";
import { apiAt, axe, launch, step } from "./kit.mjs";

const URL = process.env.ASSENT_URL;
const OP = process.env.OPERATOR_KEY;
const AGENT = process.env.AGENT_KEY;
const CODE = process.env.ENROLMENT_CODE;
const CODE2 = process.env.ENROLMENT_CODE_2;
const DB = process.env.DATABASE;

const api = apiAt(URL);

const browser = await launch();

try {
  const context = await browser.newContext({ bypassCSP: true });
  const page = await context.newPage();
  page.setDefaultTimeout(15000);
  const cdp = await context.newCDPSession(page);
  await cdp.send("WebAuthn.enable");
  const { authenticatorId } = await cdp.send("WebAuthn.addVirtualAuthenticator", {
    options: { protocol: "ctap2", transport: "internal", hasResidentKey: true,
               hasUserVerification: true, isUserVerified: true, automaticPresenceSimulation: true },
  });

  step("an R4 call is held; the operator's API approval without a passkey is refused");
  const p = await api("POST", "/v1/tool-calls", AGENT, {
    agent: "pay_bot", session_id: "pk", tool: "wire_transfer", arguments: { amount: 250000, to: "ACME" },
  });
  assert.equal(p.status, 202, JSON.stringify(p.body));
  const id = p.body.approval_id;
  const held = await api("GET", `/v1/approvals/${id}`, OP);
  assert.equal(held.body.require_passkey, true, JSON.stringify(held.body));
  const bare = await api("POST", `/v1/approvals/${id}/decision`, OP, { decision: "approve" });
  assert.equal(bare.status, 403, JSON.stringify(bare.body));
  assert.equal(bare.body.code, "PASSKEY_REQUIRED");
  const none = await api("POST", `/v1/approvals/${id}/passkey`, OP, {});
  assert.equal(none.status, 409, JSON.stringify(none.body));
  assert.equal(none.body.code, "NO_PASSKEY");

  step("sign in; a passkey cannot be registered without an enrolment code (a stolen key alone cannot)");
  await page.goto(`${URL}/ui/login`);
  await page.fill("#key", OP);
  await page.click("button[type=submit]");
  await page.waitForURL(`${URL}/ui`);
  await page.goto(`${URL}/ui/passkeys`);
  await page.waitForSelector("#no-passkeys");
  await axe(page, "passkeys page");
  await page.fill("#passkey-code", "0".repeat(40));
  await page.click("#register-passkey button[type=submit]");
  await page.waitForFunction(() => document.getElementById("passkey-status").textContent.startsWith("Not registered"));
  assert.match(await page.textContent("#passkey-status"), /enrolment code/);
  assert.equal((await cdp.send("WebAuthn.getCredentials", { authenticatorId })).credentials.length, 0);

  step("a registration whose ceremony lost its enrolment code in the database is refused");
  // Found by review: a ceremony without a code (as those before migration 0056) registered
  // unenrolled, so a database writer holding an operator's key could plant one; and then that
  // a planted ceremony could carry a genuine code's digest. Ceremony rows are sealed: one
  // edited in the database is no ceremony. (Before any passkey is registered: the
  // authenticator would not make a second one for alice.)
  await page.route("**/ui/passkeys/register/finish", async (route) => {
    execFileSync("sqlite3", ["-cmd", ".timeout 5000", DB, "UPDATE passkey_ceremonies SET code_sha256 = NULL WHERE purpose = 'register'"]);
    await route.continue();
  });
  await page.fill("#passkey-code", CODE2);
  await page.click("#register-passkey button[type=submit]");
  await page.waitForFunction(() => document.getElementById("passkey-status").textContent.startsWith("Not registered"));
  assert.match(await page.textContent("#passkey-status"), /no such passkey ceremony/);
  await page.unroute("**/ui/passkeys/register/finish");
  assert.equal((await cdp.send("WebAuthn.getCredentials", { authenticatorId })).credentials.length, 1);
  await cdp.send("WebAuthn.clearCredentials", { authenticatorId });
  await page.goto(`${URL}/ui/passkeys`);
  await page.waitForSelector("#no-passkeys");

  step("register a passkey with the administrator's one-time code");
  await page.fill("#passkey-code", CODE);
  await page.fill("#passkey-label", "laptop");
  await page.click("#register-passkey button[type=submit]");
  await page.waitForSelector("#passkeys li[data-credential-id]");
  assert.match(await page.textContent("#passkeys li"), /laptop/);
  const creds = await cdp.send("WebAuthn.getCredentials", { authenticatorId });
  assert.equal(creds.credentials.length, 1);
  step("the code is used up: it does not enrol a second passkey");
  await page.fill("#passkey-code", CODE);
  await page.click("#register-passkey button[type=submit]");
  await page.waitForFunction(() => document.getElementById("passkey-status").textContent.startsWith("Not registered"));

  step("approve from the card with the passkey");
  await page.goto(`${URL}/ui/approvals/${id}`);
  await page.waitForSelector("p.passkey-note");
  await axe(page, "card needing a passkey");
  await page.click("#approve-form button.approve");
  await page.waitForSelector("#decisions li");
  assert.match(await page.textContent("#decisions"), /approve by alice/);
  const done = await api("GET", `/v1/approvals/${id}`, OP);
  assert.equal(done.body.status, "approved", JSON.stringify(done.body));
  assert.equal(done.body.decisions[0].passkey_signed, true, JSON.stringify(done.body));
  assert.match(await page.textContent("#decisions"), /passkey-signed/);

  step("the receipt carries the passkey assertion and the credential's public key");
  const receipt = await api("GET", `/v1/approvals/${id}/receipt`, OP);
  assert.equal(receipt.status, 200, JSON.stringify(receipt.body));
  const proof = receipt.body.decisions[0].passkey;
  assert.ok(proof && proof.signature && proof.public_key.crv === "P-256", JSON.stringify(receipt.body));
  writeFileSync(process.env.RECEIPT, JSON.stringify(receipt.body));

  step("an assertion made for one approval does not approve another");
  const q = await api("POST", "/v1/tool-calls", AGENT, {
    agent: "pay_bot", session_id: "pk", tool: "wire_transfer", arguments: { amount: 1, to: "ACME" },
  });
  const ch = await api("POST", `/v1/approvals/${q.body.approval_id}/passkey`, OP, {});
  assert.equal(ch.status, 200, JSON.stringify(ch.body));
  const forged = await api("POST", `/v1/approvals/${q.body.approval_id}/decision`, OP, {
    decision: "approve",
    passkey: { ceremony: ch.body.ceremony, credential: {
      id: proof.credential_id, rawId: proof.credential_id, type: "public-key", extensions: {},
      response: { authenticatorData: proof.authenticator_data, clientDataJSON: proof.client_data_json,
                  signature: proof.signature, userHandle: null } } },
  });
  assert.equal(forged.status, 400, JSON.stringify(forged.body));
  assert.equal(forged.body.code, "PASSKEY_INVALID");
  console.log("passkeys: all steps passed");
} finally {
  await browser.close();
}

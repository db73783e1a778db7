// Single sign-on for the dashboard (issue 14 §7) against a real OpenID Connect provider (npm
// `oidc-provider`, its development login pages) on loopback, in Debian's Chromium: a user in
// the finance group signs in through the provider and approves a finance approval; a user
// whose groups map to nothing is refused; the session cookie's flags; and the attacks: a
// replayed callback, a callback carrying another browser's state, a flood of starts from the
// address an operator shares, a code issued to another client, an ID token for another
// audience (the provider's answer re-signed with its own key).
// Env: ASSENT_URL (http://localhost:PORT), ISSUER (http://127.0.0.1:PORT), CLIENT_SECRET,
// AGENT_KEY, OPERATOR_KEY (an API operator, to read the outcome), CHROMIUM.
import { chromium } from "playwright-core";
import Provider from "oidc-provider";
import { SignJWT, decodeJwt, exportJWK, generateKeyPair } from "jose";
import http from "node:http";
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import assert from "node:assert/strict";

const require = createRequire(import.meta.url);
const AXE = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

const URL = process.env.ASSENT_URL;
const ISSUER = process.env.ISSUER;
const CALLBACK = `${URL}/ui/oidc/callback`;
// The gateway names SSO operators by `email` (name_claim) and links olga@example.com to the
// key principal `olga`; eve and ivan claim olga's address without the provider verifying it.
const USERS = {
  alice: { groups: ["finance-team", "staff"], email: "alice@example.com", email_verified: true },
  mallory: { groups: ["marketing"], email: "mallory@example.com", email_verified: true },
  eve: { groups: ["finance-team"], email: "olga@example.com", email_verified: false },
  ivan: { groups: ["finance-team"], email: "olga@example.com" },
};
const step = (s) => console.log(`- ${s}`);

const api = async (method, path, key, body) => {
  const r = await fetch(URL + path, {
    method,
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: r.status, body: await r.json().catch(() => null) };
};

// The provider, with a signing key this script holds too (to forge the audience below).
const { privateKey } = await generateKeyPair("RS256", { extractable: true });
const jwk = { ...(await exportJWK(privateKey)), kid: "e2e", alg: "RS256", use: "sig" };
const client = (id, secret) => ({
  client_id: id, client_secret: secret, redirect_uris: [CALLBACK],
  grant_types: ["authorization_code"], response_types: ["code"],
});
const provider = new Provider(ISSUER, {
  clients: [client("assent", process.env.CLIENT_SECRET), client("other", "other-secret-" + "x".repeat(32))],
  jwks: { keys: [jwk] },
  cookies: { keys: ["e2e-only-cookie-key"] },
  claims: { openid: ["sub", "groups"], email: ["email", "email_verified"] },
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  features: { devInteractions: { enabled: true } },
  findAccount: async (ctx, id) => (USERS[id] ? {
    accountId: id, claims: async () => ({ sub: id, ...USERS[id] }),
  } : undefined),
});
let forgeAudience = false;
const handle = provider.callback();
const server = http.createServer((req, res) => {
  if (forgeAudience && req.method === "POST" && req.url.startsWith("/token")) {
    // An ID token for another audience, validly signed by the provider's key.
    const chunks = [];
    const end = res.end.bind(res);
    res.write = (c) => { chunks.push(Buffer.from(c)); return true; };
    res.end = (c) => {
      if (c && typeof c !== "function") chunks.push(Buffer.from(c));
      const body = JSON.parse(Buffer.concat(chunks).toString());
      const claims = { ...decodeJwt(body.id_token), aud: "other" };
      new SignJWT(claims).setProtectedHeader({ alg: "RS256", kid: "e2e" }).sign(privateKey).then((t) => {
        const s = JSON.stringify({ ...body, id_token: t });
        res.setHeader("content-length", Buffer.byteLength(s));
        end(s);
      });
      return res;
    };
  }
  handle(req, res);
});
await new Promise((ok) => server.listen(Number(new global.URL(ISSUER).port), "127.0.0.1", ok));

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const fresh = async (options = {}) => {
  const context = await browser.newContext(options);
  const page = await context.newPage();
  page.setDefaultTimeout(15000);
  return { context, page };
};
// The sign-in cookies (one per sign-in in progress: `assent_oidc_<16 hex>`) a context holds.
const signIns = async (context) => (await context.cookies(CALLBACK)).filter((c) => c.name.startsWith("assent_oidc_"));
// From the sign-in page to the provider's login form; returns the sign-in's cookie.
const toProvider = async ({ context, page }, next) => {
  await page.goto(`${URL}/ui/login` + (next ? `?next=${encodeURIComponent(next)}` : ""));
  await page.click("#sso");
  await page.waitForSelector("input[name=login]");
  const held = await signIns(context);
  assert.equal(held.length, 1, "the SSO start sets the sign-in's cookie");
  const c = held[0];
  assert.match(c.name, /^assent_oidc_[0-9a-f]{16}$/);
  assert.equal(c.httpOnly, true);
  assert.equal(c.sameSite, "Lax");
  assert.equal(c.path, "/ui/oidc");
  return c;
};
const cookieHeader = (c) => `${c.name}=${c.value}`;
// The provider's login and consent pages.
const atProvider = async (page, user) => {
  await page.fill("input[name=login]", user);
  await page.fill("input[name=password]", "any");
  await page.click("button[type=submit]");
  await page.waitForSelector("button[type=submit]");
  await page.click("button[type=submit]");
};
const session = async (context) => (await context.cookies(`${URL}/ui`)).find((c) => c.name === "assent_ui");

try {
  step("an agent's finance call is held");
  const p = await api("POST", "/v1/tool-calls", process.env.AGENT_KEY, {
    agent: "pay_bot", session_id: "sso", tool: "wire_transfer", arguments: { amount: 90, to: "ACME" },
  });
  assert.equal(p.status, 202, JSON.stringify(p.body));
  const id = p.body.approval_id;

  step("alice (group finance-team -> role finance) signs in through the provider");
  const a = await fresh({ bypassCSP: true }); // for axe-core's script
  await a.page.goto(`${URL}/ui/login`);
  await a.page.addScriptTag({ content: AXE });
  const result = await a.page.evaluate(async () => await window.axe.run(document, { resultTypes: ["violations"] }));
  const bad = result.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  assert.deepEqual(bad.map((v) => v.id), [], "axe-core: serious or critical violations on the sign-in page");
  await toProvider(a, "/ui/history");
  await atProvider(a.page, "alice");
  await a.page.waitForURL(`${URL}/ui/history`);
  assert.match(await a.page.textContent("body"), /Signed in as\s+oidc:alice@example\.com/);
  const cookie = await session(a.context);
  assert.ok(cookie, "a session cookie");
  assert.equal(cookie.httpOnly, true);
  assert.equal(cookie.sameSite, "Strict");
  assert.equal(cookie.path, "/ui");
  assert.deepEqual(await signIns(a.context), [], "the sign-in's cookie cleared");

  step("she decides the finance approval from its card, recorded under her SSO name");
  await a.page.goto(`${URL}/ui/approvals/${id}`);
  await a.page.click("#approve-form button[type=submit]");
  await a.page.waitForSelector("#status.status-approved");
  const done = await api("GET", `/v1/approvals/${id}`, process.env.OPERATOR_KEY);
  assert.equal(done.body.status, "approved", JSON.stringify(done.body));
  assert.equal(done.body.decisions[0].by, "oidc:alice@example.com", JSON.stringify(done.body));
  await a.context.close();

  step("mallory (group marketing, mapped to nothing) is refused: 403, no session");
  const m = await fresh();
  await toProvider(m);
  const refusal = m.page.waitForResponse((r) => r.url().startsWith(CALLBACK));
  await atProvider(m.page, "mallory");
  assert.equal((await refusal).status(), 403);
  assert.match(await m.page.textContent("body"), /maps to no operator role/);
  assert.equal(await session(m.context), undefined);
  await m.page.goto(`${URL}/ui`);
  await m.page.waitForURL(/\/ui\/login/);
  await m.context.close();

  // Attack: eve registers at the provider with olga's address, which the provider never
  // verified; named by email she would sign in as olga (the linked principal: her passkeys,
  // her quorum vote) and decide the held call. An email not marked verified signs no one in.
  for (const user of ["eve", "ivan"]) {
    step(`${user} (olga's email, ${USERS[user].email_verified === false ? "marked unverified" : "verification not said"}) is refused`);
    const e = await fresh();
    await toProvider(e);
    const cb = e.page.waitForResponse((r) => r.url().startsWith(CALLBACK));
    await atProvider(e.page, user);
    assert.equal((await cb).status(), 403);
    assert.match(await e.page.textContent("body"), /email address is verified/);
    assert.equal(await session(e.context), undefined);
    await e.context.close();
  }

  step("a replayed callback (its state used twice) is refused, even with the sign-in's own cookie");
  const r = await fresh();
  const signInCookie = await toProvider(r);
  const cb = r.page.waitForResponse((x) => x.url().startsWith(CALLBACK));
  await atProvider(r.page, "alice");
  const first = await cb;
  assert.equal(first.status(), 200);
  const replay = await fetch(first.url(), { headers: { cookie: cookieHeader(signInCookie) }, redirect: "manual" });
  assert.equal(replay.status, 403);
  assert.match(await replay.text(), /used already/);
  assert.equal(replay.headers.getSetCookie().some((c) => c.startsWith("assent_ui=") && !c.startsWith("assent_ui=;")), false);
  await r.context.close();

  step("a callback with another browser's state is refused, and spends nothing");
  // The victim's callback (its state and code) arrives in the attacker's browser, which holds
  // a sign-in cookie of its own: here, the victim's cookie is swapped for the attacker's.
  const attacker = await fresh();
  const attackerCookie = await toProvider(attacker);
  const victim = await fresh();
  const victimCookie = await toProvider(victim);
  await victim.context.clearCookies({ name: victimCookie.name });
  await victim.context.addCookies([{ ...attackerCookie, domain: "localhost" }]);
  const vc = victim.page.waitForResponse((x) => x.url().startsWith(CALLBACK));
  await atProvider(victim.page, "alice");
  const stolen = await vc;
  assert.equal(stolen.status(), 403);
  assert.match(await victim.page.textContent("body"), /another browser/);
  assert.equal(await session(victim.context), undefined);
  // The refusal asked the provider nothing and spent nothing: the browser that started the
  // sign-in still finishes it.
  const late = await fetch(stolen.url(), { headers: { cookie: cookieHeader(victimCookie) }, redirect: "manual" });
  assert.equal(late.status, 200, "the refused callback spent the sign-in");
  await victim.context.close();
  await attacker.context.close();

  step("a flood of sign-in starts from the browser's own address keeps no one from signing in");
  // Attack (found by review): starts were limited per client network and the network's
  // sign-ins in progress capped, so anyone sharing an office's NAT address kept everyone
  // behind it from signing in. A start holds nothing on the gateway (the sign-in is sealed into
  // the browser's cookie): 200 starts from 127.0.0.1, the browser's address, are all sent on,
  // and the browser's sign-in then finishes. test_oidc.py checks that they wrote nothing.
  const startFrom = (localAddress) => new Promise((ok, fail) => {
    const u = new global.URL(`${URL}/ui/oidc/start`);
    http.get({ host: "127.0.0.1", port: u.port, path: u.pathname, localAddress }, (res) => {
      res.resume();
      res.on("end", () => ok(res.statusCode));
    }).on("error", fail);
  });
  const flood = [];
  for (let i = 0; i < 200; i++) flood.push(await startFrom("127.0.0.1"));
  assert.deepEqual([...new Set(flood)], [303], "every start is sent on to the provider");
  const n = await fresh();
  await toProvider(n, "/ui/history");
  await atProvider(n.page, "alice");
  await n.page.waitForURL(`${URL}/ui/history`);
  assert.ok(await session(n.context), "signed in after the flood");
  await n.context.close();

  step("a code the provider issued to another client is not redeemed");
  const o = await fresh();
  const started = await o.context.request.get(`${URL}/ui/oidc/start`, { maxRedirects: 0 });
  assert.equal(started.status(), 303);
  const auth = new global.URL(started.headers()["location"]);
  assert.equal(auth.searchParams.get("code_challenge_method"), "S256", "PKCE");
  auth.searchParams.set("client_id", "other");
  await o.page.goto(auth.toString());
  await o.page.waitForSelector("input[name=login]");
  const oc = o.page.waitForResponse((x) => x.url().startsWith(CALLBACK));
  await atProvider(o.page, "alice");
  assert.equal((await oc).status(), 403);
  assert.match(await o.page.textContent("body"), /did not redeem the code/);
  assert.equal(await session(o.context), undefined);
  await o.context.close();

  step("an ID token for another audience, validly signed, is refused");
  forgeAudience = true;
  const f = await fresh();
  await toProvider(f);
  const fc = f.page.waitForResponse((x) => x.url().startsWith(CALLBACK));
  await atProvider(f.page, "alice");
  assert.equal((await fc).status(), 403);
  assert.match(await f.page.textContent("body"), /ID token was refused/);
  assert.equal(await session(f.context), undefined);
  forgeAudience = false;
  await f.context.close();
  console.log("oidc: all steps passed");
} finally {
  await browser.close();
  server.close();
}

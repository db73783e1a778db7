// What the browser tests share: the gateway's JSON API with a bearer key, axe-core's check of a
// page, Debian's Chromium launched headless, and the step log.
import { chromium } from "playwright-core";
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import assert from "node:assert/strict";

const require = createRequire(import.meta.url);
const AXE = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

// `method path` on the gateway at `url` with bearer `key` and JSON `body`: {status, body}.
export const apiAt = (url) => async (method, path, key, body) => {
  const r = await fetch(url + path, {
    method,
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: r.status, body: await r.json().catch(() => null) };
};

// axe-core on `page`: no serious or critical violation (the context needs `bypassCSP` only so
// that the script can be injected; the pages run under their CSP).
export const axe = async (page, what) => {
  await page.addScriptTag({ content: AXE });
  const result = await page.evaluate(async () => await window.axe.run(document, { resultTypes: ["violations"] }));
  const bad = result.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  assert.deepEqual(
    bad.map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`),
    [],
    `axe-core: serious or critical violations on the ${what}`,
  );
  console.log(`axe: ${what}: ${result.violations.length} violations, none serious or critical`);
};

export const step = (s) => console.log(`- ${s}`);

// Debian's Chromium (or $CHROMIUM), headless, with nothing reaching out on its own.
export const launch = () => chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});

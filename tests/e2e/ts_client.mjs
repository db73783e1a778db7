// The official TypeScript MCP SDK client, driven by the Python e2e tests: connects over stdio to
// the command in PROXY_CMD (JSON array: `assent mcp …`), or over streamable HTTP to MCP_URL, lists tools, makes the call in CALL
// (JSON {name, arguments}) with a progress callback and resetTimeoutOnProgress (unless
// RESET=0), with the SDK's request timeout (60 s) or TIMEOUT_MS when set, and prints one JSON object per line: {tools}, {progress}, then {result} or {error}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const out = (o) => console.log(JSON.stringify(o));
let transport;
if (process.env.MCP_URL) {
  // Streamable HTTP to the gateway's /mcp; the bearer key names the agent.
  transport = new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), {
    requestInit: { headers: { Authorization: `Bearer ${process.env.ASSENT_API_KEY}` } },
  });
} else {
  const [command, ...args] = JSON.parse(process.env.PROXY_CMD);
  transport = new StdioClientTransport({ command, args, env: { ...process.env }, stderr: "inherit" });
}
const client = new Client({ name: "assent-e2e-ts", version: "1.0.0" });
await client.connect(transport);
out({ tools: (await client.listTools()).tools.map((t) => t.name).sort() });
const call = JSON.parse(process.env.CALL);
const started = Date.now();
let progress = 0;
try {
  const result = await client.callTool(call, undefined, {
    onprogress: (p) => {
      progress += 1;
      out({ progress: p.progress, message: p.message, at_ms: Date.now() - started });
    },
    resetTimeoutOnProgress: process.env.RESET !== "0",
    ...(process.env.TIMEOUT_MS ? { timeout: Number(process.env.TIMEOUT_MS) } : {}),
  });
  out({ result, elapsed_ms: Date.now() - started, progress });
} catch (e) {
  out({ error: String(e), code: e.code, elapsed_ms: Date.now() - started, progress });
}
await client.close();

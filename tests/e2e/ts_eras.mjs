// The official TypeScript MCP SDK client (a 2025-11-25 handshake client) for the era matrix
// (test_mcp_eras.py): connects over stdio to PROXY_CMD (JSON array) or over streamable HTTP to
// MCP_URL, then does STEP and prints one JSON line:
// - `call`: callTool(CALL) with progress (so a held call waits) → {result} or {error};
// - `task`: a raw tools/call declaring the tasks extension (SEP-2663) in its _meta → the
//   task it was answered with, then closes the connection (the drop) → {task};
// - `poll`: tasks/get TASK until it is no longer working → {task}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ResultSchema } from "@modelcontextprotocol/sdk/types.js";

const out = (o) => console.log(JSON.stringify(o));
const transport = process.env.MCP_URL
  ? new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), {
      requestInit: { headers: { Authorization: `Bearer ${process.env.ASSENT_API_KEY}` } },
    })
  : (() => {
      const [command, ...args] = JSON.parse(process.env.PROXY_CMD);
      return new StdioClientTransport({ command, args, env: { ...process.env }, stderr: "inherit" });
    })();
const client = new Client({ name: "assent-e2e-ts", version: "1.0.0" });
await client.connect(transport);
const any = ResultSchema.passthrough();
const step = process.env.STEP;
// The tasks extension, declared per request (the handshake did not).
const meta = { "io.modelcontextprotocol/clientCapabilities": { extensions: { "io.modelcontextprotocol/tasks": {} } } };
try {
  if (step === "call") {
    const call = JSON.parse(process.env.CALL);
    const result = await client.callTool(call, undefined, { onprogress: () => {}, resetTimeoutOnProgress: true });
    out({ result });
  } else if (step === "task") {
    const call = JSON.parse(process.env.CALL);
    const task = await client.request({ method: "tools/call", params: { ...call, _meta: meta } }, any);
    out({ task });
  } else {
    let task;
    for (let i = 0; i < 300; i++) {
      task = await client.request({ method: "tasks/get", params: { taskId: process.env.TASK, _meta: meta } }, any);
      if (task.status !== "working") break;
      await new Promise((r) => setTimeout(r, 200));
    }
    out({ task });
  }
} catch (e) {
  out({ error: String(e), code: e.code });
}
await client.close();

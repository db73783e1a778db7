// An MCP server over stdio with many tools (B2 "a wide upstream"): `echo` plus WIDE_TOOLS
// (default 50) others, each with an input schema of 20 described properties, so that what a
// call costs can be seen against the size of the upstream's tool list.
//   EVERYTHING_JS=bench/wide_upstream.mjs python3 bench/mcp_proxy.py --transports stdio
// Built on the official SDK from tests/e2e (run `npm ci` there first).
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "..", "tests", "e2e", "package.json"));
const { Server } = require("@modelcontextprotocol/sdk/server/index.js");
const { StdioServerTransport } = require("@modelcontextprotocol/sdk/server/stdio.js");
const { ListToolsRequestSchema, CallToolRequestSchema } = require("@modelcontextprotocol/sdk/types.js");

const wide = Number(process.env.WIDE_TOOLS ?? 50);
const properties = Object.fromEntries(
  Array.from({ length: 20 }, (_, i) => [`field_${i}`, { type: "string", description: `Field ${i} of the request, as the upstream's documentation describes it.` }]),
);
const tools = [
  { name: "echo", description: "Echoes back the input.", inputSchema: { type: "object", properties: { message: { type: "string" } }, required: ["message"] } },
  ...Array.from({ length: wide }, (_, i) => ({ name: `tool_${i}`, description: `Tool ${i}.`, inputSchema: { type: "object", properties } })),
];

const server = new Server({ name: "wide", version: "1.0.0" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
server.setRequestHandler(CallToolRequestSchema, async (req) => ({
  content: [{ type: "text", text: `Echo: ${req.params.arguments?.message ?? ""}` }],
}));
await server.connect(new StdioServerTransport());

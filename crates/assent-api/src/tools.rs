//! MCP tool-list pinning over HTTP (issue 4): the proxy's report of an upstream's tools
//! (`POST /v1/tools/check`), reviews of changed or new tools (`GET /v1/tools/reviews`, one
//! review with its long-poll, accept and reject), the pins (`GET /v1/tools/pins`), and the
//! tools an agent declares for an MCP server
//! (`GET /v1/agents/{agent}/mcp-servers/{alias}/tools`). Tool definitions stay
//! `serde_json::Value` (they are the upstream's).
//!
//! A report pins for whoever made it: an agent's own relay for that agent alone; the MCP hub
//! inside `assent serve` (the gateway's own upstreams) for every agent, which it proves with
//! the process's [`hub_token`] (set by the hub, read by the gateway in the same process) in
//! [`ToolCheckRequest::hub_token`]; its tool results carry it too
//! ([`crate::gate::ToolResultRequest::hub_token`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::OnceLock;

static HUB_TOKEN: OnceLock<String> = OnceLock::new();

/// This process's MCP hub token, made by `make` on the first call (the hub passes a random
/// secret of at least 128 bits) and the same ever after. It never leaves the process but in
/// [`ToolCheckRequest::hub_token`] to the gateway the hub reports to: a gateway in the same
/// process (`assent serve` with `mcp_upstreams`) takes such a report as its own hub's.
pub fn hub_token_init(make: impl FnOnce() -> String) -> &'static str {
    HUB_TOKEN.get_or_init(make)
}

/// This process's MCP hub token, `None` when no hub runs in it ([`hub_token_init`]).
pub fn hub_token() -> Option<&'static str> {
    HUB_TOKEN.get().map(String::as_str)
}

/// `POST /v1/tools/check` (an agent key; the MCP proxy): the upstream's `tools/list` entries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"agent": "pay_bot", "server": "bank", "tools": [{"name": "balance", "inputSchema": {"type": "object"}}]}))]
pub struct ToolCheckRequest {
    /// The agent; must be the key's own agent.
    pub agent: String,
    /// The MCP server alias; must be declared by the agent.
    pub server: String,
    /// At most 10000 tool definitions, each with a string `name` (none when the report is of
    /// the server's `handshake`).
    #[serde(default)]
    pub tools: Vec<Value>,
    /// The server's own words from its handshake instead of a tool list:
    /// `{"instructions"?, "serverInfo"?}` as its `initialize` answer gives them (a
    /// `server/discover` answer's `instructions` and `_meta` server info). Pinned as the
    /// pseudo-tool `(server)` ([`assent_core::pin::server_entry`]: the instructions and the
    /// server info but its version), held for review when changed as a tool is; the answer's
    /// `handshake` says which words the proxy may show the client. A report with it carries no
    /// `tools`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handshake: Option<Value>,
    /// The MCP hub's proof that it runs in the gateway's own process ([`hub_token`]): with
    /// it the report pins the gateway's upstream for every agent; without it, or with any
    /// other value, it pins for `agent` alone (as every relay's does). Not in the OpenAPI
    /// document: no client but that hub sends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub hub_token: Option<String>,
}

/// The gateway's word on each reported tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolCheckResponse {
    /// One per reported tool.
    pub tools: Vec<ToolState>,
    /// The gateway's word on the reported `handshake` (named `(server)`): `pinned` (the words
    /// are their pin), `first_use`, or `held` (changed: a review decides). `pinned` is what
    /// the proxy may show the client (for a held entry the words pinned before, `null` when
    /// none were: then none are shown). Absent when no handshake was reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handshake: Option<ToolState>,
}

/// The pinning records, `assent-core`'s own types: the row the store reads back is the body
/// (times Unix milliseconds in Rust, RFC 3339 text on the wire).
pub use assent_core::pin::{
    PinState, ReviewStatus, SERVER_ENTRY, ToolPin, ToolReview, ToolState, server_entry,
};

/// `GET /v1/tools/reviews[?status=pending|accepted|rejected|all]` (operator; default
/// `pending`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolReviewList {
    /// The reviews.
    pub reviews: Vec<ToolReview>,
}

/// `GET /v1/tools/pins` (operator).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolPinList {
    /// The pins.
    pub pins: Vec<ToolPin>,
}

/// `GET /v1/agents/{agent}/mcp-servers/{alias}/tools` (the agent itself or an operator;
/// `404` when not declared).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeclaredTools {
    /// The agent.
    pub agent: String,
    /// The MCP server alias.
    pub server: String,
    /// The tool names the agent file allows; `null`: every tool.
    pub tools: Option<Vec<String>>,
}

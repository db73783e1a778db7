//! MCP tool-list pinning over HTTP (issue 4): the proxy's report of an upstream's tools
//! (`POST /v1/tools/check`), reviews of changed or new tools (`GET /v1/tools/reviews`, one
//! review with its long-poll, accept and reject), the pins (`GET /v1/tools/pins`), and the
//! tools an agent declares for an MCP server
//! (`GET /v1/agents/{agent}/mcp-servers/{alias}/tools`). Tool definitions stay
//! `serde_json::Value` (they are the upstream's).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /v1/tools/check` (an agent key; the MCP proxy): the upstream's `tools/list` entries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"agent": "pay_bot", "server": "bank", "tools": [{"name": "balance", "inputSchema": {"type": "object"}}]}))]
pub struct ToolCheckRequest {
    /// The agent; must be the key's own agent.
    pub agent: String,
    /// The MCP server alias; must be declared by the agent.
    pub server: String,
    /// At most 10000 tool definitions, each with a string `name`.
    pub tools: Vec<Value>,
}

/// The gateway's word on each reported tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolCheckResponse {
    /// One per reported tool.
    pub tools: Vec<ToolState>,
}

/// The pinning records, `assent-core`'s own types: the row the store reads back is the body
/// (times Unix milliseconds in Rust, RFC 3339 text on the wire).
pub use assent_core::pin::{PinState, ReviewStatus, ToolPin, ToolReview, ToolState};

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

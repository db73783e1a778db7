//! MCP tool-list pinning over HTTP (issue 4): the proxy's report of an upstream's tools
//! (`POST /v1/tools/check`), reviews of changed or new tools (`GET /v1/tools/reviews`, one
//! review with its long-poll, accept and reject), the pins (`GET /v1/tools/pins`), and the
//! tools an agent declares for an MCP server
//! (`GET /v1/agents/{agent}/mcp-servers/{alias}/tools`). Tool definitions stay
//! `serde_json::Value` (they are the upstream's).

use crate::kit::present;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /v1/tools/check` (an agent key; the MCP proxy): the upstream's `tools/list` entries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCheckRequest {
    /// The agent; must be the key's own agent.
    pub agent: String,
    /// The MCP server alias; must be declared by the agent.
    pub server: String,
    /// At most 10000 tool definitions, each with a string `name`.
    pub tools: Vec<Value>,
}

/// The gateway's word on each reported tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCheckResponse {
    /// One per reported tool.
    pub tools: Vec<ToolState>,
}

/// What the gateway says of one advertised tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolState {
    /// The tool name.
    pub name: String,
    /// Pinned, first use or held.
    pub state: PinState,
    /// The review of a held tool.
    pub review_id: Option<String>,
    /// The review's status, for a held tool.
    pub review_status: Option<ReviewStatus>,
    /// The pinned definition (what `tools/list` may show); `null` for a tool never pinned.
    pub pinned: Option<Value>,
}

/// `"pinned"` (matches its pin), `"first_use"` (pinned now: the server was new) or `"held"`
/// (changed or new since the server was pinned; a review decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PinState {
    /// Matches its pin.
    Pinned,
    /// Pinned now, trust on first use.
    FirstUse,
    /// Waits for an operator's review.
    Held,
}

impl PinState {
    /// `"pinned"`, `"first_use"` or `"held"`, as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pinned => "pinned",
            Self::FirstUse => "first_use",
            Self::Held => "held",
        }
    }
}

/// `"pending"`, `"accepted"` or `"rejected"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReviewStatus {
    /// Waiting for an operator.
    Pending,
    /// Accepted: the new definition is the pin.
    Accepted,
    /// Rejected: the tool stays hidden.
    Rejected,
}

impl ReviewStatus {
    /// `"pending"`, `"accepted"` or `"rejected"`, as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Accepted => "accepted",
            Self::Rejected => "rejected",
        }
    }
}

/// `GET /v1/tools/reviews[?status=pending|accepted|rejected|all]` (operator; default
/// `pending`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolReviewList {
    /// The reviews.
    pub reviews: Vec<ToolReview>,
}

/// One review of a changed or new tool (`GET /v1/tools/reviews/{id}[?wait=S]`, and the answer
/// to `POST …/accept` and `…/reject`, which are `409 ALREADY_DECIDED` after the first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolReview {
    /// Review id, UUID v4.
    pub id: String,
    /// The MCP server alias.
    pub server: String,
    /// The tool name.
    pub tool: String,
    /// Fingerprint (SHA-256 hex) of the new definition.
    pub fingerprint: String,
    /// The new definition.
    pub definition: Value,
    /// The pinned definition it would replace, `null` for a new tool.
    pub pinned: Option<Value>,
    /// Where it stands.
    pub status: ReviewStatus,
    /// When the proxy saw it, RFC 3339.
    pub seen_at: String,
    /// The agent whose proxy saw it.
    pub seen_by: String,
    /// The operator who decided.
    pub decided_by: Option<String>,
    /// When, RFC 3339.
    pub decided_at: Option<String>,
    /// RFC 6902 patch from `pinned` to `definition`; present only when `pinned` is.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub diff: Option<Value>,
}

/// `GET /v1/tools/pins` (operator).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolPinList {
    /// The pins.
    pub pins: Vec<ToolPin>,
}

/// A pinned tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolPin {
    /// The MCP server alias.
    pub server: String,
    /// The tool name.
    pub tool: String,
    /// Fingerprint (SHA-256 hex) of its definition.
    pub fingerprint: String,
    /// Its definition.
    pub definition: Value,
    /// When it was pinned, RFC 3339.
    pub pinned_at: String,
    /// `trust-on-first-use`, or the operator who accepted it.
    pub pinned_by: String,
}

/// `GET /v1/agents/{agent}/mcp-servers/{alias}/tools` (the agent itself or an operator;
/// `404` when not declared).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeclaredTools {
    /// The agent.
    pub agent: String,
    /// The MCP server alias.
    pub server: String,
    /// The tool names the agent file allows; `null`: every tool.
    pub tools: Option<Vec<String>>,
}

//! `GET /v1/insights[?since=RFC3339&until=RFC3339]` (operator; issue 16 §4): how people
//! approve over a time range (default the last 30 days, at most 366): prompts per UTC day;
//! per tool, agent and operator the outcomes, the approval rate, the time to a person's
//! decision and the rubber stamps (decisions within two seconds); per tool the calls that
//! needed nobody. Each list holds the 50 keys with the most prompts; `total` says how many
//! there were.

use serde::{Deserialize, Serialize};

/// The body of `GET /v1/insights`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Insights {
    /// The range's start, RFC 3339 (inclusive).
    pub since: String,
    /// The range's end, RFC 3339 (exclusive).
    pub until: String,
    /// A decision made sooner than this many seconds after the card was raised counts as a
    /// rubber stamp (2).
    pub rubber_stamp_seconds: f64,
    /// How many keys each list holds at most (50).
    pub list_cap: u32,
    /// Prompts per UTC day, every day of the range, oldest first.
    pub days: Vec<DayPrompts>,
    /// All prompts together (`key` is empty).
    pub overall: Figures,
    /// Per tool (its name, without the MCP server).
    pub tools: Breakdown,
    /// Per agent id.
    pub agents: Breakdown,
    /// Per operator: the cards each decided (approve or deny).
    pub operators: Breakdown,
    /// Per tool, the calls that needed nobody, most first.
    pub outright: OutrightList,
    /// The top suggestions mined from the range's settled decisions (issue 16 §2), each with
    /// its evidence, the edits with the YAML to write, and its replay; empty when the gateway
    /// was not started from a config file, or when the range holds more than 50,000 proposals
    /// (or 64 MiB of them) or a record that cannot be read (partial evidence: narrow the range;
    /// `suggestions_withheld` says so).
    #[serde(default)]
    pub suggestions: Vec<assent_core::suggest::Suggestion>,
    /// Tools with at least 10 settled decisions on one side that got no suggestion keyed on an
    /// argument, each with why (most decisions first, at most 20): only arguments a tool really
    /// takes are mined — those its input schema declares (an MCP tool's definition pinned by
    /// the gateway's hub, or accepted by an operator) or a rule names in a condition, a cost
    /// threshold or a scope — since the agent writes every argument, and one it made up could
    /// otherwise become the pattern.
    #[serde(default)]
    pub unmined: Vec<assent_core::suggest::Unmined>,
    /// Whether the suggestions were withheld (`suggestions` and `unmined` empty) because the
    /// range holds more history than is read for them — over 50,000 proposals, or over
    /// 64 MiB of their stored records — or a record that cannot be read: a suggestion mined
    /// from part of the evidence could miss the decisions that refute it. Narrow the range.
    #[serde(default)]
    pub suggestions_withheld: bool,
}

/// Prompts raised on one UTC day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DayPrompts {
    /// The day, `YYYY-MM-DD` (UTC).
    pub day: String,
    /// Approvals that waited for a person, requested that day.
    pub prompts: u64,
}

/// One dimension, cut to the keys with the most prompts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Breakdown {
    /// Most prompts first (ties by key), at most `list_cap`.
    pub rows: Vec<Figures>,
    /// How many keys there were in all.
    pub total: u64,
}

/// How the prompts of one tool, agent or operator ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Figures {
    /// The tool, agent or operator (empty for `overall`).
    pub key: String,
    /// Approvals that waited for a person (a grant's are not prompts).
    pub prompts: u64,
    /// Approved by a person.
    pub approved: u64,
    /// Rejected by a person.
    pub rejected: u64,
    /// Expired: nobody decided in time.
    pub expired: u64,
    /// Cancelled by the agent or an operator.
    pub cancelled: u64,
    /// Still waiting.
    pub pending: u64,
    /// `approved / (approved + rejected)`, 0–1; `null` when a person decided none.
    pub approval_rate: Option<f64>,
    /// Decided by a person within `rubber_stamp_seconds` of being raised.
    pub rubber_stamped: u64,
    /// Median seconds from the card being raised to a person's decision (nearest rank);
    /// `null` when nobody decided one.
    pub median_seconds: Option<f64>,
    /// 90th percentile of the same, seconds.
    pub p90_seconds: Option<f64>,
}

/// The calls that needed nobody, per tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OutrightList {
    /// Most calls first, at most `list_cap`.
    pub rows: Vec<Outright>,
    /// How many tools there were in all.
    pub total: u64,
    /// Whether the audit log held more outright verdicts than one request reads (500,000),
    /// so `allowed` and `denied` count only the oldest of them, or verdicts of more tools
    /// than one request counts (10,000), so those of the tools past it are not counted.
    pub truncated: bool,
}

/// The calls of one tool that needed nobody.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Outright {
    /// The tool.
    pub tool: String,
    /// Allowed outright by the policy.
    pub allowed: u64,
    /// Denied outright by the policy.
    pub denied: u64,
    /// Covered by an earlier approval's grant.
    pub granted: u64,
}

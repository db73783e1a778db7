//! MCP tool-list pinning records (issue 4): what the gateway says of one advertised tool
//! ([`ToolState`], [`PinState`]), a review of a changed or new tool ([`ToolReview`],
//! [`ReviewStatus`]) and a pinned tool ([`ToolPin`]). One type each for the row the store
//! reads back and the body `/v1/tools/…` returns: times are Unix milliseconds in Rust and
//! RFC 3339 text on the wire ([`crate::stamp`]); tool definitions stay `serde_json::Value`
//! (they are the upstream's). Fingerprinting, pinning and deciding reviews are the store's.

use crate::json::present;
use crate::stamp::{ms_as_rfc3339, opt_ms_as_rfc3339};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the gateway says of one advertised tool (`POST /v1/tools/check`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// `"pending"`, `"accepted"` or `"rejected"`, as on the wire and in the store.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Accepted => "accepted",
            Self::Rejected => "rejected",
        }
    }

    /// The status named `s`; `None` for any other text.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Pending, Self::Accepted, Self::Rejected]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// One review of a changed or new tool (`GET /v1/tools/reviews/{id}[?wait=S]`, and the answer
/// to `POST …/accept` and `…/reject`, which are `409 ALREADY_DECIDED` after the first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolReview {
    /// Review id, UUID v4.
    pub id: String,
    /// Whose it is: the agent whose own MCP relay reported it (`POST /v1/tools/check`), the
    /// only agent it concerns; `null`: the gateway's own MCP hub (the upstreams of its config),
    /// which holds and shows it for every agent.
    #[serde(default)]
    pub agent: Option<String>,
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
    /// Where it stands (`rejected` when the stored value is unreadable: fail closed).
    pub status: ReviewStatus,
    /// When the proxy saw it: Unix milliseconds (RFC 3339 on the wire).
    #[serde(with = "ms_as_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub seen_at: i64,
    /// The agent whose proxy saw it.
    pub seen_by: String,
    /// The operator who decided.
    pub decided_by: Option<String>,
    /// When: Unix milliseconds (RFC 3339 on the wire).
    #[serde(with = "opt_ms_as_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub decided_at: Option<i64>,
    /// RFC 6902 patch from `pinned` to `definition`; present only when `pinned` is (the
    /// gateway adds it to what it shows; the stored row has none).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub diff: Option<Value>,
}

/// A pinned tool (`GET /v1/tools/pins`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolPin {
    /// Whose it is: the agent whose own MCP relay reported it (`POST /v1/tools/check`), the
    /// only agent it concerns; `null`: the gateway's own MCP hub (the upstreams of its config),
    /// which holds and shows it for every agent.
    #[serde(default)]
    pub agent: Option<String>,
    /// The MCP server alias.
    pub server: String,
    /// The tool name.
    pub tool: String,
    /// Fingerprint (SHA-256 hex) of its definition.
    pub fingerprint: String,
    /// Its definition.
    pub definition: Value,
    /// When it was pinned: Unix milliseconds (RFC 3339 on the wire).
    #[serde(with = "ms_as_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub pinned_at: i64,
    /// `trust-on-first-use`, or the operator who accepted it.
    pub pinned_by: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_back_what_they_write_and_nothing_else() {
        for s in [
            ReviewStatus::Pending,
            ReviewStatus::Accepted,
            ReviewStatus::Rejected,
        ] {
            assert_eq!(ReviewStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(ReviewStatus::parse("Pending"), None);
        assert_eq!(ReviewStatus::parse(""), None);
    }
}

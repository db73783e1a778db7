//! The small vocabulary every body shares: risk tiers and levels, approval and decision
//! statuses, the `reasons` of a verdict, and the serde helper for an open-ended field that is
//! left out when absent but may be `null` when present. No body of its own lives here. Where
//! `assent-core` already has the type and its serde form is the wire's (tiers, statuses,
//! decisions, reasons) it is re-exported, so the vocabulary is declared once; only the AAEP
//! risk level, which core has no type for, is declared here.

use serde::{Deserialize, Serialize};

/// Seed 002 risk tier, `"R0"` … `"R4"` (R0–R1 are AAEP `low`, R2 `medium`, R3–R4 `high`):
/// `assent-core`'s own type, whose serde form is the wire's.
pub use assent_core::RiskTier;

/// Status of an approval (MPLP Confirm status), `"pending"` (the only non-terminal one),
/// `"approved"`, `"rejected"`, `"expired"` or `"cancelled"`: `assent-core`'s own type, whose
/// serde form is the wire's.
pub use assent_core::ApprovalStatus;

/// An operator's decision in a request body (seed 002 "Operator decision options"),
/// `"approve"` or `"deny"`: `assent-core`'s own type, whose serde form is the wire's.
pub use assent_core::DecisionKind;

/// What happens when an approval times out (AAEP `default_decision`), `"approve"` or
/// `"reject"`: `assent-core`'s own type, whose serde form is the wire's.
pub use assent_core::DefaultDecision;

/// One reason behind a verdict (`reasons[]` of gate answers, approvals and some errors),
/// `{"file", "rule", "text"}`: `assent-core`'s own type, whose serde form is the wire's.
pub use assent_core::Reason;

/// What a verdict asks of the approval that holds its call (`message`, `reasons`,
/// `risk_tier`, `approvers`, `default_decision`, notes and limits), serialised flat inside an
/// approval: `assent-core`'s own type, whose serde form is the wire's.
pub use assent_core::ApprovalTerms;

/// AAEP `risk_level` of a [`RiskTier`]: `"low"`, `"medium"` or `"high"`. Kept here because
/// `assent-core` has no type for it (its `RiskTier::risk_level` answers the wire text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RiskLevel {
    /// R0 and R1.
    Low,
    /// R2.
    Medium,
    /// R3 and R4.
    High,
}

impl RiskLevel {
    /// `"low"`, `"medium"` or `"high"`, as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }
}

impl From<RiskTier> for RiskLevel {
    /// The AAEP risk level of a tier: R0–R1 `low`, R2 `medium`, R3–R4 `high`.
    fn from(tier: RiskTier) -> Self {
        match tier {
            RiskTier::R0 | RiskTier::R1 => Self::Low,
            RiskTier::R2 => Self::Medium,
            RiskTier::R3 | RiskTier::R4 => Self::High,
        }
    }
}

/// Deserialises an open-ended field that the server leaves out when absent but may write as
/// `null` when present: `assent-core`'s [`assent_core::json::present`].
pub(crate) use assent_core::json::present;

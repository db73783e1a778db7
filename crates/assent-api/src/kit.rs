//! The small vocabulary every body shares: risk tiers and levels, approval and decision
//! statuses, the `reasons` of a verdict, and the serde helper for an open-ended field that is
//! left out when absent but may be `null` when present. No body of its own lives here.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// Seed 002 risk tier, `"R0"` … `"R4"`. R0–R1 are AAEP `low`, R2 `medium`, R3–R4 `high`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum RiskTier {
    /// Negligible risk (AAEP `low`).
    R0,
    /// Low risk (AAEP `low`).
    R1,
    /// Medium risk (AAEP `medium`); the tier when no rule names one.
    R2,
    /// High risk (AAEP `high`); always held for a human.
    R3,
    /// Critical risk (AAEP `high`); always held for a human.
    R4,
}

impl RiskTier {
    /// `"R0"` … `"R4"`, as on the wire.
    pub fn as_str(self) -> &'static str {
        ["R0", "R1", "R2", "R3", "R4"][self as usize]
    }
    /// The AAEP risk level of this tier.
    pub fn level(self) -> RiskLevel {
        match self {
            Self::R0 | Self::R1 => RiskLevel::Low,
            Self::R2 => RiskLevel::Medium,
            Self::R3 | Self::R4 => RiskLevel::High,
        }
    }
}

impl std::fmt::Display for RiskTier {
    /// [`RiskTier::as_str`].
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// AAEP `risk_level` of a [`RiskTier`]: `"low"`, `"medium"` or `"high"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

/// Status of an approval (MPLP Confirm status): `"pending"` is the only non-terminal one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalStatus {
    /// Waiting for a decision.
    Pending,
    /// Approved (by an operator, a grant, the agent's user, or a default `approve` at expiry
    /// reads `expired`); a token was minted.
    Approved,
    /// Denied by an operator or the agent's user.
    Rejected,
    /// Timed out; its default decision applied (a token exists only when that was `approve`).
    Expired,
    /// Withdrawn before a decision.
    Cancelled,
}

impl ApprovalStatus {
    /// The lowercase wire name (`"pending"`, `"approved"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
            Self::Expired => "expired",
            Self::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for ApprovalStatus {
    /// [`ApprovalStatus::as_str`].
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An operator's decision in a request body (seed 002 "Operator decision options"):
/// `"approve"` or `"deny"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecisionKind {
    /// Approve: mints a single-use token (and a grant for a scope wider than `once`).
    Approve,
    /// Deny, with an optional reason the agent is told.
    Deny,
}

/// What happens when an approval times out (AAEP `default_decision`): `"approve"` or
/// `"reject"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DefaultDecision {
    /// Approve at expiry (never for an irreversible action).
    Approve,
    /// Reject at expiry (the default).
    Reject,
}

/// One reason behind a verdict (`reasons[]` of gate answers, approvals and some errors): the
/// file, the rule in it, and what it said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reason {
    /// The agent or governance file; empty for a built-in rule.
    pub file: String,
    /// Where in the file (e.g. `policies[0].rules[1]`), or the built-in rule's name.
    pub rule: String,
    /// What it said about this call.
    pub text: String,
}

/// Deserialises an open-ended field that the server leaves out when absent but may write as
/// `null` when present: absent → `None` (with `#[serde(default)]`), `null` → `Some(Null)`, so
/// the value serialises back exactly (with `skip_serializing_if = "Option::is_none"`).
pub(crate) fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

//! The gatekeeper's answer for one call: [`Verdict`] (allow, confirm or deny, with every
//! reason, the risk tier, the approvers, the wait and its default, the rendered message and
//! the notes for the operator), [`VerdictKind`] and [`Reason`]. Plain data: how a verdict is
//! decided is the gatekeeper's job; the policy registry reads [`Reason`]s to name the policies
//! behind a verdict.

use crate::approval::DefaultDecision;
use crate::risk::RiskTier;
use crate::triggers::Escalation;
use serde::{Deserialize, Serialize};

/// `allow`, `confirm` (hold for a human) or `deny`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerdictKind {
    /// Run it.
    Allow,
    /// Hold it for a human (MPLP REQUIRE_CONFIRMATION).
    Confirm,
    /// Refuse it (`TOOL_DENIED`).
    Deny,
}

impl VerdictKind {
    /// `"allow"`, `"confirm"` or `"deny"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Confirm => "confirm",
            Self::Deny => "deny",
        }
    }
}

/// One reason behind a verdict: the file, the rule in it, and what it said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reason {
    /// The agent or governance file; empty for built-in rules.
    pub file: String,
    /// Where in the file (or the built-in rule's name).
    pub rule: String,
    /// What it said about this call.
    pub text: String,
}

/// The gatekeeper's answer for one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Allow, confirm or deny.
    pub kind: VerdictKind,
    /// Every source consulted, in order: the declaration, governance rules, the risk tier.
    pub reasons: Vec<Reason>,
    /// Highest tier any covering rule gives; R2 when none does.
    pub risk_tier: RiskTier,
    /// True when any covering rule marks the action irreversible; such a call is never
    /// `allow` (seed 001, AAEP §6.4.1) and its `default_decision` is `reject`.
    pub irreversible: bool,
    /// Shortest `timeout_seconds` of the covering rules, if any names one.
    pub timeout_seconds: Option<u64>,
    /// Default applied at expiry: `approve` only if every covering rule that names one says so
    /// and the action is reversible; `reject` otherwise.
    pub default_decision: DefaultDecision,
    /// Operator roles allowed to decide (union over covering rules; empty = any operator).
    pub approvers: Vec<String>,
    /// The rendered approval message (confirm), or the denial reason (deny), or empty (allow).
    pub message: String,
    /// Threshold and scope triggers that fired (`rate`, `cost`, `paths`, `domains`); their
    /// texts are in `reasons`. A grant never covers a call with any (seed 002).
    pub triggers: Vec<String>,
    /// `suggested_alternatives` of the covering rules, in order, without repeats.
    pub suggested_alternatives: Vec<String>,
    /// `on_timeout` of the covering rules merged: every role, the shortest extension.
    pub escalation: Option<Escalation>,
    /// Smallest `thresholds.output_bytes` of the covering rules.
    pub output_bytes: Option<u64>,
    /// The agent's own user may approve in the MCP client (issue 4): a covering rule sets
    /// `in_client_approval`, the verdict is `confirm`, the tier is below R3 and no covering
    /// rule names approver roles.
    #[serde(default)]
    pub in_client_approval: bool,
    /// `side_effects` of the covering rules, rendered (confirm only), in rule order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub side_effects: Vec<String>,
    /// `rollback` notes of the covering rules, rendered (confirm only), in rule order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rollback: Vec<String>,
    /// The first covering rule's `dry_run_tool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run_tool: Option<String>,
    /// Argument paths to mask outside the gateway: the union of the covering rules' `redact`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redact: Vec<String>,
}

//! The gatekeeper's answer for one call: [`Verdict`] (allow, confirm or deny, with every
//! reason, the risk tier, the approvers, the wait and its default, the rendered message and
//! the notes for the operator), [`VerdictKind`], [`Reason`], and the [`ApprovalTerms`] part of a
//! verdict that an approval keeps. Plain data: how a verdict is
//! decided is the gatekeeper's job; the policy registry reads [`Reason`]s to name the policies
//! behind a verdict.

use crate::approval::DefaultDecision;
use crate::quorum::Quorum;
use crate::risk::RiskTier;
use crate::triggers::Escalation;
use serde::{Deserialize, Serialize};

/// `allow`, `confirm` (hold for a human) or `deny`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Reason {
    /// The agent or governance file; empty for built-in rules.
    pub file: String,
    /// Where in the file (or the built-in rule's name).
    pub rule: String,
    /// What it said about this call.
    pub text: String,
}

/// The gatekeeper's answer for one call: its kind, the wait, and the [`ApprovalTerms`] an
/// approval that holds the call keeps (serialised flat, as one object).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Allow, confirm or deny.
    pub kind: VerdictKind,
    /// Shortest `timeout_seconds` of the covering rules, if any names one.
    pub timeout_seconds: Option<u64>,
    /// Everything else the verdict says: reasons, tier, approvers, message, notes.
    #[serde(flatten)]
    pub terms: ApprovalTerms,
}

/// What a verdict asks of the approval that holds its call, kept unchanged by that approval
/// (store record and `GET /v1/approvals/{id}`, where it is serialised flat): who may decide,
/// what they are shown, what happens when nobody does, and the limits on the call's result.
/// The last five fields default when absent on input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApprovalTerms {
    /// The rendered approval message (confirm), or the denial reason (deny), or empty (allow).
    pub message: String,
    /// Every source consulted, in order: the declaration, governance rules, the risk tier.
    pub reasons: Vec<Reason>,
    /// Highest tier any covering rule gives; R2 when none does.
    pub risk_tier: RiskTier,
    /// True when any covering rule marks the action irreversible; such a call is never
    /// `allow` (seed 001, AAEP §6.4.1) and its `default_decision` is `reject`.
    pub irreversible: bool,
    /// Default applied at expiry: `approve` only if every covering rule that names one says so
    /// and the action is reversible; `reject` otherwise.
    pub default_decision: DefaultDecision,
    /// Operator roles allowed to decide (union over covering rules; empty = any operator).
    pub approvers: Vec<String>,
    /// When several distinct people must approve (issue 14 §1): the merged quorum of the
    /// covering rules ([`crate::quorum::merge`]); absent: one approval decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<Quorum>,
    /// The triggers that fired, each once; their texts are in `reasons`. All of them:
    /// thresholds `rate`, `cost` and, on a held result, `output_bytes`; scope `paths`,
    /// `domains`; session risk `session_untrusted`, `lethal_trifecta`, `tool_changed`,
    /// `session_unreadable` ([`crate::session_risk::TRIGGERS`]); `deny_unevaluable` (a covering
    /// rule's `deny` cannot be evaluated); `tool_lookalike` (the tool's name, folded, is one a
    /// rule governs that the name as sent escapes); `skill_unnamed` (a delegation naming no
    /// skill to a target declaring `allowed_skills`). A call held by any is held so a person decides: a
    /// grant never covers it (seed 002), it is not asked in the client, and its default on
    /// timeout is reject ([`crate::grant::default_on_timeout`]).
    pub triggers: Vec<String>,
    /// Seed 002 `suggestedAlternatives`: those of the covering rules, in order, no repeats.
    pub suggested_alternatives: Vec<String>,
    /// `on_timeout` of the covering rules merged: every role, the shortest extension.
    pub escalation: Option<Escalation>,
    /// Smallest `thresholds.output_bytes` of the covering rules, in bytes: a larger result is
    /// held (MCP proxy and hub).
    pub output_bytes: Option<u64>,
    /// The agent's own user may approve in the MCP client (issue 4): a covering rule sets
    /// `in_client_approval`, the verdict is `confirm`, the tier is below R3 and no covering
    /// rule names approver roles.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub in_client_approval: bool,
    /// Separation of duties (issue 14 §2): the agent's owners and the person the call acts for
    /// may not approve it. On when a covering rule says `separation_of_duties: true`, or the
    /// tier is R4 and no covering rule says `false`. Serialised only when on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub separation_of_duties: bool,
    /// Whether an approving vote needs a passkey assertion bound to this approval and its
    /// `call_hash` (issue 14 §4). On when a covering rule says `require_passkey: true`, or
    /// the risk tier is R4 and no covering rule says `false`. Absent on the wire when off.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_passkey: bool,
    /// `side_effects` of the covering rules, rendered (confirm only), in rule order.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub side_effects: Vec<String>,
    /// `rollback` notes of the covering rules, rendered (confirm only), in rule order.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub rollback: Vec<String>,
    /// The first covering rule's `dry_run_tool`: the tool that previews this call.
    #[serde(default)]
    pub dry_run_tool: Option<String>,
    /// Argument paths masked in everything that leaves the gateway: the union of the covering
    /// rules' `redact`.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub redact: Vec<String>,
}

impl ApprovalTerms {
    /// Terms that say only `message`, `reasons` and `risk_tier`: reversible, default `reject`,
    /// any operator, no triggers, notes or limits (a deny verdict's, or a test's starting
    /// point).
    pub fn plain(message: String, reasons: Vec<Reason>, risk_tier: RiskTier) -> Self {
        Self {
            message,
            reasons,
            risk_tier,
            irreversible: false,
            default_decision: DefaultDecision::Reject,
            approvers: Vec::new(),
            quorum: None,
            triggers: Vec::new(),
            suggested_alternatives: Vec::new(),
            escalation: None,
            output_bytes: None,
            in_client_approval: false,
            separation_of_duties: false,
            require_passkey: false,
            side_effects: Vec::new(),
            rollback: Vec::new(),
            dry_run_tool: None,
            redact: Vec::new(),
        }
    }

    /// Whether the agent's own user may decide an approval held under these terms in the MCP
    /// client (issue 4): `in_client_approval` is set, and nothing is asked that the
    /// gatekeeper never offers there — a fired trigger, separation of duties, a quorum, a
    /// passkey. Checked again at each in-client decision on the stored terms. Found by review:
    /// the store's check left out the quorum and the passkey, so on terms holding both
    /// `in_client_approval` and a quorum, the user's deny was counted as a vote.
    pub fn decidable_in_client(&self) -> bool {
        self.in_client_approval
            && self.triggers.is_empty()
            && !self.separation_of_duties
            && self.quorum.is_none()
            && !self.require_passkey
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_in_client_terms_are_decided_in_the_client() {
        let mut t = ApprovalTerms::plain(String::new(), Vec::new(), RiskTier::R1);
        assert!(!t.decidable_in_client(), "not asked for");
        t.in_client_approval = true;
        assert!(t.decidable_in_client());
        let spoil: [fn(&mut ApprovalTerms); 4] = [
            |t| t.triggers.push("rate".into()),
            |t| t.separation_of_duties = true,
            |t| t.require_passkey = true,
            |t| {
                t.quorum = crate::quorum::parse_approvers(
                    &serde_json::json!({"roles": ["ops"], "count": 2}),
                )
                .unwrap()
                .quorum
            },
        ];
        for (i, f) in spoil.iter().enumerate() {
            let mut u = t.clone();
            f(&mut u);
            assert!(!u.decidable_in_client(), "{i}");
        }
    }
}

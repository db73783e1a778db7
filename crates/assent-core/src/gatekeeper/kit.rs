//! The gatekeeper's shared kit, at the bottom of its module graph: building a [`Reason`], a
//! [`Denial`] and its deny [`Verdict`], and reading one `approval` spec against arguments
//! ([`requires`], [`template_of`]). It imports nothing else of the gatekeeper and decides
//! nothing on its own.

use crate::condition::Outcome;
use crate::policy::ApprovalSpec;
use crate::risk::RiskTier;
use crate::verdict::{ApprovalTerms, Reason, Verdict, VerdictKind};

/// A [`Reason`] from `file` (empty for built-in rules), `rule` and what it said.
pub(super) fn reason(file: &str, rule: impl Into<String>, text: impl Into<String>) -> Reason {
    Reason {
        file: file.to_string(),
        rule: rule.into(),
        text: text.into(),
    }
}

/// Why a call is denied: the source (`file`, `rule`), the message for the agent and the
/// reason for the record (the same text unless a rule's `deny` renders its own message).
#[derive(Debug)]
pub(super) struct Denial {
    /// The agent or governance file; empty for built-in rules.
    pub file: String,
    /// Where in the file (or the built-in rule's name).
    pub rule: String,
    /// What the agent is told (the verdict's `message`).
    pub message: String,
    /// What the record keeps (the verdict's one reason).
    pub why: String,
}

impl Denial {
    /// A denial whose message and reason are both `text`.
    pub fn new(file: &str, rule: impl Into<String>, text: String) -> Self {
        Self {
            file: file.to_string(),
            rule: rule.into(),
            message: text.clone(),
            why: text,
        }
    }

    /// The deny verdict: one reason, tier R2, default `reject`, nothing else set.
    pub fn into_verdict(self) -> Verdict {
        Verdict {
            kind: VerdictKind::Deny,
            timeout_seconds: None,
            terms: ApprovalTerms::plain(
                self.message,
                vec![reason(&self.file, self.rule, self.why)],
                RiskTier::R2,
            ),
        }
    }
}

/// Outcome of one `approval` spec: `Some(why)` when it requires approval, naming the clause
/// that matched (`approval condition matched: amount > 1000 (amount = 5000)`) or could not be
/// evaluated.
pub(super) fn requires(spec: &ApprovalSpec, args: &serde_json::Value) -> Option<String> {
    match spec {
        ApprovalSpec::Exempt => None,
        ApprovalSpec::Required {
            condition: None, ..
        } => Some("approval is always required".into()),
        ApprovalSpec::Required {
            condition: Some(c), ..
        } => match c.evaluate(args) {
            Outcome::Match(groups) => Some(format!(
                "approval condition matched: {}",
                groups.join("; or ")
            )),
            Outcome::NoMatch => None,
            Outcome::CannotEvaluate(why) => Some(unevaluable("approval", &why)),
        },
    }
}

/// The reason for a condition that cannot be evaluated (fail closed: approval is required).
pub(super) fn unevaluable(what: &str, why: &[String]) -> String {
    format!(
        "{what} condition cannot be evaluated ({}), so approval is required",
        why.join("; ")
    )
}

/// The `message_template` of a spec that requires approval.
pub(super) fn template_of(spec: &ApprovalSpec) -> Option<&str> {
    match spec {
        ApprovalSpec::Required {
            message_template, ..
        } => message_template.as_deref(),
        ApprovalSpec::Exempt => None,
    }
}

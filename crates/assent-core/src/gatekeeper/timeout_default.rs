//! A verdict's default decision at its timeout, as it is shown and as it is applied: what the
//! covering rules configure ([`configured`]), settled by the one rule the expiry sweep applies
//! too ([`crate::grant::default_on_timeout`]: `reject` for a call held by a trigger, an
//! irreversible one, one needing a passkey-signed approval or a quorum), with a reason when
//! that overrides an approving default ([`settle_default`]). So what an approval shows is what
//! its timeout does.

use super::kit::reason;
use crate::approval::{DefaultDecision, QUORUM_DEFAULT_NOTE};
use crate::grant::default_on_timeout;
use crate::verdict::ApprovalTerms;

/// Why a call held by a trigger is never approved by its timeout (after the triggers' names).
const TRIGGER_DEFAULT_NOTE: &str = "a call held by a trigger is held so a person decides, and a timeout is nobody, so `default_decision: approve` does not apply to it: its default on timeout is reject";

/// The default the covering rules configure: `approve` only when every one that names a
/// default says so (`approve_default`: `None` when none names one, so `reject`) and no
/// covering rule's `deny` went unevaluated (`deny_unknown`).
pub(super) fn configured(approve_default: Option<bool>, deny_unknown: bool) -> DefaultDecision {
    if approve_default == Some(true) && !deny_unknown {
        DefaultDecision::Approve
    } else {
        DefaultDecision::Reject
    }
}

/// Sets `terms.default_decision` to the default the timeout applies to an approval held under
/// `terms` with the `configured` default ([`default_on_timeout`]: `approve` only when no
/// trigger fired, an unevaluated `deny` being one, and the call is reversible and needs neither
/// a passkey-signed approval, issue 14 §4, nor a `quorum`, issue 14 §1). When `explain` (the
/// call is held for a person) and a quorum or a trigger overrides an approving `configured`, a
/// reason says so (rule `quorum`, rule `triggers`).
///
/// The gatekeeper settles every verdict so (found by review: a call held only by session risk,
/// a threshold or scope was approved at its timeout with nobody looking; a quorum call by
/// another covering rule's `default_decision: approve`, with no vote counted); the gateway
/// settles a held result's terms with it once it adds the `output_bytes` trigger (found by
/// review: a held result showed its call's `approve` while the sweep rejected it).
pub fn settle_default(terms: &mut ApprovalTerms, configured: DefaultDecision, explain: bool) {
    if explain && configured == DefaultDecision::Approve {
        if terms.quorum.is_some() {
            terms
                .reasons
                .push(reason("", "quorum", QUORUM_DEFAULT_NOTE));
        }
        if !terms.triggers.is_empty() {
            let held = terms.triggers.join(", ");
            let note = format!("held by {held}: {TRIGGER_DEFAULT_NOTE}");
            terms.reasons.push(reason("", "triggers", note));
        }
    }
    terms.default_decision = default_on_timeout(terms, configured);
}

#[cfg(test)]
mod tests {
    use super::super::test_kit::{AGENT, governing_bot};
    use super::*;
    use crate::{ToolCall, VerdictKind, evaluate};
    use serde_json::json;

    /// The attack: a governance rule asks two finance approvers (`deny: quorum`) and names no
    /// default; another rule covering the same tool says `default_decision: approve`. Folded,
    /// the call defaulted to approve, so at its timeout it was approved with no vote counted.
    /// A quorum call's default is reject, a reason says why, and the load warns of the pair;
    /// the same approving default on a call without a quorum still applies.
    #[test]
    fn a_quorum_call_never_defaults_to_approve_whatever_another_rules_default() {
        let quorum = "- tool: pay
  approval: true
  approvers: {roles: [finance], count: 2, deny: quorum}
  escalation: [{after: 60, approvers: [cfo]}]";
        let lenient = "- tool: pa*
  risk_tier: R1
  default_decision: approve
- tool: quote
  approval: true
  default_decision: approve";
        let agent = format!("{AGENT}    - alias: quote\n");
        let policies = [("a.quorum-v1", quorum), ("b.lenient-v1", lenient)];
        let reg = governing_bot(&agent, &policies);
        let warned = reg.warnings_with("needs a quorum");
        assert_eq!(warned.len(), 1, "{:?}", reg.warnings);
        assert!(warned[0].contains("a.quorum-v1 rules[0]"), "{warned:?}");
        assert!(warned[0].contains("b.lenient-v1 rules[0]"), "{warned:?}");
        let call = ToolCall::new("pay", None, json!({})).unwrap();
        let v = evaluate(&reg, "bot", &call);
        assert_eq!(v.kind, VerdictKind::Confirm);
        assert!(v.terms.quorum.is_some());
        assert_eq!(v.terms.default_decision.as_str(), "reject");
        assert!(
            v.terms.reasons.iter().any(|r| r.rule == "quorum"),
            "{:?}",
            v.terms.reasons
        );
        let call = ToolCall::new("quote", None, json!({})).unwrap();
        let v = evaluate(&reg, "bot", &call);
        assert_eq!(v.terms.default_decision.as_str(), "approve");
        assert!(v.terms.reasons.iter().all(|r| r.rule != "quorum"));
    }

    /// The attack: a team-wide rule says `default_decision: approve` and
    /// `in_client_approval: true`; a call it covers that a `paths` scope or a `cost` threshold
    /// holds so a person decides was approved at its timeout with nobody looking, or by the
    /// agent's own user in the client. Held by a trigger, its default is reject (a reason says
    /// why) and it is not asked in the client; the same rule's call with no trigger keeps both.
    #[test]
    fn a_call_held_by_a_trigger_never_defaults_to_approve_nor_is_asked_in_the_client() {
        let rules = "- tool: pay
  approval: true
  default_decision: approve
  in_client_approval: true
  scope: {paths: {arguments: [path], roots: [/srv/data]}}
  thresholds: {cost: {argument: amount, max_per_session: 100}}";
        let reg = governing_bot(AGENT, &[("a.team-v1", rules)]);
        let plain = json!({"path": "/srv/data/a", "amount": 5});
        let v = evaluate(&reg, "bot", &ToolCall::new("pay", None, plain).unwrap());
        let plain_terms = (v.terms.triggers.is_empty(), v.terms.in_client_approval);
        assert_eq!(plain_terms, (true, true), "{v:?}");
        assert_eq!(v.terms.default_decision.as_str(), "approve");
        for (args, trigger) in [
            (json!({"path": "/etc/passwd", "amount": 5}), "paths"),
            (json!({"path": "/srv/data/a", "amount": 500}), "cost"),
        ] {
            let v = evaluate(&reg, "bot", &ToolCall::new("pay", None, args).unwrap());
            assert_eq!(v.kind, VerdictKind::Confirm);
            assert_eq!(v.terms.triggers, [trigger]);
            assert_eq!(v.terms.default_decision.as_str(), "reject", "{trigger}");
            assert!(!v.terms.in_client_approval, "{trigger}");
            let why = v.terms.reasons.iter().find(|r| r.rule == "triggers");
            let named = why.is_some_and(|r| r.text.contains(trigger) && r.text.contains("reject"));
            assert!(named, "{trigger}: {:?}", v.terms.reasons);
        }
    }
    /// The attack: a held result (trigger `output_bytes`, added by the gateway after the call's
    /// verdict) kept its call's `default_decision: approve`, shown so to the operator while the
    /// sweep rejected it. Settled, the terms say `reject` and a reason says why; terms with no
    /// trigger keep the approving default, and a held call is explained, an allowed one not.
    #[test]
    fn terms_given_a_trigger_after_the_verdict_settle_to_reject() {
        let mut terms = ApprovalTerms::plain(String::new(), Vec::new(), crate::RiskTier::R2);
        settle_default(&mut terms, DefaultDecision::Approve, true);
        assert_eq!(terms.default_decision, DefaultDecision::Approve);
        assert!(terms.reasons.is_empty());
        terms.triggers.push("output_bytes".into());
        settle_default(&mut terms, DefaultDecision::Approve, false);
        assert_eq!(terms.default_decision, DefaultDecision::Reject);
        assert!(terms.reasons.is_empty(), "{:?}", terms.reasons);
        settle_default(&mut terms, DefaultDecision::Approve, true);
        assert_eq!(terms.default_decision, DefaultDecision::Reject);
        let why = &terms.reasons[0];
        assert!(why.rule == "triggers" && why.text.contains("held by output_bytes"));
        assert_eq!(configured(Some(true), true), DefaultDecision::Reject);
        assert_eq!(configured(None, false), DefaultDecision::Reject);
    }
}

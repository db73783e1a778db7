//! Whether a held call may still be approved as it was held, under rules changed since (a
//! reload, or a restart with other agent or governance files): the approval keeps the terms
//! it was held under (who decides, its quorum, its timeout), but an approval may not give the
//! call less than the rules in force now ask of it. Pure; the store asks it inside the
//! decision's write transaction, through the server, with the rules in force at that moment.

use crate::approval::may_decide;
use crate::edit::{Original, more_approval};
use crate::gatekeeper::{Verdict, VerdictKind};
use crate::verdict::ApprovalTerms;

/// Why a call held under `held` (its approval's terms) may not be approved under the rules in
/// force now, `now` being its verdict under them (evaluated without the session's history:
/// what the files ask of the call itself); `None` when it may. It may not when the rules now
/// deny it, hold it at a higher tier or as irreversible where it was not, need more of its
/// approval than it was held under ([`more_approval`]: a quorum, a passkey, separation of
/// duties), or — for an operator holding `roles` (`None`: its timeout, or the agent's user)
/// — name approvers, with every role their escalation may add, none of whose roles the
/// operator holds. The reason is what the rules now do, as a clause: `deny it (MESSAGE)`,
/// `hold it at R4, irreversible (it was held at R2)`, `need a passkey for it`, `name approvers
/// (ops) whose roles you lack`. Found by review: a reload that made a tool need a passkey, a
/// quorum or a deny left its calls already held approvable by one operator, or by their
/// timeout, under the old terms, and their tokens redeemed. A verdict that asks less (the
/// rules loosened) takes nothing away from the held terms, which are checked too. The store
/// asks it when a held call is approved and when an approved call's token is redeemed.
pub fn tightened(held: &ApprovalTerms, now: &Verdict, roles: Option<&[String]>) -> Option<String> {
    let escalates = held
        .escalation
        .as_ref()
        .map(|e| e.roles())
        .unwrap_or_default();
    let original = Original::of(held, &escalates);
    let t = &now.terms;
    let mut approvers = t.approvers.clone();
    if !approvers.is_empty() {
        approvers.extend(t.escalation.iter().flat_map(|e| e.roles()));
    }
    let why = if now.kind == VerdictKind::Deny {
        format!("deny it ({})", t.message)
    } else if t.risk_tier > held.risk_tier || (t.irreversible && !held.irreversible) {
        let irreversible = if t.irreversible { ", irreversible" } else { "" };
        format!(
            "hold it at {}{irreversible} (it was held at {})",
            t.risk_tier.as_str(),
            held.risk_tier.as_str()
        )
    } else if let more = more_approval(&original, now)
        && !more.is_empty()
    {
        format!("need {} for it", more.join(", "))
    } else if let Some(roles) = roles
        && now.kind == VerdictKind::Confirm
        && !may_decide(&approvers, roles)
    {
        format!(
            "name approvers ({}) whose roles you lack",
            t.approvers.join(", ")
        )
    } else {
        return None;
    };
    Some(why)
}

/// Why the rules in force, `now` being the held call's verdict under them, no longer let its
/// timeout approve it: they hold it with a default on timeout that is not `approve` (its
/// `default_decision`, or a passkey, quorum or irreversible that makes any default reject:
/// [`crate::approval::default_at_timeout`]); `None` when they do, or no longer hold it
/// (allowed outright; a deny is [`tightened`]'s). Found by review: [`tightened`] never
/// compared defaults, so a reload turning a rule's `default_decision: approve` to `reject`
/// during an incident left every call already held to be approved at its timeout, up to 7
/// days later, with no one looking. Asked only of a timeout's approving default.
pub fn default_withdrawn(now: &Verdict) -> Option<String> {
    let t = &now.terms;
    // Its triggers count only through its default: `now` is evaluated without the session and
    // with paths read lexically, and a trigger firing there made the verdict's default reject
    // (`gatekeeper::settle_default`) — which may reject at the timeout a call the gate let
    // default to approve (a symlinked root: fail-safe); the sweep weighs the session itself.
    let (passkey, quorum) = (t.require_passkey, t.quorum.as_ref());
    let default =
        crate::approval::default_at_timeout(t.irreversible, passkey, quorum, t.default_decision);
    (now.kind == VerdictKind::Confirm && default != crate::DefaultDecision::Approve)
        .then(|| "reject it at its timeout (its default on timeout is now reject)".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Registry;
    use crate::triggers::Observations;
    use crate::{ToolCall, evaluate_in};
    use serde_json::json;

    const AGENT: &str =
        "metadata: {id: a}\naction_space:\n  local_tools:\n    - {alias: pay, approval: true}\n";

    /// `pay`'s verdict under a governance policy of one rule for it (`rule`: its YAML keys).
    fn verdict(rule: &str) -> Verdict {
        let gov = format!(
            "policies:\n  - id: t.rules-v1\n    selector: {{agents: [\"*\"]}}\n    rules:\n      - {{tool: pay, {rule}}}\n"
        );
        let files = [("a.agf.yaml".to_string(), AGENT.to_string())];
        let reg = Registry::load(&files, &[("g.yaml".into(), gov)]).unwrap();
        let call = ToolCall::new("pay", None, json!({"amount": 5})).unwrap();
        evaluate_in(&reg, "a", &call, None, &Observations::none(0))
    }

    /// Attack (found by review): a reload made `pay` need a passkey (or a quorum, or a deny),
    /// and a call held before it was approved by one operator under the old terms. Each way the
    /// rules in force may now ask more is named; the same rules, or looser ones, take nothing.
    #[test]
    fn rules_that_now_ask_more_of_a_held_call_refuse_its_approval() {
        let finance = ["finance".to_string()];
        let finance = Some(&finance[..]);
        let held = verdict("risk_tier: R2, approvers: [finance]").terms;
        let same = verdict("risk_tier: R2, approvers: [finance]");
        assert_eq!(tightened(&held, &same, finance), None);
        let looser = verdict("risk_tier: R1");
        assert_eq!(tightened(&held, &looser, finance), None);
        // Its timeout, or the agent's user, is asked about no approver role; nor is a role
        // the new rules' escalation adds lacking (found by review: an escalated approver was
        // refused after any change of the files).
        let others = verdict("risk_tier: R2, approvers: [ops]");
        assert_eq!(tightened(&held, &others, None), None);
        let escalated = verdict(
            "risk_tier: R2, approvers: [ops], escalation: [{after: 1m, approvers: [finance]}]",
        );
        assert_eq!(tightened(&held, &escalated, finance), None);
        for (rule, says) in [
            (
                "deny: {condition: {args_match: {amount: {gt: 1}}}}",
                "deny it (denied by governance rule",
            ),
            (
                "risk_tier: R4, approvers: [finance]",
                "hold it at R4 (it was held at R2)",
            ),
            (
                "risk_tier: R2, irreversible: true, approvers: [finance]",
                "irreversible",
            ),
            (
                "risk_tier: R2, require_passkey: true, approvers: [finance]",
                "need a passkey",
            ),
            (
                "risk_tier: R2, approvers: [ops]",
                "name approvers (ops) whose roles you lack",
            ),
        ] {
            let why = tightened(&held, &verdict(rule), finance).unwrap_or_default();
            assert!(why.contains(says), "{rule}: {why}");
        }
    }

    /// Found by review: a reload turning `default_decision: approve` to `reject` left the calls
    /// already held to be approved at their timeout. The rules in force withdraw an approving
    /// default unless they still hold the call with one.
    #[test]
    fn rules_that_no_longer_approve_at_the_timeout_withdraw_the_approving_default() {
        let base = "risk_tier: R2, approvers: [finance]";
        let kept = verdict(&format!("{base}, default_decision: approve"));
        assert_eq!(default_withdrawn(&kept), None);
        for rule in [
            format!("{base}, default_decision: reject"),
            base.to_string(),
            format!("{base}, default_decision: approve, require_passkey: true"),
        ] {
            let why = default_withdrawn(&verdict(&rule)).unwrap_or_default();
            assert!(why.contains("reject it at its timeout"), "{rule}: {why}");
        }
    }
}

//! Re-gating an operator's edit (seed 002 "Approve with modifications"; AAEP §6.3.2
//! `modified_action`; issue 10 §3): the edited call is evaluated like a proposal — with the
//! session's earlier calls for the rate and cost thresholds and the scope checks — and may only
//! restrict what was held, never widen it.

use crate::approval::may_decide;
use crate::gatekeeper::{TRIGGER_DENY_UNEVALUABLE, Verdict, VerdictKind};
use crate::quorum::{DenyRule, Quorum, QuorumGroup};
use crate::risk::RiskTier;
use crate::verdict::ApprovalTerms;

/// What the held call was, as the edit is measured against it.
#[derive(Debug, Clone, Copy)]
pub struct Original<'a> {
    /// The held call's risk tier.
    pub risk_tier: RiskTier,
    /// Whether a rule marked the held call irreversible.
    pub irreversible: bool,
    /// The triggers that held it (`rate`, `cost`, `paths`, `domains`, `deny_unevaluable`, …).
    pub triggers: &'a [String],
    /// The held call's quorum (its approval's terms; `None`: one approval decides).
    pub quorum: Option<&'a Quorum>,
    /// Every role the held approval's escalation steps add ([`crate::escalation::Escalation::roles`];
    /// empty: none): its quorum is compared as it may ever stand, widened by them.
    pub escalates: &'a [String],
    /// Whether an approving vote on the held call needs a passkey.
    pub require_passkey: bool,
    /// Whether the held call's approval keeps its agent's owners and the person it acts for
    /// out (separation of duties).
    pub separation_of_duties: bool,
}

impl<'a> Original<'a> {
    /// The held call as its approval's `terms` (an [`ApprovalTerms`] kept with the approval)
    /// describe it, with `escalates` the roles its escalation steps add (the caller keeps
    /// them: `terms.escalation.map(|e| e.roles())`, empty when it has none). One constructor
    /// for an edit's re-gate and for [`crate::rules_now::tightened`].
    pub fn of(terms: &'a ApprovalTerms, escalates: &'a [String]) -> Self {
        Original {
            risk_tier: terms.risk_tier,
            irreversible: terms.irreversible,
            triggers: &terms.triggers,
            quorum: terms.quorum.as_ref(),
            escalates,
            require_passkey: terms.require_passkey,
            separation_of_duties: terms.separation_of_duties,
        }
    }
}

/// Why an edit was refused; the server maps each to a `422` (`403` for [`NeedsRole`]).
///
/// [`NeedsRole`]: EditRefusal::NeedsRole
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditRefusal {
    /// `EDIT_DENIED`: the policy denies the edited call (the denial's message).
    #[error("the edited call is one the policy denies: {0}")]
    Denied(String),
    /// `EDIT_OUT_OF_SCOPE`: the edit names a path or domain outside a rule's scope.
    #[error("the edited arguments name a target outside the rule's scope ({}); an edit may restrict a call, not widen it", .0.join(", "))]
    OutOfScope(Vec<String>),
    /// `EDIT_OVER_THRESHOLD`: the edit crosses a rate or cost threshold the held call did not.
    #[error("the edited call crosses a threshold the held call did not ({}); an edit may restrict a call, not widen it", .0.join(", "))]
    OverThreshold(Vec<String>),
    /// `EDIT_RAISES_RISK`: the edit has a higher risk tier, or is irreversible where the held
    /// call was not.
    #[error("the edited call is riskier than the held one ({} → {}{}); propose it as a new call instead", .from.as_str(), .to.as_str(), if *.irreversible { ", irreversible" } else { "" })]
    RaisesRisk {
        /// The held call's tier.
        from: RiskTier,
        /// The edited call's tier.
        to: RiskTier,
        /// Whether the edit became irreversible.
        irreversible: bool,
    },
    /// `EDIT_DENIED`: a covering rule's `deny` cannot be evaluated against the edited call
    /// (the trigger `deny_unevaluable`) where it could against the held one: the edit removed
    /// or retyped an argument the deny reads (the rules, by label).
    #[error("a deny of the policy cannot be evaluated against the edited call ({}), so the policy may deny it; an edit may restrict a call, not widen it", .0.join(", "))]
    DenyUnevaluable(Vec<String>),
    /// The edited call needs an approver role the deciding operator lacks.
    #[error("the edited call needs an approver role ({}) the operator lacks", .0.join(", "))]
    NeedsRole(Vec<String>),
    /// `EDIT_NEEDS_MORE_APPROVAL`: the edited call needs more of its approval than the held
    /// one did ([`more_approval`]): each entry names what (`a quorum of 2 finance`, `a
    /// passkey`, `separation of duties`, `a single deny to reject it`).
    #[error("the edited call needs more approval than the held one ({}); an edit may restrict a call, not widen it: propose it as a new call instead", .0.join(", "))]
    NeedsMoreApproval(Vec<String>),
}

impl EditRefusal {
    /// The stable API code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Denied(_) | Self::DenyUnevaluable(_) => "EDIT_DENIED",
            Self::OutOfScope(_) => "EDIT_OUT_OF_SCOPE",
            Self::OverThreshold(_) => "EDIT_OVER_THRESHOLD",
            Self::RaisesRisk { .. } => "EDIT_RAISES_RISK",
            Self::NeedsRole(_) => "FORBIDDEN",
            Self::NeedsMoreApproval(_) => "EDIT_NEEDS_MORE_APPROVAL",
        }
    }
}

/// Whether an operator may edit the arguments of a held call of `tool` whose Confirm target
/// is `target_type`: only a tool call's (`other`, and not one of the gateway's derived calls,
/// [`crate::redeem::DERIVED_PREFIXES`]: a held result, a delegation, an MPLP target). Found by
/// review: an edit of a delegation was re-gated as a tool call named `delegate.…`, which no
/// agent declares, and refused as one the policy denies (`EDIT_DENIED`), which said nothing
/// of why; such an edit is now refused as one that cannot be made.
pub fn editable(target_type: &str, tool: &str) -> bool {
    target_type == "other" && !crate::redeem::is_derived(tool)
}

/// Checks the verdict `edited` of an edited call (evaluated with the session's earlier calls,
/// the held call itself left out) against the held call `original`, for an operator holding
/// `roles`. The edit is refused when the policy denies it, when a covering rule's `deny`
/// cannot be evaluated against it and could against the held call, when it triggers a scope check, when it crosses a rate or cost threshold the held call did
/// not, when it raises the risk tier or becomes irreversible, when it needs more of its
/// approval than the held call did ([`more_approval`]: a quorum, a passkey, separation of
/// duties), or when its approver roles are ones the operator lacks.
pub fn check_edit(
    original: &Original<'_>,
    edited: &Verdict,
    roles: &[String],
) -> Result<(), EditRefusal> {
    if edited.kind == VerdictKind::Deny {
        return Err(EditRefusal::Denied(edited.terms.message.clone()));
    }
    let fired = |names: &[&str]| -> Vec<String> {
        edited
            .terms
            .triggers
            .iter()
            .filter(|t| names.contains(&t.as_str()))
            .cloned()
            .collect()
    };
    // Found by review: an edit dropping the argument a `deny` condition reads turned a
    // would-be deny into an accepted edit.
    if !fired(&[TRIGGER_DENY_UNEVALUABLE]).is_empty()
        && !original
            .triggers
            .iter()
            .any(|t| t == TRIGGER_DENY_UNEVALUABLE)
    {
        let rules = edited
            .terms
            .reasons
            .iter()
            .filter(|r| r.text.contains("deny condition cannot be evaluated"));
        return Err(EditRefusal::DenyUnevaluable(
            rules.map(|r| r.rule.clone()).collect(),
        ));
    }
    let scope = fired(&["paths", "domains"]);
    if !scope.is_empty() {
        return Err(EditRefusal::OutOfScope(scope));
    }
    let new: Vec<String> = fired(&["rate", "cost"])
        .into_iter()
        .filter(|t| !original.triggers.contains(t))
        .collect();
    if !new.is_empty() {
        return Err(EditRefusal::OverThreshold(new));
    }
    let irreversible = edited.terms.irreversible && !original.irreversible;
    if edited.terms.risk_tier > original.risk_tier || irreversible {
        return Err(EditRefusal::RaisesRisk {
            from: original.risk_tier,
            to: edited.terms.risk_tier,
            irreversible,
        });
    }
    let more = more_approval(original, edited);
    if !more.is_empty() {
        return Err(EditRefusal::NeedsMoreApproval(more));
    }
    if !may_decide(&edited.terms.approvers, roles) {
        return Err(EditRefusal::NeedsRole(edited.terms.approvers.clone()));
    }
    Ok(())
}

/// What the edited call's verdict `edited` needs of its approval that the held call
/// `original` did not, for people (empty: nothing more). An edit is approved on the word of
/// those deciding the held approval, under its terms, so it may not need more than they give:
/// - a passkey (`require_passkey`) where the held call needed none: `a passkey`;
/// - separation of duties where the held call had none: `separation of duties`;
/// - a quorum that the held one does not cover: `a quorum of …`, naming every group of the
///   edited quorum. The held quorum covers it when every group of the edited quorum has a
///   group of its own in the held quorum (each held group used once) that needs as many
///   people and whose roles — widened by every role the held approval's escalation may add
///   ([`Original::escalates`]) — are within the edited group's (no roles: any operator), so
///   nobody who may ever fill the held group is outside the edited one. No held quorum covers
///   none. Conservative: the matching is greedy and escalation is counted in full, so an
///   edit it cannot show covered is refused (a quorum's votes approve the call as proposed
///   anyway);
/// - one deny settling it (`deny: any`) where the held quorum needed a quorum to deny:
///   `a single deny to reject it`.
pub fn more_approval(original: &Original<'_>, edited: &Verdict) -> Vec<String> {
    let t = &edited.terms;
    let mut out = Vec::new();
    if let Some(qe) = &t.quorum {
        let held = original.quorum.map(|q| q.widened(original.escalates));
        if !held.as_ref().is_some_and(|qh| covers(qh, qe)) {
            out.push(describe(qe));
        }
        if held.is_some_and(|qh| qh.deny == DenyRule::Quorum && qe.deny == DenyRule::Any) {
            out.push("a single deny to reject it".into());
        }
    }
    if t.require_passkey && !original.require_passkey {
        out.push("a passkey".into());
    }
    if t.separation_of_duties && !original.separation_of_duties {
        out.push("separation of duties".into());
    }
    out
}

/// Whether every group of `edited` has a group of `held` of its own, as large and of roles
/// within its roles ([`more_approval`]).
fn covers(held: &Quorum, edited: &Quorum) -> bool {
    let within = |h: &QuorumGroup, e: &QuorumGroup| {
        e.roles.is_empty() || (!h.roles.is_empty() && h.roles.iter().all(|r| e.roles.contains(r)))
    };
    let mut used = vec![false; held.groups.len()];
    edited.groups.iter().all(|ge| {
        let g = &held.groups;
        let found = (0..g.len()).find(|&i| !used[i] && g[i].count >= ge.count && within(&g[i], ge));
        found.map(|i| used[i] = true).is_some()
    })
}

/// `a quorum of 2 finance`, `a quorum of 1 finance and 1 security`, `a quorum of 2
/// operators` (a group open to any operator), `a quorum of 2 finance or audit`.
fn describe(q: &Quorum) -> String {
    let groups: Vec<String> = q
        .groups
        .iter()
        .map(|g| match (g.roles.is_empty(), g.count) {
            (true, 1) => "1 operator".to_string(),
            (true, n) => format!("{n} operators"),
            (false, n) => format!("{n} {}", g.roles.join(" or ")),
        })
        .collect();
    format!("a quorum of {}", groups.join(" and "))
}

/// The cost arguments (`thresholds.cost.argument` of the rules covering the call for
/// `agent_id`) that `edited` raises above `original`'s value, or leaves without a number.
/// An edit of a call that had already crossed its cost threshold may lower what it spends, not
/// raise it (issue 10 §3); the caller refuses the edit when this is not empty.
pub fn raised_costs(
    reg: &crate::policy::Registry,
    agent_id: &str,
    original: &crate::ToolCall,
    edited: &crate::ToolCall,
) -> Vec<String> {
    let Some(agent) = reg.agents.get(agent_id) else {
        return Vec::new();
    };
    let value = |call: &crate::ToolCall, arg: &str| {
        crate::arg_path::lookup(&call.arguments, arg).and_then(serde_json::Value::as_f64)
    };
    let mut out: Vec<String> = Vec::new();
    for (_, r) in reg.covering_rules(agent, &edited.tool, edited.server.as_deref()) {
        let Some(limit) = &r.thresholds.cost else {
            continue;
        };
        let arg = &limit.argument;
        let raised = match (value(original, arg), value(edited, arg)) {
            (Some(before), Some(after)) => after > before,
            (_, None) => true,
            (None, Some(_)) => false,
        };
        if raised && !out.contains(arg) {
            out.push(arg.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Registry;
    use crate::triggers::{Observations, PriorCall};
    use crate::{ToolCall, evaluate_in};
    use serde_json::json;

    const AGENT: &str =
        "metadata: {id: a}\naction_space:\n  local_tools:\n    - {alias: pay, approval: true}\n";
    const GOV: &str = r#"
policies:
  - id: t.edits-v1
    selector: {agents: ["*"]}
    rules:
      - tool: pay
        thresholds: {cost: {argument: amount, max_per_session: 100}}
        risk_tier: R2
"#;

    fn verdict(reg: &Registry, amount: i64, prior: &[PriorCall]) -> Verdict {
        let call = ToolCall::new("pay", None, json!({"amount": amount})).unwrap();
        let obs = Observations {
            now_ms: 0,
            prior_calls: prior,
            agent_calls: &[],
            session: &crate::session_risk::CLEAN_SESSION,
            resolve_path: &crate::triggers::lexical_only,
        };
        evaluate_in(reg, "a", &call, None, &obs)
    }

    /// A held R2 call with no trigger, quorum, passkey or separation of duties.
    fn plain() -> Original<'static> {
        Original {
            risk_tier: RiskTier::R2,
            irreversible: false,
            triggers: &[],
            quorum: None,
            escalates: &[],
            require_passkey: false,
            separation_of_duties: false,
        }
    }

    #[test]
    fn only_a_tool_calls_arguments_may_be_edited() {
        assert!(super::editable("other", "transfer_funds"));
        for (target, tool) in [
            ("other", "delegate.payments"),
            ("other", "result.read"),
            ("other", "mplp.other"),
            ("plan", "mplp.plan"),
            ("context", "transfer_funds"),
        ] {
            assert!(!super::editable(target, tool), "{target} {tool}");
        }
    }

    #[test]
    fn an_edit_may_restrict_a_call_but_not_widen_it() {
        let reg = Registry::load(
            &[("a.agf.yaml".into(), AGENT.into())],
            &[("g.yaml".into(), GOV.into())],
        )
        .unwrap();
        let held = verdict(&reg, 50, &[]);
        let original = Original {
            risk_tier: held.terms.risk_tier,
            irreversible: held.terms.irreversible,
            triggers: &held.terms.triggers,
            ..plain()
        };
        let ops = ["ops".to_string()];
        assert_eq!(check_edit(&original, &verdict(&reg, 20, &[]), &ops), Ok(()));
        assert_eq!(
            check_edit(&original, &verdict(&reg, 500, &[]), &ops),
            Err(EditRefusal::OverThreshold(vec!["cost".into()]))
        );
        // The session's earlier calls count: 60 more after 60 already spent crosses 100.
        let spent = [PriorCall {
            tool: "pay".into(),
            server: None,
            at_ms: 0,
            arguments: json!({"amount": 60}),
        }];
        assert!(matches!(
            check_edit(&original, &verdict(&reg, 60, &spent), &ops),
            Err(EditRefusal::OverThreshold(_))
        ));
        let r = check_edit(&original, &verdict(&reg, 5000, &[]), &ops).unwrap_err();
        assert_eq!(r.code(), "EDIT_OVER_THRESHOLD", "{r}");
        // A held call that crossed the threshold already may be edited within it.
        let over = verdict(&reg, 500, &[]);
        let original = Original {
            risk_tier: over.terms.risk_tier,
            irreversible: over.terms.irreversible,
            triggers: &over.terms.triggers,
            ..plain()
        };
        assert_eq!(
            check_edit(&original, &verdict(&reg, 600, &[]), &ops),
            Ok(())
        );
        // Within the crossed threshold the amount may go down, not up.
        let call = |n: i64| crate::ToolCall::new("pay", None, json!({"amount": n})).unwrap();
        assert!(raised_costs(&reg, "a", &call(500), &call(400)).is_empty());
        assert_eq!(
            raised_costs(&reg, "a", &call(500), &call(600)),
            vec!["amount".to_string()]
        );
        // Held at a lower tier than the edit now has (a policy change in between): refused.
        let low = Original {
            risk_tier: RiskTier::R1,
            irreversible: false,
            triggers: &over.terms.triggers,
            ..plain()
        };
        assert!(matches!(
            check_edit(&low, &verdict(&reg, 600, &[]), &ops),
            Err(EditRefusal::RaisesRisk { .. })
        ));
    }

    /// The attack (found by review): `pay` to `mallory` is denied; the held call pays `acme`.
    /// An edit dropping `to` made the deny unevaluable — a hold, not a deny — and was
    /// accepted. It is refused `EDIT_DENIED` naming the rule; an edit the deny can still read
    /// is accepted, and so is one of a call held by the unevaluable deny already.
    #[test]
    fn an_edit_that_leaves_a_deny_unevaluable_is_refused() {
        let reg = under("        deny: {condition: {args_match: {to: mallory}}}\n");
        let v = |args| {
            let call = ToolCall::new("pay", None, args).unwrap();
            crate::evaluate(&reg, "a", &call)
        };
        let held = v(json!({"amount": 50, "to": "acme"}));
        assert!(held.terms.triggers.is_empty(), "{:?}", held.terms.triggers);
        let original = Original {
            triggers: &held.terms.triggers,
            ..plain()
        };
        let ops = ["ops".to_string()];
        let r = check_edit(&original, &v(json!({"amount": 50})), &ops).unwrap_err();
        assert_eq!(r.code(), "EDIT_DENIED", "{r}");
        assert!(
            matches!(&r, EditRefusal::DenyUnevaluable(rules) if rules.len() == 1 && rules[0].starts_with("t.needs-v1 rules[0]")),
            "{r:?}"
        );
        assert!(r.to_string().contains("cannot be evaluated"), "{r}");
        let edited = v(json!({"amount": 20, "to": "acme"}));
        assert_eq!(check_edit(&original, &edited, &ops), Ok(()));
        // Held by the unevaluable deny already: the operator saw it; the edit adds nothing.
        let unreadable = v(json!({"amount": 50, "to": 7}));
        assert_eq!(unreadable.terms.triggers, [TRIGGER_DENY_UNEVALUABLE]);
        let original = Original {
            triggers: &unreadable.terms.triggers,
            ..plain()
        };
        assert_eq!(
            check_edit(&original, &v(json!({"amount": 5})), &ops),
            Ok(())
        );
    }

    /// The registry of [`AGENT`] under one policy whose `pay` rule has `keys` (YAML lines).
    fn under(keys: &str) -> Registry {
        let gov = format!(
            "policies:\n  - id: t.needs-v1\n    selector: {{agents: [\"*\"]}}\n    rules:\n      - tool: pay\n{keys}"
        );
        Registry::load(
            &[("a.agf.yaml".into(), AGENT.into())],
            &[("g.yaml".into(), gov)],
        )
        .unwrap()
    }

    fn quorum(v: serde_json::Value) -> Quorum {
        crate::quorum::parse_approvers(&v).unwrap().quorum.unwrap()
    }

    fn needs(original: &Original<'_>, edited: &Verdict) -> Result<(), EditRefusal> {
        check_edit(
            original,
            edited,
            &["finance".to_string(), "security".into()],
        )
    }

    #[test]
    fn an_edit_cannot_need_a_quorum_the_held_call_did_not() {
        let reg = under("        approvers: {roles: [finance], count: 2}\n");
        let edited = verdict(&reg, 20, &[]);
        let r = needs(&plain(), &edited).unwrap_err();
        assert_eq!(
            r,
            EditRefusal::NeedsMoreApproval(vec!["a quorum of 2 finance".into()])
        );
        assert_eq!(r.code(), "EDIT_NEEDS_MORE_APPROVAL");
        assert!(r.to_string().contains("propose it as a new call"), "{r}");
        let held = |q: &Quorum| {
            needs(
                &Original {
                    quorum: Some(q),
                    ..plain()
                },
                &edited,
            )
        };
        // The same quorum, or a larger one, covers the edit; a smaller count does not.
        assert_eq!(
            held(&quorum(json!({"roles": ["finance"], "count": 2}))),
            Ok(())
        );
        assert_eq!(
            held(&quorum(json!({"roles": ["finance"], "count": 3}))),
            Ok(())
        );
        let two_groups = quorum(json!([{"role": "finance", "count": 2}, {"role": "security"}]));
        assert_eq!(held(&two_groups), Ok(()));
        let one = quorum(json!({"roles": ["finance"], "count": 1, "deny": "quorum"}));
        assert!(matches!(held(&one), Err(EditRefusal::NeedsMoreApproval(_))));
        // A group of other roles, or open to any operator, is not the edit's group.
        let other = quorum(json!({"roles": ["security"], "count": 2}));
        assert!(matches!(
            held(&other),
            Err(EditRefusal::NeedsMoreApproval(_))
        ));
        let anyone = quorum(json!({"count": 2}));
        assert!(matches!(
            held(&anyone),
            Err(EditRefusal::NeedsMoreApproval(_))
        ));
        // Nor one its escalation opens to a role the edit's group does not admit.
        let finance = quorum(json!({"roles": ["finance"], "count": 2}));
        let escalating = Original {
            quorum: Some(&finance),
            escalates: &["intern".to_string()],
            ..plain()
        };
        assert!(matches!(
            needs(&escalating, &edited),
            Err(EditRefusal::NeedsMoreApproval(_))
        ));
        // Two groups where the held quorum has one: one held group fills one edited group.
        let both = quorum(json!([{"role": "finance", "count": 1}, {"role": "security"}]));
        let pair = verdict(
            &under("        approvers: [{role: finance}, {role: security}]\n"),
            20,
            &[],
        );
        assert_eq!(
            needs(&plain(), &pair),
            Err(EditRefusal::NeedsMoreApproval(vec![
                "a quorum of 1 finance and 1 security".into()
            ]))
        );
        assert_eq!(
            needs(
                &Original {
                    quorum: Some(&both),
                    ..plain()
                },
                &pair
            ),
            Ok(())
        );
        let lone = quorum(json!([{"role": "finance", "count": 2}, {"role": "audit"}]));
        let lone = Original {
            quorum: Some(&lone),
            ..plain()
        };
        assert!(matches!(
            needs(&lone, &pair),
            Err(EditRefusal::NeedsMoreApproval(_))
        ));
        // A held quorum that needed a quorum to deny, edited into one a single deny settles.
        let strict = quorum(json!({"roles": ["finance"], "count": 2, "deny": "quorum"}));
        assert_eq!(
            needs(
                &Original {
                    quorum: Some(&strict),
                    ..plain()
                },
                &edited
            ),
            Err(EditRefusal::NeedsMoreApproval(vec![
                "a single deny to reject it".into()
            ]))
        );
        // An edit needing no quorum passes whatever the held call needed.
        let plain_edit = verdict(&under("        approvers: [finance]\n"), 20, &[]);
        assert_eq!(
            needs(
                &Original {
                    quorum: Some(&finance),
                    ..plain()
                },
                &plain_edit
            ),
            Ok(())
        );
        assert_eq!(needs(&plain(), &plain_edit), Ok(()));
    }

    #[test]
    fn an_edit_cannot_need_a_passkey_the_held_call_did_not() {
        let edited = verdict(&under("        require_passkey: true\n"), 20, &[]);
        assert!(edited.terms.require_passkey);
        assert_eq!(
            needs(&plain(), &edited),
            Err(EditRefusal::NeedsMoreApproval(vec!["a passkey".into()]))
        );
        let held = Original {
            require_passkey: true,
            ..plain()
        };
        assert_eq!(needs(&held, &edited), Ok(()));
        // Lowering it (the held call needed one, the edit does not) passes.
        let lower = verdict(&under("        risk_tier: R2\n"), 20, &[]);
        assert!(!lower.terms.require_passkey);
        assert_eq!(needs(&held, &lower), Ok(()));
    }

    #[test]
    fn an_edit_cannot_need_separation_of_duties_the_held_call_did_not() {
        let reg = under("        separation_of_duties: true\n        require_passkey: true\n");
        let edited = verdict(&reg, 20, &[]);
        assert_eq!(
            needs(&plain(), &edited),
            Err(EditRefusal::NeedsMoreApproval(vec![
                "a passkey".into(),
                "separation of duties".into()
            ]))
        );
        let passkey = Original {
            require_passkey: true,
            ..plain()
        };
        assert_eq!(
            needs(&passkey, &edited),
            Err(EditRefusal::NeedsMoreApproval(vec![
                "separation of duties".into()
            ]))
        );
        let held = Original {
            separation_of_duties: true,
            ..passkey
        };
        assert_eq!(needs(&held, &edited), Ok(()));
        let lower = verdict(&under("        risk_tier: R2\n"), 20, &[]);
        assert!(!lower.terms.separation_of_duties);
        assert_eq!(needs(&held, &lower), Ok(()));
    }
}

//! Re-gating an operator's edit (seed 002 "Approve with modifications"; AAEP §6.3.2
//! `modified_action`; issue 10 §3): the edited call is evaluated like a proposal — with the
//! session's earlier calls for the rate and cost thresholds and the scope checks — and may only
//! restrict what was held, never widen it.

use crate::approval::may_decide;
use crate::gatekeeper::{Verdict, VerdictKind};
use crate::risk::RiskTier;

/// What the held call was, as the edit is measured against it.
#[derive(Debug, Clone, Copy)]
pub struct Original<'a> {
    /// The held call's risk tier.
    pub risk_tier: RiskTier,
    /// Whether a rule marked the held call irreversible.
    pub irreversible: bool,
    /// The threshold and scope triggers that held it (`rate`, `cost`, `paths`, `domains`).
    pub triggers: &'a [String],
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
    /// The edited call needs an approver role the deciding operator lacks.
    #[error("the edited call needs an approver role ({}) the operator lacks", .0.join(", "))]
    NeedsRole(Vec<String>),
}

impl EditRefusal {
    /// The stable API code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Denied(_) => "EDIT_DENIED",
            Self::OutOfScope(_) => "EDIT_OUT_OF_SCOPE",
            Self::OverThreshold(_) => "EDIT_OVER_THRESHOLD",
            Self::RaisesRisk { .. } => "EDIT_RAISES_RISK",
            Self::NeedsRole(_) => "FORBIDDEN",
        }
    }
}

/// Checks the verdict `edited` of an edited call (evaluated with the session's earlier calls,
/// the held call itself left out) against the held call `original`, for an operator holding
/// `roles`. The edit is refused when the policy denies it,
/// when it triggers a scope check, when it crosses a rate or cost threshold the held call did
/// not, when it raises the risk tier or becomes irreversible, or when its approver roles are
/// ones the operator lacks.
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
    if !may_decide(&edited.terms.approvers, roles) {
        return Err(EditRefusal::NeedsRole(edited.terms.approvers.clone()));
    }
    Ok(())
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
        crate::condition::lookup(&call.arguments, arg).and_then(serde_json::Value::as_f64)
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
        };
        assert!(matches!(
            check_edit(&low, &verdict(&reg, 600, &[]), &ops),
            Err(EditRefusal::RaisesRisk { .. })
        ));
    }
}

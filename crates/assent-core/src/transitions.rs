//! MPLP plan transitions and blocks (seed 000 "Gatekeeper duty", seed 001 §4.3): which plan
//! may be submitted for a Confirm, when a plan lets its tool calls run, where a plan goes when
//! its Confirm is settled, and how a block (a pending Confirm of the plan or step, a plan not
//! yet approved, a tool definition awaiting review) turns a verdict into a deny. Pure
//! functions the store calls inside its transaction; it finds the facts (plan status, pending
//! reviews) and stores the outcome.

use crate::gatekeeper::{Reason, Verdict, VerdictKind};

/// Whether a plan in `status` may be revised or submitted for approval: only a `draft`.
pub fn plan_editable(status: &str) -> bool {
    status == "draft"
}

/// Whether a plan in `status` lets the tool calls that name it run: `approved` or
/// `in_progress`.
pub fn plan_runs_calls(status: &str) -> bool {
    matches!(status, "approved" | "in_progress")
}

/// Whether MPLP plan `body` (its `steps[].step_id`, `mplp-plan.schema.json`; a body without a
/// `steps` array has none) has a step `step_id`. A tool call naming
/// a plan assent holds and a step that is not one of that plan's is blocked: found by review,
/// a made-up step of an approved plan put the plan's id and the step on the call's Confirm and
/// trace, so a reviewer took the call for a step of a plan someone had approved.
pub fn plan_has_step(body: &serde_json::Value, step_id: &str) -> bool {
    body["steps"]
        .as_array()
        .is_some_and(|steps| steps.iter().any(|s| s["step_id"] == step_id))
}

/// Where a plan in status `plan_status` goes when its Confirm settles with MPLP status
/// `confirm_status` ([`crate::decision::confirm_status`]), and the event recorded: `approved`
/// → (`approved`, `plan.approved`); `cancelled` → (`cancelled`, `plan.cancelled`); anything
/// else (a rejection) → back to (`draft`, `plan.rejected`) for revision. Only a plan waiting
/// for its review (`proposed`) moves: `None` for any other (seed 001 §4.3). Found by review:
/// a plan cancelled while its Confirm stayed pending (a cancel racing the submit) went to
/// `approved` when that Confirm was approved later.
pub fn plan_after_confirm(
    plan_status: &str,
    confirm_status: &str,
) -> Option<(&'static str, &'static str)> {
    if plan_status != "proposed" {
        return None;
    }
    Some(match confirm_status {
        "approved" => ("approved", "plan.approved"),
        "cancelled" => ("cancelled", "plan.cancelled"),
        _ => ("draft", "plan.rejected"),
    })
}

/// Applies a block to `verdict`: when `why` is set and the verdict is not a deny already, it
/// becomes a deny whose message is `why`, with a reason of rule `mplp plan` saying so. A deny
/// stays as it was; `None` changes nothing.
pub fn apply_block(verdict: &mut Verdict, why: Option<String>) {
    let Some(why) = why else { return };
    if verdict.kind == VerdictKind::Deny {
        return;
    }
    verdict.kind = VerdictKind::Deny;
    verdict.terms.reasons.push(Reason {
        file: String::new(),
        rule: "mplp plan".into(),
        text: why.clone(),
    });
    verdict.terms.message = why;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::ToolCall;
    use crate::policy::Registry;

    fn confirm_verdict() -> Verdict {
        let agent = "metadata: {id: bot}\naction_space:\n  local_tools:\n    - {alias: pay, approval: true}\n";
        let reg = Registry::load(&[("a".into(), agent.into())], &[]).unwrap();
        let call = ToolCall::new("pay", None, serde_json::json!({"amount": 1})).unwrap();
        crate::evaluate(&reg, "bot", &call)
    }

    #[test]
    fn plan_states() {
        assert!(plan_editable("draft"));
        for s in ["proposed", "approved", "cancelled", "completed"] {
            assert!(!plan_editable(s), "{s}");
        }
        assert!(plan_runs_calls("approved") && plan_runs_calls("in_progress"));
        for s in ["draft", "proposed", "cancelled", "failed"] {
            assert!(!plan_runs_calls(s), "{s}");
        }
        assert_eq!(
            plan_after_confirm("proposed", "approved"),
            Some(("approved", "plan.approved"))
        );
        assert_eq!(
            plan_after_confirm("proposed", "cancelled"),
            Some(("cancelled", "plan.cancelled"))
        );
        assert_eq!(
            plan_after_confirm("proposed", "rejected"),
            Some(("draft", "plan.rejected"))
        );
        // A plan no longer waiting for its review stays where it is: a cancelled plan is not
        // approved by a Confirm that outlived it, nor a draft revised since.
        for plan in ["cancelled", "draft", "approved", "completed", "failed"] {
            assert_eq!(plan_after_confirm(plan, "approved"), None, "{plan}");
        }
    }

    #[test]
    fn a_step_belongs_to_a_plan_only_when_the_plan_lists_it() {
        let body = serde_json::json!({"steps": [{"step_id": "s1"}, {"step_id": "s2"}]});
        assert!(plan_has_step(&body, "s2"));
        assert!(!plan_has_step(&body, "s3"));
        assert!(!plan_has_step(&serde_json::json!({"steps": "s1"}), "s1"));
        assert!(!plan_has_step(&serde_json::json!({}), "s1"));
    }

    #[test]
    fn a_block_turns_a_verdict_into_a_deny_once() {
        let mut v = confirm_verdict();
        assert_eq!(v.kind, VerdictKind::Confirm);
        let before = v.clone();
        apply_block(&mut v, None);
        assert_eq!(v, before);
        apply_block(&mut v, Some("plan p is draft".into()));
        assert_eq!(v.kind, VerdictKind::Deny);
        assert_eq!(v.terms.message, "plan p is draft");
        let last = v.terms.reasons.last().unwrap();
        assert_eq!((last.file.as_str(), last.rule.as_str()), ("", "mplp plan"));
        assert_eq!(last.text, "plan p is draft");
        let denied = v.clone();
        apply_block(&mut v, Some("another block".into()));
        assert_eq!(v, denied);
    }
}

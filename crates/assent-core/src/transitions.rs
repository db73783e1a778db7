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

/// The most MPLP events one plan holds. A revision or a submission that would leave no room
/// for the events that may follow it is refused ([`plan_has_room`]); a decision or a
/// cancellation is never refused for room, so a plan ends with at most this many. 256: some
/// 125 rounds of revising or submitting and being turned down, where a plan's life takes a
/// handful; each event rewrites the plan's whole list inside the writer every agent shares, so
/// an agent looping on its plan costs that writer in proportion to this bound (it was 1,000:
/// a quarter of the worst case now).
pub const MAX_PLAN_EVENTS: usize = 256;

/// What an agent does to its draft plan that adds MPLP events (seed 001 §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanGrowth {
    /// A revision of the draft: its `plan.updated` (1 event).
    Revision,
    /// A submission for approval: its own event and its Confirm's decision, which is always
    /// appended (2 events).
    Submission,
}

impl PlanGrowth {
    /// The events this growth appends: 1 for a revision, 2 for a submission.
    pub fn events(self) -> usize {
        match self {
            PlanGrowth::Revision => 1,
            PlanGrowth::Submission => 2,
        }
    }
}

/// Whether a plan holding `events` MPLP events may take `growth` and still have room for the
/// one event that may close it (its cancellation), so that it never holds more than
/// [`MAX_PLAN_EVENTS`]. Found by review: an agent revising its draft in a loop, or submitting
/// it and letting its Confirm expire (back to `draft`) in a loop, grew the plan's event list,
/// rewritten whole inside the one writer every agent shares, without bound.
pub fn plan_has_room(events: usize, growth: PlanGrowth) -> bool {
    events.saturating_add(growth.events()) < MAX_PLAN_EVENTS
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

/// The first `steps[].step_id` that MPLP plan `body` names twice, if one is
/// (`mplp-plan.schema.json` does not say ids are unique). Found by review: a plan with step
/// `S` "read the report" and another step `S` "wire the funds" was approved as one, and a
/// later call naming step `S` was shown as "step S of approved plan P", either of the two.
/// A plan naming one twice is refused when it is written.
pub fn plan_repeated_step(body: &serde_json::Value) -> Option<&str> {
    let mut seen = std::collections::HashSet::new();
    body["steps"]
        .as_array()?
        .iter()
        .filter_map(|s| s["step_id"].as_str())
        .find(|id| !seen.insert(*id))
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
    fn a_plan_naming_a_step_twice_is_found() {
        let step = |id: &str| serde_json::json!({"step_id": id, "description": "d"});
        let plan = |steps: Vec<serde_json::Value>| serde_json::json!({ "steps": steps });
        assert_eq!(plan_repeated_step(&plan(vec![step("a"), step("b")])), None);
        let twice = plan(vec![step("a"), step("b"), step("a")]);
        assert_eq!(plan_repeated_step(&twice), Some("a"));
        assert_eq!(plan_repeated_step(&serde_json::json!({})), None);
    }

    #[test]
    fn a_plan_never_grows_past_its_bound() {
        // A revision needs room for itself and a cancellation; a submission for itself, its
        // Confirm's decision and a cancellation.
        assert!(plan_has_room(0, PlanGrowth::Submission));
        assert!(plan_has_room(MAX_PLAN_EVENTS - 2, PlanGrowth::Revision));
        assert!(!plan_has_room(MAX_PLAN_EVENTS - 1, PlanGrowth::Revision));
        assert!(plan_has_room(MAX_PLAN_EVENTS - 3, PlanGrowth::Submission));
        assert!(!plan_has_room(MAX_PLAN_EVENTS - 2, PlanGrowth::Submission));
        assert!(
            !plan_has_room(usize::MAX, PlanGrowth::Submission),
            "no overflow"
        );
        // Walking either growth from an empty plan, then closing it, never passes the bound.
        for growth in [PlanGrowth::Revision, PlanGrowth::Submission] {
            let mut n = 0;
            while plan_has_room(n, growth) {
                n += growth.events();
            }
            // Room is left for the closing event (n + 1 ≤ MAX_PLAN_EVENTS).
            assert!(n < MAX_PLAN_EVENTS, "{growth:?} {n}");
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

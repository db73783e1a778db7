//! The refusals every approving settlement passes through after its approval is admitted
//! ([`no_approval_without_consent`]): the rules in force, a timeout that may not approve, a
//! stopped plan ([`stopped_plan`]), a tool definition awaiting review ([`under_review`]), a
//! session that moved since the caller's check. Part of [`super`] (`decide.rs`).

use super::{Settle, approval_event_name};
use crate::db::{self, Conn};
use crate::error::DecideError;
use crate::plans;
use crate::record::ApprovalRecord;
use crate::seal::SealKey;
use assent_core::approval::Event;
use serde_json::json;

/// The refusals of an approving event `s` (an approve, a vote, an approving timeout) on
/// pending `rec`, each audited `decision.refused` for the caller to commit:
/// - a timeout approving what [`assent_core::grant::default_on_timeout`] never lets one
///   approve (irreversible, passkey, quorum, a trigger), or a call whose session took in more
///   since it was held ([`crate::session_risk::took_in_since_held`]): `NotApprover`. The sweep applies the
///   rule before it sends the event; this is the settlement's own check (defence in depth). Refused, not
///   turned into a rejection: the next sweep, reading the same terms, rejects it.
/// - a call held under a plan that has stopped ([`stopped_plan`]): `PlanStopped` (found by
///   review: an operator approved a held call of a cancelled plan; its token redeemed nothing).
/// - a call whose MCP tool's definition changed and awaits an operator's review
///   ([`crate::pins::pending_review`]): `ToolUnderReview` (found by review: an upstream that
///   changed a tool while a call of it was held had that call approved as shown, and run).
/// - a decision re-gated against the session that moved since ([`DecisionInput::session_seen`],
///   [`crate::session_risk::moved_since`]): `SessionChanged`.
/// - first, a call the rules in force ask more of than it was held under, or a decision
///   re-gated under other rules than those in force, for an operator holding `roles`
///   ([`crate::decision_input::rules_refusal`]): `RulesTightened`.
pub(super) fn no_approval_without_consent(
    tx: Conn<'_>,
    s: &Settle<'_>,
    (rec, roles): (&ApprovalRecord, Option<&[String]>),
    held: Option<crate::approval_seal::Holding>,
) -> Result<(), DecideError> {
    let name = approval_event_name(s.event);
    let asked = (s.input, roles, matches!(s.event, Event::Expire(_)));
    if let Some(why) = crate::decision_input::rules_refusal(s.rules, rec, asked, s.now) {
        s.audit(
            tx,
            "decision.refused",
            json!({"decision": name, "why": why}),
        )?;
        return Err(DecideError::RulesTightened(why));
    }
    let t = &rec.terms;
    // Nor one whose session took in more since it was held, read again here: the sweep's
    // check ran in its own transaction before (found by review: a result landing between).
    if let Event::Expire(d) = s.event
        && (d != assent_core::grant::default_on_timeout(t, d)
            || (d == assent_core::DefaultDecision::Approve
                && crate::session_risk::took_in_since_held(tx, rec)?))
    {
        let why = "a timeout never approves a call that is irreversible, needs a passkey or a quorum, was held by a trigger, or whose session took in more since it was held: its default on timeout is reject";
        let data = json!({"decision": name, "why": why, "irreversible": t.irreversible,
            "require_passkey": t.require_passkey, "quorum": t.quorum, "triggers": t.triggers});
        s.audit(tx, "decision.refused", data)?;
        return Err(DecideError::NotApprover(t.approvers.clone()));
    }
    if let Some((plan_id, status)) = stopped_plan(tx, rec, held, (s.plans, s.delegations))? {
        let why = format!(
            "the call was held under plan {plan_id}, which is {status} and runs no calls: it cannot be approved (deny it, or let it be cancelled)"
        );
        let data = json!({"decision": name, "why": why, "plan_id": plan_id, "plan_status": status});
        s.audit(tx, "decision.refused", data)?;
        return Err(DecideError::PlanStopped { plan_id, status });
    }
    if let Some((review, server, tool)) = under_review(tx, rec)? {
        let data = json!({"decision": name, "review_id": review, "server": server, "tool": tool,
            "why": "the tool's definition changed and awaits an operator's review"});
        s.audit(tx, "decision.refused", data)?;
        return Err(DecideError::ToolUnderReview {
            review,
            server,
            tool,
        });
    }
    if let Some(why) = crate::decision_input::seen_moved(tx, rec, s.input)? {
        let data = json!({"decision": name, "why": why});
        s.audit(tx, "decision.refused", data)?;
        return Err(DecideError::SessionChanged);
    }
    Ok(())
}

/// The plan (id, status) pending approval `rec` was held under when that plan's stop reaches
/// it ([`plans::plan_of_held`] under `keys`, the plans' seal key and the delegations: by the
/// plan's agent recorded with the call, or as the plan's delegate) and it runs no calls now,
/// or the call's terms do not hold their seal (`held`: their seal, read by the caller in this
/// transaction under the approval row's lock, [`crate::approval_seal::holding`]; `None` when
/// it did not hold); `None` otherwise, and for the plan's own Confirm (`target_type: plan`,
/// which moves the plan). What neither an operator nor a timeout may approve; the expiry
/// sweep rejects it.
pub(crate) fn stopped_plan(
    tx: Conn<'_>,
    rec: &ApprovalRecord,
    held: Option<crate::approval_seal::Holding>,
    keys: (&SealKey, &assent_core::policy::Delegations),
) -> db::Result<Option<(String, String)>> {
    if rec.target_type == "plan" {
        return Ok(None);
    }
    Ok(plans::plan_of_held(tx, held, keys)?.stopped())
}

/// The pending review `(id, server, tool)` of the changed definition of `rec`'s MCP tool that
/// holds its agent's calls ([`crate::pins::pending_review`]); `None` for a local tool. What
/// neither an operator nor a timeout may approve past; the expiry sweep rejects it.
pub(crate) fn under_review(
    tx: Conn<'_>,
    rec: &ApprovalRecord,
) -> db::Result<Option<(String, String, String)>> {
    let Some(server) = &rec.call.server else {
        return Ok(None);
    };
    let review = crate::pins::pending_review(tx, &rec.agent, server, &rec.call.tool)?;
    Ok(review.map(|id| (id, server.clone(), rec.call.tool.clone())))
}

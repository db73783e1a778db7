//! Wire shapes of an approval, with RFC 3339 times: assent's own record
//! ([`assent_api::approvals::Approval`]), seed 002's ApprovalRequest and Token
//! ([`ApprovalRequestDoc`], [`ApprovalToken`]; schemas in `docs/schemas/`), built from the
//! store's [`ApprovalRecord`]; and the MPLP Confirm object, which stays a `serde_json::Value`
//! (MPLP is not part of the `/v1` contract). It answers no request itself.

use crate::body::to_value;
use crate::wire;
use assent_api::approvals::{
    Approval, ApprovalRequestDoc, DecisionEntry, Schedule, ScheduledStep, Vote, Votes,
};
use assent_api::gate::Call;
use assent_api::tokens::ApprovalToken;
use assent_core::ApprovalStatus;
use assent_store::{ApprovalRecord, ConfirmContext};
use serde_json::{Value, json};

/// Unix milliseconds as RFC 3339 (UTC, with fractional seconds when non-zero): the store's,
/// so every time stamp the gateway writes has one form.
pub use assent_store::rfc3339;

/// The RFC 6902 patch from the proposed arguments to the operator's edited ones, when the
/// approval was edited (paths are relative to the arguments object; [`crate::diff::json_diff`]).
pub fn arguments_diff(a: &ApprovalRecord) -> Option<Value> {
    let e = a.edited.as_ref()?;
    Some(crate::diff::json_diff(&a.call.arguments, &e.arguments))
}

/// Whether the agent's call did not run because of this approval's outcome, and why
/// (seed 002 "TOOL_DENIED + reason").
fn denial(a: &ApprovalRecord) -> Option<String> {
    let last = a.decisions.last();
    let why = |d: &str| {
        last.and_then(|x| x.reason.clone())
            .map(|r| format!("{d}: {r}"))
            .unwrap_or_else(|| d.to_string())
    };
    let by_user = last.is_some_and(|d| d.actor.starts_with("user-of:"));
    match a.status {
        ApprovalStatus::Rejected if by_user => Some(why("denied by the agent's user")),
        ApprovalStatus::Rejected => Some(why("denied by an operator")),
        ApprovalStatus::Cancelled => Some(why("cancelled")),
        ApprovalStatus::Expired if !a.went_ahead() => Some(
            "no decision before the approval expired; its default decision (reject) applied".into(),
        ),
        _ => None,
    }
}

/// Seed 002 Token (`docs/schemas/approval-token.schema.json`) of a minted token.
pub fn approval_token(a: &ApprovalRecord) -> Option<ApprovalToken> {
    let t = a.token.as_ref()?;
    Some(ApprovalToken {
        token_id: t.token_id.clone(),
        approval_id: a.id.clone(),
        tool_call_hash: t.call_hash.clone(),
        expires_at: rfc3339(t.expires_at),
        single_use: true,
        scope: t.scope.clone(),
        issued_to_client_device_id: t.device_id.clone(),
    })
}

/// Seed 002 ApprovalRequest (`docs/schemas/approval-request.schema.json`); `diff` only when
/// the approval was edited or its target carries one, `suggestedAlternatives` only when there
/// are some.
pub fn approval_request(a: &ApprovalRecord) -> ApprovalRequestDoc {
    ApprovalRequestDoc {
        approval_id: a.id.clone(),
        session_id: a.session_id.clone(),
        run_id: a.run_id.clone(),
        tool_call_canonical: a.canonical.clone(),
        tool_call_hash: a.call_hash.clone(),
        human_summary: a.human_summary.clone(),
        risk_tier: a.terms.risk_tier,
        requested_at: rfc3339(a.requested_at),
        expires_at: rfc3339(a.expires_at),
        status: a.status,
        diff: arguments_diff(a).or_else(|| a.target_diff.clone()),
        suggested_alternatives: (!a.terms.suggested_alternatives.is_empty())
            .then(|| a.terms.suggested_alternatives.clone()),
    }
}

/// The approval's escalation schedule as the API shows it (issue 14 §3): each step's time
/// (RFC 3339), roles and whether it was taken, and the deadline.
pub fn schedule(a: &ApprovalRecord) -> Option<Schedule> {
    a.escalation_schedule.as_ref().map(|s| Schedule {
        steps: s
            .steps
            .iter()
            .enumerate()
            .map(|(i, st)| ScheduledStep {
                at: rfc3339(st.at),
                approvers: st.approvers.clone(),
                taken: i < a.escalation_steps,
            })
            .collect(),
        deadline: rfc3339(s.deadline),
    })
}

/// assent's approval record. `token` (the signed string) is given only to the agent that
/// asked; it binds `arguments` (the operator's edit when `arguments_changed`). `damaged` (the
/// unreadable stored columns) appears only when there are some; `diff` is the edit's patch
/// (`null` when it cannot be computed) or the target's; `code` and `reason` say why a call
/// will not run.
pub fn approval(a: &ApprovalRecord, token: Option<String>) -> Approval {
    let denial = denial(a);
    let (token, token_expires_at) = match (token, &a.token) {
        (Some(t), Some(info)) => (Some(t), Some(rfc3339(info.expires_at))),
        _ => (None, None),
    };
    Approval {
        id: a.id.clone(),
        status: a.status,
        agent: a.agent.clone(),
        session_id: a.session_id.clone(),
        run_id: a.run_id.clone(),
        device_id: a.device_id.clone(),
        on_behalf_of: a.on_behalf_of.clone(),
        call: Call {
            tool: a.call.tool.clone(),
            server: a.call.server.clone(),
            arguments: a.call.arguments.clone(),
        },
        call_hash: a.call_hash.clone(),
        canonical: a.canonical.clone(),
        terms: a.terms.clone(),
        human_summary: a.human_summary.clone(),
        risk_level: wire::api(&a.terms.risk_tier.risk_level()),
        escalated_at: a.escalated_at.map(rfc3339),
        decisions: a.decisions.iter().map(decision_entry).collect(),
        votes: votes(a),
        schedule: schedule(a),
        requested_at: rfc3339(a.requested_at),
        expires_at: rfc3339(a.expires_at),
        decided_at: a.decided_at.map(rfc3339),
        scope: wire::api(&a.scope),
        grant_id: a.grant_id.clone(),
        arguments_changed: a.edited.is_some(),
        target_type: a.target_type.clone(),
        target_id: a.target_id.clone(),
        diff: match &a.edited {
            Some(_) => Some(arguments_diff(a).unwrap_or(Value::Null)),
            None => a.target_diff.clone(),
        },
        damaged: a.damaged.clone(),
        arguments: a.edited.as_ref().map(|e| e.arguments.clone()),
        approved_call_hash: a.edited.as_ref().map(|e| e.call_hash.clone()),
        policy_set_sha256: a.policy_set_sha256.clone(),
        code: denial.is_some().then(|| "TOOL_DENIED".to_string()),
        reason: denial,
        approval_token: approval_token(a),
        token,
        token_expires_at,
    }
}

/// The votes of an approval that needs a quorum, with the approving ones tallied against the
/// quorum that applies now (widened after an escalation); `None` without a quorum.
fn votes(a: &ApprovalRecord) -> Option<Votes> {
    let (q, approvals) = a.quorum_tally()?;
    Some(Votes {
        cast: a
            .votes
            .iter()
            .map(|v| Vote {
                by: v.principal.clone(),
                decision: v.decision,
                roles: v.roles.clone(),
                reason: v.reason.clone(),
                at: rfc3339(v.at),
                passkey_signed: v.passkey.is_some(),
            })
            .collect(),
        approvals,
        required: q.required(),
    })
}

/// One recorded decision of an approval (`decisions[]`).
fn decision_entry(d: &assent_store::DecisionRecord) -> DecisionEntry {
    DecisionEntry {
        decision: d.decision,
        reason: d.reason.clone(),
        by: d.actor.clone(),
        at: rfc3339(d.at),
        default_applied: d.default_applied,
        passkey_signed: d.passkey.is_some(),
    }
}

/// Whether approval `rec`'s call is a held tool result (`result.TOOL`, [`crate::gate`]) its
/// agent may not be shown yet: not `approved`. Its `preview` (the result's first 2,048
/// characters) is what the hold withholds from the agent until an operator releases it.
pub fn withheld_result(rec: &ApprovalRecord) -> bool {
    rec.call.tool.starts_with("result.") && rec.status != ApprovalStatus::Approved
}

/// `rec` as its agent is shown it: a [`withheld_result`] has its arguments' `preview` set to
/// `null`, and `canonical` and `human_summary` made again from the arguments so masked
/// (`canonical` then no longer hashes to `call_hash`, which names the call as held); any other
/// approval unchanged. Found by review: an agent holding its key read a result held for its
/// size through `GET /v1/approvals/{id}` or the answer to cancelling it (its first 2,048
/// characters in `preview`, 120 in `human_summary`), with no operator deciding anything.
pub fn agent_view(mut rec: ApprovalRecord) -> ApprovalRecord {
    if !withheld_result(&rec) {
        return rec;
    }
    if let Some(preview) = rec.call.arguments.get_mut("preview") {
        *preview = Value::Null;
    }
    match assent_core::CanonicalCall::new(rec.call.clone()) {
        Ok(c) => {
            rec.human_summary =
                assent_core::summary::HumanSummary::generate(c.call(), c.arguments()).text;
            rec.canonical = c.canonical().to_string();
        }
        // Arguments that were canonical once are canonical masked; were they not, nothing
        // of them is shown.
        Err(_) => (rec.human_summary, rec.canonical) = (String::new(), String::new()),
    }
    rec
}

/// [`approval`] as a JSON value (keys sorted), for the bodies that embed it in a `Value`
/// (AAEP, MPLP, webhooks).
pub fn approval_json(a: &ApprovalRecord, token: Option<String>) -> Value {
    to_value(&approval(a, token))
}

/// MPLP decision status of one stored decision: approve → `approved`, deny → `rejected`,
/// cancel → `cancelled`, expiry → what its default decision implies (MPLP has no `expired`;
/// the reason says it expired).
fn mplp_decision_status(d: &assent_store::DecisionRecord) -> &'static str {
    use assent_store::Settlement;
    match (d.decision, d.default_applied) {
        (Settlement::Approve, _)
        | (Settlement::Expire, Some(assent_core::DefaultDecision::Approve)) => "approved",
        (Settlement::Cancel, _) => "cancelled",
        _ => "rejected",
    }
}

/// The MPLP Confirm `governance` block of an approval held under a recorded policy set
/// (`docs/conformance.md`): `lifecyclePhase` `review` while pending, `decided` after;
/// `truthDomain` `policy-set sha256:HEX` names the policy set that governed it; `locked` once
/// decided. `None` when no policy set was recorded (approvals held before migration 0010).
fn mplp_governance(a: &ApprovalRecord, ctx: &ConfirmContext) -> Option<Value> {
    let hash = ctx.policy_set_sha256.as_ref()?;
    let pending = a.status == ApprovalStatus::Pending;
    Some(json!({
        "lifecyclePhase": if pending { "review" } else { "decided" },
        "truthDomain": format!("policy-set sha256:{hash}"),
        "locked": !pending,
    }))
}

/// The approval as an MPLP Confirm object (`mplp-confirm.schema.json` v1.0.0): UUID v4 ids,
/// `meta.protocol_version`/`schema_version`, `target_type` (`other` for a tool call; its
/// `target_id` is the plan step when the call named one), `decisions[]`, `trace` (its
/// `attributes` carry the governance policies, the policy-set hash and the plan and step ids
/// recorded when the call was held), `governance` and the `confirm.*` trace `events` from the
/// audit chain.
pub fn mplp_confirm_json(a: &ApprovalRecord, events: &[Value], ctx: &ConfirmContext) -> Value {
    let status = match a.status {
        ApprovalStatus::Pending => "pending",
        ApprovalStatus::Approved => "approved",
        ApprovalStatus::Rejected => "rejected",
        ApprovalStatus::Cancelled => "cancelled",
        ApprovalStatus::Expired => {
            if a.went_ahead() {
                "approved"
            } else {
                "rejected"
            }
        }
    };
    let decisions: Vec<Value> = a
        .decisions
        .iter()
        .map(|d| {
            let reason = match (d.decision, d.default_applied, &d.reason) {
                (assent_store::Settlement::Expire, Some(def), _) => Some(format!(
                    "expired: no decision before {}; default decision `{}` applied",
                    rfc3339(a.expires_at),
                    def.as_str()
                )),
                (_, _, r) => r.clone(),
            };
            let mut v = json!({
                "decision_id": d.decision_id, "status": mplp_decision_status(d),
                "decided_by_role": d.actor, "decided_at": rfc3339(d.at),
            });
            if let Some(r) = reason {
                v["reason"] = json!(r);
            }
            v
        })
        .collect();
    let target_id = match (&ctx.step_id, a.target_type.as_str()) {
        (Some(step), "other") => step.as_str(),
        _ => a.target_id.as_str(),
    };
    let mut v = json!({
        "meta": {"protocol_version": "1.0.0", "schema_version": "1.0.0",
                 "created_at": rfc3339(a.requested_at), "created_by": "assent"},
        "confirm_id": a.id, "target_type": a.target_type, "target_id": target_id,
        "status": status, "requested_by_role": a.agent, "requested_at": rfc3339(a.requested_at),
        "reason": if a.terms.message.is_empty() { a.human_summary.clone() } else { a.terms.message.clone() },
        "decisions": decisions,
        "trace": {"trace_id": a.trace_id, "span_id": a.span_id,
                  "attributes": {"agent": a.agent, "session_id": a.session_id, "tool": a.call.tool,
                                 "server": a.call.server, "call_hash": a.call_hash}},
    });
    let attributes = &mut v["trace"]["attributes"];
    if ctx.policy_set_sha256.is_some() {
        attributes["governance_policies"] = json!(ctx.policies);
        attributes["policy_set_sha256"] = json!(ctx.policy_set_sha256);
    }
    for (k, id) in [("plan_id", &ctx.plan_id), ("step_id", &ctx.step_id)] {
        if let Some(id) = id {
            attributes[k] = json!(id);
        }
    }
    if let Some(g) = mplp_governance(a, ctx) {
        v["governance"] = g;
    }
    if !events.is_empty() {
        v["events"] = json!(events);
    }
    v
}

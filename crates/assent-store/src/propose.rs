//! Proposing a call (AAEP §6.1, seed 002): [`Proposal`] in, [`Proposed`] out. Gating one
//! call atomically (plan and tool-review blocks, the verdict, a covering grant, joining an
//! identical pending call, the pending cap), recording outright verdicts, and inserting a held
//! approval with its audit, MPLP and AAEP records. Not deciding it (`decide.rs`).

use crate::aaep;
use crate::audit;
use crate::confirm::{self, ConfirmContext};
use crate::error::StoreError;
use crate::kit::to_json;
use crate::mplp::mplp_event;
use crate::plans;
use crate::record::{ApprovalRecord, read_approval};
use crate::store::Store;
use crate::tokens::find_grant;
use crate::usage::{pending_of, prior_calls};
use assent_core::gatekeeper::Verdict;
use assent_core::summary::HumanSummary;
use assent_core::triggers::PriorCall;
use assent_core::{ToolCall, VerdictKind};
use rusqlite::{OptionalExtension, TransactionBehavior, params};
use serde_json::{Value, json};

/// The ids of the governance policies behind a verdict ([`Proposal::governed_by`]).
pub type PoliciesOf<'a> = dyn Fn(&Verdict) -> Vec<String> + 'a;

/// A tool call proposed by an agent, ready for [`Store::propose`].
pub struct Proposal<'a> {
    /// The agent id (authenticated by the caller).
    pub agent: &'a str,
    /// Its session id.
    pub session_id: &'a str,
    /// Optional run id.
    pub run_id: Option<&'a str>,
    /// Optional client device id; tokens are bound to it.
    pub device_id: Option<&'a str>,
    /// MPLP trace id (UUID v4) the agent sent; generated when `None`.
    pub trace_id: Option<&'a str>,
    /// The call.
    pub call: &'a ToolCall,
    /// Canonical JSON of its arguments.
    pub canonical_arguments: &'a str,
    /// Canonical JSON of the call.
    pub canonical: &'a str,
    /// SHA-256 of `canonical`.
    pub call_hash: &'a str,
    /// Unix milliseconds.
    pub now: i64,
    /// How long a new approval waits (ms), given the verdict.
    pub timeout_ms: &'a dyn Fn(&Verdict) -> i64,
    /// Per-agent cap on pending approvals.
    pub max_pending: u64,
    /// The MPLP Confirm target when this is not a plain tool call (a submitted plan, a
    /// context, …). Such proposals are never covered by grants; a `plan` target must be a
    /// `draft` of the agent and becomes `proposed` with the held approval.
    pub target: Option<ConfirmTarget<'a>>,
    /// MPLP plan and step the call belongs to: blocked while either has a pending Confirm or
    /// the plan is not approved (the Gatekeeper duty of seed 000).
    pub plan_id: Option<&'a str>,
    /// See `plan_id`.
    pub step_id: Option<&'a str>,
    /// The ids of the governance policies behind a confirm verdict, recorded with a held
    /// call ([`ConfirmContext::policies`]); `None` records none.
    pub governed_by: Option<&'a PoliciesOf<'a>>,
    /// SHA-256 of the governance policy set the verdict came from
    /// ([`ConfirmContext::policy_set_sha256`]).
    pub policy_set_sha256: Option<&'a str>,
}

/// What [`Store::propose`] did.
#[derive(Debug, Clone)]
pub enum Proposed {
    /// Allowed outright (audited `call.allowed`).
    Allowed,
    /// Denied (audited `call.denied`).
    Denied,
    /// A grant covers it: an approved approval with its own token (audited `grant.used`).
    Granted(Box<ApprovalRecord>),
    /// Held: a new pending approval, or (`joined`) the pending one for the identical call.
    Held {
        /// The approval.
        approval: Box<ApprovalRecord>,
        /// True when an identical call of the same session was already pending (AAEP §6.1).
        joined: bool,
    },
    /// The agent has `limit` pending approvals already (`429 TOO_MANY_PENDING`).
    TooManyPending {
        /// The cap.
        limit: u64,
    },
}

/// What the caller proposes to hold for a human.
#[derive(Debug, Clone)]
pub struct NewApproval<'a> {
    /// The proposing agent's id.
    pub agent: &'a str,
    /// Its session id.
    pub session_id: &'a str,
    /// The call.
    pub call: &'a ToolCall,
    /// The canonical JSON of its arguments ([`ToolCall::canonical_arguments`]).
    pub canonical_arguments: &'a str,
    /// Its canonical JSON.
    pub canonical: &'a str,
    /// Its `call_hash`.
    pub call_hash: &'a str,
    /// The gatekeeper's confirm verdict (message, tier, reasons, default).
    pub verdict: &'a Verdict,
    /// Unix milliseconds.
    pub now: i64,
    /// Unix milliseconds.
    pub expires_at: i64,
    /// Optional run id.
    pub run_id: Option<&'a str>,
    /// Optional client device id.
    pub device_id: Option<&'a str>,
    /// MPLP trace id (UUID v4) the agent sent; generated when `None`.
    pub trace_id: Option<&'a str>,
    /// The MPLP Confirm target when it is not the tool call itself (a plan, context, …).
    pub target: Option<ConfirmTarget<'a>>,
    /// What governed the call (policies, policy-set hash, plan and step), stored with it.
    pub context: ConfirmContext,
}

/// The MPLP Confirm target of an approval that is not a plain tool call (MPLP Confirm §2.3):
/// `target_type` `plan`, `context`, `trace`, `extension` or `other`, its UUID v4 `target_id`,
/// and the RFC 6902 diff from its previous submission.
#[derive(Debug, Clone, Copy)]
pub struct ConfirmTarget<'a> {
    /// MPLP `target_type`.
    pub target_type: &'a str,
    /// MPLP `target_id` (UUID v4).
    pub target_id: &'a str,
    /// RFC 6902 patch from the previous submission, when this modifies an earlier one.
    pub diff: Option<&'a Value>,
}

impl Store {
    /// Audits a proposal that was allowed or denied outright (`call.allowed` / `call.denied`).
    /// The caller forwards an allowed call only after this returns `Ok` (fail closed).
    pub fn record_verdict(
        &self,
        agent: &str,
        session_id: &str,
        call: &ToolCall,
        call_hash: &str,
        verdict: &Verdict,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        audit::append(
            &tx,
            now,
            &format!(
                "call.{}",
                match verdict.kind {
                    assent_core::VerdictKind::Allow => "allowed",
                    assent_core::VerdictKind::Deny => "denied",
                    assent_core::VerdictKind::Confirm => "held",
                }
            ),
            None,
            agent,
            &json!({"session_id": session_id, "call": call, "call_hash": call_hash,
                    "verdict": verdict.kind, "reasons": verdict.reasons, "risk_tier": verdict.risk_tier}),
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Stores a new pending approval with its `approval.requested` audit record.
    pub fn create_approval(&self, n: &NewApproval<'_>) -> Result<ApprovalRecord, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let id = insert_approval(&tx, n, "pending")?;
        let rec = read_approval(&tx, &id)?.expect("just inserted");
        tx.commit()?;
        Ok(rec)
    }

    /// Gates one proposed call atomically (AAEP §6.1, seed 002): reads the session's earlier
    /// calls, asks `evaluate` for the verdict with them, and in the same transaction
    /// - denies (audited `call.denied`) or allows (`call.allowed`);
    /// - for a confirm verdict without threshold or scope triggers, lets a matching grant
    ///   through as an approved approval with its own token (`grant.used`);
    /// - joins an identical pending call of the same session instead of holding it twice;
    /// - refuses when the agent already has `max_pending` pending approvals
    ///   (`call.refused`), else holds the call as a new pending approval.
    ///
    /// Allowed, granted and held calls count toward later thresholds.
    pub fn propose(
        &self,
        p: &Proposal<'_>,
        evaluate: impl FnOnce(&[PriorCall]) -> Verdict,
    ) -> Result<(Verdict, Proposed), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let plan = p.target.filter(|t| t.target_type == "plan");
        if let Some(t) = plan {
            match plans::read_plan(&tx, t.target_id)? {
                Some(pl) if pl.agent == p.agent && pl.status == "draft" => {}
                Some(pl) if pl.agent == p.agent => {
                    return Err(StoreError::Invalid(format!(
                        "plan {} is {}; only a draft can be submitted",
                        t.target_id, pl.status
                    )));
                }
                _ => return Err(StoreError::Invalid(format!("no plan `{}`", t.target_id))),
            }
        }
        let mut blocked = plans::plan_block(&tx, p.plan_id, p.step_id)?;
        if blocked.is_none()
            && let Some(server) = &p.call.server
        {
            let review: Option<String> = tx
                .prepare_cached("SELECT id FROM tool_reviews WHERE server = ?1 AND tool = ?2 AND status = 'pending' LIMIT 1")?
                .query_row(params![server, p.call.tool], |r| r.get(0))
                .optional()?;
            blocked = review.map(|id| {
                format!(
                    "the definition of {server}/{} changed and awaits an operator's review ({id}; assent tools pending)",
                    p.call.tool
                )
            });
        }
        let prior = prior_calls(&tx, p.agent, p.session_id)?;
        let mut verdict = evaluate(&prior);
        if let Some(why) = blocked
            && verdict.kind != VerdictKind::Deny
        {
            verdict.kind = VerdictKind::Deny;
            verdict.reasons.push(assent_core::Reason {
                file: String::new(),
                rule: "mplp plan".into(),
                text: why.clone(),
            });
            verdict.message = why;
        }
        let call_data = |extra: Value| {
            let mut d = json!({"session_id": p.session_id, "run_id": p.run_id, "device_id": p.device_id,
                "call": p.call, "call_hash": p.call_hash, "verdict": verdict.kind, "reasons": verdict.reasons,
                "risk_tier": verdict.risk_tier, "triggers": verdict.triggers});
            if let (Value::Object(d), Value::Object(e)) = (&mut d, extra) {
                d.extend(e);
            }
            d
        };
        let add_usage = |approval_id: Option<&str>| -> rusqlite::Result<()> {
            tx.prepare_cached("INSERT INTO usage (agent, session_id, tool, server, at, arguments, approval_id) VALUES (?1,?2,?3,?4,?5,?6,?7)")?
                .execute(params![p.agent, p.session_id, p.call.tool, p.call.server, p.now, p.canonical_arguments, approval_id])?;
            Ok(())
        };
        let outcome = match verdict.kind {
            VerdictKind::Deny => {
                audit::append(
                    &tx,
                    p.now,
                    "call.denied",
                    None,
                    p.agent,
                    &call_data(json!({})),
                )?;
                Proposed::Denied
            }
            VerdictKind::Allow => {
                audit::append(
                    &tx,
                    p.now,
                    "call.allowed",
                    None,
                    p.agent,
                    &call_data(json!({})),
                )?;
                add_usage(None)?;
                Proposed::Allowed
            }
            VerdictKind::Confirm => {
                // A grant never stands in for the consent an irreversible call needs each time.
                let grant =
                    if verdict.triggers.is_empty() && p.target.is_none() && !verdict.irreversible {
                        find_grant(&tx, p.agent, p.session_id, p.call, p.call_hash, p.now)?
                    } else {
                        None
                    };
                let joined: Option<String> = tx
                    .prepare_cached("SELECT id FROM approvals WHERE agent = ?1 AND session_id = ?2 AND call_hash = ?3 AND status = 'pending' ORDER BY requested_at LIMIT 1")?
                    .query_row(params![p.agent, p.session_id, p.call_hash], |r| r.get(0))
                    .optional()?;
                let pending = pending_of(&tx, p.agent)?;
                let n = NewApproval {
                    agent: p.agent,
                    session_id: p.session_id,
                    call: p.call,
                    canonical_arguments: p.canonical_arguments,
                    canonical: p.canonical,
                    call_hash: p.call_hash,
                    verdict: &verdict,
                    now: p.now,
                    expires_at: p.now.saturating_add((p.timeout_ms)(&verdict)),
                    run_id: p.run_id,
                    device_id: p.device_id,
                    trace_id: p.trace_id,
                    target: p.target,
                    context: ConfirmContext {
                        policies: p.governed_by.map(|f| f(&verdict)).unwrap_or_default(),
                        policy_set_sha256: p.policy_set_sha256.map(str::to_string),
                        plan_id: p.plan_id.map(str::to_string),
                        step_id: p.step_id.map(str::to_string),
                    },
                };
                if let Some((gid, scope)) = grant {
                    let id = insert_approval(&tx, &n, "approved")?;
                    let actor = format!("grant:{gid}");
                    tx.prepare_cached("UPDATE approvals SET decided_at = ?2, scope = ?3, grant_id = ?4 WHERE id = ?1")?
                        .execute(params![id, p.now, scope, gid])?;
                    let decision_id = uuid::Uuid::new_v4().to_string();
                    let why = format!("covered by grant {gid} (scope {scope})");
                    tx.prepare_cached("INSERT INTO decisions (approval_id, decision, reason, actor, at, decision_id) VALUES (?1,'approve',?2,?3,?4,?5)")?
                        .execute(params![id, why, actor, p.now, decision_id])?;
                    let trace: String = tx
                        .prepare_cached("SELECT trace_id FROM approvals WHERE id = ?1")?
                        .query_row([&id], |r| r.get(0))?;
                    mplp_event(
                        &tx,
                        p.now,
                        "confirm.approved",
                        &id,
                        &trace,
                        &actor,
                        json!({"confirm_id": id, "decision_id": decision_id, "status": "approved", "decided_by_role": actor, "reason": why}),
                    )?;
                    audit::append(
                        &tx,
                        p.now,
                        "grant.used",
                        Some(&id),
                        &actor,
                        &json!({"grant_id": gid, "scope": scope, "call_hash": p.call_hash}),
                    )?;
                    self.mint(
                        &tx,
                        &id,
                        p.agent,
                        p.call_hash,
                        &scope,
                        p.device_id,
                        &actor,
                        p.now,
                    )?;
                    add_usage(Some(&id))?;
                    Proposed::Granted(Box::new(read_approval(&tx, &id)?.expect("inserted")))
                } else if let Some(id) = joined {
                    audit::append(
                        &tx,
                        p.now,
                        "call.held",
                        Some(&id),
                        p.agent,
                        &call_data(json!({"joined": true})),
                    )?;
                    Proposed::Held {
                        approval: Box::new(read_approval(&tx, &id)?.expect("exists")),
                        joined: true,
                    }
                } else if pending >= p.max_pending {
                    audit::append(
                        &tx,
                        p.now,
                        "call.refused",
                        None,
                        p.agent,
                        &call_data(
                            json!({"why": "too many pending approvals", "pending": pending, "limit": p.max_pending}),
                        ),
                    )?;
                    Proposed::TooManyPending {
                        limit: p.max_pending,
                    }
                } else {
                    let id = insert_approval(&tx, &n, "pending")?;
                    add_usage(Some(&id))?;
                    if let Some(t) = plan {
                        tx.prepare_cached(
                            "UPDATE plans SET confirm_id = ?2, submitted = ?3 WHERE plan_id = ?1",
                        )?
                        .execute(params![
                            t.target_id,
                            id,
                            p.canonical_arguments
                        ])?;
                        plans::transition(
                            &tx,
                            t.target_id,
                            "proposed",
                            "plan.submitted",
                            p.agent,
                            json!({"confirm_id": id, "diff": t.diff}),
                            p.now,
                        )?;
                    }
                    Proposed::Held {
                        approval: Box::new(read_approval(&tx, &id)?.expect("inserted")),
                        joined: false,
                    }
                }
            }
        };
        tx.commit()?;
        Ok((verdict, outcome))
    }
}

/// Inserts an approval row with `status` and its `approval.requested` audit record; returns
/// its id. The human summary is generated from, and verified against, the canonical arguments.
fn insert_approval(
    tx: &rusqlite::Transaction<'_>,
    n: &NewApproval<'_>,
    status: &str,
) -> Result<String, StoreError> {
    let id = uuid::Uuid::new_v4().to_string();
    let args = n.canonical_arguments;
    let v = n.verdict;
    let summary = HumanSummary::generate(n.call, args);
    summary
        .verify(args)
        .map_err(|e| StoreError::Invalid(format!("human summary check failed: {e}")))?;
    let mut rules: Vec<String> = v
        .reasons
        .iter()
        .map(|r| format!("{}#{}", r.file, r.rule))
        .collect();
    rules.sort();
    let group_key = format!(
        "{}|{}|{}|{}",
        n.agent,
        n.call.server.as_deref().unwrap_or(""),
        n.call.tool,
        rules.join(",")
    );
    let (esc_to, esc_after) = match &v.escalation {
        Some(e) => (
            serde_json::to_string(&e.escalate_to).expect("roles"),
            Some(i64::try_from(e.after_seconds.saturating_mul(1000)).unwrap_or(i64::MAX)),
        ),
        None => ("[]".to_string(), None),
    };
    let trace_id = n
        .trace_id
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let span_id = uuid::Uuid::new_v4().to_string();
    let (target_type, target_id, diff) = match &n.target {
        Some(t) => (
            t.target_type,
            t.target_id.to_string(),
            t.diff.map(|d| d.to_string()),
        ),
        None => ("other", uuid::Uuid::new_v4().to_string(), None),
    };
    tx.prepare_cached("INSERT INTO approvals (id, agent, session_id, tool, server, arguments, canonical, call_hash, message, risk_tier, irreversible, reasons, approvers, default_decision, requested_at, expires_at, status,
            run_id, device_id, group_key, human_summary, triggers, suggested_alternatives, escalate_to, escalate_after_ms, output_bytes, trace_id, span_id, target_id, target_type, target_diff, in_client, side_effects, rollback, dry_run_tool, redact)
         VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23,?24,?25,?26,?27,?28,?29,?30,?31,?32,?33,?34,?35,?36)")?.execute(
        params![id, n.agent, n.session_id, n.call.tool, n.call.server, args, n.canonical, n.call_hash, v.message,
                v.risk_tier.as_str(), v.irreversible, to_json(&v.reasons), to_json(&v.approvers), v.default_decision.as_str(), n.now, n.expires_at, status,
                n.run_id, n.device_id, group_key, summary.text, to_json(&v.triggers), to_json(&v.suggested_alternatives), esc_to, esc_after,
                v.output_bytes.map(|b| b.min(i64::MAX as u64) as i64), trace_id, span_id, target_id, target_type, diff, v.in_client_approval,
                to_json(&v.side_effects), to_json(&v.rollback), v.dry_run_tool, to_json(&v.redact)],
    )?;
    audit::append(
        tx,
        n.now,
        "approval.requested",
        Some(&id),
        n.agent,
        &json!({"session_id": n.session_id, "run_id": n.run_id, "device_id": n.device_id, "call": n.call,
                "call_hash": n.call_hash, "verdict": "confirm", "reasons": v.reasons, "risk_tier": v.risk_tier,
                "irreversible": v.irreversible, "message": v.message, "expires_at": n.expires_at,
                "default_decision": v.default_decision, "triggers": v.triggers}),
    )?;
    confirm::record(tx, &id, &n.context)?;
    // A tool call of a plan step is shown with the step as its MPLP target (see
    // `docs/conformance.md`); the stored target id stays the call's own.
    let shown_target = match (&n.context.step_id, target_type) {
        (Some(step), "other") => step.clone(),
        _ => target_id.clone(),
    };
    mplp_event(
        tx,
        n.now,
        "confirm.requested",
        &id,
        &trace_id,
        n.agent,
        json!({"confirm_id": id, "target_type": target_type, "target_id": shown_target, "requested_by_role": n.agent}),
    )?;
    if status == "pending" {
        // AAEP §6.2: a fresh reply token, stored so it stays unique and single-use across
        // restarts; the confirmation event is written with the approval.
        let token = aaep::random_id("rpl_");
        tx.prepare_cached("UPDATE approvals SET reply_token = ?2 WHERE id = ?1")?
            .execute(params![id, token])?;
        let rec = read_approval(tx, &id)?.expect("just inserted");
        aaep::emit(
            tx,
            &aaep::awaiting_confirmation(&rec, &token),
            None,
            Some(&id),
            n.now,
        )?;
    }
    Ok(id)
}

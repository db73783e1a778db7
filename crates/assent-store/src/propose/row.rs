//! The `approvals` row of a new approval ([`super::insert_approval`]): the values generated
//! rather than proposed ([`Row`]), its similarity key ([`group_key`]) and its `INSERT`
//! ([`insert_row`]).

use super::Proposal;
use crate::db::{self, Conn};
use crate::kit::to_json;
use crate::params;
use assent_core::escalation::{self, Escalation};
use assent_core::gatekeeper::Verdict;
use assent_core::quorum::Quorum;

/// The values of a new approval row that are generated rather than proposed.
pub(super) struct Row<'a> {
    pub(super) id: String,
    /// The first wait's end: the first escalation step, else the deadline.
    pub(super) expires_at: i64,
    /// When the escalation steps happen ([`escalation::schedule`]).
    pub(super) schedule: Option<escalation::Schedule>,
    pub(super) trace_id: String,
    pub(super) target_type: &'a str,
    pub(super) target_id: String,
    pub(super) summary: String,
}

/// Approvals with the same key are "similar": same agent, server, tool and (sorted) rules.
fn group_key(p: &Proposal<'_>, v: &Verdict) -> String {
    let mut rules: Vec<String> = v
        .terms
        .reasons
        .iter()
        .map(|r| format!("{}#{}", r.file, r.rule))
        .collect();
    rules.sort();
    format!(
        "{}|{}|{}|{}",
        p.agent,
        p.call.server.as_deref().unwrap_or(""),
        p.call.tool,
        rules.join(",")
    )
}

/// The `INSERT INTO approvals` of [`super::insert_approval`].
pub(super) fn insert_row(
    tx: Conn<'_>,
    p: &Proposal<'_>,
    v: &Verdict,
    row: &Row<'_>,
    (status, reply_token): (&str, Option<&str>),
) -> db::Result<()> {
    let escalation = v.terms.escalation.as_ref().map(to_json::<Escalation>);
    let schedule = row.schedule.as_ref().map(to_json::<escalation::Schedule>);
    let diff = p.target.and_then(|t| t.diff).map(|d| d.to_string());
    tx.prepare_cached("INSERT INTO approvals (id, agent, session_id, tool, server, arguments, canonical, call_hash, message, risk_tier, irreversible, reasons, approvers, default_decision, requested_at, expires_at, status,
            run_id, device_id, group_key, human_summary, triggers, suggested_alternatives, escalate_to, escalation, escalation_schedule, output_bytes, trace_id, span_id, target_id, target_type, target_diff, in_client, side_effects, rollback, dry_run_tool, redact, quorum, on_behalf_of, separation_of_duties, require_passkey, traceparent, reply_token)
         VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23,'[]',?24,?25,?26,?27,?28,?29,?30,?31,?32,?33,?34,?35,?36,?37,?38,?39,?40,?41,?42)")?.execute(
        params![row.id, p.agent, p.session_id, p.call.tool, p.call.server, p.canonical_arguments, p.canonical, p.call_hash, v.terms.message,
                v.terms.risk_tier.as_str(), v.terms.irreversible, to_json(&v.terms.reasons), to_json(&v.terms.approvers), v.terms.default_decision.as_str(), p.now, row.expires_at, status,
                p.run_id, p.device_id, group_key(p, v), row.summary, to_json(&v.terms.triggers), to_json(&v.terms.suggested_alternatives), escalation, schedule,
                v.terms.output_bytes.map(|b| b.min(i64::MAX as u64) as i64), row.trace_id, uuid::Uuid::new_v4().to_string(), row.target_id, row.target_type, diff, v.terms.in_client_approval,
                to_json(&v.terms.side_effects), to_json(&v.terms.rollback), v.terms.dry_run_tool, to_json(&v.terms.redact),
                v.terms.quorum.as_ref().map(to_json::<Quorum>), p.on_behalf_of, v.terms.separation_of_duties,
                v.terms.require_passkey, p.traceparent, reply_token],
    )?;
    Ok(())
}

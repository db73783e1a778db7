//! Learning samples (MPLP Confirm module §5, seed 001): every settled Confirm is a labelled
//! example of what a person allowed or refused. One sample per decided approval, in the shape
//! of the MPLP learning schemas (`learning/mplp-learning-sample-core.schema.json`; a plan's
//! Confirm also fits `mplp-learning-sample-intent.schema.json`):
//!
//! - a plan: `sample_family: intent_resolution`, input `intent_id` (the plan id) and
//!   `raw_request_summary` (its objective), output `final_intent_summary`, `plan_id`,
//!   `plan_step_count`, `plan_structure` (the steps) and `resolution_quality_label`;
//! - a tool call or another target: `sample_family: confirm_decision`, input the exact call
//!   (tool, server, arguments, `call_hash`), state the gatekeeper's view (risk tier, reasons,
//!   triggers), output the outcome (status, decision, who, scope, the edited arguments).
//!
//! Both carry the seed's `feedback` (`source`, `type`, `quality_label`, `details`) and a `meta`
//! with `human_feedback_label` and the MPLP `confirm.*` event ids. The sample id is the id of
//! the deciding MPLP decision, so exporting twice gives the same ids.

use crate::db::{self, Conn};
use crate::error::StoreError;
use crate::kit::rfc3339;
use crate::record::{ApprovalRecord, read_approval};
use crate::sql;
use crate::sql::lite;
use serde_json::{Value, json};
use std::path::Path;

fn sample(conn: Conn<'_>, a: &ApprovalRecord) -> db::Result<Option<Value>> {
    let Some(last) = a.decisions.last() else {
        return Ok(None);
    };
    let approved = a.went_ahead();
    let (source, kind, label) = match last.decision.as_str() {
        "cancel" => ("user", "cancellation", "not_reviewed"),
        "expire" => (
            "timeout",
            if approved { "approval" } else { "rejection" },
            "not_reviewed",
        ),
        "approve" if last.actor.starts_with("grant:") => ("grant", "approval", "approved"),
        "approve" => ("user", "approval", "approved"),
        _ => ("user", "rejection", "rejected"),
    };
    let quality = match (kind, label) {
        (_, "not_reviewed") => "unknown",
        ("approval", _) => "good",
        _ => "poor",
    };
    // The records' `event_id`s, read in Rust (SQLite's `json_extract` has no portable form);
    // the `kind` term as the partial index `audit_approval` has it (migration 0031).
    let events: Vec<String> = sql::json_values(
        conn,
        "SELECT data FROM audit WHERE approval_id = ?1 AND kind LIKE 'confirm.%' ORDER BY seq",
        [&a.id],
    )?
    .iter()
    .filter_map(|d| d["event_id"].as_str().map(str::to_string))
    .collect();
    let feedback = json!({"source": source, "type": kind, "quality_label": quality,
                          "details": last.reason, "decided_by": last.actor});
    let meta = json!({"source_flow_id": "assent.confirm", "source_event_ids": events,
                      "human_feedback_label": label, "approval_id": a.id, "trace_id": a.trace_id,
                      "target_type": a.target_type, "target_id": a.target_id});
    let created = rfc3339(a.decided_at.unwrap_or(last.at));
    // An export leaves the gateway: a rule's `redact` paths are masked.
    let r = a.redactor();
    if a.target_type == "plan" {
        let args = r.arguments(&a.call.arguments);
        let steps = &args["steps"];
        return Ok(Some(json!({
            "sample_id": last.decision_id, "sample_family": "intent_resolution",
            "created_at": created,
            "input": {"intent_id": a.target_id, "raw_request_summary": args["objective"],
                      "intent_text": args["objective"],
                      "context": {"context_id": args["context_id"]}},
            "state": {"existing_plan_count": 0, "diff_from_previous": a.target_diff},
            "output": {"final_intent_summary": args["title"], "plan_id": a.target_id,
                       "plan_step_count": steps.as_array().map_or(0, Vec::len),
                       "plan_structure": steps,
                       "resolution_quality_label": match quality { "good" => "good", "poor" => "bad", _ => "unknown" }},
            "feedback": feedback, "meta": meta,
        })));
    }
    let edited = a.edited.as_ref().map(|e| r.arguments(&e.arguments));
    Ok(Some(json!({
        "sample_id": last.decision_id, "sample_family": "confirm_decision",
        "created_at": created,
        "input": {"agent": a.agent, "session_id": a.session_id, "tool": a.call.tool,
                  "server": a.call.server, "arguments": r.arguments(&a.call.arguments), "call_hash": a.call_hash,
                  "message": r.text(&a.terms.message), "human_summary": r.summary(&a.call)},
        "state": {"risk_tier": a.terms.risk_tier, "irreversible": a.terms.irreversible,
                  // Reasons quote the clause with the argument's value: masked too.
                  "reasons": a.terms.reasons.iter().map(|x| json!({"file": x.file, "rule": x.rule, "text": r.text(&x.text)})).collect::<Vec<_>>(),
                  "triggers": a.terms.triggers, "approvers": a.terms.approvers,
                  "default_decision": a.terms.default_decision},
        "output": {"status": a.status, "decision": last.decision, "decided_by": last.actor,
                   "scope": a.scope, "arguments_changed": a.edited.is_some(),
                   "arguments": edited.unwrap_or_else(|| r.arguments(&a.call.arguments)),
                   "approved_call_hash": a.edited.as_ref().map_or(a.call_hash.as_str(), |e| e.call_hash.as_str())},
        "feedback": feedback, "meta": meta,
    })))
}

/// Every settled approval as a learning sample, oldest decision first.
pub(crate) fn samples(conn: Conn<'_>) -> db::Result<Vec<Value>> {
    let ids: Vec<String> = sql::column(
        conn,
        "SELECT id FROM approvals WHERE status != 'pending' ORDER BY decided_at NULLS FIRST, rowid",
        [],
    )?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(a) = read_approval(conn, &id)?
            && let Some(s) = sample(conn, &a)?
        {
            out.push(s);
        }
    }
    Ok(out)
}

impl crate::store::Store {
    /// Every settled approval as an MPLP learning sample (see the module documentation), read
    /// in one snapshot beside the writer (`Store::aside`). Found by review: it held the
    /// writer's connection for the whole history, stalling every proposal while it ran.
    pub fn learning_samples(&self) -> Result<Vec<Value>, StoreError> {
        self.aside(samples)
    }
}

/// [`crate::Store::learning_samples`] of the database in `data_dir`, opened read-only (the
/// gateway may keep running).
pub fn learning_samples_offline(data_dir: &Path) -> Result<Vec<Value>, StoreError> {
    Ok(samples(lite(&crate::open::open_read_only(data_dir)?))?)
}

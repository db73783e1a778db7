//! The MPLP trace event of a Confirm (`common/events.schema.json`: UUID v4 `event_id`, dotted
//! `event_type`, `source` `assent.confirm`, `timestamp`, `trace_id`, `data`), linking the
//! Confirm to its trace (MPLP evidence chain, seed 000 §4.2). A pure function of the store's
//! [`MplpEvent`]; appending it to the audit chain is the store's, serving the Confirm object
//! is [`crate::formats`].

use assent_store::{ConfirmEvent, MplpEvent, rfc3339};
use serde_json::{Value, json};

/// The MPLP trace event JSON of `e`, with a fresh `event_id`. Its `data` carries the
/// Confirm's fields and, when the call named an MPLP plan or step, `plan_id`/`step_id`.
pub fn render(e: &MplpEvent<'_>) -> Value {
    let mut data = match e.confirm {
        ConfirmEvent::Requested {
            confirm_id,
            target_type,
            target_id,
            requested_by_role,
        } => json!({"confirm_id": confirm_id, "target_type": target_type, "target_id": target_id,
                    "requested_by_role": requested_by_role}),
        ConfirmEvent::Decided {
            confirm_id,
            decision_id,
            status,
            decided_by_role,
            reason,
        } => json!({"confirm_id": confirm_id, "decision_id": decision_id, "status": status,
                    "decided_by_role": decided_by_role, "reason": reason}),
    };
    for (k, v) in [("plan_id", e.plan_id), ("step_id", e.step_id)] {
        if let Some(v) = v {
            data[k] = json!(v);
        }
    }
    json!({
        "event_id": uuid::Uuid::new_v4().to_string(), "event_type": e.event_type(), "source": "assent.confirm",
        "timestamp": rfc3339(e.at), "trace_id": e.trace_id, "data": data,
    })
}

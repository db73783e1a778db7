//! MPLP trace events of a Confirm (`confirm.requested`, `confirm.approved`, …): appended to
//! the audit chain with the approval's trace id, and read back for `GET …/mplp`. Not the
//! decision that causes them.

use crate::audit;
use crate::confirm;
use crate::error::StoreError;
use crate::kit::rfc3339;
use crate::store::Store;
use serde_json::{Value, json};

/// Appends an MPLP trace event (`common/events.schema.json`: UUID v4 `event_id`, dotted
/// `event_type`, `source`, `timestamp`, `trace_id`, `data`) to the audit chain with `kind` =
/// `event_type`, linking the Confirm to its trace (MPLP evidence chain, seed 000 §4.2). The
/// `data` of an approval whose call named an MPLP plan or step carries `plan_id`/`step_id`.
pub(crate) fn mplp_event(
    tx: &rusqlite::Transaction<'_>,
    now: i64,
    event_type: &str,
    approval_id: &str,
    trace_id: &str,
    actor: &str,
    mut data: Value,
) -> rusqlite::Result<()> {
    let ctx = confirm::read(tx, approval_id)?;
    if let Value::Object(d) = &mut data {
        for (k, v) in [("plan_id", ctx.plan_id), ("step_id", ctx.step_id)] {
            if let Some(v) = v {
                d.insert(k.into(), Value::String(v));
            }
        }
    }
    let ev = json!({
        "event_id": uuid::Uuid::new_v4().to_string(), "event_type": event_type, "source": "assent.confirm",
        "timestamp": rfc3339(now), "trace_id": trace_id, "data": data,
    });
    audit::append(tx, now, event_type, Some(approval_id), actor, &ev)
}

impl Store {
    /// The MPLP trace events (`confirm.*`) of approval `id`, oldest first, as stored in the
    /// audit chain.
    pub fn mplp_events(&self, id: &str) -> Result<Vec<Value>, StoreError> {
        Ok(crate::sql::json_values(
            &self.lock(),
            "SELECT data FROM audit WHERE approval_id = ?1 AND kind LIKE 'confirm.%' ORDER BY seq",
            [id],
        )?)
    }
}

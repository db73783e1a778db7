//! Reading back the MPLP trace events of a Confirm (`confirm.requested`, `confirm.approved`,
//! …) from the audit chain for `GET …/mplp`. Writing them is `events.rs` (`mplp_event`, in the
//! transaction of the decision that causes them); their JSON is rendered by the server's
//! `envelopes` module.

use crate::error::StoreError;

use crate::store::Store;
use serde_json::Value;

impl Store {
    /// The MPLP trace events (`confirm.*`) of approval `id`, oldest first, as stored in the
    /// audit chain. Served by the partial index `audit_approval` (migration 0031), which a
    /// query uses only while its `kind` term is written as the index's.
    pub fn mplp_events(&self, id: &str) -> Result<Vec<Value>, StoreError> {
        Ok(crate::sql::json_values(
            self.lock().conn(),
            "SELECT data FROM audit WHERE approval_id = ?1 AND kind LIKE 'confirm.%' ORDER BY seq",
            [id],
        )?)
    }
}

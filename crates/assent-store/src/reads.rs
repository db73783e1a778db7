//! The store's read-only approval queries: one approval, a list by status, the approval of
//! an AAEP reply token. Reading a row strictly is `record.rs`; this file writes nothing.

use crate::db::OptionalExtension as _;
use crate::error::StoreError;
use crate::record::{ApprovalRecord, read_approval};
use crate::sql;
use crate::store::Store;
use assent_core::approval::ApprovalStatus;

impl Store {
    /// Reads one approval with its decisions and token info.
    pub fn get_approval(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        Ok(read_approval(self.lock().conn(), id)?)
    }

    /// Lists approvals, newest first, optionally only those with `status`, at most `limit`.
    pub fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>, StoreError> {
        let guard = self.lock();
        let conn = guard.conn();
        let ids: Vec<String> = sql::column(
            conn,
            "SELECT id FROM approvals WHERE (CAST(?1 AS TEXT) IS NULL OR status = ?1) ORDER BY requested_at DESC, rowid DESC LIMIT ?2",
            crate::params![status.map(|s| s.as_str()), limit],
        )?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(a) = read_approval(conn, &id)? {
                out.push(a);
            }
        }
        Ok(out)
    }

    /// The approval whose confirmation carries `reply_token`.
    pub fn approval_by_reply_token(
        &self,
        token: &str,
    ) -> Result<Option<ApprovalRecord>, StoreError> {
        let guard = self.lock();
        let conn = guard.conn();
        let id: Option<String> = conn
            .prepare_cached("SELECT id FROM approvals WHERE reply_token = ?1")?
            .query_row([token], |r| r.get(0))
            .optional()?;
        match id {
            Some(id) => Ok(read_approval(conn, &id)?),
            None => Ok(None),
        }
    }
}

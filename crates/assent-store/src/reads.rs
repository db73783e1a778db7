//! The store's read-only approval queries: one approval, a list by status, the approval of
//! an AAEP reply token. Reading a row strictly is `record.rs`; this file writes nothing.

use crate::db::{self, Conn, OptionalExtension as _};
use crate::error::StoreError;
use crate::record::{ApprovalRecord, read_approval};
use crate::seal::Sealed;
use crate::sql;
use crate::store::Store;
use crate::tokens::signed_token;
use assent_core::approval::ApprovalStatus;

impl Store {
    /// Runs `f` in one read snapshot. On Postgres on a read session beside the writer
    /// session ([`crate::readers::Readers::read`]), so reads do not queue behind the writes'
    /// round trips; on SQLite on the writer connection, between group commits: measured with
    /// `bench/replicas.py`, SQLite read connections beside the writer halved the median
    /// decision-to-wake time at 64 agents but doubled its p99 at 16 (each read on another
    /// connection starts with a page cache the writer's commits invalidated), so SQLite keeps
    /// its reads on the writer (BENCHMARKS.md, B3 over HTTP).
    ///
    /// Inside a batch that holds its write transaction open (`batch.rs`), on the writer
    /// session on both backends: a call of the batch reads what the batch wrote (a read
    /// session would not see it), and is answered only after the batch's commit.
    pub(crate) fn read<T>(&self, f: impl Fn(Conn<'_>) -> db::Result<T>) -> Result<T, StoreError> {
        let in_batch = crate::db::HOLDS_BATCH.with(|h| h.get());
        match self.database {
            crate::db::Database::Postgres { .. } if !in_batch => {
                self.readers.read(&self.database, f)
            }
            _ => Ok(self.lock().conn().snapshot(&f)?),
        }
    }

    /// Reads one approval with its decisions and token info (on a read session, beside the
    /// writer: `readers.rs`); a token row whose seal does not hold is left out
    /// ([`Store::vouched`]), here and in every read of this file.
    pub fn get_approval(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        Ok(self
            .read(|c| read_approval(c, id))?
            .map(|r| self.vouched(r)))
    }

    /// Approval `id` when it may be acted on as shown: its terms and standing hold their seal
    /// under this gateway's key ([`crate::approval_seal`]), its stored call hashes to its
    /// `call_hash` ([`ApprovalRecord::call_intact`]) and no column is `damaged`; `None` for a
    /// row planted or edited behind the gateway's back (or no such approval). For what runs
    /// something on an approval's behalf without deciding it, the dashboard's dry run (found by
    /// review: a dry run ran whatever tool an edited row named, with no seal checked). Read on
    /// one snapshot.
    pub fn intact_approval(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        let key = self.seal_key(Sealed::Approval);
        let found = self.read(|c| {
            let Some(rec) = read_approval(c, id)? else {
                return Ok(None);
            };
            let sealed = crate::approval_seal::holds(c, &key, id)?;
            Ok((sealed && rec.damaged.is_empty() && rec.call_intact()).then_some(rec))
        })?;
        Ok(found.map(|r| self.vouched(r)))
    }

    /// [`Store::get_approval`] and, when `with_token` and the approval has a minted token, its
    /// signed token string (what [`Store::token_string`] gives), read in one snapshot on a
    /// read session: the agent's long-poll answer, which does not wait for the writer.
    pub fn approval_and_token(
        &self,
        id: &str,
        with_token: bool,
    ) -> Result<(Option<ApprovalRecord>, Option<String>), StoreError> {
        let (rec, token) = self.read(|c| {
            let rec = read_approval(c, id)?;
            let minted = rec.as_ref().is_some_and(|r| r.token.is_some());
            let token = if with_token && minted {
                signed_token(c, &self.key, &self.seal_key(Sealed::Token), id)?
            } else {
                None
            };
            Ok((rec, token))
        })?;
        Ok((rec.map(|r| self.vouched(r)), token))
    }

    /// Lists approvals, newest first, optionally only those with `status`, at most `limit`
    /// (one snapshot on a read session).
    pub fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>, StoreError> {
        let listed = self.read(|conn| {
            // The pending ones by a statement of their own, with the status written out: a
            // partial index (`approvals_pending_expires`, small) serves only a query whose
            // condition names its own, which a bound parameter does not (Postgres's generic
            // plan of a prepared statement; found by review). Every other listing reads
            // `approvals_requested` from its newest end.
            let ids: Vec<String> = match status {
                Some(ApprovalStatus::Pending) => sql::column(
                    conn,
                    "SELECT CAST(id AS TEXT) FROM approvals WHERE status = 'pending' ORDER BY requested_at DESC, rowid DESC LIMIT ?1",
                    crate::params![limit],
                )?,
                Some(s) => sql::column(
                    conn,
                    "SELECT CAST(id AS TEXT) FROM approvals WHERE status = ?1 ORDER BY requested_at DESC, rowid DESC LIMIT ?2",
                    crate::params![s.as_str(), limit],
                )?,
                None => sql::column(
                    conn,
                    "SELECT CAST(id AS TEXT) FROM approvals ORDER BY requested_at DESC, rowid DESC LIMIT ?1",
                    crate::params![limit],
                )?,
            };
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                match read_approval(conn, &id) {
                    Ok(Some(a)) => out.push(a),
                    Ok(None) => {}
                    // A row with a value of another type than the gateway writes (SQLite keeps
                    // what it is given: edited behind its back) cannot be shown; it no longer
                    // fails the whole listing (found by review). `audit verify` names it.
                    Err(e) if e.is_damaged_row() => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(out)
        })?;
        Ok(listed.into_iter().map(|a| self.vouched(a)).collect())
    }

    /// How many approvals are pending, per risk tier (`("R2", 3)`, …; tiers with none are
    /// left out), for the server's `/metrics` (issue 15 §2). One grouped count on a read
    /// session, served by the index of pending approvals.
    pub fn pending_by_tier(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.read(|conn| {
            crate::sql::rows(
                conn,
                "SELECT risk_tier, count(*) FROM approvals WHERE status = 'pending' GROUP BY risk_tier ORDER BY risk_tier",
                crate::params![],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
        })
    }

    /// The approval whose confirmation carries `reply_token`.
    pub fn approval_by_reply_token(
        &self,
        token: &str,
    ) -> Result<Option<ApprovalRecord>, StoreError> {
        let rec = self.read(|conn| {
            let id: Option<String> = conn
                .prepare_cached("SELECT id FROM approvals WHERE reply_token = ?1")?
                .query_row([token], |r| r.get(0))
                .optional()?;
            match id {
                Some(id) => read_approval(conn, &id),
                None => Ok(None),
            }
        })?;
        Ok(rec.map(|r| self.vouched(r)))
    }
}

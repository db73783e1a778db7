//! Tokens voided after a restore (`assent restore --allow-outstanding-tokens`).
//!
//! A restore rolls the database back: a token redeemed after the backup was taken is unused
//! again in the copy. Replacing `token.key` does not make it unusable, since the gateway signs
//! a token anew from its row whenever its agent reads the approval (found by review: the
//! agent read its approval again after such a restore and redeemed the fresh token, running
//! the call a second time). So a restore that accepts outstanding tokens leaves a marker,
//! [`MARKER`] in `data_dir`, holding the restore's time (Unix ms: the later of the restoring
//! host's clock and the copy's newest token or request), before the copy takes the
//! database's name; the next [`crate::Store::open`] of that SQLite database marks every
//! token issued before that time and still neither redeemed nor expired as used, each with a
//! `token.voided` audit record (`{"token_id", "restored_at"}`, actor `restore`), in one
//! transaction, and only then removes the marker. A crash in between voids again at the next
//! start (only tokens still unused); redeeming a voided token is refused as one already used,
//! and `audit verify` takes `token.voided` as the record of a used token.
//!
//! The same marker, written too when the copy holds pending approvals whose default is
//! `approve`, has that start cancel each of them requested by the marker's time (actor
//! `restore`, audited `approval.cancelled` like any cancel; their agents ask again). Found by
//! review: a call denied or cancelled after the backup was taken was pending again in the
//! copy, and once its deadline passed the expiry sweep approved it by its default, with no
//! one deciding — the denial undone. Pending approvals whose default is `reject` stay: the
//! worst the rollback does to them is ask a person again.

use crate::audit;
use crate::db::{self, Conn};
use crate::error::StoreError;
use crate::kit::io;
use crate::params;
use crate::store::Store;
use serde_json::json;
use std::path::Path;

/// The marker's file name in `data_dir`.
pub const MARKER: &str = "restored-void-tokens-before";

/// Writes the marker (0600, synced) asking the next start to void the tokens issued before
/// `at` (Unix ms): through a temporary file and a rename, so that a crash leaves the previous
/// marker or the new one, never none (found by review: written in place, a crash between
/// removing the old and creating the new lost a restore's voiding).
pub(crate) fn mark(data_dir: &Path, at: i64) -> Result<(), StoreError> {
    let (path, tmp) = (
        data_dir.join(MARKER),
        data_dir.join(format!("{MARKER}.tmp")),
    );
    crate::kit::write_private(&tmp, at.to_string().as_bytes()).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(io(&path))
}

impl Store {
    /// Voids the tokens a restore left outstanding when `data_dir` holds its [`MARKER`] (see
    /// the module doc); the number voided. `Invalid` for a marker that is not a time.
    pub(crate) fn void_restored_tokens(
        &self,
        data_dir: &Path,
        now: i64,
    ) -> Result<usize, StoreError> {
        let path = data_dir.join(MARKER);
        let at = match std::fs::read_to_string(&path) {
            Ok(t) => t.trim().parse::<i64>().map_err(|_| {
                StoreError::Invalid(format!(
                    "{}: a restore's marker holds a time in Unix milliseconds, not `{}`; restore again",
                    path.display(),
                    t.trim()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io(&path)(e)),
        };
        let n = self.write(|tx| void_before(**tx, at, now))?;
        self.cancel_restored_defaults(at, now)?;
        std::fs::remove_file(&path).map_err(io(&path))?;
        Ok(n)
    }

    /// Cancels the pending approvals requested at or before `at` whose default decision is
    /// `approve` (see the module doc; `at` is the later of the restoring host's clock and the
    /// copy's newest request or token, so a backup host's clock running ahead does not leave
    /// any out, and another process opening the store beside the gateway cancels nothing the
    /// gateway made since); how many. One a person or the sweep settled meanwhile, or that is
    /// damaged (which nobody may settle and the sweep leaves alone), is skipped and logged.
    fn cancel_restored_defaults(&self, at: i64, now: i64) -> Result<usize, StoreError> {
        // As text: an id stored as a blob names no approval below (as in the sweep).
        let ids: Vec<String> = crate::sql::column(
            self.lock().conn(),
            "SELECT CAST(id AS TEXT) FROM approvals WHERE status = 'pending' AND default_decision = 'approve' AND requested_at <= ?1 ORDER BY requested_at",
            [at],
        )?;
        let reason = "restored from a backup: it may have been decided after the backup was \
                      taken, and its default would approve it; ask again";
        let mut n = 0;
        for id in ids {
            match self.cancel(&id, Some(reason), "restore", now) {
                Ok(_) => n += 1,
                Err(crate::DecideError::Store(e)) => return Err(e),
                Err(e) => {
                    tracing::warn!(approval = %id, error = %e, restored_at = at,
                        "a restored approval whose default is approve was not cancelled")
                }
            }
        }
        if n > 0 {
            tracing::info!(
                cancelled = n,
                "restored approvals whose default is approve cancelled"
            );
        }
        Ok(n)
    }
}

/// Marks used, with a `token.voided` record each, the tokens issued before `at` that are
/// neither used nor expired at `now`.
fn void_before(tx: Conn<'_>, at: i64, now: i64) -> db::Result<usize> {
    let mut outstanding: Vec<(String, String)> = Vec::new();
    tx.prepare_cached(
        "SELECT token_id, approval_id FROM tokens WHERE used_at IS NULL AND expires_at > ?1 AND issued_at <= ?2 ORDER BY issued_at, token_id",
    )?
    .for_each(params![now, at], |r| {
        outstanding.push((r.get(0)?, r.get(1)?));
        Ok(std::ops::ControlFlow::Continue(()))
    })?;
    for (token, approval) in &outstanding {
        tx.prepare_cached(
            "UPDATE tokens SET used_at = ?2 WHERE token_id = ?1 AND used_at IS NULL",
        )?
        .execute(params![token, now])?;
        let data = json!({"token_id": token, "restored_at": crate::rfc3339(at)});
        audit::append(tx, now, "token.voided", Some(approval), "restore", &data)?;
    }
    Ok(outstanding.len())
}

//! Batches (issue 13 §4): one thread runs many store calls in one group commit it holds open
//! ([`Store::batch`]), so the server's store executor answers a queue of requests with one
//! `COMMIT` (one fsync) and no thread hand-off between them.
//!
//! While a batch runs on a thread, the first [`Store::write`] there opens the connection's
//! write transaction and *holds* its group: every later write of the batch joins it inside
//! its own `SAVEPOINT` and returns at once, uncommitted; writers of other threads join it too
//! and wait for its commit as any member does; reads of other threads wait for it to end
//! (they must not see uncommitted writes); reads of the batch's own thread read it. When the
//! batch's work returns, the group is committed, and the outcome tells the caller whether
//! what its calls wrote — and so what they answered — is durable: nothing may be answered
//! before. On PostgreSQL the batch's reads use the writer session too (`reads.rs`), not the
//! read sessions beside it, which would not see its uncommitted writes; the advisory write
//! lock is held from the batch's first write to its commit, and the notifications of every
//! call's changes go out with that commit. On SQLite the WAL checkpoint a batch's commit made
//! due runs after the batch's answers ([`Store::batch_then`]), not in front of them.

use crate::group::{self, Gate};
use crate::store::{Store, gate_of};
use std::sync::Arc;

impl Store {
    /// Whether [`Store::batch`] groups this store's calls: on both backends, unless
    /// `ASSENT_STORE_EXECUTOR=off` was set when the process first asked (for measurements:
    /// then each call commits on its own). Read once per process, not per batch.
    pub fn runs_batches(&self) -> bool {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *ON.get_or_init(|| std::env::var("ASSENT_STORE_EXECUTOR").map_or(true, |v| v != "off"))
    }

    /// Runs `work` (any number of store calls) as one batch on this thread and commits what
    /// it wrote in one group commit; `work`'s value and the outcome: `Ok` when everything the
    /// batch's calls wrote is committed (or nothing was written), `Err(why)` when the commit
    /// failed or a write of the batch panicked (its transaction was rolled back then): the
    /// answers computed in `work` must then be withheld, since they may rest on writes that
    /// are not durable. When [`Store::runs_batches`] is `false`, `work` runs as separate
    /// calls, each write committed on its own, and the outcome is `Ok`.
    ///
    /// A panic in `work` is not caught here: it propagates after the batch's group, if one
    /// is open, was ended (rolled back when the panic was inside a write, else committed).
    pub fn batch<R>(&self, work: impl FnOnce() -> R) -> (R, Result<(), String>) {
        self.batch_then(work, |r, outcome| (r, outcome))
    }

    /// [`Store::batch`], handing `work`'s value and the outcome to `answer` as soon as the
    /// batch's commit ended — before the housekeeping that commit made due (SQLite's inline
    /// WAL checkpoint, `Store::tidy_wal`), which runs after `answer` returns: the store
    /// executor answers a batch's calls in `answer`, so their answers never wait for a
    /// checkpoint (issue 13 §4). `answer`'s value is returned. The outcome means what it
    /// means for [`Store::batch`]: nothing may be answered `Ok` before it is `Ok`.
    ///
    /// A panic in `work` propagates as in [`Store::batch`] (`answer` is not called).
    pub fn batch_then<R, A>(
        &self,
        work: impl FnOnce() -> R,
        answer: impl FnOnce(R, Result<(), String>) -> A,
    ) -> A {
        if !self.runs_batches() {
            return answer(work(), Ok(()));
        }
        let gate = gate_of(self);
        let guard = group::enter(&gate);
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
        let (held, poisoned) = group::held();
        drop(guard);
        let outcome = match held {
            None => Ok(()),
            Some(group) => self.end_batch(&gate, group, poisoned),
        };
        match out {
            Ok(r) => {
                let answered = answer(r, outcome);
                self.tidy_wal();
                answered
            }
            Err(panic) => {
                self.tidy_wal();
                std::panic::resume_unwind(panic)
            }
        }
    }

    /// Commits the group `group` a batch held last, if it is still open and no group the
    /// batch held before was lost (`poisoned`: then it is rolled back too, so that nothing of
    /// a failed batch is kept). `Err` when the batch's writes are not all committed.
    fn end_batch(&self, gate: &Arc<Gate>, group: u64, poisoned: bool) -> Result<(), String> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if gate.open() != Some(group) {
            return Err("a write of the batch panicked and its transaction was rolled back".into());
        }
        if poisoned {
            let _ = conn.conn().rollback_write();
            let why = "an earlier group of the batch was rolled back";
            gate.finish(group, Err(why.into()));
            return Err(why.into());
        }
        self.commit_group(conn, gate, group, false)
            .map_err(|e| e.to_string())
    }
}

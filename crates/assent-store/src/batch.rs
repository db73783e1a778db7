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
//! before. SQLite only: on PostgreSQL reads run on other sessions, which would not see a
//! batch's uncommitted writes.

use crate::store::{Gate, Store, gate_of};
use std::cell::Cell;
use std::sync::Arc;

thread_local! {
    /// The gate of the store this thread runs a batch of, by address (none: no batch).
    static BATCH_OF: Cell<usize> = const { Cell::new(0) };
    /// The group the batch holds open, once its first write opened it.
    static HELD: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Whether this thread runs a batch of the store whose gate is `gate`.
pub(crate) fn active(gate: &Arc<Gate>) -> bool {
    BATCH_OF.with(|b| b.get()) == Arc::as_ptr(gate) as usize
}

/// Whether this thread's batch holds group `group` open.
pub(crate) fn holds(gate: &Arc<Gate>, group: u64) -> bool {
    active(gate) && HELD.with(|h| h.get()) == Some(group)
}

/// Opens the group this thread's batch holds (its first write; the caller has begun the
/// write transaction); its number.
pub(crate) fn open(gate: &Arc<Gate>) -> u64 {
    let n = gate.open_batch();
    gate.state().held_by = Some(std::thread::current().id());
    HELD.with(|h| h.set(Some(n)));
    n
}

/// Resets this thread's batch state when the batch ends, even by a panic.
struct Active;

impl Drop for Active {
    fn drop(&mut self) {
        BATCH_OF.with(|b| b.set(0));
        HELD.with(|h| h.set(None));
    }
}

impl Store {
    /// Whether [`Store::batch`] groups this store's calls (SQLite); on PostgreSQL it runs
    /// them one by one.
    pub fn runs_batches(&self) -> bool {
        matches!(self.database, crate::db::Database::Sqlite { .. })
    }

    /// Runs `work` (any number of store calls) as one batch on this thread and commits what
    /// it wrote in one group commit; `work`'s value and the outcome: `Ok` when everything the
    /// batch's calls wrote is committed (or nothing was written), `Err(why)` when the commit
    /// failed or a write of the batch panicked (its transaction was rolled back then): the
    /// answers computed in `work` must then be withheld, since they may rest on writes that
    /// are not durable. SQLite only (see the module doc); on PostgreSQL `work` runs as
    /// separate calls, each write committed on its own, and the outcome is `Ok`.
    ///
    /// A panic in `work` is not caught here: it propagates after the batch's group, if one
    /// is open, was ended (rolled back when the panic was inside a write, else committed).
    pub fn batch<R>(&self, work: impl FnOnce() -> R) -> (R, Result<(), String>) {
        if !self.runs_batches() {
            return (work(), Ok(()));
        }
        let gate = gate_of(self);
        let guard = Active;
        BATCH_OF.with(|b| b.set(Arc::as_ptr(&gate) as usize));
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
        let held = HELD.with(|h| h.get());
        drop(guard);
        let outcome = match held {
            None => Ok(()),
            Some(group) => self.end_batch(&gate, group),
        };
        match out {
            Ok(r) => (r, outcome),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Commits the group `group` a batch held, if it is still open (a write that panicked
    /// rolled it back and ended it: `Err`).
    fn end_batch(&self, gate: &Arc<Gate>, group: u64) -> Result<(), String> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if gate.open() != Some(group) {
            return Err("a write of the batch panicked and its transaction was rolled back".into());
        }
        self.commit_group(conn, gate, group)
            .map_err(|e| e.to_string())
    }
}

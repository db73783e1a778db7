//! The group-commit gate (issue 13 §4): the state [`crate::store::Store::write`]'s writers
//! share — how many wait for the connection, the open group (its number, members and their
//! changes), the outcomes of ended groups members still wait for — and the per-thread state
//! of a [`crate::store::Store::batch`] (`batch.rs`): which group the batch holds open and
//! whether a group it held was lost. Imports nothing of the store but the kernel.

use crate::db::Change;
use std::cell::Cell;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

/// The group-commit state of one [`crate::store::Store`]: how many writers wait for its
/// connection, the open transaction's group (its number, its members, their changes) and the
/// outcome of groups some member still waits for.
#[derive(Default)]
pub(crate) struct Gate {
    /// Writers waiting for the connection's mutex (counted before they lock it).
    pub(crate) queued: AtomicUsize,
    state: Mutex<GateState>,
    done: Condvar,
    /// Told how long each commit took ([`crate::store::Store::observe_commits`]).
    pub(crate) on_commit: OnceLock<CommitObserver>,
}

/// Told the duration of each commit of a store (one per group commit), on the writer's
/// thread while it still holds the connection: keep it cheap (a histogram's `observe`).
pub type CommitObserver = Box<dyn Fn(std::time::Duration) + Send + Sync>;

#[derive(Default)]
pub(crate) struct GateState {
    /// The open group: its number, members and their changes.
    open: Option<(u64, usize, Vec<Change>)>,
    /// Whether a [`crate::store::Store::batch`] holds the open group (`batch.rs`): no other
    /// member commits it (the batch's own thread knows it by [`holds`]).
    held: bool,
    /// The last group's number.
    last: u64,
    /// Outcomes of ended groups whose members still wait (`Err(why)` when the commit
    /// failed); removed when the last of them has read it.
    ended: std::collections::BTreeMap<u64, Result<(), String>>,
    /// Members still waiting, per group.
    waiting: std::collections::BTreeMap<u64, usize>,
}

impl Gate {
    pub(crate) fn state(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The open group's number, if any.
    pub(crate) fn open(&self) -> Option<u64> {
        self.state().open.as_ref().map(|o| o.0)
    }

    /// Joins the open group as one more member.
    pub(crate) fn join(&self) -> Option<u64> {
        let mut s = self.state();
        let o = s.open.as_mut()?;
        o.1 += 1;
        Some(o.0)
    }

    /// Opens a new group with one member; its number.
    pub(crate) fn open_batch(&self) -> u64 {
        let mut s = self.state();
        s.last += 1;
        let n = s.last;
        s.open = Some((n, 1, Vec::new()));
        s.held = false;
        n
    }

    /// Whether group `batch` is open and held by a [`crate::store::Store::batch`] (of any
    /// thread).
    pub(crate) fn is_held(&self, batch: u64) -> bool {
        let s = self.state();
        s.held && s.open.as_ref().is_some_and(|o| o.0 == batch)
    }

    pub(crate) fn members(&self, batch: u64) -> usize {
        self.state()
            .open
            .as_ref()
            .filter(|o| o.0 == batch)
            .map_or(0, |o| o.1)
    }

    /// Adds a member's changes to its group (each once).
    pub(crate) fn add(&self, batch: u64, changes: Vec<Change>) {
        if let Some(o) = self.state().open.as_mut().filter(|o| o.0 == batch) {
            for c in changes {
                if !o.2.contains(&c) {
                    o.2.push(c);
                }
            }
        }
    }

    pub(crate) fn take_changes(&self, batch: u64) -> Vec<Change> {
        self.state()
            .open
            .as_mut()
            .filter(|o| o.0 == batch)
            .map(|o| std::mem::take(&mut o.2))
            .unwrap_or_default()
    }

    /// Ends group `batch` with `outcome` and wakes its waiting members and readers.
    pub(crate) fn finish(&self, batch: u64, outcome: Result<(), String>) {
        let mut s = self.state();
        if s.open.as_ref().is_some_and(|o| o.0 == batch) {
            s.open = None;
            s.held = false;
        }
        if s.waiting.contains_key(&batch) {
            s.ended.insert(batch, outcome);
        }
        drop(s);
        self.done.notify_all();
    }

    /// Registers a member of group `batch` that will wait for its [`Gate::outcome`] (before
    /// it lets go of the connection, so the outcome is kept for it).
    pub(crate) fn will_wait(&self, batch: u64) {
        *self.state().waiting.entry(batch).or_default() += 1;
    }

    /// Waits until group `batch` is no longer open.
    pub(crate) fn wait_closed(&self, batch: u64) -> MutexGuard<'_, GateState> {
        let mut s = self.state();
        while s.open.as_ref().is_some_and(|o| o.0 == batch) {
            s = self.done.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        s
    }

    /// Waits until group `batch` ended (the caller registered with [`Gate::will_wait`]); its
    /// outcome: `Err(why)` when its commit failed or a member panicked.
    pub(crate) fn outcome(&self, batch: u64) -> Result<(), String> {
        let mut s = self.wait_closed(batch);
        let left = s.waiting.get_mut(&batch).map(|n| {
            *n -= 1;
            *n
        });
        let outcome = s.ended.get(&batch).cloned().unwrap_or(Ok(()));
        if left == Some(0) {
            s.waiting.remove(&batch);
            s.ended.remove(&batch);
        }
        outcome
    }
}

thread_local! {
    /// The gate of the store this thread runs a batch of, by address (none: no batch).
    static BATCH_OF: Cell<usize> = const { Cell::new(0) };
    /// The group the batch holds open, once its first write opened it.
    static HELD: Cell<Option<u64>> = const { Cell::new(None) };
    /// A group the batch held ended without its commit (a write of another thread that
    /// joined it panicked, or SQLite rolled the transaction back by itself): the batch fails
    /// whatever comes after, since answers of its earlier calls rest on lost writes.
    static POISONED: Cell<bool> = const { Cell::new(false) };
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
    if HELD.with(|h| h.get()).is_some() {
        // The group held before ended without the batch's commit (else it would still be
        // open and joined): what it held is gone.
        POISONED.with(|p| p.set(true));
    }
    let n = gate.open_batch();
    gate.state().held = true;
    HELD.with(|h| h.set(Some(n)));
    crate::db::HOLDS_BATCH.with(|h| h.set(true));
    n
}

/// The batch's first write failed and its transaction was rolled back whole (it held nothing
/// else): the batch holds no group, and none was lost.
pub(crate) fn abandon() {
    HELD.with(|h| h.set(None));
    crate::db::HOLDS_BATCH.with(|h| h.set(false));
}

/// The transaction of held group `group` is gone (SQLite rolled it back by itself): ends the
/// group with an error (its members on other threads get it) and fails the batch.
pub(crate) fn lost(gate: &Gate, group: u64) {
    POISONED.with(|p| p.set(true));
    crate::db::HOLDS_BATCH.with(|h| h.set(false));
    gate.finish(
        group,
        Err("the write transaction was rolled back by the database".into()),
    );
}

/// Puts this thread in a batch of the store whose gate is `gate` until the returned guard is
/// dropped.
pub(crate) fn enter(gate: &Arc<Gate>) -> Active {
    BATCH_OF.with(|b| b.set(Arc::as_ptr(gate) as usize));
    Active
}

/// The group this thread's batch holds (or held last), and whether a group it held was lost.
pub(crate) fn held() -> (Option<u64>, bool) {
    (HELD.with(|h| h.get()), POISONED.with(|p| p.get()))
}

/// Resets this thread's batch state when the batch ends, even by a panic.
pub(crate) struct Active;

impl Drop for Active {
    fn drop(&mut self) {
        BATCH_OF.with(|b| b.set(0));
        HELD.with(|h| h.set(None));
        POISONED.with(|p| p.set(false));
        crate::db::HOLDS_BATCH.with(|h| h.set(false));
    }
}

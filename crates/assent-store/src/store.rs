//! The [`Store`] handle: one kernel connection ([`crate::db::Connection`]; `Store::open` opens SQLite) behind a mutex, the token key, the audit key
//! and the event renderer ([`Envelopes`]). Opening it (migrations, key files) is `open.rs`; every other file adds methods.

use crate::db::Connection;
use crate::db::{Change, DbError, Settles, Tx};
use crate::error::StoreError;
use crate::events::Envelopes;
use crate::group::{self, CommitObserver, Gate};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};

/// Handle to the store (its database through the storage kernel), its keys and its event renderer. Cheap to share behind an `Arc`.
pub struct Store {
    /// The one connection; writers serialise on it ([`Store::lock`]).
    pub(crate) conn: Mutex<Connection>,
    /// Where the connection goes: a closed PostgreSQL session is replaced from it.
    pub(crate) database: crate::db::Database,
    /// Ed25519 keys of approval tokens (`token.key` and the retired keys still verifying).
    pub(crate) key: crate::token_keys::TokenKeys,
    /// Ed25519 key that signs audit checkpoints (`audit.key`).
    pub(crate) audit_key: ed25519_dalek::SigningKey,
    /// The row seal keys derived from `audit_key` ([`crate::seal::SealKeys`]).
    pub(crate) seal_keys: crate::seal::SealKeys,
    /// `<data_dir>/assent.db`.
    pub(crate) db_path: PathBuf,
    /// How long a minted token stays redeemable (ms).
    pub(crate) token_ttl_ms: i64,
    /// Renders the AAEP and MPLP events the store writes (the server's `WireEnvelopes`).
    pub(crate) envelopes: Arc<dyn Envelopes>,
    /// SQLite: the WAL checkpoint thread (`wal.rs`); `None` on Postgres.
    pub(crate) checkpointer: Option<crate::wal::Checkpointer>,
    /// Idle read sessions beside the writer (`readers.rs`).
    pub(crate) readers: crate::readers::Readers,
    /// Whether this store's audit key was taken over, as far as examined (`key_replaced.rs`).
    pub(crate) replaced: crate::key_replaced::Watch,
    /// SQLite: `<data_dir>/assent.lock`, held shared while the store is open (a restore takes
    /// it exclusively, [`crate::kit::DataDirLock`]); `None` on Postgres.
    pub(crate) _data_lock: Option<crate::kit::DataDirLock>,
    /// Whose plans stop whose calls: the agent files' declared local delegations in force
    /// ([`Store::set_rules`]; none until set).
    pub(crate) delegations: std::sync::RwLock<Arc<assent_core::policy::Delegations>>,
    /// The agent and governance rules in force ([`Store::set_rules`]; none until set): what a
    /// call held under other rules is asked again against before it is approved.
    pub(crate) rules: std::sync::RwLock<Option<Arc<assent_core::policy::Registry>>>,
    /// The configuration this process serves, checked by every write
    /// ([`Store::serve_config`]; none until set).
    pub(crate) serving: crate::config_serving::Serving,
}

impl Store {
    /// The key of `what` rows of this store (derived from its audit key when it opened:
    /// [`crate::seal::SealKeys`]).
    pub(crate) fn seal_key(&self, what: crate::seal::Sealed) -> crate::seal::SealKey {
        self.seal_keys.get(what)
    }

    /// Puts `rules`, the agent and governance rules in force, in force for the store's checks,
    /// in one step:
    /// - its declared local delegations ([`assent_core::policy::Registry::delegations`]) for the
    ///   plan checks of decisions, the expiry sweep and grant coverage (as redemption takes them
    ///   per call): a plan that runs no calls stops its delegates' held calls too, whether or
    ///   not a plan agent was recorded with the call (found by review: those checks used no
    ///   delegation, so a delegate's call naming a plan registered after it was held could be
    ///   approved, or approved by its timeout, while the plan was a draft);
    /// - the rules themselves for the store's last check of an approval (an operator's, the
    ///   agent's user's, or its timeout's) and of a redemption: a call held under another
    ///   policy set is evaluated again under these, and not approved or run as held when they
    ///   ask more of it ([`assent_core::rules_now::tightened`]).
    ///
    /// The server sets it at start and at every reload (inside the task that writes the
    /// reload's `config.reloaded` record).
    pub fn set_rules(&self, rules: Arc<assent_core::policy::Registry>) {
        *self.delegations.write().unwrap_or_else(|e| e.into_inner()) =
            Arc::new(rules.delegations().clone());
        *self.rules.write().unwrap_or_else(|e| e.into_inner()) = Some(rules);
    }

    /// The rules in force ([`Store::set_rules`]).
    pub(crate) fn rules(&self) -> Option<Arc<assent_core::policy::Registry>> {
        self.rules.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The delegations in force ([`Store::set_rules`]).
    pub(crate) fn delegations(&self) -> Arc<assent_core::policy::Delegations> {
        self.delegations
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How long a write waits for a lock held by another process before failing (default 10 s):
    /// SQLite's `busy_timeout`, PostgreSQL's `lock_timeout` (at least 1 ms: 0 would mean
    /// "wait forever" there). A reconnected PostgreSQL session is back at 10 s.
    pub fn set_busy_timeout(&self, d: std::time::Duration) -> Result<(), StoreError> {
        match &*self.lock() {
            Connection::Sqlite(c) => Ok(c.busy_timeout(d)?),
            Connection::Postgres(p) => {
                let ms = d.as_millis().clamp(1, i32::MAX as u128);
                Ok(p.batch(&format!("SET lock_timeout = '{ms}ms'"))?)
            }
        }
    }

    /// Path of the database file.
    pub fn db_path(&self) -> &Path {
        &self.db_path
    }

    /// The connection for a read or a write outside [`Store::write`], waiting for other
    /// in-process writers and for an open group commit to end (its uncommitted writes are on
    /// this connection and must not be read); a poisoned lock is taken over. The thread of a
    /// [`Store::batch`] does not wait for the group it holds open: its jobs read what the
    /// batch wrote, and their answers wait for the batch's commit.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Connection> {
        let gate = gate_of(self);
        loop {
            // A panic while holding the lock leaves the database consistent (a write's
            // transaction is rolled back by `Member`'s drop).
            let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
            let Some(open) = gate.open().filter(|&o| !group::holds(&gate, o)) else {
                reconnect_if_closed(&mut conn, &self.database);
                return conn;
            };
            drop(conn);
            drop(gate.wait_closed(open));
        }
    }

    /// The one write transaction, group-committed (issue 13 §4): runs `f` and commits what it
    /// wrote when it returns `Ok` or an error that [`Settles::keeps_writes`] (an audited
    /// refusal); any other `Err` undoes every write of `f`. This is how every state change is
    /// written together with its audit record.
    ///
    /// Writers arriving while another's transaction is open join it (leader/follower, all on
    /// their own threads): the first opens it (`BEGIN IMMEDIATE`; on Postgres `BEGIN` and the
    /// advisory write lock) and runs `f` in it; each writer that was waiting meanwhile runs
    /// its `f` in the same transaction inside its own `SAVEPOINT`, so its `Err` undoes its
    /// writes only; the writer that finds nobody else waiting (or the 64th) commits them all
    /// with one `COMMIT` (one fsync), and every member returns only after that commit
    /// succeeded, or with its error when it failed. Members run one after another, so audit
    /// records chain in order. A writer alone commits alone, as before.
    ///
    /// Every write reports [`Change::Events`] (nearly all append audit or AAEP records; a
    /// spare notification costs a wake-up); the closures report what else they changed (an
    /// approval, a clarification, a review, the subscriptions), NOTIFYed on Postgres at the
    /// commit, those of every member whose writes it holds.
    pub(crate) fn write<T, E: Settles>(
        &self,
        f: impl FnOnce(&Tx<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        self.write_as(true, true, f)
    }

    /// [`Store::write`] without the [`Change::Events`] notification: for bookkeeping that
    /// appends no audit or AAEP record (webhook and Slack leases and cursors, dashboard
    /// sessions, replay windows), whose commits must not wake every event stream of every
    /// replica (on Postgres a lease attempt NOTIFYing would wake its own delivery loop again:
    /// a write-and-NOTIFY spin).
    pub(crate) fn write_unannounced<T, E: Settles>(
        &self,
        f: impl FnOnce(&Tx<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        self.write_as(false, true, f)
    }

    /// [`Store::write_unannounced`] without the check of the configuration served
    /// ([`Store::serve_config`]): only for registering a configuration, which is how it
    /// changes.
    pub(crate) fn write_unchecked<T, E: Settles>(
        &self,
        f: impl FnOnce(&Tx<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        self.write_as(false, false, f)
    }

    /// [`Store::write`], announcing [`Change::Events`] when `events`, checking the
    /// configuration served when `checked` (the group's first writer checks for all).
    fn write_as<T, E: Settles>(
        &self,
        events: bool,
        checked: bool,
        f: impl FnOnce(&Tx<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let gate = gate_of(self);
        gate.queued.fetch_add(1, Ordering::SeqCst);
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        gate.queued.fetch_sub(1, Ordering::SeqCst);
        let joined = gate.join();
        if joined.is_none() {
            // Between groups: a session the server closed is replaced before the next one.
            reconnect_if_closed(&mut conn, &self.database);
        }
        let c = conn.conn();
        let batching = group::active(&gate);
        let (batch, first) = match joined {
            Some(b) => (b, false),
            // The first write of a batch opens the group it holds until it ends.
            None if batching => (c.begin_write().map(|()| group::open(&gate))?, true),
            None => (c.begin_write().map(|()| gate.open_batch())?, true),
        };
        let held = batching && group::holds(&gate, batch);
        let mut member = Member {
            gate: &gate,
            conn: c,
            batch,
            armed: true,
        };
        let (out, changes) = c.member(!first, |tx| {
            if first {
                // In the transaction, serialised with a take-over: a replaced key writes nothing.
                let key = self.audit_key.verifying_key();
                crate::key_replaced::refuse_if_replaced(**tx, &key, Some(&self.replaced))?;
                self.serving.lead(checked);
            }
            // The group's first writer checks for all; one that did not (a registration)
            // leaves each checked member to check for itself (found by review).
            if checked && (first || !self.serving.led_checked()) {
                crate::config_serving::refuse_if_out_of_step(**tx, &self.serving)?;
            }
            if events {
                tx.changed(Change::Events);
            }
            f(tx)
        });
        let kept = out.as_ref().err().is_none_or(Settles::keeps_writes);
        if first && !kept {
            // Nobody joined while `f` ran (they wait for the lock): undo it all.
            member.armed = false;
            drop(member);
            let undone = c.rollback_write();
            gate.finish(batch, Ok(()));
            if held {
                // Nothing of the batch was in it: the batch holds no group now, lost none.
                group::abandon();
            }
            undone?;
            return out;
        }
        gate.add(batch, changes);
        member.armed = false;
        drop(member);
        if held {
            if !c.in_transaction() {
                // SQLite rolled the transaction back by itself (I/O error, full disk): what
                // the batch wrote is gone, so the batch fails and its answers are withheld.
                group::lost(&gate, batch);
            }
            // Committed when the batch ends, before any of its answers is given.
            return out;
        }
        let commit = gate.queued.load(Ordering::SeqCst) == 0 || gate.members(batch) >= MAX_BATCH;
        if commit && !gate.is_held(batch) {
            self.commit_group(conn, &gate, batch, true)?;
            return out;
        }
        gate.will_wait(batch);
        drop(conn);
        match gate.outcome(batch) {
            Ok(()) => out,
            Err(why) => {
                Err(DbError::Unusable(format!("the write was not committed: {why}")).into())
            }
        }
    }
}

impl Store {
    /// Commits group `batch` (the connection's open write transaction) with the changes its
    /// members reported, ends it with the commit's outcome (waking its members), bounds the
    /// WAL when `tidy` (a [`Store::batch`] does it after its answers instead,
    /// [`Store::tidy_wal`]) and nudges the checkpointer. `Err` when the commit failed (nothing
    /// of it is kept).
    pub(crate) fn commit_group(
        &self,
        conn: MutexGuard<'_, Connection>,
        gate: &Gate,
        batch: u64,
        tidy: bool,
    ) -> Result<(), DbError> {
        let started = std::time::Instant::now();
        let result = conn.conn().commit_write(&gate.take_changes(batch));
        if let Some(observe) = gate.on_commit.get() {
            observe(started.elapsed());
        }
        let shared = result.as_ref().map(|_| ()).map_err(|e| e.to_string());
        gate.finish(batch, shared);
        if tidy {
            self.bound_wal(&conn);
        }
        drop(conn);
        if let Some(cp) = &self.checkpointer {
            cp.nudge();
        }
        result
    }

    /// After a commit, still holding the connection (the group's members are answered): after
    /// a background checkpoint pass, or when the WAL file is over [`crate::wal::WAL_LIMIT`],
    /// finishes the checkpoint here, where no other write can interleave, so the next write
    /// restarts the WAL and it stays small (`wal.rs`). A failed checkpoint is tried again
    /// after the next pass or commit.
    ///
    /// Also run by [`Store::tidy_wal`] after a batch's answers, when no group is open.
    fn bound_wal(&self, conn: &Connection) {
        if let (Connection::Sqlite(c), Some(cp)) = (conn, &self.checkpointer)
            && cp.writer_due()
        {
            let _ = crate::wal::checkpoint(c);
        }
    }
}

/// The group-commit state of every open store, by the address of its token key's bytes
/// (unique among live stores and fixed for a store's life, wherever the `Store` value moves).
/// Removed when the store is dropped. (A field of `Store` would do, but `Store` is built in
/// `open.rs`.)
pub(crate) fn gate_of(store: &Store) -> Arc<Gate> {
    let id = store.key.as_ptr() as usize;
    if let Some(g) = gates().read().unwrap_or_else(|p| p.into_inner()).get(&id) {
        return g.clone();
    }
    gates()
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .entry(id)
        .or_default()
        .clone()
}

fn gates() -> &'static RwLock<HashMap<usize, Arc<Gate>>> {
    static GATES: OnceLock<RwLock<HashMap<usize, Arc<Gate>>>> = OnceLock::new();
    GATES.get_or_init(Default::default)
}

impl Store {
    /// What a [`Store::batch`] leaves until its calls were answered: on SQLite, the inline
    /// WAL checkpoint its commit made due (`bound_wal`: a copy of the frames committed during
    /// the background pass and a sync of the database file, a few milliseconds on a busy
    /// disk), so that the batch's answers do not wait for it (issue 13 §4). Skipped while a
    /// group is open (a writer of another thread began one meanwhile): its commit, or the
    /// next batch's, does it. Nothing here is about durability: the batch's commit was.
    pub(crate) fn tidy_wal(&self) {
        if self.checkpointer.is_none() {
            return;
        }
        let gate = gate_of(self);
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if gate.open().is_none() {
            self.bound_wal(&conn);
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let id = self.key.as_ptr() as usize;
        gates()
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }
}

/// The most writers one group commit holds; the one that fills it commits.
const MAX_BATCH: usize = 64;

/// A member running in an open group commit. Dropped armed (its `f` panicked), it rolls the
/// whole transaction back and fails the group, so no member waits forever and the session
/// never keeps the write lock.
struct Member<'a, 'c> {
    gate: &'a Gate,
    conn: crate::db::Conn<'c>,
    batch: u64,
    armed: bool,
}

impl Drop for Member<'_, '_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.conn.rollback_write();
            self.gate.finish(
                self.batch,
                Err("another writer of its group commit panicked".into()),
            );
        }
    }
}

impl Store {
    /// Has `observe` told the duration of every later commit (the `COMMIT` of a group commit:
    /// one fsync on SQLite, one round trip on PostgreSQL), for the server's metrics (issue 15
    /// §2). The first observer stays; a second call is ignored and returns `false`.
    pub fn observe_commits(&self, observe: CommitObserver) -> bool {
        gate_of(self).on_commit.set(observe).is_ok()
    }
}

/// Replaces a PostgreSQL session that has ended (the server restarted or dropped it) with a
/// new one, so one lost connection costs the request that found it, not every later one. A
/// failed reconnection keeps the closed session: its statements fail (the server answers 503)
/// and the next caller tries again.
fn reconnect_if_closed(conn: &mut Connection, database: &crate::db::Database) {
    if let Connection::Postgres(c) = conn
        && c.is_closed()
        && let Ok(fresh) = database.connect()
    {
        *conn = fresh;
    }
}

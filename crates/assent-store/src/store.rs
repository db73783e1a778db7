//! The [`Store`] handle: one kernel connection ([`crate::db::Connection`]; `Store::open` opens SQLite) behind a mutex, the token key, the audit key
//! and the event renderer ([`Envelopes`]). Opening it (migrations, key files) is `open.rs`; every other file adds methods.

use crate::db::Connection;
use crate::db::{Change, Settles, Tx};
use crate::error::StoreError;
use crate::events::Envelopes;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Handle to the store (its database through the storage kernel), its keys and its event renderer. Cheap to share behind an `Arc`.
pub struct Store {
    /// The one connection; writers serialise on it ([`Store::lock`]).
    pub(crate) conn: Mutex<Connection>,
    /// HMAC key of approval tokens (`token.key`, at least 32 bytes).
    pub(crate) key: Vec<u8>,
    /// Ed25519 key that signs audit checkpoints (`audit.key`).
    pub(crate) audit_key: ed25519_dalek::SigningKey,
    /// `<data_dir>/assent.db`.
    pub(crate) db_path: PathBuf,
    /// How long a minted token stays redeemable (ms).
    pub(crate) token_ttl_ms: i64,
    /// Renders the AAEP and MPLP events the store writes (the server's `WireEnvelopes`).
    pub(crate) envelopes: Arc<dyn Envelopes>,
}

impl Store {
    /// How long a write waits for a lock held by another process before failing (default 10 s).
    pub fn set_busy_timeout(&self, d: std::time::Duration) -> Result<(), StoreError> {
        match &*self.lock() {
            Connection::Sqlite(c) => Ok(c.busy_timeout(d)?),
            // Postgres waits on its `lock_timeout`, set when the session opens.
            Connection::Postgres(_) => Ok(()),
        }
    }

    /// Path of the database file.
    pub fn db_path(&self) -> &Path {
        &self.db_path
    }

    /// The connection, waiting for other in-process writers; a poisoned lock is taken over.
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite consistent (transactions roll back on drop).
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The one write transaction over the kernel ([`crate::db::Conn::write`]): runs `f` after `BEGIN
    /// IMMEDIATE` and commits when it returns `Ok` or an error that [`Settles::keeps_writes`]
    /// (an audited refusal); any other `Err` rolls every write of `f` back. This is how every
    /// state change is written together with its audit record.
    ///
    /// Every write reports [`Change::Events`] (nearly all append audit or AAEP records; a
    /// spare notification costs a wake-up); the closures report what else they changed
    /// (an approval, a clarification, a review, the subscriptions), NOTIFYed on Postgres at
    /// commit.
    pub(crate) fn write<T, E: Settles>(
        &self,
        f: impl FnOnce(&Tx<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let conn = self.lock();
        conn.conn().write(|tx| {
            tx.changed(Change::Events);
            f(tx)
        })
    }
}

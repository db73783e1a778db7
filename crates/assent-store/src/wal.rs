//! The SQLite WAL checkpoint, moved out of the write lock (issue 13 §4).
//!
//! SQLite's automatic checkpoint runs inside the `COMMIT` of the writer that crosses 1,000 WAL
//! pages, while that writer holds the store's one connection: every writer queued behind it
//! waits for the copy of the WAL into the database file and its fsync. The store's writer
//! connection turns it off (`wal_autocheckpoint=0`, [`WRITER_PRAGMAS`]); instead
//!
//! - a [`Checkpointer`] thread with its own connection runs `PRAGMA wal_checkpoint(PASSIVE)`
//!   when a commit nudged it (at most once per [`PAUSE`]), beside the writers, never blocking
//!   them (a passive checkpoint copies what is committed and stops at anything newer);
//! - the WAL stays bounded whatever the load: a writer that commits while the WAL file is over
//!   [`WAL_LIMIT`] bytes checkpoints inline, still holding the connection (so no other write
//!   interleaves and the checkpoint completes), after its group's members were answered; the
//!   next write then restarts the WAL from its start, and `journal_size_limit` truncates the
//!   file back to [`WAL_KEEP`] bytes.
//!
//! Nothing here is about durability: a commit is durable in the WAL (fsync, `synchronous=FULL`)
//! before any answer; a checkpoint only moves committed pages into the database file.

use crate::db_value::DbError;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// WAL file size (bytes) past which the committing writer checkpoints inline (16 MiB).
pub const WAL_LIMIT: u64 = 16 << 20;

/// Size (bytes) the WAL file is truncated to when it restarts (`journal_size_limit`, 4 MiB).
pub const WAL_KEEP: u64 = 4 << 20;

/// The least time between two background checkpoints.
pub const PAUSE: Duration = Duration::from_millis(100);

/// Pragmas of the store's writer connection: no automatic checkpoint inside a commit, the WAL
/// truncated to [`WAL_KEEP`] when it restarts, and temporary files in memory: each member of a
/// group commit runs in a `SAVEPOINT`, whose sub-journal (a copy of every page the member is
/// first to touch) would otherwise spill to a temporary file past 64 KiB.
pub(crate) const WRITER_PRAGMAS: &str =
    "PRAGMA wal_autocheckpoint=0; PRAGMA journal_size_limit=4194304; PRAGMA temp_store=MEMORY;";

/// The background checkpoint thread of one SQLite store, and where its WAL file is. Dropping
/// it stops the thread (after the checkpoint it may be running).
pub(crate) struct Checkpointer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    wal: PathBuf,
}

/// What the store tells its thread: a commit happened since the last checkpoint (`due`), stop.
#[derive(Default)]
struct Shared {
    flags: Mutex<Flags>,
    cv: Condvar,
}

#[derive(Default)]
struct Flags {
    due: bool,
    stop: bool,
}

impl Shared {
    fn flags(&self) -> std::sync::MutexGuard<'_, Flags> {
        self.flags.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Checkpointer {
    /// Starts the thread over the database file `db` (its own connection). Errors: the
    /// connection could not be opened, or the thread not started (`Unusable`).
    pub(crate) fn start(db: &Path) -> Result<Self, DbError> {
        let conn = crate::db_sqlite::open(db)?;
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("assent-wal-checkpoint".into())
            .spawn(move || run(&conn, &s))
            .map_err(|e| DbError::Unusable(format!("the checkpoint thread: {e}")))?;
        let mut wal = db.as_os_str().to_owned();
        wal.push("-wal");
        Ok(Checkpointer {
            shared,
            thread: Some(thread),
            wal: wal.into(),
        })
    }

    /// A commit happened: the thread checkpoints soon (never waits).
    pub(crate) fn nudge(&self) {
        self.shared.flags().due = true;
        self.shared.cv.notify_one();
    }

    /// Whether the WAL file is over [`WAL_LIMIT`] (the committing writer must checkpoint).
    pub(crate) fn over_limit(&self) -> bool {
        std::fs::metadata(&self.wal).is_ok_and(|m| m.len() > WAL_LIMIT)
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.shared.flags().stop = true;
        self.shared.cv.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The thread: waits for a nudge, checkpoints, pauses [`PAUSE`]; until told to stop.
fn run(conn: &rusqlite::Connection, s: &Shared) {
    loop {
        {
            let mut f = s.flags();
            while !f.due && !f.stop {
                f = s.cv.wait(f).unwrap_or_else(|p| p.into_inner());
            }
            if f.stop {
                return;
            }
            f.due = false;
        }
        // A failed checkpoint (busy, I/O) is retried at the next nudge; the writer's inline
        // checkpoint bounds the WAL meanwhile.
        let _ = checkpoint(conn);
        let f = s.flags();
        drop(
            s.cv.wait_timeout_while(f, PAUSE, |f| !f.stop)
                .unwrap_or_else(|p| p.into_inner()),
        );
    }
}

/// `PRAGMA wal_checkpoint(PASSIVE)` on `conn`: copies the committed WAL frames no reader
/// needs into the database file, without waiting for anyone.
pub(crate) fn checkpoint(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
}

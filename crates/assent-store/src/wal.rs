//! The SQLite WAL checkpoint, moved out of the write lock (issue 13 §4).
//!
//! SQLite's automatic checkpoint runs inside the `COMMIT` of the writer that crosses 1,000 WAL
//! pages, while that writer holds the store's one connection: every writer queued behind it
//! waits for the copy of the WAL into the database file and its fsync. The store's writer
//! connection turns it off (`wal_autocheckpoint=0`, [`WRITER_PRAGMAS`]); instead
//!
//! - a [`Checkpointer`] thread with its own connection runs `PRAGMA wal_checkpoint(PASSIVE)`
//!   after every [`EVERY`] commits (at most once per [`PAUSE`]), beside the writers, never
//!   blocking them (a passive checkpoint copies what is committed and stops at anything
//!   newer); about as often as SQLite's own 1,000-page checkpoint, not after every commit;
//! - the WAL stays small: a passive checkpoint beside busy writers never catches up with the
//!   newest frames, so SQLite never restarts the WAL from its start. After each background
//!   pass, the next committing writer checkpoints inline what is left (the frames of the
//!   commits made during the pass: little), still holding the connection, so no other write
//!   interleaves and the checkpoint completes; the next write then restarts the WAL from
//!   the file's start (writing over the blocks it has), and `journal_size_limit` truncates a
//!   file grown past [`WAL_KEEP`] back to it. The writer does this after its group's members
//!   were answered;
//! - and bounded whatever the load: a writer that commits while the WAL file is over
//!   [`WAL_LIMIT`] bytes (the background thread fell behind) checkpoints inline the same way.
//!
//! Nothing here is about durability: a commit is durable in the WAL (fdatasync, `synchronous=FULL`)
//! before any answer; a checkpoint only moves committed pages into the database file.

use crate::db_value::DbError;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// WAL file size (bytes) past which the committing writer checkpoints inline (16 MiB).
pub const WAL_LIMIT: u64 = 16 << 20;

/// Size (bytes) the WAL file is truncated to when it restarts (`journal_size_limit`, 16 MiB,
/// as [`WAL_LIMIT`]): a WAL file that stays at the size its load gives it is written over in
/// place, while one truncated at every restart and grown again has its blocks allocated anew,
/// so every commit's fsync wrote the file system's allocation too (measured at 16 agents,
/// BENCHMARKS.md 2026-12-04: the commit's p99 5.0 → 1.7 ms, the wake-up's 16–17 → 12 ms).
/// A file past [`WAL_LIMIT`] makes every commit checkpoint inline until the WAL can restart
/// (no reader's snapshot holds it), and that restart truncates it back.
pub const WAL_KEEP: u64 = 16 << 20;

// A WAL file kept at its size is never over the limit (else every commit would checkpoint
// inline).
const _: () = assert!(WAL_KEEP <= WAL_LIMIT);

/// The least time between two background checkpoints.
pub const PAUSE: Duration = Duration::from_millis(100);

/// Commits between two background checkpoints (a commit writes a few pages to the WAL).
pub const EVERY: u32 = 200;

/// Pragmas of the store's writer connection: no automatic checkpoint inside a commit, the WAL
/// truncated to [`WAL_KEEP`] when it restarts, and temporary files in memory: each member of a
/// group commit runs in a `SAVEPOINT`, whose sub-journal (a copy of every page the member is
/// first to touch) would otherwise spill to a temporary file past 64 KiB.
pub(crate) const WRITER_PRAGMAS: &str =
    "PRAGMA wal_autocheckpoint=0; PRAGMA journal_size_limit=16777216; PRAGMA temp_store=MEMORY;";

/// The background checkpoint thread of one SQLite store, and where its WAL file is. Dropping
/// it stops the thread (after the checkpoint it may be running).
pub(crate) struct Checkpointer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    wal: PathBuf,
}

/// What the store tells its thread: commits since the last checkpoint, stop.
#[derive(Default)]
struct Shared {
    flags: Mutex<Flags>,
    cv: Condvar,
}

#[derive(Default)]
struct Flags {
    commits: u32,
    stop: bool,
    /// A background pass ended since the writer last finished a checkpoint.
    passed: bool,
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

    /// A commit happened: the thread checkpoints after [`EVERY`] of them (never waits).
    pub(crate) fn nudge(&self) {
        let mut f = self.shared.flags();
        f.commits = f.commits.saturating_add(1);
        if f.commits >= EVERY {
            self.shared.cv.notify_one();
        }
    }

    /// Whether the committing writer should finish a checkpoint inline: a background pass
    /// ended since it last did (once per pass: this resets it), or the WAL file is over
    /// [`WAL_LIMIT`].
    pub(crate) fn writer_due(&self) -> bool {
        std::mem::take(&mut self.shared.flags().passed)
            || std::fs::metadata(&self.wal).is_ok_and(|m| m.len() > WAL_LIMIT)
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

/// The thread: waits for [`EVERY`] commits, checkpoints, pauses [`PAUSE`]; until told to
/// stop.
fn run(conn: &rusqlite::Connection, s: &Shared) {
    loop {
        {
            let mut f = s.flags();
            while f.commits < EVERY && !f.stop {
                f = s.cv.wait(f).unwrap_or_else(|p| p.into_inner());
            }
            if f.stop {
                return;
            }
            f.commits = 0;
        }
        // A failed checkpoint (busy, I/O) is retried at the next nudge; the writer's inline
        // checkpoint bounds the WAL meanwhile.
        let _ = checkpoint(conn);
        let mut f = s.flags();
        f.passed = true;
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

#[cfg(test)]
mod tests {
    /// The pragma's literal says [`super::WAL_KEEP`].
    #[test]
    fn the_writer_keeps_the_wal_at_wal_keep() {
        let pragma = format!("PRAGMA journal_size_limit={};", super::WAL_KEEP);
        assert!(super::WRITER_PRAGMAS.contains(&pragma));
    }
}

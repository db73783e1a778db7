//! Reads beside the writer (issue 13 §4 and item 5): a small pool of read sessions, so a read
//! (an agent's long-poll finding its approval decided) does not queue behind the group
//! commits that hold the one writer session. Postgres lets a reader see the last committed
//! state while a write is open; a write's answer is sent only after its commit, so whatever
//! that answer led to reads it back. Used on Postgres for every `Store::read` (`reads.rs`
//! says why SQLite's stay on the writer connection), and on both backends for dashboard
//! session lookups (`ui_sessions.rs`), which must not wait behind a group commit.
//!
//! Each read runs in one snapshot ([`crate::db::Conn::snapshot`]: SQLite `BEGIN`, Postgres
//! `REPEATABLE READ, READ ONLY`), so a record read in several statements is one state. A
//! session is opened on demand, at most [`SESSIONS`] of them; a read finding them all busy
//! waits for one. A Postgres session the server closed is dropped and replaced when needed.

use crate::db::{self, Conn, Connection, Database};
use crate::error::StoreError;
use std::sync::{Condvar, Mutex, MutexGuard};

/// The most read sessions one store opens.
pub const SESSIONS: usize = 4;

/// The read sessions of one store: the idle ones, and how many are open in all.
#[derive(Default)]
pub(crate) struct Readers {
    state: Mutex<Pool>,
    freed: Condvar,
}

#[derive(Default)]
struct Pool {
    idle: Vec<Connection>,
    open: usize,
}

impl Readers {
    fn pool(&self) -> MutexGuard<'_, Pool> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle session, a new one while fewer than [`SESSIONS`] are open, or the next one
    /// given back.
    fn take(&self, database: &Database) -> db::Result<Connection> {
        let mut p = self.pool();
        loop {
            if let Some(c) = p.idle.pop() {
                if closed(&c) {
                    p.open -= 1;
                    continue;
                }
                return Ok(c);
            }
            if p.open < SESSIONS {
                p.open += 1;
                drop(p);
                let c = database.connect();
                if c.is_err() {
                    self.pool().open -= 1;
                    self.freed.notify_one();
                }
                return c;
            }
            p = self.freed.wait(p).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Keeps `c` for the next read, unless it is a Postgres session the server closed.
    fn give_back(&self, c: Connection) {
        let mut p = self.pool();
        if closed(&c) {
            p.open -= 1;
        } else {
            p.idle.push(c);
        }
        drop(p);
        self.freed.notify_one();
    }
}

/// Whether `c` is a Postgres session the server closed.
fn closed(c: &Connection) -> bool {
    matches!(c, Connection::Postgres(pg) if pg.is_closed())
}

/// A session taken from the pool, given back when dropped (also when the read panicked: its
/// snapshot was rolled back by then).
struct Lease<'a> {
    readers: &'a Readers,
    conn: Option<Connection>,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            self.readers.give_back(c);
        }
    }
}

impl Readers {
    /// Runs `f` in one read snapshot on a read session of the pool over `database`, not on
    /// the writer connection: it neither waits for an open group commit nor blocks one. `f`
    /// must only read (it may run twice: a read that failed because its Postgres session had
    /// been closed by the server is run again once on a new session). Errors: `Db` (a
    /// session that could not be opened, or `f`'s).
    pub(crate) fn read<T>(
        &self,
        database: &Database,
        f: impl Fn(Conn<'_>) -> db::Result<T>,
    ) -> Result<T, StoreError> {
        let mut tries = 0;
        loop {
            tries += 1;
            let lease = Lease {
                readers: self,
                conn: Some(self.take(database)?),
            };
            let c = lease.conn.as_ref().expect("taken above");
            match c.conn().snapshot(&f) {
                Err(_) if tries == 1 && closed(c) => continue,
                out => return Ok(out?),
            }
        }
    }
}

//! [`Store::readiness`] (`GET /readyz`): whether this gateway can serve now. Over SQLite the
//! database file must still be at its path and open and read afresh, its schema be current,
//! and its write lock be free; over Postgres the session must answer, the schema be current,
//! the audit log readable and this process's clock within [`MAX_CLOCK_SKEW_MS`] of the
//! database's; on both, this store's audit key must not have been taken over by another key
//! set (`key_replaced.rs`). Never an error: a failure is the answer ([`NotReady`]).

use crate::db::Conn;
pub use crate::kit::MAX_CLOCK_SKEW_MS;
use crate::kit::skewed;
use crate::migrate::{SchemaState, schema_state};
use crate::ops::SCHEMA_VERSION;
use crate::store::Store;
use rusqlite::{Connection, ErrorCode, OpenFlags};
use serde::Serialize;
use std::time::Duration;

/// Why a gateway is not ready: a stable `reason` and a sentence (no file paths: `/readyz`
/// needs no key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotReady {
    /// `database_missing`, `database_unreadable`, `database_locked`, `database_error`,
    /// `database_unreachable`, `schema_behind`, `schema_ahead`, `clock_skew` (PostgreSQL:
    /// this replica's clock differs from the database's, [`MAX_CLOCK_SKEW_MS`]) or
    /// `audit_key_replaced` (another key set took the database over: restart with the new
    /// keys).
    pub reason: &'static str,
    /// What is wrong, in a sentence of ours: never the driver's error text, which may name
    /// the database file's path (found by review: SQLite's `unable to open database file:
    /// /srv/…/assent.db` reached the unauthenticated `/readyz` body).
    pub message: String,
    /// The driver's error behind it, for the gateway's log only (not serialised).
    #[serde(skip)]
    pub detail: Option<String>,
}

/// The answer of [`Store::readiness`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Readiness {
    /// The database's `PRAGMA user_version`, when it could be read.
    pub schema_version: Option<i64>,
    /// `None`: ready.
    pub problem: Option<NotReady>,
}

/// `NotReady` with `reason` and `message`.
fn not_ready(reason: &'static str, message: impl Into<String>) -> NotReady {
    NotReady {
        reason,
        message: message.into(),
        detail: None,
    }
}

/// `NotReady` with `reason` and `message`, the error `e` kept as its log-only detail.
fn failed(reason: &'static str, message: &str, e: impl std::fmt::Display) -> NotReady {
    NotReady {
        detail: Some(e.to_string()),
        ..not_ready(reason, message)
    }
}

impl Store {
    /// Whether this gateway can serve (`GET /readyz`): its database file is still at its path
    /// and opens and reads afresh (what a restart would find), its schema version is
    /// [`SCHEMA_VERSION`], and the write lock can be taken within 500 ms (the check writes
    /// nothing). Holds the store's connection for the check (a fraction of a millisecond,
    /// unless the write lock is held elsewhere). Never fails: a failure is the answer.
    pub fn readiness(&self) -> Readiness {
        let conn = self.lock();
        let mut found = None;
        let problem = match &*conn {
            crate::db::Connection::Sqlite(c) => self.ready_problem(c, &mut found).err(),
            crate::db::Connection::Postgres(_) => pg_problem(conn.conn(), &mut found)
                .and_then(|()| clock_problem(conn.conn()))
                .err(),
        };
        let problem = problem.or_else(|| self.replaced_problem(conn.conn()));
        Readiness {
            schema_version: found,
            problem,
        }
    }

    /// The checks of [`Store::readiness`] in order; `found` gets the schema version read.
    fn ready_problem(&self, live: &Connection, found: &mut Option<i64>) -> Result<(), NotReady> {
        if !self.db_path.exists() {
            return Err(not_ready(
                "database_missing",
                "the database file is no longer in the data directory (removed or moved)",
            ));
        }
        let unreadable = |e: rusqlite::Error| {
            let why = "the database file cannot be opened and read afresh";
            failed("database_unreadable", why, e)
        };
        let fresh = Connection::open_with_flags(&self.db_path, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(unreadable)?;
        fresh
            .busy_timeout(Duration::from_millis(500))
            .map_err(unreadable)?;
        let version: i64 = fresh
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(unreadable)?;
        *found = Some(version);
        fresh
            .query_row("SELECT max(seq) FROM audit", [], |r| {
                r.get::<_, Option<i64>>(0)
            })
            .map_err(unreadable)?;
        if version < SCHEMA_VERSION {
            return Err(not_ready(
                "schema_behind",
                format!("schema version {version}, this assent needs {SCHEMA_VERSION}"),
            ));
        }
        if version > SCHEMA_VERSION {
            return Err(not_ready(
                "schema_ahead",
                format!(
                    "schema version {version} is newer than this assent ({SCHEMA_VERSION}); upgrade assent"
                ),
            ));
        }
        write_lock_free(live)
    }
}

impl Store {
    /// `audit_key_replaced` when another key set's take-over of this store's audit key is
    /// recorded (`key_replaced::replaced_by`, through the store's watch): this replica writes and signs
    /// nothing more, so it is not ready until it is restarted with the new keys.
    fn replaced_problem(&self, conn: Conn<'_>) -> Option<NotReady> {
        let key = self.audit_key.verifying_key();
        match self.replaced.replaced_by(conn, &key) {
            Ok(None) => None,
            Ok(Some((seq, theirs))) => Some(not_ready(
                "audit_key_replaced",
                crate::key_replaced::replaced_message(&hex::encode(key.to_bytes()), &theirs, seq),
            )),
            Err(e) => Some(failed(
                "database_unreadable",
                "the audit checkpoints cannot be read",
                e,
            )),
        }
    }
}

/// Takes and releases the write lock (`BEGIN IMMEDIATE; ROLLBACK`) within 500 ms, restoring
/// the connection's busy timeout after.
fn write_lock_free(live: &Connection) -> Result<(), NotReady> {
    let error = |e: rusqlite::Error| {
        failed(
            "database_error",
            "the database's write lock cannot be checked",
            e,
        )
    };
    let old: i64 = live
        .pragma_query_value(None, "busy_timeout", |r| r.get(0))
        .map_err(error)?;
    live.busy_timeout(Duration::from_millis(500))
        .map_err(error)?;
    let taken = live.execute_batch("BEGIN IMMEDIATE; ROLLBACK;");
    let restored = live.busy_timeout(Duration::from_millis(old.max(0) as u64));
    match taken {
        Err(e)
            if matches!(
                e.sqlite_error_code(),
                Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
            ) =>
        {
            Err(not_ready(
                "database_locked",
                "another program holds the database's write lock; decisions cannot be written",
            ))
        }
        Err(e) => Err(error(e)),
        Ok(()) => restored.map_err(error),
    }
}

/// `clock_skew` when this process's clock and the database's (`clock_timestamp()`) differ, or
/// may given the query's round trip, by more than [`MAX_CLOCK_SKEW_MS`] ([`skewed`]). Found by
/// review: each replica judged expiry by its own clock, and nothing showed one that had
/// drifted.
fn clock_problem(conn: Conn<'_>) -> Result<(), NotReady> {
    let before = crate::kit::now_ms();
    let db = conn
        .shared_clock_ms(before)
        .map_err(|e| failed("database_unreachable", "the database does not answer", e))?;
    match skewed(before, db, crate::kit::now_ms()) {
        Some(why) => Err(not_ready("clock_skew", why)),
        None => Ok(()),
    }
}

/// The Postgres checks of [`Store::readiness`] over the store's own session: a round trip,
/// the schema version recorded by the migrations, a read of the audit log's head, and that
/// the session may write (not a standby, not read-only transactions).
fn pg_problem(conn: Conn<'_>, found: &mut Option<i64>) -> Result<(), NotReady> {
    let unreachable = |e| failed("database_unreachable", "the database does not answer", e);
    let state = schema_state(conn).map_err(unreachable)?;
    conn.query_row("SELECT max(seq) FROM audit", [], |r| {
        r.get::<Option<i64>>(0)
    })
    .map_err(|e| failed("database_unreadable", "the audit log cannot be read", e))?;
    // Found by review: a standby reached after a failover (a stale address, a multi-host URL
    // without `target_session_attrs`), or a database set to read-only transactions (as some
    // managed services do when the disk is full), answered ready while every write failed.
    let read_only: bool = conn
        .query_row(
            "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'",
            [],
            |r| r.get(0),
        )
        .map_err(|e| failed("database_unreachable", "the database does not answer", e))?;
    if read_only {
        return Err(not_ready(
            "database_read_only",
            "the database takes no writes here (a standby, or read-only transactions)",
        ));
    }
    match state {
        SchemaState::Current(v) => {
            *found = Some(i64::from(v));
            Ok(())
        }
        SchemaState::Behind { at, latest } => {
            *found = Some(i64::from(at));
            Err(not_ready(
                "schema_behind",
                format!("schema version {at}, this assent needs {latest}"),
            ))
        }
        SchemaState::Newer { at, latest } => {
            *found = Some(i64::from(at));
            Err(not_ready(
                "schema_ahead",
                format!("schema version {at} is newer than this assent ({latest}); upgrade assent"),
            ))
        }
    }
}

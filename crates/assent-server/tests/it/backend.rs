//! Which database the behaviour suite runs on, and backend-neutral access to it for the tests
//! that look at (or tamper with) the rows behind the gateway's back.
//!
//! `ASSENT_TEST_BACKEND=postgres` runs every gateway of the suite on a database of its own in
//! the throw-away PostgreSQL cluster (`assent_testkit::pg`, issue 13 §1), copied from a
//! template migrated once per run; unset or `sqlite`, on a SQLite file in the test's data
//! directory. A data directory keeps its database for the life of
//! the test binary, so a test that stops a gateway and starts another over the same directory
//! (a restart) finds its rows again, as it does with the file. `scripts/test.sh` runs the suite
//! once per backend. A test that only one backend can run (it renames
//! the file) calls [`sqlite_only`] with the reason, which is printed when it is skipped.

use assent_store::db::Database;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};

/// Whether this run of the suite is on PostgreSQL (`ASSENT_TEST_BACKEND=postgres`); panics on
/// an unknown value, so a typo never silently runs the SQLite suite twice.
pub fn on_postgres() -> bool {
    match std::env::var("ASSENT_TEST_BACKEND").as_deref() {
        Err(_) | Ok("" | "sqlite") => false,
        Ok("postgres") => true,
        Ok(other) => panic!("ASSENT_TEST_BACKEND={other}: expected sqlite or postgres"),
    }
}

/// `true` (after printing why) when the suite runs on PostgreSQL and the calling test can only
/// run on SQLite: the test returns at once. `why` names what has no PostgreSQL counterpart.
pub fn sqlite_only(why: &str) -> bool {
    let skip = on_postgres();
    if skip {
        eprintln!("skipped on PostgreSQL: {why}");
    }
    skip
}

/// The schema each data directory of this binary runs on (PostgreSQL only).
static SCHEMAS: LazyLock<Mutex<HashMap<PathBuf, assent_testkit::pg::Schema>>> =
    LazyLock::new(Mutex::default);

/// The database of the gateway over `dir`: its SQLite file, or the PostgreSQL database this
/// directory was given the first time (a fresh copy of the migrated template, with keys made in
/// `dir` as `assent keys init` would).
pub fn database(dir: &Path) -> Database {
    if !on_postgres() {
        return Database::Sqlite {
            path: dir.join("assent.db"),
        };
    }
    let mut schemas = SCHEMAS.lock().unwrap_or_else(|p| p.into_inner());
    let schema = schemas.entry(dir.to_path_buf()).or_insert_with(|| {
        assent_store::keys::init(dir).unwrap();
        off_runtime(|| assent_testkit::pg::from_template(migrate_template))
            .expect("ASSENT_TEST_BACKEND=postgres needs the cluster (ASSENT_TEST_NO_PG is set)")
    });
    Database::Postgres {
        url: schema.url.clone(),
    }
}

/// Migrates the template every PostgreSQL gateway's database is copied from, as a gateway's
/// start-up would (its start-up then finds the schema current).
fn migrate_template(url: &str) {
    let db = Database::Postgres { url: url.into() };
    let conn = db.connect().unwrap();
    assent_store::migrate::migrate(conn.conn(), "template").unwrap();
}

/// One statement parameter: a number or a text.
pub enum Param {
    /// An integer column (`BIGINT` / `INTEGER`).
    Int(i64),
    /// A text column.
    Text(String),
}

impl From<i64> for Param {
    fn from(n: i64) -> Self {
        Param::Int(n)
    }
}

impl From<&str> for Param {
    fn from(s: &str) -> Self {
        Param::Text(s.into())
    }
}

impl From<&String> for Param {
    fn from(s: &String) -> Self {
        Param::Text(s.clone())
    }
}

/// A connection of the test's own to the gateway's database, independent of assent's store
/// code: rusqlite on the file, or the `postgres` client on the schema. SQL is written once
/// with `?1`, `?2`… placeholders (rewritten to `$1`, `$2`… for PostgreSQL).
pub enum Sql {
    /// The SQLite file.
    Lite(rusqlite::Connection),
    /// The PostgreSQL schema's connection string: each statement connects on a thread of its
    /// own ([`off_runtime`]), since the sync client cannot run inside the test's runtime.
    Pg(String),
}

/// Runs `f` on a thread outside the async runtime (the sync `postgres` client, and the store
/// opening over it, start a runtime of their own, which tokio forbids inside another).
pub fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(f)
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// Runs `f` with a fresh client of the schema at `url`, off the runtime.
fn with_pg<T: Send>(url: &str, f: impl FnOnce(&mut postgres::Client) -> T + Send) -> T {
    off_runtime(|| f(&mut postgres::Client::connect(url, postgres::NoTls).unwrap()))
}

impl Sql {
    /// Connects to the database of the gateway over `dir`.
    pub fn open(dir: &Path) -> Sql {
        match database(dir) {
            Database::Sqlite { path } => Sql::Lite(rusqlite::Connection::open(path).unwrap()),
            Database::Postgres { url } => Sql::Pg(url),
        }
    }

    /// Runs `sql` with `params`: the number of rows changed, or the database's error text.
    pub fn try_exec(&mut self, sql: &str, params: &[Param]) -> Result<u64, String> {
        match self {
            Sql::Lite(c) => c
                .execute(sql, rusqlite::params_from_iter(params.iter().map(lite)))
                .map(|n| n as u64)
                .map_err(|e| e.to_string()),
            Sql::Pg(url) => with_pg(url, |c| {
                c.execute(&dollars(sql), &pg(params))
                    .map_err(|e| format!("{e}: {:?}", e.as_db_error().map(|d| d.message())))
            }),
        }
    }

    /// [`Sql::try_exec`], panicking on an error.
    pub fn exec(&mut self, sql: &str, params: &[Param]) -> u64 {
        self.try_exec(sql, params)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The rows of `sql` as text columns (`CAST(x AS TEXT)` for a number).
    pub fn rows(&mut self, sql: &str, params: &[Param]) -> Vec<Vec<String>> {
        match self {
            Sql::Lite(c) => {
                let mut st = c.prepare(sql).unwrap();
                let n = st.column_count();
                st.query_map(rusqlite::params_from_iter(params.iter().map(lite)), |r| {
                    (0..n).map(|i| r.get::<_, String>(i)).collect()
                })
                .unwrap()
                .map(Result::unwrap)
                .collect()
            }
            Sql::Pg(url) => with_pg(url, |c| {
                c.query(&dollars(sql), &pg(params))
                    .unwrap()
                    .iter()
                    .map(|r| (0..r.len()).map(|i| r.get::<_, String>(i)).collect())
                    .collect()
            }),
        }
    }

    /// The one text value `sql` selects.
    pub fn text(&mut self, sql: &str, params: &[Param]) -> String {
        let rows = self.rows(sql, params);
        assert_eq!(rows.len(), 1, "{sql}: {rows:?}");
        rows[0][0].clone()
    }

    /// The one integer `sql` selects (`count(*)`, a time).
    pub fn int(&mut self, sql: &str, params: &[Param]) -> i64 {
        match self {
            Sql::Lite(c) => c
                .query_row(
                    sql,
                    rusqlite::params_from_iter(params.iter().map(lite)),
                    |r| r.get(0),
                )
                .unwrap(),
            Sql::Pg(url) => with_pg(url, |c| {
                c.query_one(&dollars(sql), &pg(params)).unwrap().get(0)
            }),
        }
    }
}

/// A parameter as rusqlite takes it.
fn lite(p: &Param) -> rusqlite::types::Value {
    match p {
        Param::Int(n) => rusqlite::types::Value::Integer(*n),
        Param::Text(s) => rusqlite::types::Value::Text(s.clone()),
    }
}

/// The parameters as the `postgres` client takes them.
fn pg(params: &[Param]) -> Vec<&(dyn postgres::types::ToSql + Sync)> {
    params
        .iter()
        .map(|p| match p {
            Param::Int(n) => n as &(dyn postgres::types::ToSql + Sync),
            Param::Text(s) => s as &(dyn postgres::types::ToSql + Sync),
        })
        .collect()
}

/// `?N` placeholders rewritten as PostgreSQL's `$N` (the tests' SQL has no `?` in literals).
fn dollars(sql: &str) -> String {
    sql.replace('?', "$")
}

/// Counts the audit records of `kind` in the database of the gateway over `dir`.
pub fn audit_count(dir: &Path, kind: &str) -> i64 {
    Sql::open(dir).int(
        "SELECT count(*) FROM audit WHERE kind = ?1",
        &[Param::from(kind)],
    )
}

/// The first problem `audit verify` (the store's integrity check: the audit chain, and every
/// row under a seal against its records) finds in the database of the gateway over `dir`;
/// `None` when it verifies.
pub fn audit_problem(dir: &Path) -> Option<assent_store::integrity::Problem> {
    let db = database(dir);
    off_runtime(|| {
        let opts = Default::default();
        assent_store::integrity::verify_database(&db, dir, &opts).unwrap()
    })
    .problem
}

/// Another program holding the database's write lock until this is dropped: on SQLite a
/// connection in `BEGIN IMMEDIATE`; on PostgreSQL a session in a transaction holding
/// `LOCK TABLE audit IN ACCESS EXCLUSIVE MODE` (every write of the gateway appends an audit
/// record, so none can commit), on a thread of its own.
pub enum WriteBlocker {
    /// The SQLite connection in its transaction.
    Lite(rusqlite::Connection),
    /// The PostgreSQL session's thread and the sender that tells it to roll back.
    Pg(Option<(std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>)>),
}

/// Takes the write lock of the database of the gateway over `dir` (held once this returns).
pub fn block_writes(dir: &Path) -> WriteBlocker {
    match database(dir) {
        Database::Sqlite { path } => {
            let c = rusqlite::Connection::open(path).unwrap();
            c.execute_batch("BEGIN IMMEDIATE").unwrap();
            WriteBlocker::Lite(c)
        }
        Database::Postgres { url } => {
            let (held_tx, held) = std::sync::mpsc::channel();
            let (release, released) = std::sync::mpsc::channel::<()>();
            let thread = std::thread::spawn(move || {
                let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                c.batch_execute("BEGIN; LOCK TABLE audit IN ACCESS EXCLUSIVE MODE")
                    .unwrap();
                held_tx.send(()).unwrap();
                let _ = released.recv();
                c.batch_execute("ROLLBACK").unwrap();
            });
            held.recv().unwrap();
            WriteBlocker::Pg(Some((release, thread)))
        }
    }
}

impl Drop for WriteBlocker {
    /// Releases the lock (rolls the blocking transaction back) and waits until it is released.
    fn drop(&mut self) {
        match self {
            WriteBlocker::Lite(c) => c.execute_batch("ROLLBACK").unwrap(),
            WriteBlocker::Pg(held) => {
                if let Some((release, thread)) = held.take() {
                    let _ = release.send(());
                    thread.join().unwrap();
                }
            }
        }
    }
}

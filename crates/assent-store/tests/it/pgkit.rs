//! The store tests' databases: a fresh SQLite file or a fresh schema of the shared throw-away
//! Postgres cluster (`assent_testkit::pg`), and [`both`] to run one test on each; or, for the
//! tests that open a store, a fresh database copied from a migrated template ([`both_migrated`]).

use assent_store::db::{Conn, Database, FromValue, Params};
pub use assent_testkit::pg::cluster;

/// A new empty schema of its own for one test, as a [`Database`]; `None` when
/// `ASSENT_TEST_NO_PG=1`.
pub fn fresh_pg() -> Option<Database> {
    assent_testkit::pg::fresh_schema().map(|url| Database::Postgres { url })
}

/// A new database of its own, copied from a template migrated once per run (a store opening
/// it finds its schema current), as a [`Database`]; `None` when `ASSENT_TEST_NO_PG=1`.
pub fn migrated_pg() -> Option<Database> {
    assent_testkit::pg::from_template(|url| {
        let db = Database::Postgres { url: url.into() };
        let conn = db.connect().unwrap();
        assent_store::migrate::migrate(conn.conn(), "template").unwrap();
    })
    .map(|s| Database::Postgres { url: s.url })
}

/// A new SQLite database file in a temporary directory (kept while the `TempDir` lives).
pub fn fresh_sqlite() -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("assent.db");
    (dir, Database::Sqlite { path })
}

/// Runs `f` against a fresh SQLite file and then a fresh Postgres schema.
pub fn both(mut f: impl FnMut(&Database)) {
    let (_dir, lite) = fresh_sqlite();
    f(&lite);
    if let Some(pg) = fresh_pg() {
        f(&pg);
    }
}

/// [`both`] for a test that opens a store: the Postgres half on [`migrated_pg`] (migrating a
/// fresh schema costs the cluster about 0.3 s of CPU; copying the template a sixth of it).
pub fn both_migrated(mut f: impl FnMut(&Database)) {
    let (_dir, lite) = fresh_sqlite();
    f(&lite);
    if let Some(pg) = migrated_pg() {
        f(&pg);
    }
}

/// [`both`] with one session of each database: runs `f` with the database and the session.
pub fn both_connected(mut f: impl FnMut(&Database, Conn<'_>)) {
    both(|db| {
        let conn = db.connect().unwrap();
        f(db, conn.conn());
    });
}

/// The first column of every row `sql` (with `p`) reads on `c`, in order; panics on an error.
pub fn column<T: FromValue>(c: Conn<'_>, sql: &str, p: impl Params) -> Vec<T> {
    c.query_map(sql, p, |r| r.get(0)).unwrap()
}

/// The first column of the first row `sql` (with `p`) reads on `c`; panics on an error or
/// when there is no row.
pub fn value<T: FromValue>(c: Conn<'_>, sql: &str, p: impl Params) -> T {
    c.query_row(sql, p, |r| r.get(0)).unwrap()
}

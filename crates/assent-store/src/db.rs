//! The storage kernel: one API over SQLite (rusqlite) and Postgres (the sync `postgres`
//! client), so the store's logic and SQL are written once (issue 13).
//!
//! - [`Database`] says where the data is; [`Connection`] owns a session, [`Conn`] borrows one.
//! - SQL is written with numbered `?N` parameters; on Postgres the kernel rewrites them to
//!   `$N` ([`dollar_params`]) and prepares each text once per session.
//! - Parameters are the kernel's [`Value`]s (`params![…]`, arrays, `[]`); booleans bind as
//!   0/1 on SQLite and as `BOOLEAN` on Postgres. Columns are read as [`ValueRef`] (what the
//!   strict reader tells apart) or any [`FromValue`], a row's first columns as a tuple by
//!   [`tuple`]; no row is `Err(NoRows)`, made `None` by [`OptionalExtension::optional`].
//! - [`Conn::write`] is the one write transaction: `BEGIN IMMEDIATE` on SQLite, `BEGIN` plus
//!   the schema's advisory write lock on Postgres, so every write in every process is
//!   serialised as SQLite serialises them; the [`Change`]s it collects are NOTIFYed in the
//!   commit's round trip, and [`listen`] hears them in other processes.
//!
//! Backend glue lives in `db_sqlite.rs` and `db_pg.rs`, the values in `db_value.rs`, the
//! rewrite in `db_sql.rs`, the listener in `db_listen.rs`; this file is the facade.

pub use crate::db_listen::{Heard, Listener, listen};
pub use crate::db_pg::PgConn;
use crate::db_pg::value_ref as pg_value_ref;
pub use crate::db_sql::dollar_params;
use crate::db_sqlite::value_ref as lite_value_ref;
pub use crate::db_value::{
    Change, DbError, FromValue, OptionalExtension, Params, Settles, ToValue, Value, ValueRef,
};
use std::cell::RefCell;
use std::ops::ControlFlow;
use std::path::PathBuf;

/// The kernel's result.
pub type Result<T, E = DbError> = std::result::Result<T, E>;

/// PostgreSQL's clock as Unix ms (`clock_timestamp()`: the time of the statement's read, not
/// the transaction's start), an SQL expression.
pub const PG_CLOCK_MS: &str = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)";

thread_local! {
    /// Whether this thread runs a `Store::batch` whose write transaction is open on its
    /// connection (set by `batch.rs`): only then does a snapshot read that transaction.
    pub(crate) static HOLDS_BATCH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `params![a, b, c]`: parameters of different types, bound as `?1, ?2, ?3` (rusqlite's
/// macro, for the kernel's [`Params`]).
#[macro_export]
macro_rules! params {
    () => { [] as [&dyn $crate::db::ToValue; 0] };
    ($($p:expr),+ $(,)?) => { [$(&$p as &dyn $crate::db::ToValue),+] };
}

/// Where a store keeps its data: a SQLite file, or a Postgres database (the URL's
/// `options=-csearch_path=…` picks the schema; `public` by default).
#[derive(Clone)]
pub enum Database {
    /// The SQLite file (`<data_dir>/assent.db`).
    Sqlite {
        /// Its path.
        path: PathBuf,
    },
    /// A Postgres database.
    Postgres {
        /// A `postgres://` URL or a `key=value` connection string (may hold a password).
        url: String,
    },
}

impl std::fmt::Debug for Database {
    /// The path, or "postgres" alone: the URL may hold a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Database::Sqlite { path } => write!(f, "sqlite:{}", path.display()),
            Database::Postgres { .. } => f.write_str("postgres"),
        }
    }
}

impl Database {
    /// Opens a session: SQLite with the pragmas assent relies on (WAL, `synchronous=FULL`,
    /// foreign keys, `busy_timeout` 10 s), Postgres with `lock_timeout` and
    /// `idle_in_transaction_session_timeout` 10 s (`Unusable` when its schema does not exist
    /// or its encoding is not UTF8).
    pub fn connect(&self) -> Result<Connection> {
        Ok(match self {
            Database::Sqlite { path } => Connection::Sqlite(crate::db_sqlite::open(path)?),
            Database::Postgres { url } => Connection::Postgres(Box::new(PgConn::connect(url)?)),
        })
    }
}

/// Which engine a connection talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// SQLite.
    Sqlite,
    /// Postgres.
    Postgres,
}

/// An owned session.
pub enum Connection {
    /// A SQLite connection.
    Sqlite(rusqlite::Connection),
    /// A Postgres session.
    Postgres(Box<PgConn>),
}

impl Connection {
    /// The session, borrowed for statements and transactions.
    pub fn conn(&self) -> Conn<'_> {
        match self {
            Connection::Sqlite(c) => Conn::Sqlite(c),
            Connection::Postgres(c) => Conn::Postgres(c),
        }
    }
}

/// A borrowed session, in or out of a transaction. Methods are named after rusqlite's.
#[derive(Clone, Copy)]
pub enum Conn<'c> {
    /// A SQLite connection.
    Sqlite(&'c rusqlite::Connection),
    /// A Postgres session.
    Postgres(&'c PgConn),
}

/// A statement prepared through its session's cache.
pub enum Stmt<'c> {
    /// rusqlite's cached statement.
    Sqlite(rusqlite::CachedStatement<'c>),
    /// A Postgres prepared statement and its session.
    Postgres(&'c PgConn, postgres::Statement),
}

impl<'c> Conn<'c> {
    /// The engine.
    pub fn backend(&self) -> Backend {
        match self {
            Conn::Sqlite(_) => Backend::Sqlite,
            Conn::Postgres(_) => Backend::Postgres,
        }
    }

    /// `now` as SQL: the later of parameter `?{param}` (this process's clock, Unix ms) and, on
    /// PostgreSQL, the database's clock ([`PG_CLOCK_MS`]) — when a row shared by replicas
    /// ends, read so that neither a replica's slow clock nor a slow database keeps it alive.
    pub fn later_clock_sql(&self, param: u8) -> String {
        match self.backend() {
            Backend::Postgres => format!("GREATEST(CAST(?{param} AS BIGINT), {PG_CLOCK_MS})"),
            Backend::Sqlite => format!("?{param}"),
        }
    }

    /// The time (Unix ms) that rows shared by replicas are compared against: on PostgreSQL
    /// the database's clock (`clock_timestamp()`), since each replica's own runs fast or slow;
    /// on SQLite, whose one process has one clock, the caller's `now`. Errors: the query's.
    pub fn shared_clock_ms(&self, now: i64) -> Result<i64> {
        if self.backend() != Backend::Postgres {
            return Ok(now);
        }
        self.query_row(&format!("SELECT {PG_CLOCK_MS}"), [], |r| r.get(0))
    }

    /// `sql` (with `?N` parameters) prepared, from the session's cache when it was before.
    pub fn prepare_cached(&self, sql: &str) -> Result<Stmt<'c>> {
        Ok(match *self {
            Conn::Sqlite(c) => Stmt::Sqlite(c.prepare_cached(sql)?),
            Conn::Postgres(c) => Stmt::Postgres(c, c.prepare(sql)?),
        })
    }

    /// Runs `sql`; the number of rows it changed.
    pub fn execute(&self, sql: &str, p: impl Params) -> Result<usize> {
        self.prepare_cached(sql)?.execute(p)
    }

    /// `f` of the first row of `sql`; `Err(NoRows)` when there is none.
    pub fn query_row<T>(
        &self,
        sql: &str,
        p: impl Params,
        f: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<T> {
        self.prepare_cached(sql)?.query_row(p, f)
    }

    /// `f` of every row of `sql`, in order.
    pub fn query_map<T>(
        &self,
        sql: &str,
        p: impl Params,
        f: impl FnMut(&Row<'_>) -> Result<T>,
    ) -> Result<Vec<T>> {
        self.prepare_cached(sql)?.query_map(p, f)
    }

    /// Runs `sql`, several statements without parameters, in one round trip (migrations).
    pub fn batch(&self, sql: &str) -> Result<()> {
        match *self {
            Conn::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Conn::Postgres(c) => c.batch(sql),
        }
    }

    /// Whether a table `name` exists (SQLite `sqlite_master`; Postgres, in the session's schema).
    pub fn has_table(&self, name: &str) -> Result<bool> {
        match *self {
            Conn::Sqlite(c) => crate::db_sqlite::has_table(c, name),
            Conn::Postgres(c) => c.has_table(name),
        }
    }

    /// The one write transaction: runs `f` after `BEGIN IMMEDIATE` (SQLite) or `BEGIN` and
    /// `pg_advisory_xact_lock(WRITE_LOCK, schema oid)` in one round trip (Postgres), so writes
    /// of every process are serialised, waiting up to 10 s for another's to commit. Commits
    /// when `f` returns `Ok` or an error that [`Settles::keeps_writes`], and then, on
    /// Postgres, NOTIFYs the changes `f` reported ([`Tx::changed`]) in the commit's round
    /// trip; rolls back otherwise (and when `f` panics). Returns only after the commit.
    pub fn write<T, E: Settles>(self, f: impl FnOnce(&Tx<'c>) -> Result<T, E>) -> Result<T, E> {
        let tx = Tx {
            conn: self,
            changes: RefCell::new(Vec::new()),
        };
        match self {
            Conn::Sqlite(c) => {
                let lite = rusqlite::Transaction::new_unchecked(
                    c,
                    rusqlite::TransactionBehavior::Immediate,
                )
                .map_err(DbError::from)?;
                let out = f(&tx);
                if out.as_ref().err().is_none_or(Settles::keeps_writes) {
                    lite.commit().map_err(DbError::from)?;
                }
                out
            }
            Conn::Postgres(c) => {
                c.begin_write()?;
                let open = PgOpen(c);
                let out = f(&tx);
                // `f` returned: the transaction ends here, not in the guard.
                std::mem::forget(open);
                if out.as_ref().err().is_none_or(Settles::keeps_writes) {
                    if let Err(e) = c.commit(&tx.changes.borrow()) {
                        let _ = c.rollback();
                        return Err(e.into());
                    }
                } else {
                    c.rollback()?;
                }
                out
            }
        }
    }

    /// A write transaction that does not take the schema's write lock on Postgres (a plain
    /// `BEGIN`): for a table no other write reads and whose statements are each atomic on
    /// their rows (the replicas' shared failed-authentication count), so that such writes
    /// neither wait for nor hold up the approvals' writes of every replica (found by review:
    /// wrong keys from many addresses queued every replica's writes behind their counts).
    /// `READ COMMITTED` whatever the database's default isolation (as [`Conn::write`]'s: a
    /// `serializable` default failed such concurrent counts).
    /// Commits when `f` returns `Ok`, rolls back otherwise; announces nothing. SQLite: as
    /// [`Conn::write`] (one writer per file whatever is written).
    pub fn write_unserialised<T, E: Settles>(
        self,
        f: impl FnOnce(&Tx<'c>) -> Result<T, E>,
    ) -> Result<T, E> {
        let Conn::Postgres(c) = self else {
            return self.write(f);
        };
        let tx = Tx {
            conn: self,
            changes: RefCell::new(Vec::new()),
        };
        c.begin("BEGIN ISOLATION LEVEL READ COMMITTED")?;
        let open = PgOpen(c);
        let out = f(&tx);
        std::mem::forget(open);
        if out.is_ok() {
            if let Err(e) = c.commit(&[]) {
                let _ = c.rollback();
                return Err(e.into());
            }
        } else {
            c.rollback()?;
        }
        out
    }

    /// Opens the one write transaction for a group commit ([`Conn::write`]'s `BEGIN`, taking
    /// the global write lock), to be ended by [`Conn::commit_write`] or
    /// [`Conn::rollback_write`]; its members run with [`Conn::member`].
    pub fn begin_write(self) -> Result<()> {
        match self {
            Conn::Sqlite(_) => self.control("BEGIN IMMEDIATE"),
            Conn::Postgres(c) => c.begin_write(),
        }
    }

    /// Runs one transaction-control statement (`SAVEPOINT`, `RELEASE`, …): on SQLite a cached
    /// prepared statement (parsed once per connection, not per write), on Postgres a simple
    /// query.
    fn control(self, sql: &str) -> Result<()> {
        match self {
            Conn::Sqlite(c) => {
                c.prepare_cached(sql)?.execute([])?;
                Ok(())
            }
            Conn::Postgres(c) => c.batch(sql),
        }
    }

    /// Runs `f`, one member of the write transaction [`Conn::begin_write`] opened. `isolated`:
    /// inside its own `SAVEPOINT`, so that an `Err` that does not [`Settles::keeps_writes`]
    /// undoes this member's writes alone (`ROLLBACK TO`), leaving the others' and the
    /// transaction usable; without it such an `Err` leaves the undoing to the caller (the
    /// first member of a transaction rolls it all back). Returns `f`'s result and the
    /// changes it reported, none when its writes were undone. `Err` from the savepoint
    /// statements themselves is `f`'s result.
    pub fn member<T, E: Settles>(
        self,
        isolated: bool,
        f: impl FnOnce(&Tx<'c>) -> Result<T, E>,
    ) -> (Result<T, E>, Vec<Change>) {
        if isolated && let Err(e) = self.control("SAVEPOINT assent_member") {
            return (Err(e.into()), Vec::new());
        }
        let tx = Tx {
            conn: self,
            changes: RefCell::new(Vec::new()),
        };
        let out = f(&tx);
        let kept = out.as_ref().err().is_none_or(Settles::keeps_writes);
        if !isolated {
            return (out, if kept { tx.changes() } else { Vec::new() });
        }
        let end = if kept {
            self.control("RELEASE SAVEPOINT assent_member")
        } else {
            self.control("ROLLBACK TO SAVEPOINT assent_member")
                .and_then(|()| self.control("RELEASE SAVEPOINT assent_member"))
        };
        match end {
            Ok(()) if kept => (out, tx.changes()),
            Ok(()) => (out, Vec::new()),
            Err(e) => (Err(e.into()), Vec::new()),
        }
    }

    /// Commits the transaction [`Conn::begin_write`] opened; on Postgres with the NOTIFYs of
    /// `changes` in the same round trip. Rolled back when the commit fails (the error is
    /// returned): nothing of it is kept.
    pub fn commit_write(self, changes: &[Change]) -> Result<()> {
        let out = match self {
            Conn::Sqlite(_) => self.control("COMMIT"),
            Conn::Postgres(c) => c.commit(changes),
        };
        if out.is_err() {
            let _ = self.rollback_write();
        }
        out
    }

    /// Whether a transaction is open on this session.
    pub(crate) fn in_transaction(self) -> bool {
        match self {
            Conn::Sqlite(c) => !c.is_autocommit(),
            Conn::Postgres(c) => c.in_transaction(),
        }
    }

    /// Rolls back the transaction [`Conn::begin_write`] opened (a no-op when none is open).
    pub fn rollback_write(self) -> Result<()> {
        match self {
            Conn::Sqlite(c) if c.is_autocommit() => Ok(()),
            Conn::Sqlite(c) => Ok(c.execute_batch("ROLLBACK")?),
            Conn::Postgres(c) => c.rollback(),
        }
    }

    /// Runs `f` in one read snapshot: SQLite `BEGIN` (deferred), Postgres `BEGIN ISOLATION
    /// LEVEL REPEATABLE READ, READ ONLY`; ends it with `ROLLBACK` (nothing was written).
    pub fn snapshot<T>(self, f: impl FnOnce(Conn<'c>) -> Result<T>) -> Result<T> {
        // Inside the transaction this thread's batch holds open (`batch.rs`): it is the
        // snapshot (on Postgres a `BEGIN` would be refused, and its `ROLLBACK` would end the
        // batch's transaction). Any other open transaction is refused by `BEGIN`, as before.
        if HOLDS_BATCH.with(|h| h.get()) && self.in_transaction() {
            return f(self);
        }
        match self {
            Conn::Sqlite(c) => {
                let tx = rusqlite::Transaction::new_unchecked(
                    c,
                    rusqlite::TransactionBehavior::Deferred,
                )?;
                let out = f(self);
                drop(tx);
                out
            }
            Conn::Postgres(c) => {
                c.begin("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")?;
                let open = PgOpen(c);
                let out = f(self);
                std::mem::forget(open);
                c.rollback()?;
                out
            }
        }
    }
}

/// A Postgres transaction still open: rolled back if dropped (a panic in the closure), so the
/// session never keeps the write lock.
struct PgOpen<'c>(&'c PgConn);

impl Drop for PgOpen<'_> {
    fn drop(&mut self) {
        let _ = self.0.rollback();
    }
}

/// The session inside [`Conn::write`]: every [`Conn`] method, plus [`Tx::changed`].
pub struct Tx<'c> {
    conn: Conn<'c>,
    changes: RefCell<Vec<Change>>,
}

impl<'c> std::ops::Deref for Tx<'c> {
    type Target = Conn<'c>;
    fn deref(&self) -> &Conn<'c> {
        &self.conn
    }
}

impl Tx<'_> {
    /// Reports a change, NOTIFYed when the transaction commits (each change once however
    /// often it is reported; none when it rolls back). On SQLite it is only collected.
    pub fn changed(&self, c: Change) {
        let mut changes = self.changes.borrow_mut();
        if !changes.contains(&c) {
            changes.push(c);
        }
    }

    /// The changes reported so far, in order.
    pub fn changes(&self) -> Vec<Change> {
        self.changes.borrow().clone()
    }
}

impl Stmt<'_> {
    /// Runs the statement; the number of rows it changed.
    pub fn execute(&mut self, p: impl Params) -> Result<usize> {
        let values = p.values()?;
        match self {
            Stmt::Sqlite(s) => Ok(s.execute(rusqlite::params_from_iter(values.iter()))?),
            Stmt::Postgres(c, s) => {
                let refs = pg_refs(&values);
                Ok(c.client()?.execute(s, &refs)? as usize)
            }
        }
    }

    /// `f` of the first row; `Err(NoRows)` when there is none. `f` may run other statements
    /// on the same session.
    pub fn query_row<T>(
        &mut self,
        p: impl Params,
        f: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<T> {
        match self {
            Stmt::Sqlite(s) => {
                let values = p.values()?;
                let mut rows = s.query(rusqlite::params_from_iter(values.iter()))?;
                match rows.next()? {
                    Some(r) => f(&Row::Sqlite(r)),
                    None => Err(DbError::NoRows),
                }
            }
            Stmt::Postgres(c, s) => {
                use postgres::fallible_iterator::FallibleIterator;
                let values = p.values()?;
                // The first row only; the session is free again before `f` runs.
                let first = c.client()?.query_raw(&*s, values.iter())?.next()?;
                match first {
                    Some(r) => f(&Row::Postgres(&r)),
                    None => Err(DbError::NoRows),
                }
            }
        }
    }

    /// `f` of every row, in order. On Postgres the rows are fetched first, so `f` may run
    /// other statements on the same session.
    pub fn query_map<T>(
        &mut self,
        p: impl Params,
        mut f: impl FnMut(&Row<'_>) -> Result<T>,
    ) -> Result<Vec<T>> {
        match self {
            Stmt::Sqlite(_) => {
                let mut out = Vec::new();
                self.for_each(p, |r| {
                    out.push(f(r)?);
                    Ok(ControlFlow::Continue(()))
                })?;
                Ok(out)
            }
            Stmt::Postgres(c, s) => {
                let values = p.values()?;
                let rows = c.client()?.query(s, &pg_refs(&values))?;
                rows.iter().map(|r| f(&Row::Postgres(r))).collect()
            }
        }
    }

    /// Streams the rows to `f` until it breaks, never holding them all (Postgres: a portal
    /// read as it goes), for walks over the whole audit chain. `f` must not run statements on
    /// the same session meanwhile (on Postgres that is `Err(Unusable)`).
    pub fn for_each(
        &mut self,
        p: impl Params,
        mut f: impl FnMut(&Row<'_>) -> Result<ControlFlow<()>>,
    ) -> Result<()> {
        let values = p.values()?;
        match self {
            Stmt::Sqlite(s) => {
                let mut rows = s.query(rusqlite::params_from_iter(values.iter()))?;
                while let Some(r) = rows.next()? {
                    if f(&Row::Sqlite(r))?.is_break() {
                        break;
                    }
                }
            }
            Stmt::Postgres(c, s) => {
                use postgres::fallible_iterator::FallibleIterator;
                let mut client = c.client()?;
                let mut rows = client.query_raw(&*s, values.iter())?;
                while let Some(r) = rows.next()? {
                    if f(&Row::Postgres(&r))?.is_break() {
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}

fn pg_refs<'a>(values: &'a [Value<'a>]) -> Vec<&'a (dyn postgres::types::ToSql + Sync)> {
    values
        .iter()
        .map(|v| v as &(dyn postgres::types::ToSql + Sync))
        .collect()
}

/// One result row.
pub enum Row<'r> {
    /// A rusqlite row.
    Sqlite(&'r rusqlite::Row<'r>),
    /// A Postgres row.
    Postgres(&'r postgres::Row),
}

/// A column by position (from 0) or by name: whatever rusqlite indexes a row by, and where
/// it is in a Postgres row.
pub trait ColumnIndex: Copy + std::fmt::Display + rusqlite::RowIndex {
    /// The column of a rusqlite row.
    fn sqlite<'a>(
        self,
        r: &'a rusqlite::Row<'_>,
    ) -> rusqlite::Result<rusqlite::types::ValueRef<'a>> {
        r.get_ref(self)
    }
    /// The position of the column in a Postgres row, `None` when there is no such column.
    fn position(self, r: &postgres::Row) -> Option<usize>;
}
impl ColumnIndex for usize {
    fn position(self, r: &postgres::Row) -> Option<usize> {
        (self < r.len()).then_some(self)
    }
}
impl ColumnIndex for &str {
    fn position(self, r: &postgres::Row) -> Option<usize> {
        r.columns().iter().position(|c| c.name() == self)
    }
}

impl Row<'_> {
    /// Column `i` as stored.
    pub fn get_ref(&self, i: impl ColumnIndex) -> Result<ValueRef<'_>> {
        match self {
            Row::Sqlite(r) => Ok(lite_value_ref(i.sqlite(r)?)),
            Row::Postgres(r) => match i.position(r) {
                Some(n) => pg_value_ref(r, n),
                None => Err(DbError::Column {
                    column: i.to_string(),
                    why: "no such column".into(),
                }),
            },
        }
    }

    /// Column `i` as a `T`; `Err(Column)` naming the column when it is not one.
    pub fn get<T: FromValue>(&self, i: impl ColumnIndex) -> Result<T> {
        T::from_value(self.get_ref(i)?).map_err(|why| DbError::Column {
            column: i.to_string(),
            why,
        })
    }
}

/// A row's first N columns (2 to 8), in order, as a tuple of [`FromValue`]s: what
/// [`tuple`] reads.
pub trait FromRow: Sized {
    /// Columns 0, 1, … read in turn by [`Row::get`]; the first that is not its element's
    /// type is `Err(Column)` naming it (by position), as `Row::get` says.
    fn from_row(r: &Row<'_>) -> Result<Self>;
}

/// `impl FromRow for (A, B, …)`: `Ok((r.get(0)?, r.get(1)?, …))`.
macro_rules! from_row_tuple {
    ($($T:ident $i:tt),+) => {
        impl<$($T: FromValue),+> FromRow for ($($T,)+) {
            fn from_row(r: &Row<'_>) -> Result<Self> {
                Ok(($(r.get::<$T>($i)?,)+))
            }
        }
    };
}
from_row_tuple!(A 0, B 1);
from_row_tuple!(A 0, B 1, C 2);
from_row_tuple!(A 0, B 1, C 2, D 3);
from_row_tuple!(A 0, B 1, C 2, D 3, E 4);
from_row_tuple!(A 0, B 1, C 2, D 3, E 4, F 5);
from_row_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
from_row_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

/// The row's first columns as the tuple `T` (see [`FromRow`]), a mapper for
/// `query_map(sql, p, db::tuple)` and `query_row(…, db::tuple)`: the same as the closure
/// `|r| Ok((r.get(0)?, r.get(1)?, …))`, with the same errors.
pub fn tuple<T: FromRow>(r: &Row<'_>) -> Result<T> {
    T::from_row(r)
}

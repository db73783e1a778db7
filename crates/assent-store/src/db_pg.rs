//! The storage kernel's Postgres glue over the sync `postgres` client: [`PgConn`] (a session
//! with its settings, its schema, its prepared-statement cache), binding a [`Value`], reading
//! a column as a [`ValueRef`], and the write transaction's SQL: `BEGIN` plus the global write
//! lock in one round trip, the NOTIFYs of its changes plus `COMMIT` in one round trip. The
//! facade is `db.rs`.

use crate::db_sql::dollar_params;
use crate::db_value::{Change, DbError, Value, ValueRef};
use bytes::BytesMut;
use postgres::types::{FromSql, IsNull, ToSql, Type};
use std::cell::RefCell;
use std::collections::HashMap;
use std::error::Error;

/// First key of the transaction-level advisory lock every write takes (`'asse'`); the second
/// is the oid of the connection's schema, so stores in different schemas do not contend.
pub(crate) const WRITE_LOCK: i32 = 0x6173_7365;
/// First key of the session-level advisory lock the migration runner holds (`'migr'`).
pub(crate) const MIGRATE_LOCK: i32 = 0x6d69_6772;
/// The most prepared statements kept per connection (the store's SQL is a fixed set of about
/// 110 texts; the cache is emptied when a bug would grow it past this).
const CACHE_CAP: usize = 1024;
/// Per-session settings: the wait for the write lock (as SQLite's `busy_timeout`), how long a
/// session may sit idle inside a transaction before Postgres ends it (and frees the lock),
/// standard strings (so the NOTIFY literals need only doubled quotes), and no notices below
/// warnings (the migration runner's `CREATE TABLE IF NOT EXISTS` sent one per session, logged
/// at every start of every replica).
const SESSION: &str = "SET lock_timeout = '10s'; \
    SET idle_in_transaction_session_timeout = '10s'; \
    SET standard_conforming_strings = on; \
    SET client_min_messages = warning";
/// The session's wait for a lock (the first setting of `SESSION`, kept equal to it), restored
/// after the migration runner's unbounded wait for another process's migration.
pub(crate) const LOCK_TIMEOUT: &str = "10s";

/// One Postgres session in the schema its `search_path` names. Methods take `&self`, as
/// rusqlite's do: the client sits in a `RefCell`, borrowed for one statement at a time.
pub struct PgConn {
    /// `None` only while the session is dropped (see the `Drop` impl).
    client: RefCell<Option<postgres::Client>>,
    stmts: RefCell<HashMap<Box<str>, postgres::Statement>>,
    schema: String,
    schema_oid: u32,
    /// Whether a transaction is open (a second `BEGIN` would only warn on Postgres).
    in_tx: std::cell::Cell<bool>,
}

/// Connects with `url` (a `postgres://` URL or `key=value` string; `connect_timeout` 10 s
/// unless it says otherwise; TLS by its `sslmode` and `sslrootcert`, see [`crate::db_tls`]),
/// applies the session settings and finds the schema. `Unusable` when the `search_path` names
/// no existing schema or the server's encoding is not UTF8 (text must round-trip byte for
/// byte), or when the URL's TLS keys are wrong.
pub(crate) fn connect_client(url: &str) -> Result<(postgres::Client, String, u32), DbError> {
    let crate::db_tls::PgTarget { mut config, tls } = crate::db_tls::target(url)?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(std::time::Duration::from_secs(10));
    }
    let mut client = config.connect(tls).map_err(crate::db_tls::explain)?;
    client.batch_execute(SESSION)?;
    let row = client.query_one(
        "SELECT current_schema()::text, (SELECT oid FROM pg_namespace WHERE nspname = current_schema()), current_setting('server_encoding')",
        &[],
    )?;
    let (schema, oid, encoding): (Option<String>, Option<u32>, String) =
        (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
    if encoding != "UTF8" {
        return Err(DbError::Unusable(format!(
            "the database's encoding is {encoding}; assent needs UTF8"
        )));
    }
    match (schema, oid) {
        (Some(s), Some(o)) => Ok((client, s, o)),
        _ => Err(DbError::Unusable(
            "no schema of the search_path exists; create it first".into(),
        )),
    }
}

/// The NOTIFY channel of changes of `kind` to the schema with oid `oid`. Named by the oid,
/// not the schema's name, so it is always a plain identifier within Postgres's 63 bytes.
pub(crate) fn channel(oid: u32, kind: &str) -> String {
    format!("assent_{oid}_{kind}")
}

/// Found by the server's suite on PostgreSQL: the sync client ends
/// its connection by blocking on a runtime of its own, which panics on a thread that is
/// driving an async runtime — a gateway dropping its store at shutdown, or a session being
/// replaced, inside the server's runtime. The client is therefore dropped on a thread of its
/// own, which this waits for.
impl Drop for PgConn {
    fn drop(&mut self) {
        if let Some(client) = self.client.get_mut().take() {
            std::thread::scope(|s| {
                s.spawn(move || drop(client));
            });
        }
    }
}

impl PgConn {
    /// Connects (see [`connect_client`]).
    pub fn connect(url: &str) -> Result<PgConn, DbError> {
        let (client, schema, schema_oid) = connect_client(url)?;
        Ok(PgConn {
            client: RefCell::new(Some(client)),
            stmts: RefCell::new(HashMap::new()),
            schema,
            schema_oid,
            in_tx: std::cell::Cell::new(false),
        })
    }

    /// Whether the session's connection has ended (the server closed it, the network failed):
    /// every further statement would fail, so the store opens a new session.
    pub fn is_closed(&self) -> bool {
        self.client
            .try_borrow()
            .is_ok_and(|c| c.as_ref().is_none_or(postgres::Client::is_closed))
    }

    /// The schema this session works in (the first existing one of its `search_path`).
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The schema's oid (the advisory locks' second key, and the NOTIFY channels' name).
    pub fn schema_oid(&self) -> u32 {
        self.schema_oid
    }

    /// The client, for one statement. `Unusable` instead of a panic when a statement is run
    /// while another streams its rows (inside a `for_each` callback).
    pub(crate) fn client(&self) -> Result<std::cell::RefMut<'_, postgres::Client>, DbError> {
        let busy =
            || DbError::Unusable("a statement ran while another was streaming its rows".into());
        let client = self.client.try_borrow_mut().map_err(|_| busy())?;
        std::cell::RefMut::filter_map(client, Option::as_mut)
            .map_err(|_| DbError::Unusable("the session is closing".into()))
    }

    /// The prepared statement of `sql` (written with `?N`), from this session's cache or
    /// prepared now (one round trip, once per text and session).
    pub(crate) fn prepare(&self, sql: &str) -> Result<postgres::Statement, DbError> {
        if let Some(s) = self.stmts.borrow().get(sql) {
            return Ok(s.clone());
        }
        let text = dollar_params(sql).map_err(DbError::Bind)?;
        let stmt = self.client()?.prepare(&text)?;
        let mut cache = self.stmts.borrow_mut();
        if cache.len() >= CACHE_CAP {
            cache.clear();
        }
        cache.insert(sql.into(), stmt.clone());
        Ok(stmt)
    }

    /// Runs `sql` (several statements, no parameters) in one round trip.
    pub(crate) fn batch(&self, sql: &str) -> Result<(), DbError> {
        Ok(self.client()?.batch_execute(sql)?)
    }

    /// Empties the statement cache (after DDL changed what the statements return).
    pub(crate) fn forget_statements(&self) {
        self.stmts.borrow_mut().clear();
    }

    /// `BEGIN` and the schema's write lock, in one round trip: the Postgres `BEGIN IMMEDIATE`.
    /// Waits up to `lock_timeout` for another session's write to commit. `READ COMMITTED`
    /// whatever the database's or role's `default_transaction_isolation`: each statement after
    /// the lock then sees every write committed before it was granted. Found by review: under
    /// a `repeatable read` or `serializable` default the snapshot was taken by the lock
    /// statement itself, before it waited, so what a decision re-reads under the lock (the
    /// session's state, the principals, the audit chain's head) could be stale.
    pub(crate) fn begin_write(&self) -> Result<(), DbError> {
        self.begin(&format!(
            "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock({WRITE_LOCK}, {})",
            self.schema_oid as i32
        ))
    }

    /// Whether this session has a transaction open (begun here and not yet ended).
    pub(crate) fn in_transaction(&self) -> bool {
        self.in_tx.get()
    }

    /// Runs `sql`, which opens a transaction; `Unusable` when one is open already (Postgres
    /// would only warn, and the inner COMMIT would end the outer transaction early).
    pub(crate) fn begin(&self, sql: &str) -> Result<(), DbError> {
        if self.in_tx.get() {
            return Err(DbError::Unusable(
                "a transaction was begun inside another".into(),
            ));
        }
        if let Err(e) = self.batch(sql) {
            // BEGIN may have run and the lock wait failed (lock_timeout): leave no aborted
            // transaction block behind, or every later statement of this session fails.
            let _ = self.batch("ROLLBACK");
            return Err(e);
        }
        self.in_tx.set(true);
        Ok(())
    }

    /// The NOTIFYs of `changes` (or a bare `SELECT 1`) and `COMMIT`, in one round trip.
    /// Postgres delivers the notifications only once the commit is durable, and never for a
    /// rolled back write. `Err` when the transaction was aborted by a failed statement (the
    /// caller rolls back): a COMMIT Postgres would turn into a ROLLBACK is never reported as
    /// a commit.
    pub(crate) fn commit(&self, changes: &[Change]) -> Result<(), DbError> {
        let mut sql = String::new();
        for (i, c) in changes.iter().enumerate() {
            let (kind, payload) = c.parts();
            sql.push_str(if i == 0 { "SELECT " } else { ", " });
            sql.push_str(&format!(
                "pg_notify('{}', '{}')",
                channel(self.schema_oid, kind),
                payload.replace('\'', "''")
            ));
        }
        // A statement always precedes COMMIT: in a transaction a failed statement aborted,
        // Postgres answers COMMIT with a silent ROLLBACK, but this statement fails (25P02),
        // so a write whose closure swallowed a database error is reported, never "committed".
        if sql.is_empty() {
            sql.push_str("SELECT 1");
        }
        sql.push_str("; COMMIT");
        self.batch(&sql)?;
        self.in_tx.set(false);
        Ok(())
    }

    /// `ROLLBACK` (a no-op warning outside a transaction).
    pub(crate) fn rollback(&self) -> Result<(), DbError> {
        let out = self.batch("ROLLBACK");
        self.in_tx.set(false);
        out
    }

    /// Whether a table named `name` exists in this session's schema.
    pub(crate) fn has_table(&self, name: &str) -> Result<bool, DbError> {
        let stmt = self.prepare(
            "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = ?1",
        )?;
        let n: i64 = self.client()?.query_one(&stmt, &[&name])?.try_get(0)?;
        Ok(n > 0)
    }
}

fn mismatch(what: &str, ty: &Type) -> Box<dyn Error + Sync + Send> {
    format!("{what} bound where Postgres expects {ty}").into()
}

/// Whether values of `ty` are text the kernel reads as [`ValueRef::Text`] and binds from
/// [`Value::Text`].
fn is_text(ty: &Type) -> bool {
    [
        Type::TEXT,
        Type::VARCHAR,
        Type::BPCHAR,
        Type::NAME,
        Type::UNKNOWN,
    ]
    .contains(ty)
}

impl ToSql for Value<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        match *self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(i)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(i)?.to_sql(ty, out),
                _ => Err(mismatch("an integer", ty)),
            },
            Value::Text(s) if is_text(ty) => s.to_sql(ty, out),
            Value::Text(_) => Err(mismatch("text", ty)),
            Value::Bool(b) if *ty == Type::BOOL => b.to_sql(ty, out),
            Value::Bool(_) => Err(mismatch("a boolean", ty)),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

/// A column's raw bytes (binary format), `None` for NULL, whatever its type.
struct Raw<'a>(Option<&'a [u8]>);

impl<'a> FromSql<'a> for Raw<'a> {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
        Ok(Raw(Some(raw)))
    }
    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn Error + Sync + Send>> {
        Ok(Raw(None))
    }
    fn accepts(_: &Type) -> bool {
        true
    }
}

/// Column `i` of `row` as a [`ValueRef`], by the column's Postgres type: the integer types
/// are `Int`, BOOL is `Bool`, the text types are `Text`, every other type `Other`.
pub(crate) fn value_ref(row: &postgres::Row, i: usize) -> Result<ValueRef<'_>, DbError> {
    let bad = |e: Box<dyn Error + Sync + Send>| DbError::Column {
        column: i.to_string(),
        why: e.to_string(),
    };
    let ty = row.columns()[i].type_();
    let Raw(raw) = row.try_get(i)?;
    let Some(raw) = raw else {
        return Ok(ValueRef::Null);
    };
    Ok(match *ty {
        Type::INT8 => ValueRef::Int(i64::from_sql(ty, raw).map_err(bad)?),
        Type::INT4 => ValueRef::Int(i32::from_sql(ty, raw).map_err(bad)?.into()),
        Type::INT2 => ValueRef::Int(i16::from_sql(ty, raw).map_err(bad)?.into()),
        Type::BOOL => ValueRef::Bool(bool::from_sql(ty, raw).map_err(bad)?),
        _ if is_text(ty) => ValueRef::Text(raw),
        _ => ValueRef::Other,
    })
}

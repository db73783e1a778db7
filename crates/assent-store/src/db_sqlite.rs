//! The storage kernel's SQLite glue: opening a connection with the pragmas assent relies on,
//! binding a [`Value`] and reading a column as a [`ValueRef`]. The facade is `db.rs`.

use crate::db_value::{DbError, Value, ValueRef};
use rusqlite::types::{ToSqlOutput, ValueRef as LiteRef};
use std::path::Path;

/// How long a statement waits for another process's write lock before failing.
pub(crate) const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Opens (creating) the database at `path`: `busy_timeout` 10 s, WAL, `synchronous=FULL`,
/// foreign keys on, and a statement cache of 256 (a held approval's cycle uses about 24
/// statements, more than rusqlite's default of 16). A missing file is first created private
/// ([`create_private_file`]).
pub(crate) fn open(path: &Path) -> Result<rusqlite::Connection, DbError> {
    create_private_file(path)?;
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    wal(&conn)?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.set_prepared_statement_cache_capacity(256);
    Ok(conn)
}

/// Creates the database file `path` empty with mode 0600 (Unix) when nothing is there, before
/// SQLite opens it: SQLite creates a file with mode 0644 under the usual umask (022), and gives
/// its `-wal` and `-shm` files the main file's mode, so in a data directory others may enter
/// (an existing one keeps its mode, with a warning: `kit::create_private_dir`) every local
/// user could read the held calls' arguments, the tokens' hashes and the sessions (found by
/// review). Created exclusively (`O_EXCL`: a link planted under the name is not followed);
/// an existing file is left as it is. When root creates it (`assent migrate`, `backup`,
/// `passkeys enrol` on a service's fresh data directory), it is given to the directory's
/// owner by its handle, as the lock file is (`kit::DataDirLock`), else the service could not
/// open it (SQLite gives the `-wal` and `-shm` files it makes as root the main file's owner).
/// Names SQLite does not take as a file (`:memory:`, the empty name of a temporary database,
/// a `file:` URI) are left to SQLite. Errors: `Unusable` naming the path and the I/O error.
fn create_private_file(path: &Path) -> Result<(), DbError> {
    let name = path.as_os_str();
    if name.is_empty() || name == ":memory:" || path.to_string_lossy().starts_with("file:") {
        return Ok(());
    }
    let mut create = std::fs::OpenOptions::new();
    create.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut create, 0o600);
    let unusable = |e: std::io::Error| {
        DbError::Unusable(format!(
            "{}: cannot create the database file: {e}",
            path.display()
        ))
    };
    let created = match create.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(unusable(e)),
    };
    #[cfg(unix)]
    if rustix::process::geteuid().is_root() {
        use std::os::unix::fs::MetadataExt;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let d = std::fs::metadata(dir).map_err(unusable)?;
        std::os::unix::fs::fchown(&created, Some(d.uid()), Some(d.gid())).map_err(unusable)?;
    }
    #[cfg(not(unix))]
    drop(created);
    Ok(())
}

/// Puts `conn`'s database in WAL mode, waiting up to [`BUSY_TIMEOUT`] for other connections
/// doing the same: SQLite answers `SQLITE_BUSY` at once, without calling the busy handler,
/// when two connections change a new database's journal mode together (found as a flaky
/// `two_processes_migrating_at_once_apply_each_migration_once`: one of two processes
/// starting on a fresh file failed with "database is locked").
fn wal(conn: &rusqlite::Connection) -> Result<(), DbError> {
    let start = std::time::Instant::now();
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy
                    && start.elapsed() < BUSY_TIMEOUT =>
            {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            r => return Ok(r?),
        }
    }
}

impl rusqlite::ToSql for Value<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match *self {
            Value::Null => ToSqlOutput::Borrowed(LiteRef::Null),
            Value::Int(i) => ToSqlOutput::Borrowed(LiteRef::Integer(i)),
            Value::Text(s) => ToSqlOutput::Borrowed(LiteRef::Text(s.as_bytes())),
            Value::Bool(b) => ToSqlOutput::Borrowed(LiteRef::Integer(b.into())),
        })
    }
}

/// A rusqlite column as the kernel's [`ValueRef`] (REAL and BLOB are `Other`).
pub(crate) fn value_ref(v: LiteRef<'_>) -> ValueRef<'_> {
    match v {
        LiteRef::Null => ValueRef::Null,
        LiteRef::Integer(i) => ValueRef::Int(i),
        LiteRef::Text(b) => ValueRef::Text(b),
        LiteRef::Real(_) | LiteRef::Blob(_) => ValueRef::Other,
    }
}

/// Whether a table (or view) named `name` exists (`sqlite_master`).
pub(crate) fn has_table(conn: &rusqlite::Connection, name: &str) -> Result<bool, DbError> {
    Ok(conn
        .prepare_cached(
            "SELECT count(*) FROM sqlite_master WHERE type IN ('table','view') AND name = ?1",
        )?
        .query_row([name], |r| r.get::<_, i64>(0))?
        > 0)
}

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
/// ([`create_private_file`]); an existing one must be a regular file, not a symbolic link
/// ([`create_private_file`], and SQLite's `SQLITE_OPEN_NOFOLLOW` on the path with its
/// directory resolved: [`no_follow`]).
pub(crate) fn open(path: &Path) -> Result<rusqlite::Connection, DbError> {
    let conn = if sqlite_special(path) {
        rusqlite::Connection::open(path)?
    } else {
        create_private_file(path)?;
        no_follow(path, rusqlite::OpenFlags::default())?
    };
    conn.busy_timeout(BUSY_TIMEOUT)?;
    wal(&conn)?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.set_prepared_statement_cache_capacity(256);
    Ok(conn)
}

/// Names SQLite does not take as a file: `:memory:`, the empty name of a temporary database,
/// a `file:` URI. They are left to SQLite as they are.
fn sqlite_special(path: &Path) -> bool {
    let name = path.as_os_str();
    name.is_empty() || name == ":memory:" || path.to_string_lossy().starts_with("file:")
}

/// Opens the existing database file `path` with `flags` (say, read-only) under the rule of
/// [`open`]: its last component must be a regular file ([`existing`]), and SQLite opens it
/// with `SQLITE_OPEN_NOFOLLOW` ([`no_follow`]). For the offline readers
/// (`open::open_read_only`: `assent audit verify`, `backup`'s source, exports). Found by
/// review: they opened `DATA/assent.db` by a plain path, so a link planted there by the data
/// directory's owner was followed by root. Errors: `Unusable` naming the path and what it is;
/// SQLite's.
pub(crate) fn open_existing(
    path: &Path,
    flags: rusqlite::OpenFlags,
) -> Result<rusqlite::Connection, DbError> {
    existing(path)?;
    no_follow(path, flags)
}

/// Opens the database file `path` (which [`create_private_file`] made or checked) with
/// `flags` and `SQLITE_OPEN_NOFOLLOW`, its directory resolved first (so a data directory
/// reached through a symbolic link still opens): SQLite resolves every link on the path it is
/// given, and with that flag refuses one instead. That closes the window after
/// [`create_private_file`]'s check: a regular file swapped for a link before SQLite resolves
/// the path is refused there, and one swapped after it is not followed (SQLite opens the main
/// file, its `-wal` and its `-shm` with `O_NOFOLLOW`). Errors: `Unusable` naming the link; SQLite's.
fn no_follow(path: &Path, flags: rusqlite::OpenFlags) -> Result<rusqlite::Connection, DbError> {
    let resolved = match (dir_of(path).canonicalize(), path.file_name()) {
        (Ok(d), Some(name)) => d.join(name),
        _ => path.to_path_buf(),
    };
    let flags = flags | rusqlite::OpenFlags::SQLITE_OPEN_NOFOLLOW;
    rusqlite::Connection::open_with_flags(&resolved, flags).map_err(|e| match e {
        rusqlite::Error::SqliteFailure(f, _)
            if f.extended_code == rusqlite::ffi::SQLITE_CANTOPEN_SYMLINK =>
        {
            not_regular(path, "is a symbolic link")
        }
        e => e.into(),
    })
}

/// The refusal of a database path that is not a plain regular file.
fn not_regular(path: &Path, what: &str) -> DbError {
    DbError::Unusable(format!(
        "{}: {what}; the database must be a regular file in the data directory — refusing to \
         follow or use it",
        path.display()
    ))
}

/// The directory `path`'s file is in (`.` for a bare name).
fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Creates the database file `path` empty with mode 0600 (Unix) when nothing is there, before
/// SQLite opens it: SQLite creates a file with mode 0644 under the usual umask (022), and gives
/// its `-wal` and `-shm` files the main file's mode, so in a data directory others may enter
/// (an existing one keeps its mode, with a warning: `kit::create_private_dir`) every local
/// user could read the held calls' arguments, the tokens' hashes and the sessions (found by
/// review). Created exclusively (`O_EXCL`: a link planted under the name is not followed);
/// an existing file keeps its mode. When root creates it (`assent migrate`, `backup`,
/// `passkeys enrol` on a service's fresh data directory), it is given to the directory's
/// owner by its handle, as the lock file is (`kit::DataDirLock`), else the service could not
/// open it (SQLite gives the `-wal` and `-shm` files it makes as root the main file's owner).
/// An existing file is checked ([`existing`]), not followed. Errors: `Unusable` naming the
/// path and the I/O error, or what the existing file is.
fn create_private_file(path: &Path) -> Result<(), DbError> {
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
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return existing(path),
        Err(e) => return Err(unusable(e)),
    };
    #[cfg(unix)]
    crate::owner::give_as_root(&created, dir_of(path)).map_err(unusable)?;
    #[cfg(not(unix))]
    drop(created);
    Ok(())
}

/// Checks the database file found at `path`: its last component must be a regular file, not
/// a symbolic link, FIFO, directory or device. Found by review: the service user owning the
/// data directory ran `ln -s /etc/nologin DATA/assent.db`, and `assent migrate` (or `serve`,
/// `passkeys enrol`) run by root had SQLite follow it, creating `/etc/nologin` (and `-wal`,
/// `-shm` beside it) with the schema. Refused for everyone: nothing documented relies on the
/// file being a link (a data directory reached through a link is fine). When root opens a
/// service user's directory, a file with other hard links is refused too unless it is the
/// directory owner's (a hard link to a root-owned file planted there, where the system lets
/// users link files they do not own). Errors: `Unusable` naming the path and what it is.
fn existing(path: &Path) -> Result<(), DbError> {
    let m = std::fs::symlink_metadata(path).map_err(|e| {
        DbError::Unusable(format!(
            "{}: cannot inspect the database file: {e}",
            path.display()
        ))
    })?;
    let t = m.file_type();
    if t.is_symlink() {
        return Err(not_regular(path, "is a symbolic link"));
    }
    if !t.is_file() {
        return Err(not_regular(path, "is not a regular file"));
    }
    #[cfg(unix)]
    if rustix::process::geteuid().is_root() {
        use std::os::unix::fs::MetadataExt;
        let owner = std::fs::metadata(dir_of(path)).map(|d| d.uid()).ok();
        if m.nlink() > 1 && owner.is_some_and(|o| o != 0 && o != m.uid()) {
            return Err(not_regular(
                path,
                "has other hard links and is not the data directory owner's",
            ));
        }
    }
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

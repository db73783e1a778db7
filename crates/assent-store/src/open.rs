//! Opening a store: the private data directory, the token key file, the connection (the
//! kernel's `db_sqlite::open`) and the schema migrations (`migrate.rs`); and the read-only offline audit verification (which, writing
//! nothing, needs no event renderer). Nothing that reads or writes approvals.

use crate::audit;
use crate::checkpoint;
use crate::db::Database;
use crate::error::StoreError;
use crate::events::Envelopes;
use crate::kit::{create_private_dir, io, write_private};
use crate::migrate;
use crate::sql::lite;
use crate::store::Store;
use rusqlite::Connection;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Reads `<dir>/token.key`, creating a random 32-byte key (mode 0600) when there is none.
fn load_or_create_key(dir: &Path) -> Result<Vec<u8>, StoreError> {
    let path = dir.join("token.key");
    match std::fs::read(&path) {
        Ok(k) if k.len() >= 32 => Ok(k),
        Ok(_) => Err(StoreError::Invalid(format!(
            "{}: token key is shorter than 32 bytes; restore it or delete it (outstanding tokens become invalid)",
            path.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut k = vec![0u8; 32];
            getrandom::fill(&mut k)
                .map_err(|e| StoreError::Invalid(format!("no randomness: {e}")))?;
            let tmp = dir.join("token.key.tmp");
            write_private(&tmp, &k).map_err(io(&tmp))?;
            std::fs::rename(&tmp, &path).map_err(io(&path))?;
            Ok(k)
        }
        Err(e) => Err(io(&path)(e)),
    }
}

impl Store {
    /// Opens (creating when needed) `<data_dir>/assent.db`, `<data_dir>/token.key` and the
    /// audit checkpoint key `<data_dir>/audit.key` ([`checkpoint`]), and applies pending
    /// migrations. `token_ttl_ms` is how long a minted token stays redeemable; `envelopes`
    /// renders the AAEP and MPLP events state changes write (`assent_server::WireEnvelopes`).
    pub fn open(
        data_dir: &Path,
        token_ttl_ms: i64,
        envelopes: Arc<dyn Envelopes>,
    ) -> Result<Store, StoreError> {
        let path = data_dir.join("assent.db");
        Self::open_database(
            data_dir,
            &Database::Sqlite { path },
            token_ttl_ms,
            envelopes,
        )
    }

    /// Opens a store over `database` (SQLite or Postgres, issue 13), with its keys in
    /// `data_dir` as [`Store::open`], and applies pending migrations. The SQLite-only
    /// operations ([`Store::db_path`], backup, restore, readiness) concern
    /// `<data_dir>/assent.db`; over Postgres readiness reports not ready (fail closed) until
    /// its checks exist.
    pub fn open_database(
        data_dir: &Path,
        database: &crate::db::Database,
        token_ttl_ms: i64,
        envelopes: Arc<dyn Envelopes>,
    ) -> Result<Store, StoreError> {
        create_private_dir(data_dir).map_err(io(data_dir))?;
        let key = load_or_create_key(data_dir)?;
        let audit_key = checkpoint::load_or_create_key(data_dir)?;
        let conn = database.connect()?;
        migrate::migrate(conn.conn(), &format!("{database:?}"))?;
        Ok(Store {
            conn: Mutex::new(conn),
            key,
            audit_key,
            db_path: data_dir.join("assent.db"),
            token_ttl_ms,
            envelopes,
        })
    }
}

/// Verifies the audit chain of the database in `data_dir` without starting a server, read-only.
pub fn verify_offline(data_dir: &Path) -> Result<audit::VerifyReport, StoreError> {
    Ok(audit::verify(lite(&open_read_only(data_dir)?))?)
}

/// Opens `<data_dir>/assent.db` read-only for the offline readers (audit verification,
/// learning samples), waiting up to 10 s for a running gateway's writes. `Invalid` when
/// there is no database there (opening would not create one).
pub(crate) fn open_read_only(data_dir: &Path) -> Result<Connection, StoreError> {
    let path = data_dir.join("assent.db");
    if !path.exists() {
        return Err(StoreError::Invalid(format!(
            "{}: no assent database here",
            path.display()
        )));
    }
    let conn = Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    Ok(conn)
}

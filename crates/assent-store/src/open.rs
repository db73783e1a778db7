//! Opening a store: the private data directory, the token key file, the connection pragmas
//! and the schema migrations; and the read-only offline audit verification (which, writing
//! nothing, needs no event renderer). Nothing that reads or writes approvals.

use crate::audit;
use crate::checkpoint;
use crate::error::StoreError;
use crate::events::Envelopes;
use crate::kit::{create_private_dir, io, write_private};
use crate::store::Store;
use rusqlite::{Connection, TransactionBehavior};
use std::path::Path;
use std::sync::{Arc, Mutex};

const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_init.sql"),
    include_str!("../migrations/0002_protocol.sql"),
    include_str!("../migrations/0003_aaep.sql"),
    include_str!("../migrations/0004_plans.sql"),
    include_str!("../migrations/0005_tool_pins.sql"),
    include_str!("../migrations/0006_in_client.sql"),
    include_str!("../migrations/0007_operator.sql"),
    include_str!("../migrations/0008_audit_checkpoints.sql"),
    include_str!("../migrations/0009_cancelled_sessions.sql"),
    include_str!("../migrations/0010_confirm_context.sql"),
];

/// Opens a connection with the pragmas assent relies on.
fn connect(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(conn)
}

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
        create_private_dir(data_dir).map_err(io(data_dir))?;
        let key = load_or_create_key(data_dir)?;
        let audit_key = checkpoint::load_or_create_key(data_dir)?;
        let db_path = data_dir.join("assent.db");
        let mut conn = connect(&db_path)?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version as usize > MIGRATIONS.len() {
            return Err(StoreError::Invalid(format!(
                "{}: schema version {version} is newer than this assent ({}); upgrade assent",
                db_path.display(),
                MIGRATIONS.len()
            )));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", (i + 1) as i64)?;
            tx.commit()?;
        }
        Ok(Store {
            conn: Mutex::new(conn),
            key,
            audit_key,
            db_path,
            token_ttl_ms,
            envelopes,
        })
    }
}

/// Verifies the audit chain of the database in `data_dir` without starting a server, read-only.
pub fn verify_offline(data_dir: &Path) -> Result<audit::VerifyReport, StoreError> {
    Ok(audit::verify(&open_read_only(data_dir)?)?)
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

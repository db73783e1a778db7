//! The kit at the bottom of the crate: RFC 3339 time stamps, random prefixed ids, file helpers for the data
//! directory (private files and directories, I/O errors naming the path) and JSON text for
//! JSON columns. No SQL and no approval logic.

use crate::error::StoreError;
use std::path::Path;

pub use assent_core::stamp::rfc3339;

/// The SQLite database's file name in the data directory.
pub const DB_FILE: &str = "assent.db";

/// `prefix` + 32 lowercase hex characters of 128 random bits: the ids the store mints and
/// keeps (`rpl_` reply tokens, `sub_` subscriptions) and the `evt_` event ids the envelope
/// renderer gives (AAEP §6.2.1).
pub fn random_id(prefix: &str) -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source works");
    format!("{prefix}{}", hex::encode(b))
}

/// Maps an I/O error on `path` to [`StoreError::Io`] naming it.
pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `bytes` to `path` with mode 0600 (Unix) and syncs it.
#[cfg(unix)]
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}
#[cfg(not(unix))]
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)
}

/// Creates `dir` (and parents) with mode 0700 on Unix.
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// JSON text of a serialisable value, for JSON columns (every value the store writes
/// serialises; a failure is a bug).
pub(crate) fn to_json<T: serde::Serialize + ?Sized>(x: &T) -> String {
    serde_json::to_string(x).expect("serialisable")
}

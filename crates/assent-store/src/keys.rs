//! The key files a store signs with (issue 13 §2): `token.key` (HMAC-SHA256 of approval
//! tokens, at least 32 bytes) and `audit.key` (the Ed25519 seed that signs audit
//! checkpoints, [`crate::checkpoint`]), both in one `keys_dir` (default `data_dir`).
//!
//! An embedded SQLite store creates them the first time it opens ([`KeyFiles::CreateMissing`]).
//! Replicas sharing one Postgres database must share the keys: a token minted by one is
//! redeemed at another, and every checkpoint must verify under one public key. So a Postgres
//! store never creates keys ([`KeyFiles::MustExist`]); `assent keys init --keys-dir DIR`
//! ([`init`]) makes them once, and every replica is given the directory.

use crate::checkpoint;
use crate::error::StoreError;
use crate::kit::{create_private_dir, io, write_private};
use ed25519_dalek::SigningKey;
use std::path::Path;

/// The token key's file name in `keys_dir`.
pub const TOKEN_KEY_FILE: &str = "token.key";

/// What opening a store may do with missing key files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFiles {
    /// Create a missing key (the embedded SQLite default: one process, one directory).
    CreateMissing,
    /// Refuse to open without both keys (a shared database: per-replica keys would make
    /// tokens and checkpoints of one replica invalid on the others).
    MustExist,
}

/// The store's two keys.
pub(crate) struct Keys {
    /// HMAC key of approval tokens (at least 32 bytes).
    pub(crate) token: Vec<u8>,
    /// Ed25519 key that signs audit checkpoints.
    pub(crate) audit: SigningKey,
}

/// Reads the keys of `dir` (which must exist when `files` is `MustExist`). Errors: `Invalid`
/// naming the directory and `assent keys init` when a key is missing and may not be created,
/// or when a key file is damaged (short token key, audit key not 32 bytes); `Io`.
pub(crate) fn load(dir: &Path, files: KeyFiles) -> Result<Keys, StoreError> {
    if files == KeyFiles::CreateMissing {
        create_private_dir(dir).map_err(io(dir))?;
        return Ok(Keys {
            token: load_or_create_token_key(dir)?,
            audit: checkpoint::load_or_create_key(dir)?,
        });
    }
    let token = read_token_key(dir)?;
    let audit = checkpoint::read_key(dir)?;
    match (token, audit) {
        (Some(token), Some(audit)) => Ok(Keys { token, audit }),
        (token, _) => Err(StoreError::Invalid(format!(
            "keys_dir {}: no {}: a shared (PostgreSQL) database needs the same keys on every replica, so assent never makes them per replica; run `assent keys init --keys-dir {}` once and give that directory to every replica",
            dir.display(),
            if token.is_none() {
                TOKEN_KEY_FILE
            } else {
                checkpoint::KEY_FILE
            },
            dir.display()
        ))),
    }
}

/// What [`init`] did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Initialised {
    /// The key files created now (`token.key`, `audit.key`); empty when both existed.
    pub created: Vec<&'static str>,
    /// The audit public key (64 hex), for `assent audit verify --public-key`.
    pub audit_public_key: String,
}

/// `assent keys init`: creates `dir` (0700) and whichever of `token.key` and `audit.key` it
/// lacks (random, 0600, written to a temporary file and renamed). An existing key is kept,
/// never overwritten (replacing `token.key` invalidates every outstanding token; replacing
/// `audit.key` makes the signed checkpoints unverifiable). Errors: `Invalid` for a damaged
/// existing key; `Io`.
pub fn init(dir: &Path) -> Result<Initialised, StoreError> {
    create_private_dir(dir).map_err(io(dir))?;
    let mut created = Vec::new();
    if read_token_key(dir)?.is_none() {
        created.push(TOKEN_KEY_FILE);
    }
    if checkpoint::read_key(dir)?.is_none() {
        created.push(checkpoint::KEY_FILE);
    }
    let keys = load(dir, KeyFiles::CreateMissing)?;
    Ok(Initialised {
        created,
        audit_public_key: checkpoint::public_key_hex(&keys.audit.verifying_key()),
    })
}

/// `<dir>/token.key`, `None` when absent. `Invalid` when shorter than 32 bytes.
fn read_token_key(dir: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    let path = dir.join(TOKEN_KEY_FILE);
    match std::fs::read(&path) {
        Ok(k) if k.len() >= 32 => Ok(Some(k)),
        Ok(_) => Err(StoreError::Invalid(format!(
            "{}: token key is shorter than 32 bytes; restore it or delete it (outstanding tokens become invalid)",
            path.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(&path)(e)),
    }
}

/// Reads `<dir>/token.key`, creating a random 32-byte key (mode 0600) when there is none.
fn load_or_create_token_key(dir: &Path) -> Result<Vec<u8>, StoreError> {
    if let Some(k) = read_token_key(dir)? {
        return Ok(k);
    }
    let mut k = vec![0u8; 32];
    getrandom::fill(&mut k).map_err(|e| StoreError::Invalid(format!("no randomness: {e}")))?;
    let tmp = dir.join("token.key.tmp");
    write_private(&tmp, &k).map_err(io(&tmp))?;
    let path = dir.join(TOKEN_KEY_FILE);
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    Ok(k)
}

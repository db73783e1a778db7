//! The key files a store signs with (issue 13 §2, issue 14 §6): `token.key` (the 32-byte
//! Ed25519 seed that signs approval tokens, [`assent_core::token`]) and `audit.key` (the
//! Ed25519 seed that signs audit checkpoints, [`crate::checkpoint`]), both in one `keys_dir`
//! (default `data_dir`). They are separate so that rotating the token key never touches the
//! audit chain.
//!
//! Rotation ([`rotate_token_key`], `assent keys rotate-token-key`): the current `token.key` is
//! copied to `token-retired-<unix ms>.key` and a new `token.key` written. A retired key keeps
//! verifying — and stays in the JWKS — until every token it can have signed has expired: its
//! retirement time plus the token lifetime plus [`RETIRED_GRACE_MS`]; after that it is
//! ignored (the file may be deleted). A running store re-reads the directory every
//! [`REREAD_AFTER`] (and when it meets a `kid` it does not know), so replicas sharing
//! `keys_dir` move to the new key without a restart.
//!
//! An embedded SQLite store creates missing keys the first time it opens
//! ([`KeyFiles::CreateMissing`]). Replicas sharing one Postgres database must share the keys: a
//! token minted by one is redeemed at another, and every checkpoint must verify under one
//! public key. So a Postgres store never creates keys ([`KeyFiles::MustExist`]); `assent keys
//! init --keys-dir DIR` ([`init`]) makes them once, and every replica is given the directory.

use crate::checkpoint;
use crate::error::StoreError;
use crate::kit::{create_private_dir, io, now_ms, write_private};
use crate::token_keys::{TokenKeys, read_seed};
use assent_core::token::TokenSigner;
use ed25519_dalek::SigningKey;
use std::path::Path;

pub use crate::token_keys::{REREAD_AFTER, RETIRED_GRACE_MS, RETIRED_PREFIX, TOKEN_KEY_FILE};

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
    /// The token keys: the current signer and the retired keys that still verify.
    pub(crate) token: TokenKeys,
    /// Ed25519 key that signs audit checkpoints.
    pub(crate) audit: SigningKey,
    /// Whether this load created `audit.key` (it was missing).
    pub(crate) created_audit: bool,
}

/// Reads the keys of `dir` (which must exist when `files` is `MustExist`). Errors: `Invalid`
/// naming the directory and `assent keys init` when a key is missing and may not be created,
/// or when a key file is damaged (short token key, audit key not 32 bytes); `Io`.
pub(crate) fn load(dir: &Path, files: KeyFiles) -> Result<Keys, StoreError> {
    if files == KeyFiles::CreateMissing {
        create_private_dir(dir).map_err(io(dir))?;
        load_or_create_token_key(dir)?;
        let created_audit = checkpoint::read_key(dir)?.is_none();
        return Ok(Keys {
            token: TokenKeys::load(dir)?,
            audit: checkpoint::load_or_create_key(dir)?,
            created_audit,
        });
    }
    let token = read_token_key(dir)?;
    let audit = checkpoint::read_key(dir)?;
    match (token, audit) {
        (Some(_), Some(audit)) => Ok(Keys {
            token: TokenKeys::load(dir)?,
            audit,
            created_audit: false,
        }),
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

/// For the administration commands only (`assent audit verify`, `backup`, `restore`, `keys`,
/// and the others that are not `assent serve`): when the process runs as root, a key file (and
/// its directory) another user owns — the service's, say a systemd `DynamicUser` — is read
/// if no one else may read or replace it. A gateway never calls it: run as root, it refuses
/// keys another user owns, who could replace them (`kit::read_key_file`).
pub fn let_root_read_service_keys() {
    crate::kit::let_root_read_service_keys();
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
/// never overwritten (replacing `token.key` outside [`rotate_token_key`] invalidates every
/// outstanding token; replacing `audit.key` makes the signed checkpoints unverifiable).
/// Errors: `Invalid` for a damaged existing key; `Io`.
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

/// `<dir>/token.key`, `None` when absent. `Invalid` when it is not 32 bytes.
fn read_token_key(dir: &Path) -> Result<Option<[u8; 32]>, StoreError> {
    read_seed(&dir.join(TOKEN_KEY_FILE))
}

/// 32 random bytes written to `<dir>/<name>` (mode 0600) through a temporary file and a rename.
fn write_seed(dir: &Path, name: &str, seed: &[u8; 32]) -> Result<(), StoreError> {
    let tmp = dir.join(format!("{name}.tmp"));
    write_private(&tmp, seed).map_err(io(&tmp))?;
    let path = dir.join(name);
    std::fs::rename(&tmp, &path).map_err(io(&path))
}

fn random_seed() -> Result<[u8; 32], StoreError> {
    let mut k = [0u8; 32];
    getrandom::fill(&mut k).map_err(|e| StoreError::Invalid(format!("no randomness: {e}")))?;
    Ok(k)
}

/// Creates `<dir>/token.key` (a random Ed25519 seed) when there is none.
fn load_or_create_token_key(dir: &Path) -> Result<(), StoreError> {
    if read_token_key(dir)?.is_none() {
        write_seed(dir, TOKEN_KEY_FILE, &random_seed()?)?;
    }
    Ok(())
}

/// What [`rotate_token_key`] did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Rotated {
    /// The `kid` of the new current key.
    pub kid: String,
    /// The `kid` of the key it replaced, which keeps verifying until its tokens expired.
    pub retired_kid: String,
    /// The retired key's file name in `keys_dir`.
    pub retired_file: String,
}

/// `assent keys rotate-token-key`: copies `<dir>/token.key` to `token-retired-<now ms>.key`
/// and writes a new random `token.key` (both 0600, through a temporary file and a rename, in
/// that order, so a store reading the directory meanwhile always finds the old key). Errors:
/// `Invalid` when there is no token key (run `assent keys init`) or it is damaged; `Io`.
pub fn rotate_token_key(dir: &Path) -> Result<Rotated, StoreError> {
    let old = read_token_key(dir)?.ok_or_else(|| {
        StoreError::Invalid(format!(
            "keys_dir {}: no {TOKEN_KEY_FILE} to rotate; run `assent keys init --keys-dir {}` first",
            dir.display(),
            dir.display()
        ))
    })?;
    let mut at = now_ms();
    while dir.join(retired_name(at)).exists() {
        at += 1;
    }
    let retired_file = retired_name(at);
    write_seed(dir, &retired_file, &old)?;
    let new = random_seed()?;
    write_seed(dir, TOKEN_KEY_FILE, &new)?;
    Ok(Rotated {
        kid: TokenSigner::from_seed(&new).kid().to_string(),
        retired_kid: TokenSigner::from_seed(&old).kid().to_string(),
        retired_file,
    })
}

fn retired_name(at_ms: i64) -> String {
    format!("{RETIRED_PREFIX}{at_ms}.key")
}

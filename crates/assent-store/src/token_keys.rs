//! The token keys a running store holds (issue 14 §6): the current Ed25519 signer of
//! `<keys_dir>/token.key` and the retired keys (`token-retired-<unix ms>.key`) that still
//! verify, re-read from the directory every [`REREAD_AFTER`]. The files, their creation and
//! rotation are [`crate::keys`].

use crate::error::StoreError;
use crate::kit::{io, read_key_file};
use assent_core::token::{InvalidToken, Jwks, PublicKey, TokenClaims, TokenSigner, VerifyError};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// The token key's file name in `keys_dir`.
pub const TOKEN_KEY_FILE: &str = "token.key";

/// A retired token key's file is `token-retired-<unix ms of its retirement>.key`.
pub const RETIRED_PREFIX: &str = "token-retired-";

/// How much longer than the token lifetime a retired key keeps verifying (ms): time for every
/// replica to re-read `keys_dir` ([`REREAD_AFTER`]) and stop signing with it.
pub const RETIRED_GRACE_MS: i64 = 60_000;

/// The longest a retired key can still verify a token (ms): the longest token lifetime a
/// configuration may give (`token_ttl_seconds` is at most one day) and [`RETIRED_GRACE_MS`].
/// A retired key's file older than this is not read at all, so one damaged or unreadable long
/// after its tokens expired stops nothing (found by review: any bad retired file failed every
/// load, refusing start-up and leaving a running store on the keys it read before).
pub(crate) const RETIRED_READ_MS: i64 = 86_400_000 + RETIRED_GRACE_MS;

/// How often a running store re-reads the token keys of `keys_dir`.
pub const REREAD_AFTER: Duration = Duration::from_secs(10);

/// The 32-byte seed in `path`, `None` when absent. `Invalid` when it is not 32 bytes.
pub(crate) fn read_seed(path: &Path) -> Result<Option<[u8; 32]>, StoreError> {
    let Some(k) = read_key_file(path)? else {
        return Ok(None);
    };
    k.try_into().map(Some).map_err(|k: Vec<u8>| {
        StoreError::Invalid(format!(
            "{}: a token key is a 32-byte Ed25519 seed, this file has {} bytes; restore it, or delete it (outstanding tokens become invalid)",
            path.display(),
            k.len()
        ))
    })
}

/// The token keys of one `keys_dir` as last read: the current signer and every retired key
/// with its retirement time (Unix ms).
struct Loaded {
    signer: Arc<TokenSigner>,
    retired: Vec<(PublicKey, i64)>,
    read_at: Instant,
    /// The directory's modification time when read (a rotation renames files into it).
    dir_mtime: Option<std::time::SystemTime>,
}

fn dir_mtime(dir: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(dir).and_then(|m| m.modified()).ok()
}

fn read_token_keys(dir: &Path) -> Result<Loaded, StoreError> {
    let mtime = dir_mtime(dir);
    let current = read_seed(&dir.join(TOKEN_KEY_FILE))?.ok_or_else(|| {
        StoreError::Invalid(format!("keys_dir {}: no {TOKEN_KEY_FILE}", dir.display()))
    })?;
    let mut retired = Vec::new();
    let oldest = crate::kit::now_ms().saturating_sub(RETIRED_READ_MS);
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let name = entry.file_name();
        let Some(at) = name
            .to_str()
            .and_then(|n| n.strip_prefix(RETIRED_PREFIX))
            .and_then(|n| n.strip_suffix(".key"))
            .and_then(|n| n.parse::<i64>().ok())
        else {
            continue;
        };
        if at < oldest {
            continue;
        }
        if let Some(seed) = read_seed(&entry.path())? {
            retired.push((TokenSigner::from_seed(&seed).public_key().clone(), at));
        }
    }
    Ok(Loaded {
        signer: Arc::new(TokenSigner::from_seed(&current)),
        retired,
        read_at: Instant::now(),
        dir_mtime: mtime,
    })
}

/// The token keys of a store: signs with the current key of `keys_dir` and verifies with it
/// and the retired keys still in their window, re-reading the directory every
/// [`REREAD_AFTER`]. A failed re-read keeps the keys read before and logs an error (each
/// [`REREAD_AFTER`] while it fails).
pub(crate) struct TokenKeys {
    shared: Box<Shared>,
}

struct Shared {
    dir: PathBuf,
    state: RwLock<Loaded>,
}

impl TokenKeys {
    /// Reads the token keys of `dir` (`token.key` must exist). Errors: `Invalid`, `Io`.
    pub(crate) fn load(dir: &Path) -> Result<TokenKeys, StoreError> {
        Ok(TokenKeys {
            shared: Box::new(Shared {
                dir: dir.to_path_buf(),
                state: RwLock::new(read_token_keys(dir)?),
            }),
        })
    }

    /// An address unique among live stores and fixed for this store's life (the store's
    /// group-commit gate is found by it).
    pub(crate) fn as_ptr(&self) -> *const u8 {
        (&*self.shared as *const Shared).cast()
    }

    /// Re-reads the directory when the keys were read longer than `after` ago, or (`changed`)
    /// when the directory's modification time is not the one it had when read.
    fn refresh(&self, after: Duration, changed: bool) {
        let due = |l: &Loaded| {
            l.read_at.elapsed() >= after || (changed && dir_mtime(&self.shared.dir) != l.dir_mtime)
        };
        if !due(&self.read()) {
            return;
        }
        let mut w = self.shared.state.write().unwrap_or_else(|p| p.into_inner());
        if !due(&w) {
            return;
        }
        match read_token_keys(&self.shared.dir) {
            Ok(l) => *w = l,
            Err(e) => {
                // Kept signing with the keys read before: said loudly, since a rotation the
                // operator ran (say as root, leaving files this process cannot read) has not
                // taken effect (found by review: the failure was silent).
                tracing::error!(
                    dir = %self.shared.dir.display(), error = %e,
                    "token keys could not be re-read; still signing with the keys read before"
                );
                w.read_at = Instant::now();
                w.dir_mtime = dir_mtime(&self.shared.dir);
            }
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Loaded> {
        self.shared.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The current signing key.
    pub(crate) fn signer(&self) -> Arc<TokenSigner> {
        self.refresh(REREAD_AFTER, false);
        self.read().signer.clone()
    }

    /// The keys that verify at `now_ms` for tokens living `ttl_ms`: the current one, then the
    /// retired ones retired after `now_ms - ttl_ms - RETIRED_GRACE_MS`, newest first; a key
    /// appears once.
    pub(crate) fn jwks(&self, now_ms: i64, ttl_ms: i64) -> Jwks {
        self.refresh(REREAD_AFTER, false);
        let l = self.read();
        let mut keys = vec![l.signer.public_key().clone()];
        let mut retired: Vec<&(PublicKey, i64)> = l.retired.iter().collect();
        retired.sort_by_key(|(_, at)| std::cmp::Reverse(*at));
        let from = now_ms
            .saturating_sub(ttl_ms)
            .saturating_sub(RETIRED_GRACE_MS);
        for (k, at) in retired {
            if *at > from && !keys.iter().any(|x| x.kid == k.kid) {
                keys.push(k.clone());
            }
        }
        Jwks { keys }
    }

    /// Verifies `token` against [`TokenKeys::jwks`]; a `kid` it does not know makes it
    /// re-read the directory when it changed since it was read (one `stat`), and try once
    /// more.
    pub(crate) fn verify(
        &self,
        token: &str,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<TokenClaims, InvalidToken> {
        match assent_core::token::verify(&self.jwks(now_ms, ttl_ms), token) {
            Err(InvalidToken(VerifyError::UnknownKey(_))) => {
                self.refresh(REREAD_AFTER, true);
                assent_core::token::verify(&self.jwks(now_ms, ttl_ms), token)
            }
            r => r,
        }
    }
}

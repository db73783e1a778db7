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
use crate::db::Database;
use crate::error::StoreError;
use crate::kit::{create_private_dir, io, now_ms, write_private};
use crate::token_keys::{TokenKeys, read_seed};
use assent_core::token::TokenSigner;
use ed25519_dalek::SigningKey;
use std::path::Path;

pub use crate::token_keys::{REREAD_AFTER, RETIRED_GRACE_MS, RETIRED_PREFIX, TOKEN_KEY_FILE};

/// The file in `keys_dir` by which an operator accepts a new `audit.key` over a database
/// checkpointed under a lost one: it holds the lost key's public key (64 hex), which the
/// refusal to open names. Nothing in assent writes it; without it a store is not opened
/// over a database whose checkpoints were all signed by another key (a replica given a key
/// set of its own, or a key made anew after the old one was lost).
pub const AUDIT_KEY_REPLACES_FILE: &str = "audit-key-replaces";

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
/// naming the directory and `assent keys init` when a key is missing and may not be created
/// ([`missing_keys`] says more when the database was served before), or when a key file is
/// damaged (short token key, audit key not 32 bytes); `Io`.
pub(crate) fn load(dir: &Path, files: KeyFiles) -> Result<Keys, StoreError> {
    if files == KeyFiles::CreateMissing {
        create_private_dir(dir).map_err(io(dir))?;
        load_or_create_token_key(dir)?;
        let (audit, created_audit) = checkpoint::load_or_create(dir)?;
        return Ok(Keys {
            token: TokenKeys::load(dir)?,
            audit,
            created_audit,
        });
    }
    if let Some(file) = first_missing(dir)? {
        return Err(missing_keys(dir, file, false));
    }
    let audit =
        checkpoint::read_key(dir)?.ok_or_else(|| missing_keys(dir, checkpoint::KEY_FILE, false))?;
    Ok(Keys {
        token: TokenKeys::load(dir)?,
        audit,
        created_audit: false,
    })
}

/// The first of `token.key` and `audit.key` that `dir` lacks, if any. Errors: a damaged key.
pub(crate) fn first_missing(dir: &Path) -> Result<Option<&'static str>, StoreError> {
    if read_token_key(dir)?.is_none() {
        return Ok(Some(TOKEN_KEY_FILE));
    }
    Ok(checkpoint::read_key(dir)?
        .is_none()
        .then_some(checkpoint::KEY_FILE))
}

/// The refusal of a shared database's store whose `dir` lacks `file`. When the database
/// already holds audit records (`served`), new keys would not do: the replicas serving it sign
/// with the keys they were given, so the directory is to be copied from one of them (found by
/// review: the message said to run `assent keys init`, and an operator adding a replica did,
/// on the new host, and got a key set of its own).
pub(crate) fn missing_keys(dir: &Path, file: &str, served: bool) -> StoreError {
    let d = dir.display();
    StoreError::Invalid(if served {
        format!(
            "keys_dir {d}: no {file}, but the database already holds audit records made under the keys of the replicas serving it: copy keys_dir (token.key and audit.key) from an existing replica, or put back the keys kept with this database; `assent keys init` would make a new key set the other replicas ignore"
        )
    } else {
        format!(
            "keys_dir {d}: no {file}: a shared (PostgreSQL) database needs the same keys on every replica, so assent never makes them per replica; run `assent keys init --keys-dir {d}` once and give that directory to every replica"
        )
    })
}

/// Whether `database` holds an audit record; `false` when it does not exist yet (an SQLite
/// file not made, a schema without the table). Read-only: nothing is created.
/// Errors: the database cannot be opened or read.
pub fn holds_audit_records(database: &Database) -> Result<bool, StoreError> {
    use crate::db::OptionalExtension;
    let has = |conn: crate::db::Conn<'_>| -> Result<bool, StoreError> {
        if !conn.has_table("audit")? {
            return Ok(false);
        }
        let seq: Option<i64> = conn
            .prepare_cached("SELECT seq FROM audit LIMIT 1")?
            .query_row([], |r| r.get(0))
            .optional()?;
        Ok(seq.is_some())
    };
    Ok(read_only(database, has)?.unwrap_or(false))
}

/// `f` over `database` opened read-only; `None` when it does not exist yet (an SQLite file
/// not made). Errors: the database cannot be opened; those of `f`.
fn read_only<T>(
    database: &Database,
    f: impl FnOnce(crate::db::Conn<'_>) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError> {
    match database {
        Database::Sqlite { path } if !path.exists() => Ok(None),
        Database::Sqlite { path } => {
            let conn = rusqlite::Connection::open_with_flags(
                path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )?;
            conn.busy_timeout(std::time::Duration::from_secs(10))?;
            f(crate::sql::lite(&conn)).map(Some)
        }
        Database::Postgres { .. } => f(database.connect()?.conn()).map(Some),
    }
}

/// The audit public key (64 hex) whose claim `database` holds at record 0
/// (`checkpoint::not_a_claim`: a verifying checkpoint of the empty chain), if any; `None`
/// also for a row there that is no claim (a start reports that). Read-only. Errors: the
/// database cannot be opened or read.
pub fn claimed_by(database: &Database) -> Result<Option<String>, StoreError> {
    let claim = |conn: crate::db::Conn<'_>| -> Result<Option<String>, StoreError> {
        let Some(cp) = checkpoint::claim_row(conn)? else {
            return Ok(None);
        };
        if checkpoint::not_a_claim(&cp).is_some() {
            return Ok(None);
        }
        let key = checkpoint::parse_public_key(&cp.public_key)?;
        Ok(Some(checkpoint::public_key_hex(&key)))
    };
    Ok(read_only(database, claim)?.flatten())
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

/// `assent keys init`: creates `dir` (0700, when missing; an existing one keeps its mode)
/// and whichever of `token.key` and `audit.key` it lacks (random, 0600, placed without
/// replacing anything: [`crate::kit::place_private`]). An existing key is kept, never
/// overwritten (replacing `token.key` outside [`rotate_token_key`] invalidates every
/// outstanding token; replacing `audit.key` makes the signed checkpoints unverifiable); when
/// another process makes one meanwhile, theirs is kept and reported. Errors: `Invalid` for a
/// damaged existing key; `Io` (a directory others may write is refused).
pub fn init(dir: &Path) -> Result<Initialised, StoreError> {
    create_private_dir(dir).map_err(io(dir))?;
    let mut created = Vec::new();
    if load_or_create_token_key(dir)? {
        created.push(TOKEN_KEY_FILE);
    }
    let (audit, made) = checkpoint::load_or_create(dir)?;
    if made {
        created.push(checkpoint::KEY_FILE);
    }
    TokenKeys::load(dir)?;
    Ok(Initialised {
        created,
        audit_public_key: checkpoint::public_key_hex(&audit.verifying_key()),
    })
}

/// [`init`] for the store of a config: refused when a key would be made while `database` is
/// claimed by another key set ([`claimed_by`], named in the refusal) or already holds audit
/// records — it was served under keys that are not in `dir` (a new replica's host, or keys
/// lost), and a new key set would be one the other replicas ignore ([`missing_keys`]).
/// `assent keys init --keys-dir DIR` remains the way to make a key for such a database
/// knowingly. Errors: that refusal (`Invalid`); those of [`init`] and of reading
/// the database.
pub fn init_for(dir: &Path, database: &Database) -> Result<Initialised, StoreError> {
    let Some(file) = first_missing(dir)? else {
        return init(dir);
    };
    let served = holds_audit_records(database)?;
    let ours = checkpoint::read_key(dir)?.map(|k| checkpoint::public_key_hex(&k.verifying_key()));
    // The claim first, so the refusal names the key set to copy.
    if let Some(theirs) = claimed_by(database)?
        && ours.as_ref() != Some(&theirs)
    {
        return Err(claimed(dir, &theirs, served));
    }
    if served {
        return Err(missing_keys(dir, file, true));
    }
    init(dir)
}

/// The refusal of [`init_for`] when the database is claimed by audit key `theirs` (64 hex),
/// not this directory's: the first start of a gateway under that key set claimed it, and a
/// gateway under new keys is refused on it. `served`: it holds audit records too (that first
/// start records its configuration, `config.loaded`). Found by review: `keys init --config`
/// checked only for audit records, so over a database claimed but not yet written to it made
/// keys that the start then refused; and the refusal over one written to named no key set.
fn claimed(dir: &Path, theirs: &str, served: bool) -> StoreError {
    let d = dir.display();
    let held = if served {
        "the database holds audit records and is claimed by audit key"
    } else {
        "the database holds no audit record yet, but it is claimed by audit key"
    };
    StoreError::Invalid(format!(
        "keys_dir {d}: no keys made: {held} {theirs} (the first start of a gateway under that key set claimed it), and a gateway under new keys is refused on it: copy keys_dir (token.key and audit.key) from the replica that claimed it; only if that key set is lost for good, make keys knowingly with `assent keys init --keys-dir {d}` and write {theirs} into {d}/{AUDIT_KEY_REPLACES_FILE} (owned by the user assent runs as, writable by no one else)"
    ))
}

/// `<dir>/token.key`, `None` when absent. `Invalid` when it is not 32 bytes.
fn read_token_key(dir: &Path) -> Result<Option<[u8; 32]>, StoreError> {
    read_seed(&dir.join(TOKEN_KEY_FILE))
}

/// Writes `seed` to `<dir>/<name>` (mode 0600) through a temporary file of a random name and
/// a rename, which replaces what is there: for [`rotate_token_key`] only (a new key is placed
/// with [`crate::kit::place_private`], which replaces nothing).
fn write_seed(dir: &Path, name: &str, seed: &[u8; 32]) -> Result<(), StoreError> {
    let tmp = dir.join(crate::kit::random_id(&format!(".{name}.tmp-")));
    write_private(&tmp, seed).map_err(io(&tmp))?;
    let path = dir.join(name);
    std::fs::rename(&tmp, &path).map_err(io(&path))
}

fn random_seed() -> Result<[u8; 32], StoreError> {
    let mut k = [0u8; 32];
    getrandom::fill(&mut k).map_err(|e| StoreError::Invalid(format!("no randomness: {e}")))?;
    Ok(k)
}

/// Places a random `<dir>/token.key` when there is none; whether this call placed it (when
/// another process placed one first, theirs is kept).
fn load_or_create_token_key(dir: &Path) -> Result<bool, StoreError> {
    if read_token_key(dir)?.is_some() {
        return Ok(false);
    }
    let path = dir.join(TOKEN_KEY_FILE);
    crate::kit::place_private(dir, TOKEN_KEY_FILE, &random_seed()?).map_err(io(&path))
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
/// and writes a new random `token.key` (both 0600, in that order, so a store reading the
/// directory meanwhile always finds the old key). The retired copy is placed without
/// replacing anything (`kit::place_private`); when the name is taken, the next
/// millisecond's is tried. Rotations of one directory run one at a time (an exclusive
/// `flock` of the directory, `rotation_lock`), so that each retires the key the one
/// before it made. Found by review: the name was checked for, then renamed over, so two
/// rotations at once (or a file made between the check and the rename) could replace a
/// retired key, and both read the same current key, so the key the first made was replaced
/// without being retired: every token it had signed became invalid. Errors: `Invalid` when
/// there is no token key (run `assent keys init`) or it is damaged; `Io`.
pub fn rotate_token_key(dir: &Path) -> Result<Rotated, StoreError> {
    let missing = || {
        StoreError::Invalid(format!(
            "keys_dir {}: no {TOKEN_KEY_FILE} to rotate; run `assent keys init --keys-dir {}` first",
            dir.display(),
            dir.display()
        ))
    };
    // Before the lock, which needs the directory: one without a key is told to make it.
    read_token_key(dir)?.ok_or_else(missing)?;
    let _one_at_a_time = rotation_lock(dir)?;
    let old = read_token_key(dir)?.ok_or_else(missing)?;
    let start = now_ms();
    let mut retired_file = None;
    for at in start..start.saturating_add(RETIRED_NAME_TRIES) {
        let name = retired_name(at);
        let path = dir.join(&name);
        if crate::kit::place_private(dir, &name, &old).map_err(io(&path))? {
            retired_file = Some(name);
            break;
        }
    }
    let retired_file = retired_file.ok_or_else(|| {
        StoreError::Invalid(format!(
            "keys_dir {}: {RETIRED_NAME_TRIES} retired-key names from {} on are all taken; nothing rotated",
            dir.display(),
            retired_name(start)
        ))
    })?;
    let new = random_seed()?;
    write_seed(dir, TOKEN_KEY_FILE, &new)?;
    Ok(Rotated {
        kid: TokenSigner::from_seed(&new).kid().to_string(),
        retired_kid: TokenSigner::from_seed(&old).kid().to_string(),
        retired_file,
    })
}

/// How many retired-key names (one a millisecond) [`rotate_token_key`] tries.
const RETIRED_NAME_TRIES: i64 = 1000;

/// The exclusive `flock` of the directory `dir` that [`rotate_token_key`] holds, waiting for
/// another rotation's. On a filesystem that has no such lock the rotation goes on without
/// it, with a warning: retired keys are still never replaced. Errors: `Io`.
fn rotation_lock(dir: &Path) -> Result<Option<std::fs::File>, StoreError> {
    let f = std::fs::File::open(dir).map_err(io(dir))?;
    match f.lock() {
        Ok(()) => Ok(Some(f)),
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
            tracing::warn!(dir = %dir.display(), error = %e, "the keys directory cannot be locked: token key rotations run at once are not kept apart");
            Ok(None)
        }
        Err(e) => Err(io(dir)(e)),
    }
}

fn retired_name(at_ms: i64) -> String {
    format!("{RETIRED_PREFIX}{at_ms}.key")
}

/// The public key `<dir>/audit-key-replaces` ([`AUDIT_KEY_REPLACES_FILE`]) holds, trimmed;
/// `None` without the file. Read under the owner rules of the key files
/// ([`crate::kit::read_key_file`]), its mode rule relaxed to writing (a public key may be
/// read by anyone): the file opened (links followed, as for the keys), any link at its name,
/// and the directory must be this user's or root's, the file writable by no one else, the
/// directory by no one else unless sticky. Found by review: it was read whatever its owner
/// and mode, so in a shared sticky directory another local user could plant it and have a
/// foreign key set served. Errors: `Invalid` naming the file or directory, what is wrong and
/// the `chmod`/`chown` that mends it; `Io`.
pub(crate) fn read_replaced_key(dir: &Path) -> Result<Option<String>, StoreError> {
    use std::io::Read;
    let path = dir.join(AUDIT_KEY_REPLACES_FILE);
    let mut f = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path)(e)),
    };
    #[cfg(unix)]
    {
        let link = std::fs::symlink_metadata(&path).map_err(io(&path))?;
        let file = f.metadata().map_err(io(&path))?;
        let d = std::fs::metadata(dir).map_err(io(dir))?;
        not_writable_by_others(&path, &link, false)?;
        not_writable_by_others(&path, &file, false)?;
        not_writable_by_others(dir, &d, true)?;
    }
    let mut text = String::new();
    (&mut f)
        .take(4096)
        .read_to_string(&mut text)
        .map_err(io(&path))?;
    Ok(Some(text.trim().to_string()))
}

/// Refuses `path` (metadata `m`; a directory when `dir`, which may be writable by others
/// when sticky) unless this user or root owns it and no one else may write it (a symbolic
/// link's own mode is not checked). Errors: `Invalid` naming it and the mend.
#[cfg(unix)]
fn not_writable_by_others(path: &Path, m: &std::fs::Metadata, dir: bool) -> Result<(), StoreError> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let mode = m.mode() & 0o7777;
    let p = path.display();
    if m.uid() != me && m.uid() != 0 {
        return Err(StoreError::Invalid(format!(
            "{p}: belongs to user id {}, not to the user assent runs as ({me}) or root; it decides which audit key may serve the database, so another user's is not read: `chown {me} {p}`, or remove it",
            m.uid()
        )));
    }
    let sticky = dir && mode & 0o1000 != 0;
    if m.file_type().is_symlink() || mode & 0o022 == 0 || sticky {
        return Ok(());
    }
    Err(StoreError::Invalid(format!(
        "{p}: mode {mode:04o} lets users other than its owner {} it, and it decides which audit key may serve the database; `chmod go-w {p}`",
        if dir { "put files in" } else { "change" }
    )))
}

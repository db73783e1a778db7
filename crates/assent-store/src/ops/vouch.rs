//! Whether a staged copy `assent restore` was given is this gateway's whole history: its
//! stored checkpoints must be signed with the audit key of the data directory's `keys_dir`
//! (another key's are refused unless `--force`), and the newest of them must cover the copy's
//! head (`assent backup` signs one there, [`crate::checkpoint::sign_head_of_copy`]).
//!
//! Attack (found by review): the hash chain has no key, so whoever can write a backup file
//! (not the keys) deleted its checkpoints, rewrote any part of its history, re-chained it,
//! kept the state tables in step and the newest sealed approval whole; the restore took one
//! intact seal as proof that the copy was this gateway's, checked no other signature, and the
//! gateway then signed the forged history as its own. Records appended after the newest
//! checkpoint were taken the same way. Without the audit key neither can be signed, so a copy
//! whose head no checkpoint of the key covers is refused unless `--force`. What this cannot
//! show is a rollback to an older genuine backup (or one whose newest checkpoints and the
//! records after an older one were cut off): that is the checkpoint file's to show
//! (`audit_checkpoints.file`, checked by `restore --config`).

use super::{Staging, refuse, unverified};
use crate::checkpoint::{self, Checkpoint};
use crate::error::StoreError;
use crate::integrity::{self, Report, VerifyOptions};
use ed25519_dalek::VerifyingKey;
use rusqlite::{Connection, OpenFlags, OptionalExtension as _};
use std::path::Path;

/// What [`verify_staged`] found of a copy that may be restored.
pub(super) struct Vouched {
    /// The offline verification of the copy (it verifies).
    pub rep: Report,
    /// `--force`: its checkpoints were signed by another audit key than `keys_dir`'s.
    pub other_key: bool,
    /// A checkpoint signed with `keys_dir`'s audit key covers its head (or it has no audit
    /// record); `false` only with `--force`.
    pub head_signed: bool,
}

/// The stored checkpoints of the staged copy and the first that names another public key
/// than `key` (any at all when there is no `key` to check them with) — or, when none does,
/// the copy's claim at record 0 ([`checkpoint::claim_row`], a claim of the empty chain by
/// another key, or by any with no `key`) when no stored checkpoint names `key`: a claim
/// lies behind every checkpoint, as at the gateway's start. Attack (found by review): a
/// fresh database of another gateway (its claim alone, no record) was restored without
/// `--force` — nothing "signed by another key", and no head to cover — and the next start
/// refused it as another key set's: the operator's database had been replaced first.
fn signed_by_other_key(
    staged: &Path,
    key: Option<&VerifyingKey>,
) -> Result<(Vec<Checkpoint>, Option<Checkpoint>), StoreError> {
    let conn = Connection::open_with_flags(staged, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let stored = checkpoint::stored(crate::sql::lite(&conn))?;
    let hex = key.map(checkpoint::public_key_hex);
    let ours = |c: &Checkpoint| hex.as_deref() == Some(c.public_key.as_str());
    if let Some(c) = stored.iter().find(|c| !ours(c)) {
        let c = c.clone();
        return Ok((stored, Some(c)));
    }
    let claim = match checkpoint::claim_row(crate::sql::lite(&conn))? {
        Some(c) if stored.is_empty() && checkpoint::not_a_claim(&c).is_none() => {
            // Compared as this store writes keys: a claim's key parses (it verifies).
            let theirs = checkpoint::parse_public_key(&c.public_key)?;
            let own = key.is_some_and(|k| *k == theirs);
            (!own).then(|| Checkpoint {
                public_key: checkpoint::public_key_hex(&theirs),
                ..c
            })
        }
        _ => None,
    };
    Ok((stored, claim))
}

/// For a copy with no checkpoint of this gateway's key, a hint only (never proof: one intact
/// seal says nothing of the rest of the copy): whether its newest sealed approval holds its
/// seal under the audit key of `keys_dir`. `false` when it has none (or predates the seals,
/// migration 0029) or there is no key.
fn sealed_by_us(staged: &Path, keys_dir: &Path) -> Result<bool, StoreError> {
    let conn = Connection::open_with_flags(staged, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let Some(audit) = checkpoint::read_key(keys_dir)? else {
        return Ok(false);
    };
    let sealed: i64 = conn.query_row(
        "SELECT count(*) FROM pragma_table_info('approvals') WHERE name = 'seal'",
        [],
        |r| r.get(0),
    )?;
    if sealed == 0 {
        return Ok(false);
    }
    let newest = conn
        .query_row(
            "SELECT id FROM approvals WHERE seal IS NOT NULL AND seal <> '' ORDER BY requested_at DESC, rowid DESC LIMIT 1",
            [],
            |r| r.get::<_, String>(0),
        )
        .optional()?;
    let seal = crate::seal::SealKey::of(&audit, crate::seal::Sealed::Approval);
    Ok(match newest {
        Some(id) => crate::approval_seal::holds(crate::sql::lite(&conn), &seal, &id)?,
        None => false,
    })
}

/// What to check before restoring, with `--force`, a copy no checkpoint vouches for.
const CHECK_FIRST: &str = "A backup written by this assent's `assent backup` carries a checkpoint signed at its head; one written by an older assent does not. Restore such a copy only if you trust the file (kept where only you could write it), with --force; with --config, the copy is still checked against every checkpoint of audit_checkpoints.file up to its head, which shows a rewrite of the history those checkpoints cover";

/// The refusal of a copy (`what`) whose chain of `head` records goes past `newest`, the
/// newest record a checkpoint of `key` (of `keys_dir`) covers (0: none).
fn unvouched(
    what: &str,
    staged: &Path,
    keys_dir: &Path,
    key: Option<&VerifyingKey>,
    (head, newest): (i64, i64),
) -> Result<StoreError, StoreError> {
    let Some(key) = key else {
        return Ok(refuse(format!(
            "{what} holds {head} audit records, but {} holds no audit.key to check them with: nothing shows its history is this gateway's. Put back the audit.key and token.key backed up with it, or --force",
            keys_dir.display()
        )));
    };
    let hex = checkpoint::public_key_hex(key);
    if newest > 0 {
        return Ok(refuse(format!(
            "{what}'s newest checkpoint signed by this gateway's audit key {hex} is at record {newest}, but its audit chain goes on to record {head}: its last {} records are vouched for by no signature — added or rewritten after that checkpoint (anyone who can write the file can re-chain records: the chain has no key), or the copy was written by an older `assent backup`, which did not sign its head. {CHECK_FIRST}",
            head - newest
        )));
    }
    let whose = if sealed_by_us(staged, keys_dir)? {
        String::new()
    } else {
        format!(
            ", and nothing in it is sealed under the audit key {} holds ({hex}): it may be another gateway's, or made up",
            keys_dir.display()
        )
    };
    Ok(refuse(format!(
        "{what} has no audit checkpoint signed by this gateway's audit key {hex}{whose}; nothing shows that its {head} audit records are the history this gateway wrote (anyone who can write the file can rewrite and re-chain them: the chain has no key). {CHECK_FIRST}"
    )))
}

/// The refusal of a copy (`what`) signed by another key than `key` (of `keys_dir`): `theirs`
/// is the first checkpoint of that key, or its claim of the copy (record 0).
fn other_key(
    what: &str,
    theirs: &Checkpoint,
    keys_dir: &Path,
    key: Option<&VerifyingKey>,
) -> StoreError {
    let signed = if theirs.seq == 0 {
        "database was claimed (at its first start, with no audit record yet) by"
    } else {
        "audit checkpoints were signed by"
    };
    refuse(format!(
        "{what}'s {signed} {}, but {} {}: put back the audit.key and token.key that were backed up with this database, or --force (a gateway then refuses to serve it until those keys are put back; audit verify fails on its checkpoints, and every token minted before the backup is refused)",
        checkpoint::named_key(theirs),
        keys_dir.display(),
        match key {
            Some(k) => format!("holds audit key {}", checkpoint::public_key_hex(k)),
            None => "holds no audit.key".to_string(),
        }
    ))
}

/// Verifies the staged copy under the audit key `key` of `keys_dir` ([`Vouched`]). Refused
/// unless `force`: checkpoints signed by another key (or any, with no key here), or the
/// claim of another key with none of `key` ([`signed_by_other_key`]); a chain with
/// records past the newest checkpoint of `key` (an archive anchor, verified under `key`,
/// covers the records it archived), or with records and no `key`. With `force` and another
/// key, verified under the key its checkpoints name (the chain and state still checked).
/// Errors: those refusals; the copy does not verify; I/O and SQLite errors.
pub(super) fn verify_staged(
    staging: &Staging,
    key: Option<VerifyingKey>,
    keys_dir: &Path,
    what: &str,
    force: bool,
) -> Result<Vouched, StoreError> {
    let (stored, theirs) = signed_by_other_key(&staging.db(), key.as_ref())?;
    let other = theirs.is_some();
    if let Some(t) = &theirs
        && !force
    {
        return Err(other_key(what, t, keys_dir, key.as_ref()));
    }
    let checked_with = match stored.first().or(theirs.as_ref()) {
        Some(c) if other => Some(checkpoint::parse_public_key(&c.public_key)?),
        _ => key,
    };
    let opts = VerifyOptions {
        public_key: checked_with,
        checkpoint_file: None,
        ..Default::default()
    };
    let rep = integrity::verify_offline(&staging.dir, &opts)?;
    if let Some(e) = unverified(what, &rep) {
        return Err(e);
    }
    let head = rep.archived_records + rep.records;
    // Not `other`: every stored checkpoint is `key`'s, and verified under it (as the anchors).
    let newest = match (other, key) {
        (false, Some(_)) => stored
            .iter()
            .map(|c| c.seq)
            .fold(rep.archived_records, i64::max),
        _ => 0,
    };
    let head_signed = !other && head <= newest;
    if !head_signed && !other && !force {
        return Err(unvouched(
            what,
            &staging.db(),
            keys_dir,
            key.as_ref(),
            (head, newest),
        )?);
    }
    if !other && !force {
        seals_hold(staging, keys_dir, &opts, what)?;
    }
    Ok(Vouched {
        rep,
        other_key: other,
        head_signed,
    })
}

/// The staged copy verified again with `keys_dir`'s audit key at hand, so that the seals of
/// its settlements and plans are checked too (the staging directory holds no key). Found by
/// review: a backup whose settled approval was edited where only its seal vouches for it (a
/// decision's reason, the scope approved) was restored in place of the sound database without
/// `--force`. Errors: the copy does not verify so (refused, naming the seal); those of
/// [`integrity::verify_database`].
fn seals_hold(
    staging: &Staging,
    keys_dir: &Path,
    opts: &VerifyOptions<'_>,
    what: &str,
) -> Result<(), StoreError> {
    let copy = crate::db::Database::Sqlite { path: staging.db() };
    let rep = integrity::verify_database(&copy, keys_dir, opts)?;
    match unverified(what, &rep) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

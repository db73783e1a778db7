//! Whether the audit key a process serves under was replaced: another key set took the
//! database over (`audit-key-replaces`, `open.rs`), which its first start records with an
//! `audit.key_replaced` record and a checkpoint signed by the new key past every one of the
//! old key's. From then on the old key's process must not write: its seals, tokens and
//! checkpoints are ones the new key set ignores or takes for damage. Checked in every write
//! transaction ([`crate::store::Store`]'s group commit opens it), by the checkpoint signer and
//! by `/readyz` ([`crate::readiness`]). It reads only `audit_checkpoints` and imports no
//! store file, so that the write path may call it.

use crate::db::{self, Conn, OptionalExtension};
use assent_core::checkpoint::Checkpoint;
use ed25519_dalek::VerifyingKey;

/// The kind of the audit record of a take-over (`checkpoint::take_over`):
/// `{"public_key", "replaces", "replaced_at_record"}`, signed at its own record by a
/// checkpoint of the key that took over.
pub const KEY_REPLACED: &str = "audit.key_replaced";

/// How many of the newest checkpoints [`newest_verifying`] looks at.
pub(crate) const LOOKED_AT: i64 = 1000;

/// Whose checkpoints [`newest_verifying`] looks for, by public key (64 hex).
#[derive(Clone, Copy)]
pub(crate) enum Signer<'a> {
    /// Those naming this key.
    Is(&'a str),
    /// Those naming any other key.
    Not(&'a str),
}

/// Whether `cp` verifies under the Ed25519 public key it names (64 hex).
fn verifies_under_its_key(cp: &Checkpoint) -> bool {
    let key = hex::decode(cp.public_key.trim())
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .and_then(|b| VerifyingKey::from_bytes(&b).ok());
    key.is_some_and(|k| cp.verifies(&k))
}

/// The `(seq, public key)` of the newest stored checkpoint (the claim at record 0 included)
/// at a record strictly between `after` and `before` that names the key `who` says and
/// verifies under the key it names, among the newest [`LOOKED_AT`] such rows. Errors: the
/// database's.
pub(crate) fn newest_verifying(
    conn: Conn<'_>,
    who: Signer<'_>,
    after: i64,
    before: i64,
) -> db::Result<Option<(i64, String)>> {
    use std::ops::ControlFlow;
    let (op, key) = match who {
        Signer::Is(k) => ("=", k),
        Signer::Not(k) => ("<>", k),
    };
    let sql = format!(
        "SELECT seq, head_hash, record_count, time, public_key, signature FROM audit_checkpoints WHERE public_key {op} ?1 AND seq > ?2 AND seq < ?3 ORDER BY seq DESC LIMIT ?4"
    );
    let mut found = None;
    conn.prepare_cached(&sql)?
        .for_each(crate::params![key, after, before, LOOKED_AT], |r| {
            let cp = Checkpoint {
                seq: r.get(0)?,
                head_hash: r.get(1)?,
                record_count: r.get(2)?,
                time: r.get(3)?,
                public_key: r.get(4)?,
                signature: r.get(5)?,
            };
            Ok(if verifies_under_its_key(&cp) {
                found = Some((cp.seq, cp.public_key));
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            })
        })?;
    Ok(found)
}

/// Whether the audit key `key` was replaced on the database of `conn`: `Some((seq, public
/// key))` of a checkpoint (or claim) that verifies under another key and lies past the
/// newest one that verifies under `key` (or any, when `key` signed none). Cheap when `key`
/// signed the newest row (one indexed read, nothing verified), as it does on a database it
/// serves alone. A row naming `key` that does not verify counts for nothing either way (whoever
/// could plant it can write the database). Errors: the database's.
pub(crate) fn replaced_by(conn: Conn<'_>, key: &VerifyingKey) -> db::Result<Option<(i64, String)>> {
    let ours = hex::encode(key.to_bytes());
    let top: Option<String> = conn
        .prepare_cached("SELECT public_key FROM audit_checkpoints ORDER BY seq DESC LIMIT 1")?
        .query_row([], |r| r.get(0))
        .optional()?;
    if top.is_none_or(|k| k == ours) {
        return Ok(None);
    }
    let mine = newest_verifying(conn, Signer::Is(&ours), i64::MIN, i64::MAX)?;
    let after = mine.map_or(i64::MIN, |(s, _)| s);
    newest_verifying(conn, Signer::Not(&ours), after, i64::MAX)
}

/// The refusal of a write, a checkpoint or `/readyz` by a process whose audit key `ours`
/// (64 hex) was replaced by `theirs` (named as the database holds it: 64 hex characters
/// re-encoded, never echoed as stored) at record `seq`.
pub(crate) fn replaced_message(ours: &str, theirs: &str, seq: i64) -> String {
    let theirs = hex::decode(theirs.trim())
        .map(hex::encode)
        .unwrap_or_else(|_| "(a key that is not hex)".into());
    format!(
        "this replica's audit key {ours} was replaced by audit key {theirs} (which signed past it, at record {seq}): another replica took the database over; nothing more is written or signed under the old key; restart it with the new keys (copy keys_dir from the replica serving under {theirs})"
    )
}

/// In the write transaction `conn`, before anything is written: `Err(Unusable)` with
/// [`replaced_message`] when `key` was replaced ([`replaced_by`]), logged. Errors: that,
/// the database's.
pub(crate) fn refuse_if_replaced(conn: Conn<'_>, key: &VerifyingKey) -> db::Result<()> {
    let Some((seq, theirs)) = replaced_by(conn, key)? else {
        return Ok(());
    };
    let why = replaced_message(&hex::encode(key.to_bytes()), &theirs, seq);
    tracing::error!(error = %why, "write refused: this replica's audit key was replaced");
    Err(db::DbError::Unusable(why))
}

/// The take-overs recorded on the database, oldest first: `(seq, replaced key, new key)` (64
/// hex each, re-encoded) of each [`KEY_REPLACED`] record at whose record a stored checkpoint
/// names the new key and verifies under it (as the take-over signs it). A record without such
/// a checkpoint (appended by someone who can write the database, who cannot sign as the new
/// key) counts for nothing. Errors: the database's.
pub(crate) fn recorded_takeovers(conn: Conn<'_>) -> db::Result<Vec<(i64, String, String)>> {
    let mut found = Vec::new();
    let rows: Vec<(i64, String)> = crate::sql::rows(
        conn,
        "SELECT seq, data FROM audit WHERE kind = ?1 ORDER BY seq",
        [KEY_REPLACED],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let hex_key = |v: &serde_json::Value| {
        v.as_str()
            .and_then(|t| hex::decode(t).ok())
            .filter(|b| b.len() == 32)
            .map(hex::encode)
    };
    for (seq, data) in rows {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&data) else {
            continue;
        };
        let (Some(old), Some(new)) = (hex_key(&v["replaces"]), hex_key(&v["public_key"])) else {
            continue;
        };
        let signed = newest_verifying(conn, Signer::Is(&new), seq - 1, seq.saturating_add(1))?;
        if signed.is_some() {
            found.push((seq, old, new));
        }
    }
    Ok(found)
}

//! Whether the audit key a process serves under was replaced: another key set took the
//! database over (`audit-key-replaces`, `open.rs`), which its first start records with an
//! `audit.key_replaced` record and, at that record, a checkpoint signed by the new key
//! (`checkpoint::take_over`). From then on the old key's process must not write: its seals,
//! tokens and checkpoints are ones the new key set ignores or takes for damage.
//!
//! Decided ONLY by such a recorded take-over of the key ([`replaced_by`]): a checkpoint row of
//! another key past ours is no take-over (found by review: one row signed by the old key at
//! the head — a replica still running an older binary, a restored backup — or by a database
//! writer's key of their own made the legitimate new replica refuse every write and tell the
//! operator to copy the lost key's keys; unverified rows naming the key switched the check
//! off, and junk rows made every write verify a thousand signatures). Foreign or unverifiable
//! checkpoint rows are damage `assent audit verify` reports. Checked in every write
//! transaction ([`crate::store::Store`]'s group commit opens it), incrementally
//! ([`Watch`]: only checkpoint rows newer than those already examined, normally none), by the
//! checkpoint signer, at start-up and by `/readyz` ([`crate::readiness`]). It imports no
//! store file, so that the write path may call it.

use crate::db::{self, Conn};
use assent_core::checkpoint::Checkpoint;
use ed25519_dalek::VerifyingKey;
use std::sync::Mutex;

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

/// The Ed25519 public key of 64 hex characters `text` (surrounding blanks ignored), if it is one.
fn parse_key(text: &str) -> Option<VerifyingKey> {
    hex::decode(text.trim())
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .and_then(|b| VerifyingKey::from_bytes(&b).ok())
}

/// Whether `cp` verifies under the Ed25519 public key it names (64 hex).
fn verifies_under_its_key(cp: &Checkpoint) -> bool {
    parse_key(&cp.public_key).is_some_and(|k| cp.verifies(&k))
}

/// The `(seq, public key)` of the newest stored checkpoint (the claim at record 0 included)
/// at a record strictly between `after` and `before` that names the key `who` says and
/// verifies under the key it names, among the newest [`LOOKED_AT`] such rows. Used by the
/// start-up checks (`open.rs`), never by the write path. Errors: the database's.
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

/// A recorded take-over: `(seq, replaced key, new key)`, the keys 64 hex each (re-encoded).
pub(crate) type Takeover = (i64, String, String);

/// The take-overs recorded at checkpoint rows past record `after`, oldest first, and the
/// highest checkpoint `seq` examined, never past the audit head read in the same query
/// (`None`: no row past `after`, or no audit record; found by review: one junk row at a huge
/// `seq` moved a [`Watch`] past every later take-over, which its own record puts at or below
/// the head, so the replaced replica kept writing). A take-over is an
/// [`KEY_REPLACED`] record whose `replaces` and `public_key` are keys, with a stored
/// checkpoint at its own record that names the new key, verifies under it and whose
/// `head_hash` is that record's `hash` (as `checkpoint::take_over` signs it). One query by
/// the checkpoints' primary key, each row joined to the audit record at its `seq`; only a row
/// at an [`KEY_REPLACED`] record has its signature checked. A record without such a
/// checkpoint (appended by someone who can write the database, who cannot sign as the new
/// key) counts for nothing. Errors: the database's.
fn takeovers_after(conn: Conn<'_>, after: i64) -> db::Result<(Vec<Takeover>, Option<i64>)> {
    type Row = (Checkpoint, Option<String>, Option<String>, Option<i64>);
    let rows: Vec<Row> = crate::sql::rows(
        conn,
        "SELECT c.seq, c.head_hash, c.record_count, c.time, c.public_key, c.signature, CASE WHEN a.kind = ?2 THEN a.hash END, CASE WHEN a.kind = ?2 THEN a.data END, (SELECT max(seq) FROM audit) FROM audit_checkpoints c LEFT JOIN audit a ON a.seq = c.seq WHERE c.seq > ?1 ORDER BY c.seq",
        crate::params![after, KEY_REPLACED],
        |r| {
            let cp = Checkpoint {
                seq: r.get(0)?,
                head_hash: r.get(1)?,
                record_count: r.get(2)?,
                time: r.get(3)?,
                public_key: r.get(4)?,
                signature: r.get(5)?,
            };
            Ok((cp, r.get(6)?, r.get(7)?, r.get(8)?))
        },
    )?;
    let examined = rows
        .last()
        .and_then(|(cp, _, _, head)| Some(cp.seq.min((*head)?)));
    let found = rows
        .into_iter()
        .filter_map(|(cp, hash, data, _)| takeover_at(&cp, hash.as_deref()?, &data?))
        .collect();
    Ok((found, examined))
}

/// The take-over that the [`KEY_REPLACED`] record of chain hash `hash` and JSON `data`, and
/// the checkpoint `cp` at its record, make ([`takeovers_after`]), if they make one.
fn takeover_at(cp: &Checkpoint, hash: &str, data: &str) -> Option<Takeover> {
    let v: serde_json::Value = serde_json::from_str(data).ok()?;
    let old = parse_key(v["replaces"].as_str()?)?;
    let new = parse_key(v["public_key"].as_str()?)?;
    let named = parse_key(&cp.public_key)?;
    (named == new && cp.head_hash == hash && cp.verifies(&new)).then(|| {
        let hex_of = |k: &VerifyingKey| hex::encode(k.to_bytes());
        (cp.seq, hex_of(&old), hex_of(&new))
    })
}

/// The oldest of `found` that replaced `key`: `(seq, new key)`.
fn of_key(found: Vec<Takeover>, key: &VerifyingKey) -> Option<(i64, String)> {
    let ours = hex::encode(key.to_bytes());
    found
        .into_iter()
        .find(|(_, old, _)| *old == ours)
        .map(|(seq, _, new)| (seq, new))
}

/// Whether the audit key `key` was replaced on the database of `conn`: `Some((seq, new
/// key))` of the oldest recorded take-over of `key` ([`takeovers_after`]); checkpoint rows of
/// other keys, valid or not, count for nothing here. Reads every checkpoint row (no
/// signature checked but at take-over records): for a start, the signer and `audit verify`;
/// the write path and `/readyz` ask a [`Watch`]. Errors: the database's.
pub(crate) fn replaced_by(conn: Conn<'_>, key: &VerifyingKey) -> db::Result<Option<(i64, String)>> {
    Ok(of_key(takeovers_after(conn, i64::MIN)?.0, key))
}

/// The take-overs recorded on the database, oldest first ([`Takeover`]). Errors: the
/// database's.
pub(crate) fn recorded_takeovers(conn: Conn<'_>) -> db::Result<Vec<Takeover>> {
    Ok(takeovers_after(conn, i64::MIN)?.0)
}

/// What one store has learnt of its audit key's take-over: the highest checkpoint `seq`
/// examined and, once found, the take-over (permanent: never going back, whatever the
/// database later holds). Each [`Watch::replaced_by`] reads only checkpoint rows past those
/// already examined (one query by primary key, normally returning nothing).
#[derive(Default)]
pub(crate) struct Watch(Mutex<Seen>);

/// [`Watch`]'s state.
#[derive(Default, Clone)]
struct Seen {
    /// The highest checkpoint `seq` examined.
    through: Option<i64>,
    /// The take-over of the key once found: `(seq, new key)`.
    found: Option<(i64, String)>,
}

impl Watch {
    /// [`replaced_by`] for this store's key `key`, reading only checkpoint rows past those
    /// already examined. Errors: the database's (nothing is remembered then).
    pub(crate) fn replaced_by(
        &self,
        conn: Conn<'_>,
        key: &VerifyingKey,
    ) -> db::Result<Option<(i64, String)>> {
        let seen = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if seen.found.is_some() {
            return Ok(seen.found);
        }
        let (found, examined) = takeovers_after(conn, seen.through.unwrap_or(i64::MIN))?;
        let found = of_key(found, key);
        let mut now = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if now.found.is_none() {
            now.found = found;
        }
        now.through = now.through.max(examined);
        Ok(now.found.clone())
    }
}

/// The refusal of a write, a checkpoint, a start or `/readyz` by a process whose audit key
/// `ours` (64 hex) was replaced by `theirs` (64 hex, as [`Takeover`] re-encodes it) through the
/// take-over recorded at record `seq`.
pub(crate) fn replaced_message(ours: &str, theirs: &str, seq: i64) -> String {
    format!(
        "this replica's audit key {ours} was replaced by audit key {theirs} (the take-over is recorded at audit record {seq}, signed by {theirs}): another replica took the database over; nothing more is written or signed under the old key; restart it with the new keys (copy keys_dir from the replica serving under {theirs})"
    )
}

/// Before anything is written in the write transaction `conn`: `Err(Unusable)` with
/// [`replaced_message`] when `key` was replaced (through `watch` when given, else
/// [`replaced_by`]), logged. Errors: that, the database's.
pub(crate) fn refuse_if_replaced(
    conn: Conn<'_>,
    key: &VerifyingKey,
    watch: Option<&Watch>,
) -> db::Result<()> {
    let found = match watch {
        Some(w) => w.replaced_by(conn, key)?,
        None => replaced_by(conn, key)?,
    };
    let Some((seq, theirs)) = found else {
        return Ok(());
    };
    let why = replaced_message(&hex::encode(key.to_bytes()), &theirs, seq);
    tracing::error!(error = %why, "write refused: this replica's audit key was replaced");
    Err(db::DbError::Unusable(why))
}

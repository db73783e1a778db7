//! Whether the audit key a process serves under was replaced: another key set took the
//! database over (`audit-key-replaces`, `open.rs`), which its first start records with an
//! `audit.key_replaced` record and, at that record, a take-over signature by the new key
//! (`checkpoint::take_over`, [`takeover_bytes`]: a signature of its own, never a routine
//! checkpoint's). From then on the old key's process must not write: its seals,
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
//! ([`Watch`]: only take-over signature rows newer than those already examined, normally none), by the
//! checkpoint signer, at start-up and by `/readyz` ([`crate::readiness`]). It imports no
//! store file, so that the write path may call it.

use crate::db::{self, Conn};
use assent_core::checkpoint::Checkpoint;
use ed25519_dalek::VerifyingKey;
use std::sync::Mutex;

/// The kind of the audit record of a take-over (`checkpoint::take_over`):
/// `{"public_key", "replaces", "replaced_at_record", "archived_through",
/// "archived_anchors_sha256"}` (the archive as the take-over found it,
/// `key_ranges::Archived`), signed at its own record by the key
/// that took over with a take-over signature ([`takeover_bytes`], `audit_takeovers`), which
/// the routine checkpoint signer never makes.
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

/// The domain of a take-over signature ([`takeover_bytes`]): no checkpoint, manifest or token
/// signs bytes that carry it.
pub const TAKEOVER_FORMAT: &str = "assent-audit-takeover/1";

/// What a take-over signature signs for the [`KEY_REPLACED`] record at `seq` of chain hash
/// `hash` and JSON `data`: the RFC 8785 canonical JSON of `{"format":` [`TAKEOVER_FORMAT`]`,
/// "seq", "hash", "record"}` (`record`: `data` as JSON, so `public_key`, `replaces`,
/// `carried_from` and the rest are signed as they are; `hash` binds them too). `None` when
/// `data` is not JSON.
pub(crate) fn takeover_bytes(seq: i64, hash: &str, data: &str) -> Option<Vec<u8>> {
    let record: serde_json::Value = serde_json::from_str(data).ok()?;
    let v =
        serde_json::json!({"format": TAKEOVER_FORMAT, "seq": seq, "hash": hash, "record": record});
    assent_core::canonical::canonical_value(&v)
        .ok()
        .map(String::into_bytes)
}

/// Whether `signature` (128 hex) is a take-over signature ([`takeover_bytes`]) by `key` of
/// the record at `seq` of chain hash `hash` and JSON `data` (strict RFC 8032).
pub(crate) fn takeover_verifies(
    key: &VerifyingKey,
    (seq, hash, data): (i64, &str, &str),
    signature: &str,
) -> bool {
    takeover_bytes(seq, hash, data)
        .is_some_and(|b| assent_core::checkpoint::signature_verifies(key, &b, signature))
}

/// In the write transaction `conn`: signs with `key` the take-over signature of the
/// [`KEY_REPLACED`] record at `seq` (as it is stored) and stores it in `audit_takeovers`.
/// Called only where a take-over is written: `checkpoint::take_over` and
/// `checkpoint::sign_carried` — never by the routine checkpoint signer, which refuses to
/// sign over a take-over record without one (found by review: the routine checkpoint at a
/// take-over record was the take-over's only signature, so a take-over row a database
/// writer appended at the head was signed by the gateway's own checkpoint timer). Errors:
/// `Unusable` when the record is not a [`KEY_REPLACED`] record; the database's (a
/// signature already stored at `seq`).
pub(crate) fn sign_takeover(
    conn: Conn<'_>,
    key: &ed25519_dalek::SigningKey,
    seq: i64,
) -> db::Result<()> {
    use ed25519_dalek::Signer as _;
    let (kind, hash, data): (String, String, String) = conn.query_row(
        "SELECT kind, hash, data FROM audit WHERE seq = ?1",
        [seq],
        db::tuple,
    )?;
    let bytes = takeover_bytes(seq, &hash, &data).filter(|_| kind == KEY_REPLACED);
    let Some(bytes) = bytes else {
        return Err(db::DbError::Unusable(format!(
            "audit record {seq} is no {KEY_REPLACED} record: no take-over signed"
        )));
    };
    let signature = hex::encode(key.sign(&bytes).to_bytes());
    let public = hex::encode(key.verifying_key().to_bytes());
    conn.prepare_cached(
        "INSERT INTO audit_takeovers (seq, public_key, signature) VALUES (?1, ?2, ?3)",
    )?
    .execute(crate::params![seq, public, signature])?;
    Ok(())
}

/// The take-over records past record `?1` with the take-over signatures at them
/// ([`refuse_unsigned`]), through the partial index `audit_key_replaced` (migration 0051).
pub(crate) const UNSIGNED_SQL: &str = "SELECT a.seq, a.hash, a.data, t.public_key, t.signature FROM audit a LEFT JOIN audit_takeovers t ON t.seq = a.seq WHERE a.kind = 'audit.key_replaced' AND a.seq > ?1 ORDER BY a.seq";

/// Refuses a checkpoint by `key` over a [`KEY_REPLACED`] record past record `after` that
/// carries no take-over signature by `key` ([`takeover_verifies`]): one this gateway did not
/// write itself (`checkpoint.rs`: the routine signer and `sign_carried`). Found by review: a
/// take-over row a database writer appended at the head was signed by the routine
/// checkpoint, which then counted as the take-over's signature. Read through the partial
/// index of the take-over records (migration 0051). Errors: `Invalid` naming the record;
/// the database's.
pub(crate) fn refuse_unsigned(
    conn: Conn<'_>,
    after: i64,
    key: &VerifyingKey,
) -> Result<(), crate::error::StoreError> {
    type Row = (i64, String, String, Option<String>, Option<String>);
    let rows: Vec<Row> = crate::sql::rows(conn, UNSIGNED_SQL, [after], db::tuple)?;
    let unsigned = rows.into_iter().find(|(seq, hash, data, signer, sig)| {
        let ours = signer.as_deref().and_then(parse_key) == Some(*key);
        let record = (*seq, hash.as_str(), data.as_str());
        !(ours
            && sig
                .as_deref()
                .is_some_and(|s| takeover_verifies(key, record, s)))
    });
    match unsigned {
        Some((seq, ..)) => Err(crate::error::StoreError::Invalid(format!(
            "audit record {seq} ({KEY_REPLACED}) records a take-over this gateway did not write (no take-over signature of its audit key {} is at it): it was appended behind the gateway's back; no checkpoint signed over it (run assent audit verify)",
            hex::encode(key.to_bytes())
        ))),
        None => Ok(()),
    }
}

/// The take-overs whose take-over signature rows (`audit_takeovers`) lie past record
/// `after`, oldest first, and the highest such `seq` examined, never past the audit head
/// read in the same query (`None`: no row past `after`, or no audit record; found by review:
/// one junk row at a huge `seq` moved a [`Watch`] past every later take-over, which its own
/// record puts at or below the head, so the replaced replica kept writing). A take-over is a
/// [`KEY_REPLACED`] record whose `replaces` and `public_key` are two different keys, with a
/// take-over signature at its own record ([`takeover_bytes`]) by the new key, as
/// `checkpoint::take_over` signs it. One query by the signatures' primary key, each row
/// joined to the take-over record at its `seq`. A record without such a signature (appended
/// by someone who can write the database, who cannot sign as the new key) counts for
/// nothing, and so does a routine checkpoint at it (found by review: the checkpoint timer's
/// signature over a planted head record counted as the take-over's). Errors: the database's.
fn takeovers_after(conn: Conn<'_>, after: i64) -> db::Result<(Vec<Takeover>, Option<i64>)> {
    type Row = (
        i64,
        String,
        String,
        Option<String>,
        Option<String>,
        Option<i64>,
    );
    let rows: Vec<Row> = crate::sql::rows(
        conn,
        "SELECT t.seq, t.public_key, t.signature, a.hash, a.data, (SELECT max(seq) FROM audit) FROM audit_takeovers t LEFT JOIN audit a ON a.seq = t.seq AND a.kind = 'audit.key_replaced' WHERE t.seq > ?1 ORDER BY t.seq",
        [after],
        db::tuple,
    )?;
    let examined = rows
        .last()
        .and_then(|(seq, .., head)| Some((*seq).min((*head)?)));
    let found = rows
        .into_iter()
        .filter_map(|(seq, signer, sig, hash, data, _)| {
            takeover_at((seq, &hash?, &data?), &signer, &sig)
        })
        .collect();
    Ok((found, examined))
}

/// The take-over that the [`KEY_REPLACED`] record `(seq, hash, data)` and the take-over
/// signature `signature` at it by the key `signer` (64 hex) make ([`takeovers_after`]), if
/// they make one: the signer is the record's new key, and it replaces another key.
fn takeover_at(record: (i64, &str, &str), signer: &str, signature: &str) -> Option<Takeover> {
    let v: serde_json::Value = serde_json::from_str(record.2).ok()?;
    let old = parse_key(v["replaces"].as_str()?)?;
    let new = parse_key(v["public_key"].as_str()?)?;
    let named = parse_key(signer)?;
    (old != new && named == new && takeover_verifies(&new, record, signature)).then(|| {
        let hex_of = |k: &VerifyingKey| hex::encode(k.to_bytes());
        (record.0, hex_of(&old), hex_of(&new))
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
/// key))` of the oldest recorded take-over of `key` ([`takeovers_after`]); checkpoint rows,
/// valid or not, count for nothing here. Reads every take-over signature row: for a start, the signer and `audit verify`;
/// the write path and `/readyz` ask a [`Watch`]. Errors: the database's.
pub(crate) fn replaced_by(conn: Conn<'_>, key: &VerifyingKey) -> db::Result<Option<(i64, String)>> {
    Ok(of_key(takeovers_after(conn, i64::MIN)?.0, key))
}

/// What one store has learnt of its audit key's take-over: the highest checkpoint `seq`
/// examined and, once found, the take-over (permanent: never going back, whatever the
/// database later holds). Each [`Watch::replaced_by`] reads only take-over signature rows past those
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
    /// [`replaced_by`] for this store's key `key`, reading only take-over signature rows past those
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

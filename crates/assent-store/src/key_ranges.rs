//! Which audit key judges a stored checkpoint (or a checkpoint-file line) at a given record,
//! once the database was taken over (`audit-key-replaces`, `key_replaced.rs`): the key
//! `assent audit verify` checks with (or the gateway's own, for retention) from the newest
//! take-over on, each replaced key before the take-over that replaced it. Found by review:
//! after a take-over from a key that had signed checkpoints, `audit verify` with the new key
//! failed on each of the old key's checkpoints, and retention stopped archiving at them.
//!
//! The ranges come only from the `audit.key_replaced` records in the live chain (first
//! written by `checkpoint::take_over`, carried forward by retention when archived), walked
//! from the newest down: each must name as its new key (`public_key`) the key of the range
//! above it, and have at its own record a stored checkpoint whose `head_hash` is that
//! record's hash and whose signature verifies under the key of the range the record lies in
//! (the take-over checkpoint of the new key, or the checkpoint retention signed at a carried
//! record). The record's `replaces` names the key of the range below; where that range ends
//! is the record's own `seq`, or `carried_from` for a carried one (both signed with the
//! record). A key is thus only ever trusted through a record a trusted key signed, never
//! through a database row alone, nor through `audit-key-replaces` (an operator's acceptance
//! at start-up, removed once the take-over is recorded). Anything else — a take-over record
//! that is no such record, names another new key, or is signed by nothing trusted — is a
//! problem: nothing is judged under a key it would introduce.

use crate::db::{self, Conn};
use crate::key_replaced::KEY_REPLACED;
use assent_core::checkpoint::Checkpoint;
use ed25519_dalek::VerifyingKey;

/// The keys that judge checkpoints, by record: [`KeyRanges::key_at`].
#[derive(Debug, Clone)]
pub(crate) struct KeyRanges {
    /// The key of the newest range (the trusted key).
    newest: VerifyingKey,
    /// The older ranges, oldest first: `(end, key)`, `key` judging records below `end` (and
    /// at or past the previous entry's `end`).
    older: Vec<(i64, VerifyingKey)>,
}

impl KeyRanges {
    /// Only `key`, for every record.
    pub(crate) fn only(key: VerifyingKey) -> KeyRanges {
        KeyRanges {
            newest: key,
            older: Vec::new(),
        }
    }

    /// The key that judges a checkpoint (or an anchor) at record `seq`.
    pub(crate) fn key_at(&self, seq: i64) -> &VerifyingKey {
        self.older
            .iter()
            .find(|(end, _)| seq < *end)
            .map_or(&self.newest, |(_, k)| k)
    }

    /// Each key with the records it judges: `(key, from, to)`, `from` inclusive and `to`
    /// exclusive (`i64::MAX` for the newest).
    pub(crate) fn spans(&self) -> Vec<(VerifyingKey, i64, i64)> {
        let mut from = i64::MIN;
        let mut out = Vec::new();
        for (end, k) in &self.older {
            out.push((*k, from, *end));
            from = *end;
        }
        out.push((self.newest, from, i64::MAX));
        out
    }
}

/// One `audit.key_replaced` record of the live chain, with the checkpoint at it.
struct Recorded {
    seq: i64,
    hash: String,
    data: String,
    cp: Option<Checkpoint>,
}

/// The Ed25519 public key of 64 hex characters at `v[field]`.
fn key_in(v: &serde_json::Value, field: &str) -> Option<VerifyingKey> {
    let b: [u8; 32] = hex::decode(v[field].as_str()?).ok()?.try_into().ok()?;
    VerifyingKey::from_bytes(&b).ok()
}

/// The key ranges of the database behind `conn` under the trusted key `trusted` (see the
/// module doc): `Err((seq, why))` naming the first take-over record not accounted for.
/// One query over the take-over records (few) and the checkpoints at them. Errors (outer):
/// the database's.
pub(crate) fn key_ranges(
    conn: Conn<'_>,
    trusted: &VerifyingKey,
) -> db::Result<Result<KeyRanges, (i64, String)>> {
    if !conn.has_table("audit_checkpoints")? {
        return Ok(Ok(KeyRanges::only(*trusted)));
    }
    let rows: Vec<Recorded> = crate::sql::rows(
        conn,
        "SELECT a.seq, a.hash, a.data, c.seq, c.head_hash, c.record_count, c.time, c.public_key, c.signature FROM audit a LEFT JOIN audit_checkpoints c ON c.seq = a.seq WHERE a.kind = ?1 ORDER BY a.seq",
        [KEY_REPLACED],
        |r| {
            let cp = match r.get::<Option<i64>>(3)? {
                Some(seq) => Some(Checkpoint {
                    seq,
                    head_hash: r.get(4)?,
                    record_count: r.get(5)?,
                    time: r.get(6)?,
                    public_key: r.get(7)?,
                    signature: r.get(8)?,
                }),
                None => None,
            };
            Ok(Recorded {
                seq: r.get(0)?,
                hash: r.get(1)?,
                data: r.get(2)?,
                cp,
            })
        },
    )?;
    Ok(walk(rows, trusted))
}

/// [`key_ranges`] over the records read.
fn walk(rows: Vec<Recorded>, trusted: &VerifyingKey) -> Result<KeyRanges, (i64, String)> {
    let hex_of = |k: &VerifyingKey| hex::encode(k.to_bytes());
    let mut parsed = Vec::new();
    for r in rows {
        let v: serde_json::Value = serde_json::from_str(&r.data).unwrap_or_default();
        let (Some(old), Some(new)) = (key_in(&v, "replaces"), key_in(&v, "public_key")) else {
            return Err((
                r.seq,
                format!(
                    "audit record {} ({KEY_REPLACED}) names no replaced and new audit key: it is no take-over, and nothing is judged under a key it would name",
                    r.seq
                ),
            ));
        };
        let end = v.get("carried_from").map_or(Some(r.seq), |c| c.as_i64());
        let Some(end) = end.filter(|e| *e <= r.seq) else {
            return Err((
                r.seq,
                format!(
                    "audit record {} ({KEY_REPLACED}) says it was carried from a record that is no earlier one",
                    r.seq
                ),
            ));
        };
        parsed.push((end, r, old, new));
    }
    parsed.sort_by_key(|p| std::cmp::Reverse(p.0));
    let mut ranges = KeyRanges::only(*trusted);
    for (end, r, old, new) in parsed {
        let judge = *ranges.key_at(r.seq);
        let cur = ranges.older.first().map_or(*trusted, |(_, k)| *k);
        let signed =
            r.cp.as_ref()
                .is_some_and(|cp| cp.head_hash == r.hash && cp.verifies(&judge));
        let why = if new != cur {
            format!(
                "it records audit key {} taking over from {}, but the key of the records after it is {}",
                hex_of(&new),
                hex_of(&old),
                hex_of(&cur)
            )
        } else if !signed {
            format!(
                "no checkpoint at it verifies under audit key {} with its hash (a take-over is signed at its own record)",
                hex_of(&judge)
            )
        } else if ranges.older.first().is_some_and(|(e, _)| end >= *e) {
            "it lies after a later take-over".to_string()
        } else {
            ranges.older.insert(0, (end, old));
            continue;
        };
        return Err((
            r.seq,
            format!(
                "audit record {} ({KEY_REPLACED}) is not accounted for: {why}; checkpoints before it cannot be judged under the key it replaces",
                r.seq
            ),
        ));
    }
    Ok(ranges)
}

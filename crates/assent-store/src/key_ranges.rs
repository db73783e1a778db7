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
//! above it, replace another key, and have at its own record a take-over signature
//! (`key_replaced::takeover_bytes`, `audit_takeovers`) that verifies under the key of the
//! range the record lies in (the new key's, written by `checkpoint::take_over`, or the one
//! retention signed at a carried record). A routine checkpoint at the record is no take-over
//! signature (found by review: the checkpoint timer signs whatever head there is, so a
//! take-over row a database writer appended at the head, naming the gateway's key as new
//! and their own as replaced, was signed by the gateway and put their key in judgement of
//! everything below it). The record's `replaces` names the key of the range below; where that range ends
//! is the record's own `seq`, or `carried_from` for a carried one (both signed with the
//! record). A key is thus only ever trusted through a record a trusted key signed, never
//! through a database row alone, nor through `audit-key-replaces` (an operator's acceptance
//! at start-up, removed once the take-over is recorded). Anything else — a take-over record
//! that is no such record, names another new key, or is signed by nothing trusted — is a
//! problem: nothing is judged under a key it would introduce.

use crate::db::{self, Conn};
use crate::key_replaced::{KEY_REPLACED, takeover_verifies};
use ed25519_dalek::VerifyingKey;

/// The keys that judge checkpoints, by record: [`KeyRanges::key_at`].
#[derive(Debug, Clone)]
pub(crate) struct KeyRanges {
    /// The key of the newest range (the trusted key).
    newest: VerifyingKey,
    /// The older ranges, oldest first: `(end, key, archived)`, `key` judging records below
    /// `end` (and at or past the previous entry's `end`), `archived` the archive when it was
    /// taken over ([`Archived`]).
    older: Vec<(i64, VerifyingKey, Archived)>,
}

/// The archive as a take-over record found it (`checkpoint::take_over`): `(archived_through,
/// archived_anchors_sha256)`, the newest anchor's `last_seq` (0: none) and the digest of
/// every anchor's signature up to it (`archive::anchors_digest`). A replaced key's anchors
/// are accepted only up to there, and only as they were then (found by review: the stolen
/// old key could sign an anchor over the records before the take-over and so permit
/// deleting them).
pub(crate) type Archived = (i64, String);

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
            .find(|(end, ..)| seq < *end)
            .map_or(&self.newest, |(_, k, _)| k)
    }

    /// Each key with the records it judges: `(key, from, to)`, `from` inclusive and `to`
    /// exclusive (`i64::MAX` for the newest).
    pub(crate) fn spans(&self) -> Vec<(VerifyingKey, i64, i64)> {
        let mut from = i64::MIN;
        let mut out = Vec::new();
        for (end, k, _) in &self.older {
            out.push((*k, from, *end));
            from = *end;
        }
        out.push((self.newest, from, i64::MAX));
        out
    }

    /// Each key with the anchors it may sign: `(key, to, archived)`, the key's range ending
    /// before `to` (exclusive); `archived` ([`Archived`]) for a replaced key, `None` for the
    /// newest, which signs any.
    pub(crate) fn anchor_spans(&self) -> Vec<(VerifyingKey, i64, Option<Archived>)> {
        let mut out: Vec<_> = (self.older.iter())
            .map(|(end, k, a)| (*k, *end, Some(a.clone())))
            .collect();
        out.push((self.newest, i64::MAX, None));
        out
    }
}

/// One `audit.key_replaced` record of the live chain, with the take-over signature at it
/// (`audit_takeovers`: signer, signature), if any.
struct Recorded {
    seq: i64,
    hash: String,
    data: String,
    sig: Option<(String, String)>,
}

/// The Ed25519 public key of 64 hex characters at `v[field]`.
fn key_in(v: &serde_json::Value, field: &str) -> Option<VerifyingKey> {
    key_hex(v[field].as_str()?)
}

/// The Ed25519 public key of 64 hex characters `text`.
fn key_hex(text: &str) -> Option<VerifyingKey> {
    let b: [u8; 32] = hex::decode(text).ok()?.try_into().ok()?;
    VerifyingKey::from_bytes(&b).ok()
}

/// The take-over records with the take-over signatures at them, read through the partial
/// index `audit_key_replaced` (migration 0051; the kind is a literal so that the planner may
/// use it: found by review, retention read them by a full scan of `audit` under the
/// writer's lock).
const RECORDS_SQL: &str = "SELECT a.seq, a.hash, a.data, t.public_key, t.signature FROM audit a LEFT JOIN audit_takeovers t ON t.seq = a.seq WHERE a.kind = 'audit.key_replaced' ORDER BY a.seq";

/// The key ranges of the database behind `conn` under the trusted key `trusted` (see the
/// module doc): `Err((seq, why))` naming the first take-over record not accounted for.
/// One query over the take-over records (few, through their partial index, migration 0051)
/// and the take-over signatures at them. Errors (outer): the database's.
pub(crate) fn key_ranges(
    conn: Conn<'_>,
    trusted: &VerifyingKey,
) -> db::Result<Result<KeyRanges, (i64, String)>> {
    let sql = if conn.has_table("audit_takeovers")? {
        RECORDS_SQL
    } else {
        // A schema before 0051 (read-only verify): no take-over is signed as one.
        "SELECT a.seq, a.hash, a.data, CAST(NULL AS TEXT), CAST(NULL AS TEXT) FROM audit a WHERE a.kind = 'audit.key_replaced' ORDER BY a.seq"
    };
    let rows: Vec<Recorded> = crate::sql::rows(conn, sql, [], |r| {
        let sig = match (r.get::<Option<String>>(3)?, r.get::<Option<String>>(4)?) {
            (Some(k), Some(s)) => Some((k, s)),
            _ => None,
        };
        Ok(Recorded {
            seq: r.get(0)?,
            hash: r.get(1)?,
            data: r.get(2)?,
            sig,
        })
    })?;
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
        let archived = (
            v["archived_through"].as_i64().unwrap_or(0),
            v["archived_anchors_sha256"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        );
        parsed.push((end, r, old, new, archived));
    }
    parsed.sort_by_key(|p| std::cmp::Reverse(p.0));
    let mut ranges = KeyRanges::only(*trusted);
    for (end, r, old, new, archived) in parsed {
        let judge = *ranges.key_at(r.seq);
        let cur = ranges.older.first().map_or(*trusted, |(_, k, _)| *k);
        let signed = r.sig.as_ref().is_some_and(|(signer, sig)| {
            key_hex(signer) == Some(judge)
                && takeover_verifies(&judge, (r.seq, &r.hash, &r.data), sig)
        });
        let why = if old == new {
            format!(
                "it records audit key {} taking over from itself",
                hex_of(&new)
            )
        } else if new != cur {
            format!(
                "it records audit key {} taking over from {}, but the key of the records after it is {}",
                hex_of(&new),
                hex_of(&old),
                hex_of(&cur)
            )
        } else if !signed {
            format!(
                "no take-over signature at it verifies under audit key {} (a take-over is signed as one at its own record by the key that took over, or by the key that carried it; a routine checkpoint is none)",
                hex_of(&judge)
            )
        } else if ranges.older.first().is_some_and(|(e, ..)| end >= *e) {
            "it lies after a later take-over".to_string()
        } else {
            ranges.older.insert(0, (end, old, archived));
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

#[cfg(test)]
mod tests {
    /// The plan of `sql` on a migrated SQLite database, one line per step.
    fn plan(sql: &str) -> String {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        crate::migrate::migrate(crate::sql::lite(&c), "test").unwrap();
        let mut st = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = st.query_map([], |r| r.get::<_, String>(3)).unwrap();
        rows.map(Result::unwrap).collect::<Vec<_>>().join("\n")
    }

    /// Found by review: retention read the take-over records by a full scan of `audit`
    /// under the writer's lock (at start-up, hourly and per batch); they are read through
    /// their partial index, here and in the signer's check.
    #[test]
    fn take_over_records_are_read_through_their_index_not_by_scanning_the_audit_log() {
        for sql in [super::RECORDS_SQL, crate::key_replaced::UNSIGNED_SQL] {
            let p = plan(&sql.replace("?1", "0"));
            assert!(p.contains("INDEX audit_key_replaced"), "{sql}: {p}");
            assert!(
                !p.contains("SCAN a\n") && !p.ends_with("SCAN a"),
                "{sql}: {p}"
            );
        }
    }
}

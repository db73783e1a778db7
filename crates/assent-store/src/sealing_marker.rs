//! The audit chain's word that this gateway seals every settlement from there on
//! ([`crate::settlement_seal`], migration 0035): one `settlement.sealing` record, appended by
//! the transaction of the first settlement a gateway of this version seals, before that
//! settlement's own record ([`record_once`], called by `settlement_seal::seal`), and
//! written again at the chain's end by audit retention before it archives it ([`carry`]),
//! as a take-over record is, so that it always stands in the live chain, with a checkpoint
//! signed over it there.
//!
//! `assent audit verify` ([`crate::integrity_people::settlements`]) requires a seal of
//! every settlement whose first settling record follows it, whatever the approval's own
//! columns say. Found by review: which settlements had to hold a seal was told only by
//! evidence a database writer controls (the seals themselves and the terms' seals), so
//! clearing every seal back to the first sealed settlement, and breaking the terms' seals of
//! those approvals, hid an edited settlement. The record is hash-linked and signed over by
//! the checkpoints: a writer can neither delete nor move it without breaking the chain (nor
//! drop it alone from the head: the settling record of its own transaction follows it).
//! Appending another one at the head only moves the word earlier or leaves it where it is:
//! the earliest place any such record names counts ([`position`]). Only a record whose
//! `seal` holds at its place (an HMAC under a key derived from the audit key) spares a
//! settlement from writing one ([`record_once`]): a planted record is no gateway's word.
//!
//! Written with the first settlement rather than at start-up: it is then never the head
//! record of a committed chain, its time is the settlement's clock (retention, which
//! archives a prefix older than its cut-off, is not held up by it), and opening a store
//! still writes nothing.

use crate::archive::Manifest;
use crate::audit;
use crate::db::{self, Conn, OptionalExtension as _};
use crate::error::StoreError;
use crate::params;
use crate::seal::{SealKey, Sealed};
use ed25519_dalek::SigningKey;
use serde_json::{Value, json};
use std::ops::ControlFlow;

/// The kind of the record: data `{"since_migration": 35}` (the migration that made every
/// settlement sealed) and `seal` (an HMAC over the record's own place, see `record_once`),
/// plus `carried_from` and `carried_at` (the original record's `seq` and time, Unix ms) once
/// retention carried it.
pub const SETTLEMENT_SEALING: &str = "settlement.sealing";

/// The records of [`SETTLEMENT_SEALING`] (`seq`, `data`) in the live chain, past the archive anchor `?1`
/// ([`audit::anchor`]: 0 when nothing was archived), read through the partial index
/// `audit_settlement_sealing` (migration 0054; the kind is a literal so that the planner may
/// use it). Found by review: rows at or below the anchor (a `seq` of 0 or less, or an
/// archived one) are no part of the chain `audit verify` walks from the anchor, nor of what
/// the checkpoint signer checks; a writer who planted one before the first settlement (say
/// at `seq` -5: `append` goes on after the greatest `seq`) had every settlement write no
/// record of its own, then deleted the planted row before `audit verify`, leaving no record
/// at all. A carried copy stands past the anchor (its `carried_from` may name one at or
/// below it).
const RECORDS_SQL: &str =
    "SELECT seq, data FROM audit WHERE kind = 'settlement.sealing' AND seq > ?1 ORDER BY seq";

/// Where the gateway's word that it seals settlements stands in the chain: the least `seq`
/// among the [`SETTLEMENT_SEALING`] records of the live chain (past the archive anchor, see
/// [`RECORDS_SQL`]), each at its own `seq` or at the `carried_from` it names when that is an
/// earlier record (a carried copy); `None` when none is recorded (a database no gateway of
/// this version served yet). One read through the partial index, streamed (normally one
/// row). Errors: the database's.
pub(crate) fn position(conn: Conn<'_>) -> db::Result<Option<i64>> {
    let (anchor, _) = audit::anchor(conn)?;
    let mut least: Option<i64> = None;
    conn.prepare_cached(RECORDS_SQL)?.for_each([anchor], |r| {
        let (seq, data): (i64, String) = (r.get(0)?, r.get(1)?);
        let v: Value = serde_json::from_str(&data).unwrap_or_default();
        let at = v["carried_from"]
            .as_i64()
            .filter(|c| *c <= seq)
            .unwrap_or(seq);
        least = Some(least.map_or(at, |l| l.min(at)));
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(least)
}

/// What a [`SETTLEMENT_SEALING`] record's `seal` field is over: the kind and the `seq` the
/// record stands at, `["settlement.sealing", seq]`, under the settlement seal key
/// ([`crate::seal::Sealed::Settlement`], derived from the audit key the database never holds).
fn word(seq: i64) -> Value {
    json!([SETTLEMENT_SEALING, seq])
}

/// Whether the stored record `data` (JSON text) at `seq` carries a `seal` that holds under
/// `key` ([`word`]): one the gateway wrote there, not one a database writer planted.
fn sealed_here(key: &SealKey, seq: i64, data: &str) -> bool {
    let v: Value = serde_json::from_str(data).unwrap_or_default();
    v["seal"]
        .as_str()
        .is_some_and(|seal| key.holds(&word(seq), seal))
}

/// The data of a [`SETTLEMENT_SEALING`] record about to be appended to the chain `conn`:
/// `base` with its `seal` over the `seq` it will stand at (one past the greatest, as
/// `audit::append` numbers it; 1 in an empty table). Errors: the database's.
fn sealed_data(
    conn: Conn<'_>,
    key: &SealKey,
    mut base: serde_json::Map<String, Value>,
) -> db::Result<Value> {
    let head: Option<i64> = conn
        .prepare_cached("SELECT seq FROM audit ORDER BY seq DESC LIMIT 1")?
        .query_row([], |r| r.get(0))
        .optional()?;
    let seq = head.map_or(1, |h| h.saturating_add(1));
    base.insert("seal".into(), key.seal(&word(seq)).into());
    Ok(base.into())
}

/// In the settling transaction `conn`, before the settlement's audit record: appends the
/// [`SETTLEMENT_SEALING`] record (actor `system:settlement-seal`, time `at`, Unix ms: the
/// settlement's; data `{"since_migration": 35, "seal": …}`, the seal over its own place
/// under `key`, [`word`]) unless the live chain holds one already whose seal holds there
/// (past the archive anchor: a row at or below it does not count, see [`RECORDS_SQL`]);
/// `true` when it did. Found by review: any record of the kind in the live chain stood in
/// for it, and the live chain is told by the archive anchor, which a writer can move (delete
/// the newest `audit_archives` row, plant a record just past the older anchor, let the
/// settlements write none, then put the row back and delete the plant). A planted record
/// carries no seal that holds (the key derives from the audit key), so the first settlement
/// writes the gateway's own; a record of an earlier build (no seal) is followed by one more,
/// which is harmless. Called by `settlement_seal::seal`, so by every settlement: one read of
/// the anchor, the records through the partial index (migration 0054: normally one) and
/// one HMAC. Errors: the database's.
pub(crate) fn record_once(conn: Conn<'_>, key: &SealKey, at: i64) -> db::Result<bool> {
    let (anchor, _) = audit::anchor(conn)?;
    let mut recorded = false;
    conn.prepare_cached(RECORDS_SQL)?.for_each([anchor], |r| {
        let (seq, data): (i64, String) = (r.get(0)?, r.get(1)?);
        recorded = sealed_here(key, seq, &data);
        Ok(if recorded {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        })
    })?;
    if recorded {
        return Ok(false);
    }
    let mut base = serde_json::Map::new();
    base.insert("since_migration".into(), 35.into());
    let data = sealed_data(conn, key, base)?;
    audit::append(
        conn,
        at,
        SETTLEMENT_SEALING,
        None,
        "system:settlement-seal",
        &data,
    )?;
    Ok(true)
}

/// Before the records `m` covers are deleted (`retention.rs`): each [`SETTLEMENT_SEALING`]
/// record among them is written again at the chain's end (same actor and data, plus
/// `carried_from` and `carried_at`: the original record's `seq` and time, kept through later
/// carries, and a `seal` over its new place, [`record_once`]), so the word stays in the live chain at its original place ([`position`]); then
/// signs with `key` a checkpoint over the new head, at `m.archived_at`
/// ([`crate::checkpoint::sign_due`], as a carried take-over is signed). Found by review: the
/// copy stood at the head with no checkpoint over it, so a writer who deleted that one row
/// left a chain that verified and no word that settlements are sealed. Errors: `Invalid`
/// when the chain does not extend the newest checkpoint of `key` (nothing archived); the
/// database's.
pub(crate) fn carry(tx: &db::Tx<'_>, m: &Manifest, key: &SigningKey) -> Result<(), StoreError> {
    let found: Vec<(i64, i64, String, String)> = crate::sql::rows(
        **tx,
        "SELECT seq, at, actor, data FROM audit WHERE kind = 'settlement.sealing' AND seq >= ?1 AND seq <= ?2 ORDER BY seq",
        params![m.first_seq, m.last_seq],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )?;
    let settled = SealKey::of(key, Sealed::Settlement);
    for (seq, at, actor, data) in found {
        let mut d = match serde_json::from_str(&data) {
            Ok(Value::Object(d)) => d,
            _ => serde_json::Map::new(),
        };
        d.entry("carried_at").or_insert(at.into());
        d.entry("carried_from").or_insert(seq.into());
        let data = sealed_data(**tx, &settled, d)?;
        audit::append(**tx, m.archived_at, SETTLEMENT_SEALING, None, &actor, &data)?;
        let due = crate::checkpoint::Due::NOW;
        crate::checkpoint::sign_due(**tx, (key, false), due, m.archived_at, None)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The marker is read by every settlement and every verify: through its partial index,
    /// never by a scan of the audit log.
    #[test]
    fn the_marker_is_read_through_its_index_not_by_scanning_the_audit_log() {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        crate::migrate::migrate(crate::sql::lite(&c), "test").unwrap();
        let sql = super::RECORDS_SQL;
        let mut st = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = st.query_map([0], |r| r.get::<_, String>(3)).unwrap();
        let p = rows.map(Result::unwrap).collect::<Vec<_>>().join("\n");
        assert!(p.contains("INDEX audit_settlement_sealing"), "{sql}: {p}");
    }
}

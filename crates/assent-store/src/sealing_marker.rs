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
//! settlement from writing one ([`record_once`]): a planted record is no gateway's word
//! (though a genuine one put back whole where it stood is). Retention's signed manifest
//! keeps the word too (`sealing_since`, [`archived_since`]), so that it stands even when no
//! record is left in the live chain ([`position`]).
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

/// The records of [`SETTLEMENT_SEALING`] (`seq`, `data`, `prev_hash`) in the live chain,
/// past the archive anchor `?1` ([`audit::anchor`]: 0 when nothing was archived), read
/// through the partial index
/// `audit_settlement_sealing` (migration 0054; the kind is a literal so that the planner may
/// use it). Found by review: rows at or below the anchor (a `seq` of 0 or less, or an
/// archived one) are no part of the chain `audit verify` walks from the anchor, nor of what
/// the checkpoint signer checks; a writer who planted one before the first settlement (say
/// at `seq` -5: `append` goes on after the greatest `seq`) had every settlement write no
/// record of its own, then deleted the planted row before `audit verify`, leaving no record
/// at all. A carried copy stands past the anchor (its `carried_from` may name one at or
/// below it).
const RECORDS_SQL: &str = "SELECT seq, data, prev_hash FROM audit WHERE kind = 'settlement.sealing' AND seq > ?1 ORDER BY seq";

/// Where the gateway's word that it seals settlements stands in the chain: the least `seq`
/// among the [`SETTLEMENT_SEALING`] records of the live chain (past the archive anchor, see
/// [`RECORDS_SQL`]), each at its own `seq` or at the `carried_from` it names when that is an
/// earlier record (a carried copy), and the archive anchors' signed `sealing_since`
/// ([`anchored`]), whichever is earliest; `None` when neither is recorded (a database no
/// gateway of this version served yet). Found by review: with the live records alone, a
/// writer who deleted retention's copy from the head together with the checkpoint over it
/// (or had a genuine record put back below a lowered anchor stand in for the one the next
/// settlement would write, then deleted it) left the later settlements held to nothing;
/// the anchor's word is signed, and deleting the anchor breaks the chain's start. One read
/// of the anchor and one through the partial index, streamed (normally one row). Errors:
/// the database's.
pub(crate) fn position(conn: Conn<'_>) -> db::Result<Option<i64>> {
    let (anchor, _) = audit::anchor(conn)?;
    let mut least = anchored(conn)?;
    conn.prepare_cached(RECORDS_SQL)?.for_each([anchor], |r| {
        let (seq, data): (i64, String) = (r.get(0)?, r.get(1)?);
        let at = named(seq, &data);
        least = Some(least.map_or(at, |l| l.min(at)));
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(least)
}

/// The place a [`SETTLEMENT_SEALING`] record at `seq` with data `data` (JSON text) names:
/// its `carried_from` when that is an earlier record (a carried copy), else `seq`.
fn named(seq: i64, data: &str) -> i64 {
    let v: Value = serde_json::from_str(data).unwrap_or_default();
    v["carried_from"]
        .as_i64()
        .filter(|c| *c <= seq)
        .unwrap_or(seq)
}

/// The earliest `sealing_since` of the archive anchors ([`Manifest::sealing_since`],
/// migration 0055; every anchor's signature is checked by `audit verify`): `None` when
/// nothing was archived or no anchor names one. Every anchor, not the newest alone (found by
/// review: a newer anchor without the word, signed by a run that read the previous one while
/// a writer had cleared it, or by an older build's replica during an upgrade, dropped it); a
/// signed word only ever moves the place earlier. Errors: the database's.
pub(crate) fn anchored(conn: Conn<'_>) -> db::Result<Option<i64>> {
    if !conn.has_table("audit_archives")? {
        return Ok(None);
    }
    let least: Option<Option<i64>> = conn
        .prepare_cached("SELECT min(sealing_since) FROM audit_archives")?
        .query_row([], |r| r.get(0))
        .optional()?;
    Ok(least.flatten())
}

/// A retention run's [`Manifest::sealing_since`]: the least place named ([`named`]) by the
/// `records` it archives (`seq`, `prev_hash`, `data` of each [`SETTLEMENT_SEALING`] record)
/// whose seal holds there under the settlement key derived from `audit_key`, and `prev` (the
/// previous anchor's), whichever is earlier. A record whose seal does not hold (planted, or
/// from a build before the seal) adds nothing.
pub(crate) fn archived_since(
    audit_key: &SigningKey,
    prev: Option<i64>,
    records: &[(i64, String, String)],
) -> Option<i64> {
    let key = SealKey::of(audit_key, Sealed::Settlement);
    records
        .iter()
        .filter(|(seq, prev_hash, data)| sealed_here(&key, (*seq, prev_hash), data))
        .map(|(seq, _, data)| named(*seq, data))
        .chain(prev)
        .min()
}

/// What a [`SETTLEMENT_SEALING`] record's `seal` field is over: the kind, the `seq` the
/// record stands at and its `prev_hash`, `["settlement.sealing", seq, prev_hash]`, under the
/// settlement seal key ([`crate::seal::Sealed::Settlement`], derived from the audit key the
/// database never holds). The `prev_hash` ties it to this chain (found by review: over the
/// `seq` alone, a seal copied from another database under the same audit key, a backup or a
/// staging copy, held here too).
fn word((seq, prev_hash): (i64, &str)) -> Value {
    json!([SETTLEMENT_SEALING, seq, prev_hash])
}

/// Whether the stored record `data` (JSON text) at `place` (`seq`, `prev_hash`) carries a
/// `seal` that holds under `key` ([`word`]): one the gateway wrote there, not one a database
/// writer planted (a genuine record put back whole where it stood still holds).
fn sealed_here(key: &SealKey, place: (i64, &str), data: &str) -> bool {
    let v: Value = serde_json::from_str(data).unwrap_or_default();
    v["seal"]
        .as_str()
        .is_some_and(|seal| key.holds(&word(place), seal))
}

/// The data of a [`SETTLEMENT_SEALING`] record about to be appended to the chain `conn`:
/// `base` with its `seal` over the place it will stand at (one past the greatest `seq`, after
/// that record's hash, as `audit::append` links it; 1 after the genesis hash in an empty
/// table). Errors: the database's.
fn sealed_data(
    conn: Conn<'_>,
    key: &SealKey,
    mut base: serde_json::Map<String, Value>,
) -> db::Result<Value> {
    let head: Option<(i64, String)> = conn
        .prepare_cached("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")?
        .query_row([], db::tuple)
        .optional()?;
    let (seq, prev) = head.map_or((1, audit::GENESIS.to_string()), |(s, h)| {
        (s.saturating_add(1), h)
    });
    base.insert("seal".into(), key.seal(&word((seq, &prev))).into());
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
/// writes the gateway's own. (Records without a seal that holds, from builds of 2026-12-01
/// and -02 that never left this repository, are followed by one more, and are neither
/// carried by retention nor kept in its manifest.) A genuine record put back whole where it
/// stood (below a lowered anchor) still holds here; `audit verify` then holds the later
/// settlements by the anchors' signed word ([`position`]). Called by `settlement_seal::seal`,
/// so by every settlement: one read of the anchor, the records through the partial index
/// (migration 0054: normally one) and one HMAC. Errors: the database's.
pub(crate) fn record_once(conn: Conn<'_>, key: &SealKey, at: i64) -> db::Result<bool> {
    let (anchor, _) = audit::anchor(conn)?;
    let mut recorded = false;
    conn.prepare_cached(RECORDS_SQL)?.for_each([anchor], |r| {
        let (seq, data, prev): (i64, String, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
        recorded = sealed_here(key, (seq, &prev), &data);
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
/// record among them whose seal holds (the gateway's own) is written again at the chain's
/// end (same actor and data, plus `carried_from` and `carried_at`: the original record's
/// `seq` and time, kept through later carries, and a `seal` over its new place,
/// [`record_once`]), so the word stays in the live chain at its original place
/// ([`position`]); then signs with `key` a checkpoint over the new head, at `m.archived_at`
/// ([`crate::checkpoint::sign_due`], as a carried take-over is signed). Found by review: the
/// copy stood at the head with no checkpoint over it, so a writer who deleted that one row
/// left a chain that verified and no word that settlements are sealed. Errors: `Invalid`
/// when the chain does not extend the newest checkpoint of `key` (nothing archived); the
/// database's.
pub(crate) fn carry(tx: &db::Tx<'_>, m: &Manifest, key: &SigningKey) -> Result<(), StoreError> {
    type Found = (i64, i64, String, String, String);
    let found: Vec<Found> = crate::sql::rows(
        **tx,
        "SELECT seq, at, actor, data, prev_hash FROM audit WHERE kind = 'settlement.sealing' AND seq >= ?1 AND seq <= ?2 ORDER BY seq",
        params![m.first_seq, m.last_seq],
        db::tuple,
    )?;
    let settled = SealKey::of(key, Sealed::Settlement);
    for (seq, at, actor, data, prev) in found {
        // Only the gateway's own: a record appended behind its back is not sealed anew.
        if !sealed_here(&settled, (seq, &prev), &data) {
            continue;
        }
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

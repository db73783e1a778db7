//! The approvals whose audit records a retention run archived (migration 0061), each with its
//! seals as the run found them: the SHA-256 of its terms' seal ([`crate::approval_seal`]) and
//! its settlement's ([`crate::settlement_seal`]) when the settlement's held, marked by whether
//! the terms' held too ([`TERMS_HELD`]); `""` when the settlement's did not (an approval
//! settled before migration 0035; one settled since must hold it, or the run is refused,
//! [`to_record`]). A run records the
//! approvals its export names ([`to_record`]) that no earlier run recorded, signs the digest of
//! that list in its manifest ([`crate::archive::Manifest::approvals_sha256`]) and stores the
//! rows in its deleting transaction ([`record`]).
//!
//! `assent audit verify` excuses a settled approval's missing `approval.requested` or settling
//! record only for an approval a run recorded (or one older than the cut-off of a run from
//! before this table: [`crate::archive::Gone`]), checks every run's rows against its signed
//! digest ([`check`]) and holds each recorded approval to the seals it had ([`Recorded`]).
//! Found by review: every settled approval older than the newest cut-off was excused, so one
//! edited after its records were archived (its settlement seal cleared and its terms' seal
//! broken, so that it passed for one settled before the seals) or planted with old times
//! passed, and the API, history and learning export showed it.

use crate::archive::Manifest;
use crate::db::{self, Conn, OptionalExtension as _};
use crate::error::StoreError;
use crate::params;
use crate::seal::SealKey;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;

/// What a run records of one approval: `(approval id, seals)`: `""` when its settlement seal
/// did not hold; else [`TERMS_HELD`] or [`SETTLED_HELD`] (its terms' seal, of any form, held
/// too, or not: a call held before the terms were sealed) and the digest of its seal columns.
pub(crate) const TERMS_HELD: &str = "st:";
/// See [`TERMS_HELD`].
pub(crate) const SETTLED_HELD: &str = "s:";

/// See [`TERMS_HELD`].
pub(crate) type Entry = (String, String);

/// The seal and terms keys a run judges the seals under.
pub(crate) type Keys<'a> = (&'a SealKey, &'a SealKey);

/// The digest of the seal columns of approval `id` as stored now: SHA-256 (hex) of its terms'
/// seal, `\n`, its settlement seal; `None` when there is no such approval.
fn seals_now(conn: Conn<'_>, id: &str) -> db::Result<Option<String>> {
    let row: Option<(SealText, SealText)> = conn
        .prepare_cached("SELECT seal, settlement_seal FROM approvals WHERE id = ?1")?
        .query_row(params![id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(row.map(|(terms, settled)| columns_digest(&terms.0, &settled.0)))
}

/// A seal column as read: its text, or for a value that is not UTF-8 text (on SQLite a
/// database writer can store a blob or a number in a TEXT column) a marker no seal is, so
/// that it reads as a changed seal. Found by review: read as `String`, such a value failed
/// every retention run and `audit verify` with a database error instead of naming the
/// approval.
struct SealText(String);

impl db::FromValue for SealText {
    fn from_value(v: db::ValueRef<'_>) -> Result<Self, String> {
        Ok(SealText(match v {
            db::ValueRef::Text(b) => match std::str::from_utf8(b) {
                Ok(t) => t.to_string(),
                Err(_) => "\u{0}text that is not UTF-8".into(),
            },
            _ => "\u{0}not text".into(),
        }))
    }
}

/// SHA-256 (hex) of an approval's terms' seal, `\n`, its settlement seal.
fn columns_digest(terms: &str, settled: &str) -> String {
    hex::encode(Sha256::digest(format!("{terms}\n{settled}")))
}

/// The settling audit kinds (as `integrity_people::settlements` reads them).
pub(crate) const SETTLING: [&str; 4] = [
    "decision",
    "approval.expired",
    "approval.cancelled",
    "grant.used",
];

/// Where the chain stands for [`to_record`]: where the newest key take-over stands
/// (`integrity_people::takeover_cut`) and the chain's word that every settlement is sealed
/// ([`crate::sealing_marker::position`]), read once per run.
pub(crate) type Cuts = (Option<i64>, Option<i64>);

/// The entries a run whose export names the approvals `ids` (each with the `seq` of its
/// settling record in the export, if there) records: each that exists and no earlier run
/// recorded, in the order given, its seals' digest when both hold under `keys` (settlement,
/// terms), `""` when they do not and it may be a settlement from before the seals (`cuts`).
/// Errors: `Invalid`
/// (nothing is archived) for one whose seals do not hold though it was settled after the
/// chain's word that every settlement is sealed ([`crate::sealing_marker`]) or it carries a
/// settlement seal, unless a key take-over recorded since may have sealed it under the replaced
/// key (found by review: edited before its records aged out, it was recorded as unsealed and
/// excused for good); the store's.
pub(crate) fn to_record<'i>(
    conn: Conn<'_>,
    (settled, terms): Keys<'_>,
    ids: impl IntoIterator<Item = (&'i String, &'i Option<i64>)>,
    (cut, marker): Cuts,
) -> Result<Vec<Entry>, StoreError> {
    let mut out = Vec::new();
    for (id, settled_at) in ids {
        let known = conn
            .prepare_cached("SELECT 1 FROM archived_approvals WHERE approval_id = ?1")?
            .query_row(params![id], |r| r.get::<i64>(0))
            .optional()?;
        if known.is_some() {
            continue;
        }
        let Some(now) = seals_now(conn, id)? else {
            continue;
        };
        let sealed = crate::settlement_seal::holds(conn, settled, id)?;
        if !sealed {
            let at = match settled_at {
                Some(at) => Some(*at),
                None => settling_seq(conn, id)?,
            };
            // Read as [`SealText`]: a blob planted here stopped every run with a database
            // error naming nothing (found by review); its marker counts as a seal it carries.
            let carries: SealText = conn
                .prepare_cached("SELECT settlement_seal FROM approvals WHERE id = ?1")?
                .query_row(params![id], |r| r.get(0))?;
            let old_key = cut.is_some_and(|c| at.is_none_or(|s| s <= c));
            let after_marker = at.is_some_and(|s| marker.is_some_and(|m| s > m));
            if !old_key && (after_marker || !carries.0.is_empty()) {
                return Err(StoreError::Invalid(format!(
                    "approval {id} does not hold its seal though it was settled sealed: it was changed behind the gateway's back; nothing archived (run assent audit verify)"
                )));
            }
        }
        let value = match (sealed, crate::approval_seal::holds(conn, terms, id)?) {
            (false, _) => String::new(),
            (true, true) => format!("{TERMS_HELD}{now}"),
            (true, false) => format!("{SETTLED_HELD}{now}"),
        };
        out.push((id.clone(), value));
    }
    Ok(out)
}

/// The `seq` of approval `id`'s first settling record in the live chain, if any.
fn settling_seq(conn: Conn<'_>, id: &str) -> db::Result<Option<i64>> {
    conn.prepare_cached(
        "SELECT min(seq) FROM audit WHERE approval_id = ?1 AND kind IN ('decision', 'approval.expired', 'approval.cancelled', 'grant.used')",
    )?
    .query_row(params![id], |r| r.get(0))
}

/// The seal columns' digest in a recorded value (past its [`TERMS_HELD`] or [`SETTLED_HELD`]).
fn columns_of(value: &str) -> &str {
    value
        .strip_prefix(TERMS_HELD)
        .or_else(|| value.strip_prefix(SETTLED_HELD))
        .unwrap_or(value)
}

/// The digest a manifest signs of a run's `entries`: SHA-256 (hex) of one line per entry, in
/// byte order of the ids, each the JSON array `[id, seals]` (unambiguous whatever an id holds).
pub(crate) fn digest(entries: &[Entry]) -> String {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort();
    let mut d = Sha256::new();
    for (id, seals) in sorted {
        d.update(serde_json::json!([id, seals]).to_string());
        d.update("\n");
    }
    hex::encode(d.finalize())
}

/// How many entries one `INSERT` of [`record`] stores.
const INSERT_ROWS: usize = 200;

/// In the run's deleting transaction: each of `entries` must be unrecorded still and, when its
/// seals held, have the seal columns it had at the export (an approval edited since refuses
/// the run), and their digest must be the manifest's; then they are stored under the
/// manifest's `last_seq`. The seal columns of every approval the manifest's records name are
/// read in one query and the rows stored [`INSERT_ROWS`] per statement, so that the write
/// lock is not held for two round trips per approval on PostgreSQL. Errors: `Invalid` when
/// they changed; the store's (a row recorded meanwhile by another run: its primary key).
pub(crate) fn record(tx: Conn<'_>, (m, entries): (&Manifest, &[Entry])) -> Result<(), StoreError> {
    let changed = || {
        StoreError::Invalid(
            "approvals named by the audit records changed while they were being archived; nothing deleted".into(),
        )
    };
    if m.approvals_sha256.as_deref() != Some(digest(entries).as_str()) {
        return Err(changed());
    }
    let mut now: HashMap<String, String> = HashMap::new();
    tx.prepare_cached(
        "SELECT id, seal, settlement_seal FROM approvals
         WHERE id IN (SELECT approval_id FROM audit WHERE seq >= ?1 AND seq <= ?2)",
    )?
    .for_each(params![m.first_seq, m.last_seq], |r| {
        let (id, terms, settled): (String, SealText, SealText) = (r.get(0)?, r.get(1)?, r.get(2)?);
        now.insert(id, columns_digest(&terms.0, &settled.0));
        Ok(ControlFlow::Continue(()))
    })?;
    for (id, seals) in entries {
        if !seals.is_empty() && now.get(id).map(String::as_str) != Some(columns_of(seals)) {
            return Err(changed());
        }
    }
    for rows in entries.chunks(INSERT_ROWS) {
        let values: Vec<String> = (0..rows.len())
            .map(|i| format!("(?{}, ?1, ?{})", 2 * i + 2, 2 * i + 3))
            .collect();
        let sql = format!(
            "INSERT INTO archived_approvals (approval_id, anchor_last_seq, seals) VALUES {}",
            values.join(", ")
        );
        let mut p: Vec<&dyn db::ToValue> = vec![&m.last_seq];
        for (id, seals) in rows {
            p.extend([id as &dyn db::ToValue, seals as &dyn db::ToValue]);
        }
        tx.execute(&sql, p.as_slice())?;
    }
    Ok(())
}

/// The recorded approvals: id → (the recording run's `last_seq`, its value: [`Entry`]).
pub(crate) struct Recorded(HashMap<String, (i64, String)>);

impl Recorded {
    /// Read whole (none before schema 61). Errors: the store's.
    pub(crate) fn of(conn: Conn<'_>) -> db::Result<Recorded> {
        let mut map = HashMap::new();
        if conn.has_table("archived_approvals")? {
            conn.prepare_cached(
                "SELECT approval_id, anchor_last_seq, seals FROM archived_approvals",
            )?
            .for_each([], |r| {
                map.insert(r.get(0)?, (r.get(1)?, r.get(2)?));
                Ok(ControlFlow::Continue(()))
            })?;
        }
        Ok(Recorded(map))
    }

    /// Whether a run recorded approval `id`.
    pub(crate) fn has(&self, id: &str) -> bool {
        self.0.contains_key(id)
    }

    /// Whether a run recorded approval `id` with seals that held.
    pub(crate) fn sealed(&self, id: &str) -> bool {
        self.0.get(id).is_some_and(|(_, s)| !s.is_empty())
    }

    /// Whether the run that recorded approval `id` archived records past `cut` (where the
    /// newest key take-over stands, if any): it ran under the key that took over, so it judged
    /// the seals under this key (found by review: after any take-over none was judged).
    pub(crate) fn after(&self, id: &str, cut: Option<i64>) -> bool {
        self.0
            .get(id)
            .is_some_and(|(run, _)| cut.is_none_or(|c| *run > c))
    }

    /// Whether a run recorded approval `id` with its terms' seal holding too.
    pub(crate) fn terms_sealed(&self, id: &str) -> bool {
        self.0
            .get(id)
            .is_some_and(|(_, s)| s.starts_with(TERMS_HELD))
    }

    /// Whether approval `id`, recorded with seals that held, still has those seal columns
    /// (whether they still hold is for the key's holder to check). Errors: the store's.
    pub(crate) fn as_recorded(&self, conn: Conn<'_>, id: &str) -> db::Result<bool> {
        let then = self.0.get(id).map(|(_, s)| columns_of(s));
        Ok(seals_now(conn, id)?.as_deref() == then)
    }

    /// Each recorded approval that is gone, or whose seals are not those it had when it was
    /// recorded (cleared or replaced behind the gateway's back), as a problem. Errors: the
    /// store's.
    pub(crate) fn problems(
        &self,
        conn: Conn<'_>,
        out: &mut Vec<(Option<i64>, String)>,
    ) -> db::Result<()> {
        let mut ids: Vec<&String> = self.0.keys().collect();
        ids.sort();
        for id in ids {
            let then = &self.0[id].1;
            match seals_now(conn, id)? {
                None => out.push((None, format!(
                    "approval {id}, whose audit records retention archived, is gone from the approvals table"
                ))),
                Some(now) if !then.is_empty() && now != columns_of(then) => out.push((None, format!(
                    "approval {id} does not have the seals it had when retention archived its records: it was changed behind the gateway's back"
                ))),
                Some(_) => {}
            }
        }
        Ok(())
    }
}

/// Checks the rows against the anchors (oldest first): each run's rows must have the digest its
/// signed manifest names (a run from before schema 61 names none and has none), and no row may
/// name another run. The first problem found: `(the run's last_seq, why)`. Errors: the
/// store's.
pub(crate) fn check(conn: Conn<'_>, anchors: &[Manifest]) -> db::Result<Option<(i64, String)>> {
    if !conn.has_table("archived_approvals")? {
        return Ok(None);
    }
    let mut runs: BTreeMap<i64, Vec<Entry>> = BTreeMap::new();
    conn.prepare_cached("SELECT anchor_last_seq, approval_id, seals FROM archived_approvals")?
        .for_each([], |r| {
            runs.entry(r.get(0)?)
                .or_default()
                .push((r.get(1)?, r.get(2)?));
            Ok(ControlFlow::Continue(()))
        })?;
    for a in anchors {
        let rows = runs.remove(&a.last_seq).unwrap_or_default();
        let fits = match &a.approvals_sha256 {
            Some(d) => *d == digest(&rows),
            None => rows.is_empty(),
        };
        if !fits {
            return Ok(Some((
                a.last_seq,
                format!(
                    "the approvals recorded as archived by the run ending at record {} are not those its signed manifest names: they were changed behind the gateway's back",
                    a.last_seq
                ),
            )));
        }
    }
    Ok(runs.into_keys().next().map(|seq| {
        (seq, format!(
            "approvals are recorded as archived by a run ending at record {seq}, but no archive anchor ends there: they were planted behind the gateway's back"
        ))
    }))
}

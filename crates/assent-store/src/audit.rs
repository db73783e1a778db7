//! The hash-chained audit log: append inside a caller's transaction, verify offline.
//!
//! Record `n` stores `hash_n = SHA-256(canonical JSON of [prev_hash, seq, at, kind,
//! approval_id, actor, data])` with `prev_hash = hash_{n-1}` (64 zeros for the first record), so
//! altering, inserting or removing any record before the newest breaks the chain at that record.
//!
//! Audit retention ([`crate::retention`]) deletes a prefix of the chain once it is archived in
//! a signed export; its anchor (the newest `audit_archives` row: the last archived record's
//! `seq` and hash) then stands in for genesis: the remaining chain must start at the record
//! after it and link to its hash.

use crate::db::{self, Conn, OptionalExtension, Row};
use crate::params;
use assent_core::canonical::{canonical_value, sha256_hex};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::ops::ControlFlow;

use crate::error::StoreError;
use crate::sql::from_row;
use crate::store::Store;

/// `prev_hash` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// How a person's decision reached the gateway, kept in its audit records as `data.via`
/// (`{"channel": "dashboard", "sso": "olga@example.com"}`): an action a principal took signed
/// in by single sign-on is told from one taken with their key (issue 14 §7, forensics), though
/// both are recorded under the principal's name.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Via {
    /// `api` (an operator key on `/v1`), `dashboard`, `slack` or `aaep` (a reply on the
    /// AAEP stream).
    pub channel: &'static str,
    /// The single sign-on name (`oidc.name_claim`'s value) of the dashboard session that
    /// decided; `None`: signed in with a key, or not through the dashboard.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sso: Option<String>,
}

impl Via {
    /// A decision through `channel` (`api`, `slack`, `aaep`), no SSO name.
    pub fn channel(channel: &'static str) -> Self {
        Self { channel, sso: None }
    }
    /// A decision from the dashboard, by a session signed in by SSO as `sso` (its
    /// `name_claim`'s value) or, `None`, with a key.
    pub fn dashboard(sso: Option<String>) -> Self {
        Self {
            channel: "dashboard",
            sso,
        }
    }
}

/// `data` with `via` added as `data.via` when there is one (and `data` is an object).
pub(crate) fn with_via(mut data: Value, via: Option<&Via>) -> Value {
    if let (Some(v), Some(o)) = (via, data.as_object_mut()) {
        o.insert("via".into(), json!(v));
    }
    data
}

/// One audit record as stored (and as one line of an audit export, [`crate::retention`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditRecord {
    /// Position in the chain, from 1.
    pub seq: i64,
    /// Unix milliseconds.
    pub at: i64,
    /// What happened (`approval.requested`, `decision`, `token.minted`, …).
    pub kind: String,
    /// The approval it concerns, if any.
    pub approval_id: Option<String>,
    /// Who did it: principal name, agent id or `system:expiry`.
    pub actor: String,
    /// Canonical JSON text.
    pub data: String,
    /// Hash of the previous record (`GENESIS` for the first).
    pub prev_hash: String,
    /// This record's chain hash ([`record_hash`]).
    pub hash: String,
}

impl AuditRecord {
    /// Reads a row that selects `seq, at, kind, approval_id, actor, data, prev_hash, hash`
    /// (by name, in any order).
    pub(crate) fn read(r: &Row<'_>) -> db::Result<Self> {
        from_row!(r => AuditRecord { seq, at, kind, approval_id, actor, data, prev_hash, hash })
    }

    /// Reads a row that selects exactly `seq, at, kind, approval_id, actor, data, prev_hash,
    /// hash` in that order, by position (no lookup of column names: the chain walks).
    pub(crate) fn read_in_order(r: &Row<'_>) -> db::Result<Self> {
        Ok(AuditRecord {
            seq: r.get(0)?,
            at: r.get(1)?,
            kind: r.get(2)?,
            approval_id: r.get(3)?,
            actor: r.get(4)?,
            data: r.get(5)?,
            prev_hash: r.get(6)?,
            hash: r.get(7)?,
        })
    }

    /// The chain hash this record's content gives ([`record_hash`] of its `prev_hash`, `seq`,
    /// `at`, `kind`, `approval_id`, `actor` and `data`); equal to `hash` unless the row was
    /// edited after it was appended.
    pub fn content_hash(&self) -> String {
        record_hash(
            &self.prev_hash,
            self.seq,
            self.at,
            &self.kind,
            self.approval_id.as_deref(),
            &self.actor,
            &self.data,
        )
    }
}

/// The chain hash of one record's content: SHA-256 (lowercase hex) of the RFC 8785
/// canonical JSON of `[prev, seq, at, kind, approval_id, actor, data]`.
///
/// Streamed into the hash without building a JSON tree: an array of strings, integers and
/// `null` has no keys to sort, a string's canonical form is serde_json's (RFC 8785 §3.2.2.2
/// escapes exactly `"`, `\` and the control characters: `\b \t \n \f \r`, else lowercase
/// `\u00xx`), and an integer within ±2^53 is its decimal text. Integers beyond that take the
/// general canonicaliser.
pub fn record_hash(
    prev: &str,
    seq: i64,
    at: i64,
    kind: &str,
    approval_id: Option<&str>,
    actor: &str,
    data: &str,
) -> String {
    const EXACT: i64 = 1 << 53;
    if !(-EXACT..=EXACT).contains(&seq) || !(-EXACT..=EXACT).contains(&at) {
        let v = json!([prev, seq, at, kind, approval_id, actor, data]);
        return sha256_hex(
            canonical_value(&v)
                .expect("strings and integers canonicalise")
                .as_bytes(),
        );
    }
    let mut h = HashWriter(Sha256::new());
    let text = |h: &mut HashWriter, t: &str| {
        serde_json::to_writer(&mut *h, t).expect("hashing does not fail");
    };
    h.0.update(b"[");
    text(&mut h, prev);
    h.0.update(format!(",{seq},{at},").as_bytes());
    text(&mut h, kind);
    h.0.update(b",");
    match approval_id {
        Some(a) => text(&mut h, a),
        None => h.0.update(b"null"),
    }
    h.0.update(b",");
    text(&mut h, actor);
    h.0.update(b",");
    text(&mut h, data);
    h.0.update(b"]");
    let mut out = [0u8; 64];
    hex::encode_to_slice(h.0.finalize(), &mut out).expect("64 hex digits for 32 bytes");
    String::from_utf8(out.to_vec()).expect("hex is ASCII")
}

/// Bytes written to it go into the SHA-256.
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Appends one record in `tx`. `data` is stored as its canonical JSON.
pub(crate) fn append(
    tx: Conn<'_>,
    at: i64,
    kind: &str,
    approval_id: Option<&str>,
    actor: &str,
    data: &Value,
) -> db::Result<()> {
    let last: Option<(i64, String)> = tx
        .prepare_cached("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")?
        .query_row([], db::tuple)
        .optional()?;
    let (seq, prev) = match last {
        // A planted record at `i64::MAX` would wrap the next number (or panic): refused.
        Some((s, h)) => (
            s.checked_add(1).ok_or_else(|| {
                db::DbError::Bind("the last audit record's seq is i64::MAX".into())
            })?,
            h,
        ),
        None => (1, GENESIS.to_string()),
    };
    let data = canonical_value(data).unwrap_or_else(|_| "null".into());
    let hash = record_hash(&prev, seq, at, kind, approval_id, actor, &data);
    tx.prepare_cached("INSERT INTO audit (seq, at, kind, approval_id, actor, data, prev_hash, hash) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)")?.execute(
        params![seq, at, kind, approval_id, actor, data, prev, hash],
    )?;
    Ok(())
}

/// Where the stored chain starts: `(seq, hash)` of the last archived record (the newest
/// `audit_archives` row, unchecked here: [`crate::integrity`] checks its signature), or
/// `(0, GENESIS)` when nothing was archived (or the schema predates retention).
pub fn anchor(conn: Conn<'_>) -> db::Result<(i64, String)> {
    if !conn.has_table("audit_archives")? {
        return Ok((0, GENESIS.to_string()));
    }
    Ok(conn
        .prepare_cached(
            "SELECT last_seq, last_hash FROM audit_archives ORDER BY last_seq DESC LIMIT 1",
        )?
        .query_row([], db::tuple)
        .optional()?
        .unwrap_or((0, GENESIS.to_string())))
}

/// Result of [`verify`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct VerifyReport {
    /// Records checked (the records in the store, after the archived ones).
    pub records: i64,
    /// Records archived and deleted before them ([`anchor`]'s `seq`; 0 when none): the
    /// newest record's `seq` is `archived + records`.
    pub archived: i64,
    /// Hash of the newest record (GENESIS when empty).
    pub head: String,
    /// The first broken record and why, if any.
    pub broken: Option<(i64, String)>,
}

/// Walks the whole stored chain in `seq` order from its [`anchor`] (genesis when nothing was
/// archived), streaming it ([`crate::db::Stmt::for_each`]: never all records in memory), and
/// reports the first record whose sequence number, `prev_hash` or `hash` does not fit.
pub fn verify(conn: Conn<'_>) -> db::Result<VerifyReport> {
    let (archived, mut prev) = anchor(conn)?;
    let mut expect_seq = archived + 1;
    let mut n = 0;
    let mut broken = None;
    conn.prepare_cached(
        "SELECT seq, at, kind, approval_id, actor, data, prev_hash, hash FROM audit ORDER BY seq",
    )?
    .for_each([], |r| {
        let rec = AuditRecord::read_in_order(r)?;
        n += 1;
        if let Some(why) = break_in(&rec, expect_seq, &prev) {
            broken = Some((rec.seq, why));
            return Ok(ControlFlow::Break(()));
        }
        expect_seq += 1;
        prev = rec.hash;
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(VerifyReport {
        records: n,
        archived,
        head: prev,
        broken,
    })
}

/// Why `rec` does not continue a chain whose next record is `expect_seq` after `prev`.
pub(crate) fn break_in(rec: &AuditRecord, expect_seq: i64, prev: &str) -> Option<String> {
    if rec.seq != expect_seq {
        Some(format!(
            "sequence number {} where {expect_seq} was expected (a record was removed or inserted)",
            rec.seq
        ))
    } else if rec.prev_hash != prev {
        Some("prev_hash does not match the previous record's hash (a record before it was removed, inserted or altered)".to_string())
    } else if rec.content_hash() != rec.hash {
        Some("hash does not match the record's content (the record was altered)".to_string())
    } else {
        None
    }
}

impl Store {
    /// Appends an audit record of its own (e.g. the result hash of a forwarded call).
    pub fn append_audit(
        &self,
        kind: &str,
        approval_id: Option<&str>,
        actor: &str,
        data: &Value,
        now: i64,
    ) -> Result<(), StoreError> {
        self.write(|tx| Ok(append(**tx, now, kind, approval_id, actor, data)?))
    }

    /// Appends `config.loaded` by `actor` at `now` (Unix ms) when the configuration a server
    /// puts in force at start-up, `data` (a JSON object with its `policy_set_sha256`, its
    /// `config_digest` — principals, agents, policies, sign-on and restart-only settings — and
    /// what else the server adds), is not the one the chain recorded last (the newest
    /// `config.loaded` or `config.reloaded` record: either field differs, or is missing there),
    /// or when the chain records none yet (a fresh database's first start, or a chain from
    /// before these records). The record adds `previous_policy_set_sha256`,
    /// `previous_config_digest` (`null` when none is recorded) and `changed` (`false` for the
    /// first record of a chain, the baseline). Found by review: a fresh database's first start
    /// recorded nothing, so its first restart with other files was recorded as the baseline,
    /// not as a change. Retention carries the newest of these records (`retention_carry.rs`).
    /// Read beside the writer first and again in the write transaction (two replicas starting
    /// at once record it once); a start with the same
    /// configuration writes nothing. Found by review: a reload was recorded, but a restart with
    /// other files changed the rules in force, or who may approve, with no trace in the chain.
    /// Returns what it recorded (`None`: nothing). Errors: `data` lacks either field; the
    /// store's.
    pub fn record_config_loaded(
        &self,
        data: Value,
        actor: &str,
        now: i64,
    ) -> Result<Option<Value>, StoreError> {
        let text = |k: &str| data.get(k).and_then(Value::as_str).map(str::to_string);
        let (Some(policy_set), Some(digest)) = (text("policy_set_sha256"), text("config_digest"))
        else {
            return Err(StoreError::Invalid(
                "config.loaded data holds a policy_set_sha256 and a config_digest".into(),
            ));
        };
        let now_is = (policy_set.as_str(), digest.as_str());
        if self.aside(|c| config_due(c, now_is))?.is_none() {
            return Ok(None);
        }
        self.write(|tx| {
            let Some(previous) = config_due(**tx, now_is)? else {
                return Ok(None);
            };
            let mut data = data.clone();
            data["changed"] = (!previous.is_null()).into();
            data["previous_policy_set_sha256"] = previous["policy_set_sha256"].clone();
            data["previous_config_digest"] = previous["config_digest"].clone();
            append(**tx, now, "config.loaded", None, actor, &data)?;
            Ok(Some(data))
        })
    }

    /// Verifies the audit chain ([`verify`]) in one read snapshot beside the writer
    /// (`Store::aside`: on SQLite a connection of its own, on Postgres a read session), so
    /// a scan of the whole history never holds the writer's connection. Found by review: it
    /// ran on the writer's connection, so every refresh of the dashboard's audit page stalled
    /// every proposal and decision for as long as the scan took. Records committed after its
    /// snapshot began are not in the report. Errors: the database cannot be read.
    pub fn verify_audit(&self) -> Result<VerifyReport, StoreError> {
        self.aside(verify)
    }
}

/// Whether a start whose configuration is `now_is` (`(policy_set_sha256, config_digest)`) is
/// to record itself ([`Store::record_config_loaded`]): `Some` with the newest `config.loaded`
/// or `config.reloaded` record's data when either differs from it (or is missing there),
/// `Some(null)` when the chain records none, else `None`. Read by the
/// partial index `audit_config` (migration 0066).
fn config_due(c: Conn<'_>, (policy_set, digest): (&str, &str)) -> db::Result<Option<Value>> {
    let newest: Option<String> = c
        .prepare_cached(
            "SELECT data FROM audit WHERE kind IN ('config.loaded', 'config.reloaded') ORDER BY seq DESC LIMIT 1",
        )?
        .query_row(params![], |r| r.get(0))
        .optional()?;
    if let Some(d) = newest {
        // Unreadable: recorded as changed from a damaged record, never as a baseline.
        let d: Value = serde_json::from_str(&d).unwrap_or_else(|_| json!({"damaged": true}));
        // A record from before `config_digest` was recorded is compared by its policy set.
        let digest_then = text_at(&d, "config_digest");
        let same = text_at(&d, "policy_set_sha256").as_deref() == Some(policy_set)
            && digest_then.as_deref().is_none_or(|then| then == digest)
            && d.get("damaged").is_none();
        return Ok((!same).then_some(d));
    }
    // None recorded (a fresh chain, or one from before these records): the baseline.
    Ok(Some(Value::Null))
}

/// The `data` column (JSON text) of an audit row; `null` when it is not JSON.
pub(crate) fn json_of(r: &db::Row<'_>) -> db::Result<serde_json::Value> {
    let text: String = r.get("data")?;
    Ok(serde_json::from_str(&text).unwrap_or_default())
}

/// The string at `key` of a JSON object; `None` when absent or not a string.
pub(crate) fn text_at(v: &serde_json::Value, key: &str) -> Option<String> {
    v[key].as_str().map(str::to_string)
}

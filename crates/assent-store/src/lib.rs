//! assent-store: durable state of the assent gateway in one SQLite file.
//!
//! [`Store`] keeps approvals, their decisions, approval tokens and the hash-chained audit log
//! ([`audit`]) in `<data_dir>/assent.db` (WAL, `synchronous=FULL`), and the token signing key
//! in `<data_dir>/token.key` (directory mode 0700, file mode 0600). Every state change is
//! written in one `BEGIN IMMEDIATE` transaction together with its audit record. The first
//! decision on an approval wins; later ones are audited as late and change nothing.
//!
//! It is not the policy engine (that is `assent-core`) nor an API: callers pass in the time
//! (Unix milliseconds) and the verdicts. Calls are blocking; async callers use
//! `spawn_blocking`. One connection behind a mutex serialises writers in-process, and
//! `busy_timeout` waits for other processes instead of failing.

#![warn(missing_docs)]

pub mod audit;

use assent_core::ToolCall;
use assent_core::approval::{
    self, AlreadyDecided, ApprovalStatus, DecisionKind, DefaultDecision, Event,
};
use assent_core::gatekeeper::{Reason, Verdict};
use assent_core::token::{self, TokenClaims};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::Serialize;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const MIGRATIONS: &[&str] = &[include_str!("../migrations/0001_init.sql")];

/// Store errors. `Sqlite` and `Io` are infrastructure failures: callers fail closed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    /// SQLite failed (locked past the busy timeout, disk full, corrupt file).
    Sqlite(#[from] rusqlite::Error),
    #[error("{path}: {source}")]
    /// A file in the data directory could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    #[error("{0}")]
    /// The data is not what this version expects.
    Invalid(String),
}

/// Why a decision was not applied.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    #[error("approval not found")]
    /// No approval has this id.
    NotFound,
    /// The approval names approver roles and the operator has none of them (listed here); the
    /// attempt was audited as `decision.refused`.
    #[error("the operator has none of the approver roles ({})", .0.join(", "))]
    NotApprover(Vec<String>),
    /// `ALREADY_DECIDED`: the approval had left `pending`; the attempt was audited as late.
    #[error(transparent)]
    AlreadyDecided(#[from] AlreadyDecided),
    #[error(transparent)]
    /// The store failed; nothing changed.
    Store(#[from] StoreError),
}

/// Why a token redemption failed (seed 002 "Execution requires").
#[derive(Debug, thiserror::Error)]
pub enum RedeemError {
    /// `TOKEN_INVALID` (401): not signed by this gateway, or unknown.
    #[error("token is not valid")]
    Invalid,
    /// 403: issued to another agent.
    #[error("token was issued to another agent")]
    WrongAgent,
    /// `TOKEN_USED` (409).
    #[error("token has already been used")]
    Used,
    /// `TOKEN_EXPIRED` (410).
    #[error("token has expired")]
    Expired,
    /// `TOKEN_MISMATCH` (403): the call's hash differs from the approved one.
    #[error(
        "token does not match this call: it approves call_hash {approved}, this call is {presented}"
    )]
    Mismatch {
        /// The hash the token was minted for.
        approved: String,
        /// The hash of the call presented.
        presented: String,
    },
    #[error(transparent)]
    /// The store failed; the token was not consumed.
    Store(#[from] StoreError),
}

impl From<rusqlite::Error> for DecideError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Store(e.into())
    }
}
impl From<rusqlite::Error> for RedeemError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Store(e.into())
    }
}

/// One decision on an approval, as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecisionRecord {
    /// `approve`, `deny`, `expire` or `cancel`.
    pub decision: String,
    /// The operator's reason, or the expiry note.
    pub reason: Option<String>,
    /// Principal name, or `system:expiry`.
    pub actor: String,
    /// Unix milliseconds.
    pub at: i64,
    /// For an expiry: the default decision that was applied.
    pub default_applied: Option<String>,
}

/// An approval as stored (seed 002 ApprovalRequest, MPLP Confirm).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalRecord {
    /// UUID v4.
    pub id: String,
    /// The agent id that proposed the call.
    pub agent: String,
    /// The agent's session id.
    pub session_id: String,
    /// The call as proposed.
    pub call: ToolCall,
    /// RFC 8785 canonical JSON of the call.
    pub canonical: String,
    /// SHA-256 of `canonical`, lowercase hex.
    pub call_hash: String,
    /// The rendered approval message.
    pub message: String,
    /// `R0`…`R4`.
    pub risk_tier: String,
    /// Whether a rule marks the action irreversible.
    pub irreversible: bool,
    /// Why approval is required.
    pub reasons: Vec<Reason>,
    /// Operator roles that may decide (empty: any operator).
    pub approvers: Vec<String>,
    /// `approve` or `reject`, applied at expiry.
    pub default_decision: String,
    /// Unix milliseconds.
    pub requested_at: i64,
    /// Unix milliseconds; the approval expires at this time.
    pub expires_at: i64,
    /// Current status.
    pub status: ApprovalStatus,
    /// Unix milliseconds of the decision, expiry or cancellation.
    pub decided_at: Option<i64>,
    /// The decision that settled it (at most one).
    pub decisions: Vec<DecisionRecord>,
    /// The token's id and expiry once one was minted.
    pub token: Option<TokenInfo>,
}

/// The stored part of a minted token; [`Store::token_string`] signs it for the agent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenInfo {
    /// `tokenId`, UUID v4.
    pub token_id: String,
    /// Unix milliseconds after which it cannot be redeemed.
    pub expires_at: i64,
    /// Unix milliseconds of its redemption, if redeemed.
    pub used_at: Option<i64>,
}

/// What the caller proposes to hold for a human.
#[derive(Debug, Clone)]
pub struct NewApproval<'a> {
    /// The proposing agent's id.
    pub agent: &'a str,
    /// Its session id.
    pub session_id: &'a str,
    /// The call.
    pub call: &'a ToolCall,
    /// The canonical JSON of its arguments ([`ToolCall::canonical_arguments`]).
    pub canonical_arguments: &'a str,
    /// Its canonical JSON.
    pub canonical: &'a str,
    /// Its `call_hash`.
    pub call_hash: &'a str,
    /// The gatekeeper's confirm verdict (message, tier, reasons, default).
    pub verdict: &'a Verdict,
    /// Unix milliseconds.
    pub now: i64,
    /// Unix milliseconds.
    pub expires_at: i64,
}

/// Handle to the SQLite store and the token key. Cheap to share behind an `Arc`.
pub struct Store {
    conn: Mutex<Connection>,
    key: Vec<u8>,
    db_path: PathBuf,
    token_ttl_ms: i64,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Opens a connection with the pragmas assent relies on.
fn connect(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(conn)
}

fn load_or_create_key(dir: &Path) -> Result<Vec<u8>, StoreError> {
    let path = dir.join("token.key");
    match std::fs::read(&path) {
        Ok(k) if k.len() >= 32 => Ok(k),
        Ok(_) => Err(StoreError::Invalid(format!(
            "{}: token key is shorter than 32 bytes; restore it or delete it (outstanding tokens become invalid)",
            path.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut k = vec![0u8; 32];
            getrandom::fill(&mut k)
                .map_err(|e| StoreError::Invalid(format!("no randomness: {e}")))?;
            let tmp = dir.join("token.key.tmp");
            write_private(&tmp, &k).map_err(io(&tmp))?;
            std::fs::rename(&tmp, &path).map_err(io(&path))?;
            Ok(k)
        }
        Err(e) => Err(io(&path)(e)),
    }
}

#[cfg(unix)]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}
#[cfg(not(unix))]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

fn approval_event_name(e: Event) -> &'static str {
    match e {
        Event::Decide(DecisionKind::Approve) => "approve",
        Event::Decide(DecisionKind::Deny) => "deny",
        Event::Expire(_) => "expire",
        Event::Cancel => "cancel",
    }
}

impl Store {
    /// Opens (creating when needed) `<data_dir>/assent.db` and `<data_dir>/token.key`, and
    /// applies pending migrations. `token_ttl_ms` is how long a minted token stays redeemable.
    pub fn open(data_dir: &Path, token_ttl_ms: i64) -> Result<Store, StoreError> {
        create_private_dir(data_dir).map_err(io(data_dir))?;
        let key = load_or_create_key(data_dir)?;
        let db_path = data_dir.join("assent.db");
        let mut conn = connect(&db_path)?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version as usize > MIGRATIONS.len() {
            return Err(StoreError::Invalid(format!(
                "{}: schema version {version} is newer than this assent ({}); upgrade assent",
                db_path.display(),
                MIGRATIONS.len()
            )));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", (i + 1) as i64)?;
            tx.commit()?;
        }
        Ok(Store {
            conn: Mutex::new(conn),
            key,
            db_path,
            token_ttl_ms,
        })
    }

    /// How long a write waits for a lock held by another process before failing (default 10 s).
    pub fn set_busy_timeout(&self, d: std::time::Duration) -> Result<(), StoreError> {
        Ok(self.lock().busy_timeout(d)?)
    }

    /// Path of the database file.
    pub fn db_path(&self) -> &Path {
        &self.db_path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite consistent (transactions roll back on drop).
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Audits a proposal that was allowed or denied outright (`call.allowed` / `call.denied`).
    /// The caller forwards an allowed call only after this returns `Ok` (fail closed).
    pub fn record_verdict(
        &self,
        agent: &str,
        session_id: &str,
        call: &ToolCall,
        call_hash: &str,
        verdict: &Verdict,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        audit::append(
            &tx,
            now,
            &format!(
                "call.{}",
                match verdict.kind {
                    assent_core::VerdictKind::Allow => "allowed",
                    assent_core::VerdictKind::Deny => "denied",
                    assent_core::VerdictKind::Confirm => "held",
                }
            ),
            None,
            agent,
            &json!({"session_id": session_id, "call": call, "call_hash": call_hash,
                    "verdict": verdict.kind, "reasons": verdict.reasons, "risk_tier": verdict.risk_tier}),
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Stores a new pending approval with its `approval.requested` audit record.
    pub fn create_approval(&self, n: &NewApproval<'_>) -> Result<ApprovalRecord, StoreError> {
        let id = uuid::Uuid::new_v4().to_string();
        let args = n.canonical_arguments;
        let v = n.verdict;
        let reasons = serde_json::to_string(&v.reasons).expect("reasons serialise");
        let approvers = serde_json::to_string(&v.approvers).expect("roles serialise");
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.prepare_cached("INSERT INTO approvals (id, agent, session_id, tool, server, arguments, canonical, call_hash, message, risk_tier, irreversible, reasons, approvers, default_decision, requested_at, expires_at, status)
             VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,'pending')")?.execute(
            params![id, n.agent, n.session_id, n.call.tool, n.call.server, args, n.canonical, n.call_hash, v.message,
                    v.risk_tier.as_str(), v.irreversible, reasons, approvers, v.default_decision.as_str(), n.now, n.expires_at],
        )?;
        audit::append(
            &tx,
            n.now,
            "approval.requested",
            Some(&id),
            n.agent,
            &json!({"session_id": n.session_id, "call": n.call, "call_hash": n.call_hash, "verdict": "confirm",
                    "reasons": v.reasons, "risk_tier": v.risk_tier, "irreversible": v.irreversible,
                    "message": v.message, "expires_at": n.expires_at, "default_decision": v.default_decision}),
        )?;
        let rec = read_approval(&tx, &id)?.expect("just inserted");
        tx.commit()?;
        Ok(rec)
    }

    /// Reads one approval with its decisions and token info.
    pub fn get_approval(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        Ok(read_approval(&self.lock(), id)?)
    }

    /// Lists approvals, newest first, optionally only those with `status`, at most `limit`.
    pub fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>, StoreError> {
        let conn = self.lock();
        let ids: Vec<String> = {
            let mut stmt = conn.prepare_cached(
                "SELECT id FROM approvals WHERE (?1 IS NULL OR status = ?1) ORDER BY requested_at DESC, rowid DESC LIMIT ?2",
            )?;
            stmt.query_map(params![status.map(|s| s.as_str()), limit], |r| r.get(0))?
                .collect::<Result<_, _>>()?
        };
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(a) = read_approval(&conn, &id)? {
                out.push(a);
            }
        }
        Ok(out)
    }

    /// Applies an operator decision by `actor`, who holds `roles`. The first valid decision
    /// wins atomically; on a decided approval it appends a `decision.late` audit record and
    /// returns `AlreadyDecided`. When the approval names approver roles and `roles` has none of
    /// them, it appends `decision.refused` and returns `NotApprover`, in the same transaction
    /// as the check. An approval mints a token (`token.minted`).
    pub fn decide(
        &self,
        id: &str,
        decision: DecisionKind,
        reason: Option<&str>,
        actor: &str,
        roles: &[String],
        now: i64,
    ) -> Result<ApprovalRecord, DecideError> {
        self.apply(id, Event::Decide(decision), reason, actor, Some(roles), now)
    }

    /// Cancels a pending approval (the requesting agent or an operator withdrew it).
    pub fn cancel(
        &self,
        id: &str,
        reason: Option<&str>,
        actor: &str,
        now: i64,
    ) -> Result<ApprovalRecord, DecideError> {
        self.apply(id, Event::Cancel, reason, actor, None, now)
    }

    /// Moves approval `id` out of `pending`. `roles`: the deciding operator's roles, checked
    /// against the approval's approver roles (`None` for expiry and cancellation).
    fn apply(
        &self,
        id: &str,
        event: Event,
        reason: Option<&str>,
        actor: &str,
        roles: Option<&[String]>,
        now: i64,
    ) -> Result<ApprovalRecord, DecideError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let row: Option<(String, String, String, String)> = tx
            .prepare_cached(
                "SELECT status, agent, call_hash, approvers FROM approvals WHERE id = ?1",
            )?
            .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .optional()?;
        let Some((status, agent, call_hash, approvers)) = row else {
            return Err(DecideError::NotFound);
        };
        if let Some(roles) = roles {
            let approvers: Vec<String> = serde_json::from_str(&approvers).unwrap_or_default();
            if !approvers.is_empty() && !approvers.iter().any(|a| roles.contains(a)) {
                audit::append(
                    &tx,
                    now,
                    "decision.refused",
                    Some(id),
                    actor,
                    &json!({"decision": approval_event_name(event), "why": "operator lacks an approver role", "approvers": approvers}),
                )?;
                tx.commit()?;
                return Err(DecideError::NotApprover(approvers));
            }
        }
        let status = ApprovalStatus::parse(&status)
            .ok_or_else(|| StoreError::Invalid(format!("bad status {status}")))?;
        let name = approval_event_name(event);
        let next = match approval::transition(status, event) {
            Ok(s) => s,
            Err(e) => {
                audit::append(
                    &tx,
                    now,
                    "decision.late",
                    Some(id),
                    actor,
                    &json!({"decision": name, "reason": reason, "status": status}),
                )?;
                tx.commit()?;
                return Err(e.into());
            }
        };
        let default_applied = match event {
            Event::Expire(d) => Some(d.as_str()),
            _ => None,
        };
        tx.prepare_cached("UPDATE approvals SET status = ?2, decided_at = ?3 WHERE id = ?1 AND status = 'pending'")?.execute(
            params![id, next.as_str(), now],
        )?;
        tx.prepare_cached("INSERT INTO decisions (approval_id, decision, reason, actor, at, default_applied) VALUES (?1,?2,?3,?4,?5,?6)")?.execute(
            params![id, name, reason, actor, now, default_applied],
        )?;
        let kind = match event {
            Event::Decide(_) => "decision",
            Event::Expire(_) => "approval.expired",
            Event::Cancel => "approval.cancelled",
        };
        audit::append(
            &tx,
            now,
            kind,
            Some(id),
            actor,
            &json!({"decision": name, "reason": reason, "status": next, "default_applied": default_applied}),
        )?;
        if approval::mints_token(event) {
            let tid = uuid::Uuid::new_v4().to_string();
            let exp = now + self.token_ttl_ms;
            tx.prepare_cached("INSERT INTO tokens (token_id, approval_id, agent, call_hash, issued_at, expires_at) VALUES (?1,?2,?3,?4,?5,?6)")?.execute(
                params![tid, id, agent, call_hash, now, exp],
            )?;
            audit::append(
                &tx,
                now,
                "token.minted",
                Some(id),
                actor,
                &json!({"token_id": tid, "call_hash": call_hash, "agent": agent, "expires_at": exp}),
            )?;
        }
        let rec = read_approval(&tx, id)?.expect("exists");
        tx.commit()?;
        Ok(rec)
    }

    /// Expires every pending approval whose `expires_at <= now`, applying its default decision
    /// (a token is minted only for `approve`). Also catches up on approvals that expired while
    /// the server was down. Returns the ids expired.
    pub fn expire_due(&self, now: i64) -> Result<Vec<String>, StoreError> {
        let due: Vec<(String, String)> = {
            let conn = self.lock();
            let mut stmt = conn.prepare_cached(
                "SELECT id, default_decision FROM approvals WHERE status = 'pending' AND expires_at <= ?1 ORDER BY expires_at",
            )?;
            stmt.query_map([now], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?
        };
        let mut done = Vec::new();
        for (id, d) in due {
            let d = if d == "approve" {
                DefaultDecision::Approve
            } else {
                DefaultDecision::Reject
            };
            match self.apply(
                &id,
                Event::Expire(d),
                Some("timed out; default decision applied"),
                "system:expiry",
                None,
                now,
            ) {
                Ok(_) => done.push(id),
                Err(
                    DecideError::AlreadyDecided(_)
                    | DecideError::NotFound
                    | DecideError::NotApprover(_),
                ) => {}
                Err(DecideError::Store(e)) => return Err(e),
            }
        }
        Ok(done)
    }

    /// The signed token string for a minted token of approval `id`, for its agent.
    pub fn token_string(&self, id: &str) -> Result<Option<String>, StoreError> {
        let conn = self.lock();
        let row: Option<(String, String, String, i64)> = conn
            .prepare_cached(
                "SELECT token_id, agent, call_hash, expires_at FROM tokens WHERE approval_id = ?1",
            )?
            .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .optional()?;
        Ok(row.map(|(tid, agent, h, exp)| {
            token::sign(
                &self.key,
                &TokenClaims {
                    tid,
                    aid: id.to_string(),
                    agent,
                    h,
                    exp,
                },
            )
        }))
    }

    /// Redeems `token` for `agent`'s call with hash `call_hash`, atomically and once.
    /// Every attempt, successful or not, is audited (`token.redeemed` / `token.refused`).
    pub fn redeem(
        &self,
        token: &str,
        agent: &str,
        call_hash: &str,
        now: i64,
    ) -> Result<TokenClaims, RedeemError> {
        let claims = token::verify(&self.key, token).ok();
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let result = (|| -> Result<TokenClaims, RedeemError> {
            let c = claims.clone().ok_or(RedeemError::Invalid)?;
            let row: Option<(String, String, i64, Option<i64>)> = tx
                .prepare_cached("SELECT agent, call_hash, expires_at, used_at FROM tokens WHERE token_id = ?1 AND approval_id = ?2")?.query_row(
                    params![c.tid, c.aid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .optional()?;
            let (tagent, thash, exp, used) = row.ok_or(RedeemError::Invalid)?;
            if tagent != agent || c.agent != agent {
                return Err(RedeemError::WrongAgent);
            }
            if used.is_some() {
                return Err(RedeemError::Used);
            }
            if now >= exp {
                return Err(RedeemError::Expired);
            }
            if thash != call_hash || c.h != call_hash {
                return Err(RedeemError::Mismatch {
                    approved: thash,
                    presented: call_hash.to_string(),
                });
            }
            let n = tx
                .prepare_cached(
                    "UPDATE tokens SET used_at = ?2 WHERE token_id = ?1 AND used_at IS NULL",
                )?
                .execute(params![c.tid, now])?;
            if n != 1 {
                return Err(RedeemError::Used);
            }
            Ok(c)
        })();
        let aid = claims.as_ref().map(|c| c.aid.as_str());
        match &result {
            Ok(c) => audit::append(
                &tx,
                now,
                "token.redeemed",
                aid,
                agent,
                &json!({"token_id": c.tid, "call_hash": call_hash}),
            )?,
            Err(RedeemError::Store(_)) => {}
            Err(e) => audit::append(
                &tx,
                now,
                "token.refused",
                aid,
                agent,
                &json!({"token_id": claims.as_ref().map(|c| c.tid.clone()), "call_hash": call_hash, "error": e.to_string()}),
            )?,
        }
        tx.commit()?;
        result
    }

    /// Appends an audit record of its own (e.g. the result hash of a forwarded call).
    pub fn append_audit(
        &self,
        kind: &str,
        approval_id: Option<&str>,
        actor: &str,
        data: &Value,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        audit::append(&tx, now, kind, approval_id, actor, data)?;
        tx.commit()?;
        Ok(())
    }

    /// Verifies the audit chain over this store's connection.
    pub fn verify_audit(&self) -> Result<audit::VerifyReport, StoreError> {
        Ok(audit::verify(&self.lock())?)
    }
}

/// Verifies the audit chain of the database in `data_dir` without starting a server, read-only.
pub fn verify_offline(data_dir: &Path) -> Result<audit::VerifyReport, StoreError> {
    let path = data_dir.join("assent.db");
    if !path.exists() {
        return Err(StoreError::Invalid(format!(
            "{}: no assent database here",
            path.display()
        )));
    }
    let conn = Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    Ok(audit::verify(&conn)?)
}

fn read_approval(conn: &Connection, id: &str) -> rusqlite::Result<Option<ApprovalRecord>> {
    let rec = conn
        .prepare_cached("SELECT id, agent, session_id, tool, server, arguments, canonical, call_hash, message, risk_tier, irreversible, reasons, approvers, default_decision, requested_at, expires_at, status, decided_at FROM approvals WHERE id = ?1")?.query_row(
            [id],
            |r| {
                let args: String = r.get(5)?;
                let reasons: String = r.get(11)?;
                let approvers: String = r.get(12)?;
                let status: String = r.get(16)?;
                Ok(ApprovalRecord {
                    id: r.get(0)?,
                    agent: r.get(1)?,
                    session_id: r.get(2)?,
                    call: ToolCall {
                        tool: r.get(3)?,
                        server: r.get(4)?,
                        arguments: serde_json::from_str(&args).unwrap_or(Value::Null),
                    },
                    canonical: r.get(6)?,
                    call_hash: r.get(7)?,
                    message: r.get(8)?,
                    risk_tier: r.get(9)?,
                    irreversible: r.get(10)?,
                    reasons: serde_json::from_str(&reasons).unwrap_or_default(),
                    approvers: serde_json::from_str(&approvers).unwrap_or_default(),
                    default_decision: r.get(13)?,
                    requested_at: r.get(14)?,
                    expires_at: r.get(15)?,
                    status: ApprovalStatus::parse(&status).unwrap_or(ApprovalStatus::Cancelled),
                    decided_at: r.get(17)?,
                    decisions: Vec::new(),
                    token: None,
                })
            },
        )
        .optional()?;
    let Some(mut rec) = rec else { return Ok(None) };
    let mut stmt = conn.prepare_cached(
        "SELECT decision, reason, actor, at, default_applied FROM decisions WHERE approval_id = ?1 ORDER BY rowid",
    )?;
    rec.decisions = stmt
        .query_map([id], |r| {
            Ok(DecisionRecord {
                decision: r.get(0)?,
                reason: r.get(1)?,
                actor: r.get(2)?,
                at: r.get(3)?,
                default_applied: r.get(4)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    rec.token = conn
        .prepare_cached("SELECT token_id, expires_at, used_at FROM tokens WHERE approval_id = ?1")?
        .query_row([id], |r| {
            Ok(TokenInfo {
                token_id: r.get(0)?,
                expires_at: r.get(1)?,
                used_at: r.get(2)?,
            })
        })
        .optional()?;
    Ok(Some(rec))
}

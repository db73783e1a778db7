//! assent-store: durable state of the assent gateway in one SQLite file.
//!
//! [`Store`] keeps approvals, their decisions, approval tokens and the hash-chained audit log
//! ([`audit`]) in `<data_dir>/assent.db` (WAL, `synchronous=FULL`), and the token signing key
//! in `<data_dir>/token.key` (directory mode 0700, file mode 0600); the Ed25519 key that signs
//! audit checkpoints is `<data_dir>/audit.key` ([`checkpoint`]; [`integrity`] verifies it all
//! offline). Every state change is
//! written in one `BEGIN IMMEDIATE` transaction together with its audit record. The first
//! decision on an approval wins; later ones are audited as late and change nothing.
//!
//! It is not the policy engine (that is `assent-core`) nor an API: callers pass in the time
//! (Unix milliseconds) and the verdicts. Calls are blocking; async callers use
//! `spawn_blocking`. One connection behind a mutex serialises writers in-process, and
//! `busy_timeout` waits for other processes instead of failing.

#![warn(missing_docs)]

pub mod aaep;
pub mod audit;
pub mod checkpoint;
pub mod confirm;
mod expiry;
pub mod integrity;
pub mod learning;
pub mod outbox;
pub mod pins;
pub mod plans;
pub mod sessions;
pub mod stored;
pub use stored::Settlement;

pub use confirm::ConfirmContext;

use assent_core::ToolCall;
use assent_core::approval::{
    self, AlreadyDecided, ApprovalStatus, DecisionKind, DefaultDecision, Event, GrantScope,
};
use assent_core::gatekeeper::{Reason, Verdict};
use assent_core::summary::HumanSummary;
use assent_core::token::{self, TokenClaims};
use assent_core::triggers::{Escalation, PriorCall};
use assent_core::{RiskTier, VerdictKind};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::Serialize;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_init.sql"),
    include_str!("../migrations/0002_protocol.sql"),
    include_str!("../migrations/0003_aaep.sql"),
    include_str!("../migrations/0004_plans.sql"),
    include_str!("../migrations/0005_tool_pins.sql"),
    include_str!("../migrations/0006_in_client.sql"),
    include_str!("../migrations/0007_operator.sql"),
    include_str!("../migrations/0008_audit_checkpoints.sql"),
    include_str!("../migrations/0009_cancelled_sessions.sql"),
    include_str!("../migrations/0010_confirm_context.sql"),
];

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
    /// `workspace` scope on an R3/R4 tool without the explicit confirmation flag.
    #[error(
        "scope `workspace` on a {0} tool is discouraged and needs explicit confirmation (confirm_workspace: true, or --yes-workspace)"
    )]
    WorkspaceNeedsConfirmation(String),
    /// A scope or an edit was given with a deny, or an edit changed the tool.
    #[error("{0}")]
    Invalid(String),
    /// `APPROVAL_DAMAGED` (409): stored columns of the approval (named here) could not be
    /// read, so nobody may decide, cancel or expire it (issue 10 §8, fail closed). The attempt
    /// was audited as `decision.refused`.
    #[error("the stored approval is damaged (unreadable column(s): {}); nobody may decide it", .0.join(", "))]
    Damaged(Vec<String>),
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
    /// `DEVICE_MISMATCH` (403): the token was issued to another client device.
    #[error("token was issued to another client device")]
    DeviceMismatch,
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
    /// `approve`, `deny`, `expire` or `cancel`; `deny` when the stored value is unreadable
    /// (the approval's `damaged` then names `decisions.decision`).
    pub decision: Settlement,
    /// The operator's reason, or the expiry note.
    pub reason: Option<String>,
    /// Principal name, or `system:expiry`.
    pub actor: String,
    /// Unix milliseconds.
    pub at: i64,
    /// For an expiry: the default decision that was applied (`reject` when unreadable; the
    /// approval's `damaged` then names `decisions.default_applied`).
    pub default_applied: Option<DefaultDecision>,
    /// MPLP `decision_id` (UUID v4).
    pub decision_id: String,
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
    /// `R0`…`R4`; `R4` when the stored value is unreadable (see `damaged`).
    pub risk_tier: RiskTier,
    /// Whether a rule marks the action irreversible.
    pub irreversible: bool,
    /// Why approval is required.
    pub reasons: Vec<Reason>,
    /// Operator roles that may decide (empty: any operator). When the stored list is
    /// unreadable it is `[`[`stored::UNREADABLE_ROLE`]`]`, a role nobody holds (see `damaged`).
    pub approvers: Vec<String>,
    /// Applied at expiry; `reject` when the stored value is unreadable (see `damaged`).
    pub default_decision: DefaultDecision,
    /// Unix milliseconds.
    pub requested_at: i64,
    /// Unix milliseconds; the approval expires at this time.
    pub expires_at: i64,
    /// Current status; `cancelled` when the stored value is unreadable (see `damaged`).
    pub status: ApprovalStatus,
    /// Unix milliseconds of the decision, expiry or cancellation.
    pub decided_at: Option<i64>,
    /// The decision that settled it (at most one).
    pub decisions: Vec<DecisionRecord>,
    /// The token's id and expiry once one was minted.
    pub token: Option<TokenInfo>,
    /// The agent's run id (seed 002 `runId`), if it sent one.
    pub run_id: Option<String>,
    /// The client device id the agent sent; the token is bound to it.
    pub device_id: Option<String>,
    /// Approvals with the same key are "similar" (same agent, server, tool and rules).
    pub group_key: String,
    /// Seed 002 `humanSummary`, verified against the canonical arguments at creation.
    pub human_summary: String,
    /// Threshold and scope triggers that fired (`rate`, `cost`, `paths`, `domains`).
    pub triggers: Vec<String>,
    /// Seed 002 `suggestedAlternatives` from the covering rules.
    pub suggested_alternatives: Vec<String>,
    /// `on_timeout` of the covering rules, if any.
    pub escalation: Option<Escalation>,
    /// Unix milliseconds when the wait was extended to the escalation roles.
    pub escalated_at: Option<i64>,
    /// `thresholds.output_bytes`: results larger than this are held (MCP proxy).
    pub output_bytes: Option<u64>,
    /// The decided scope (wire form `once`, `session`, `15m`, `workspace`) once approved;
    /// `once` when the stored value is unreadable (see `damaged`).
    pub scope: Option<GrantScope>,
    /// The grant this approval created (scope wider than once) or was allowed by.
    pub grant_id: Option<String>,
    /// The operator's edit of the arguments, when approved with modifications.
    pub edited: Option<EditedCall>,
    /// MPLP trace id (UUID v4).
    pub trace_id: String,
    /// MPLP span id of this approval (UUID v4).
    pub span_id: String,
    /// MPLP Confirm `target_type` (`other` for a tool call).
    pub target_type: String,
    /// MPLP Confirm `target_id` (UUID v4): the held tool call, plan or other target.
    pub target_id: String,
    /// AAEP `reply_token` of its confirmation (`rpl_` + 32 hex), for approvals that were held.
    pub reply_token: Option<String>,
    /// RFC 6902 patch from the target's previous submission (a resubmitted plan), if any.
    pub target_diff: Option<Value>,
    /// The agent's own user may decide it in the MCP client (`in_client_approval`).
    pub in_client_approval: bool,
    /// Predicted side effects from the covering rules' `side_effects` (rendered).
    pub side_effects: Vec<String>,
    /// Rollback / safety notes from the covering rules' `rollback` (rendered).
    pub rollback: Vec<String>,
    /// The tool that previews this call (`dry_run_tool`), if a rule names one.
    pub dry_run_tool: Option<String>,
    /// Argument paths masked in everything that leaves the gateway (`redact`).
    pub redact: Vec<String>,
    /// Names of the stored columns that could not be read (issue 10 §8), e.g. `["approvers"]`;
    /// each holds its most restrictive value above. Non-empty: nobody may decide, cancel or
    /// expire the approval ([`DecideError::Damaged`]) and `assent audit verify` reports it.
    /// Not serialised when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub damaged: Vec<String>,
}

impl ApprovalRecord {
    /// Masks this call's `redact` paths in what leaves the gateway.
    pub fn redactor(&self) -> assent_core::redact::Redactor {
        assent_core::redact::Redactor::new(&self.call.arguments, &self.redact)
    }

    /// RFC 8785 canonical JSON of the proposed arguments.
    pub fn canonical_arguments(&self) -> String {
        assent_core::canonical::canonical_value(&self.call.arguments)
            .unwrap_or_else(|_| self.call.arguments.to_string())
    }
    /// The arguments the agent may run with: the operator's edit, else the proposed ones.
    pub fn effective_arguments(&self) -> &Value {
        self.edited
            .as_ref()
            .map_or(&self.call.arguments, |e| &e.arguments)
    }
    /// The AAEP deadline (Unix ms) announced in `agent.awaiting.confirmation`'s
    /// `timeout_seconds` (AAEP §6.1, §6.4; issue 10 §5): when the default decision really
    /// applies. For an approval with an `on_timeout` escalation not yet used, `expires_at` (the
    /// first wait) plus the escalation's `after_seconds`; otherwise `expires_at` (an escalation
    /// sets `expires_at` to this same deadline). Replies are accepted before it, countdowns
    /// count toward it.
    pub fn announced_deadline(&self) -> i64 {
        match &self.escalation {
            Some(e) if self.escalated_at.is_none() => self
                .expires_at
                .saturating_add(approval::millis(e.after_seconds)),
            _ => self.expires_at,
        }
    }

    /// The hash the token binds: of the edited call, else of the proposed one.
    pub fn effective_hash(&self) -> &str {
        self.edited
            .as_ref()
            .map_or(&self.call_hash, |e| &e.call_hash)
    }
}

/// An operator's edit of a held call's arguments (seed 002 "Approve with modifications"),
/// re-canonicalised and re-hashed. The caller re-checks it with the gatekeeper first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EditedCall {
    /// The new arguments.
    pub arguments: Value,
    /// RFC 8785 canonical JSON of the arguments.
    pub canonical_arguments: String,
    /// RFC 8785 canonical JSON of the whole edited call (same tool and server).
    pub canonical: String,
    /// SHA-256 of `canonical`, lowercase hex.
    pub call_hash: String,
}

/// An operator decision with the seed 002 options.
#[derive(Debug, Clone, Default)]
pub struct DecisionInput {
    /// Approve or deny (`None` is not allowed; use [`DecisionInput::approve`] / `deny`).
    pub kind: Option<DecisionKind>,
    /// Reason; reaches the agent on a deny.
    pub reason: Option<String>,
    /// Scope of an approval (once when omitted).
    pub scope: GrantScope,
    /// Widen a grant from the exact arguments to every call of the tool.
    pub whole_tool: bool,
    /// Explicit confirmation for `workspace` on an R3/R4 tool.
    pub confirm_workspace: bool,
    /// Approve with these arguments instead.
    pub edited: Option<EditedCall>,
    /// The `thresholds.output_bytes` of the edited call, if a rule names one: the approval's
    /// result limit becomes the smaller of the two.
    pub edited_output_bytes: Option<u64>,
}

impl DecisionInput {
    /// Approve once.
    pub fn approve() -> Self {
        Self {
            kind: Some(DecisionKind::Approve),
            ..Default::default()
        }
    }
    /// Deny with an optional reason.
    pub fn deny(reason: Option<&str>) -> Self {
        Self {
            kind: Some(DecisionKind::Deny),
            reason: reason.map(str::to_string),
            ..Default::default()
        }
    }
}

/// A stored grant (seed 002 "Approve with scope").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GrantRecord {
    /// UUID v4.
    pub id: String,
    /// The agent it lets through.
    pub agent: String,
    /// For scope `session`: the session.
    pub session_id: Option<String>,
    /// Tool name.
    pub tool: String,
    /// MCP server alias.
    pub server: Option<String>,
    /// The call hash it covers; `None` when widened to the whole tool.
    pub call_hash: Option<String>,
    /// `session`, a duration such as `15m`, or `workspace`.
    pub scope: String,
    /// Risk tier of the approval that created it.
    pub risk_tier: String,
    /// `workspace` on an R3/R4 tool (allowed after explicit confirmation, discouraged).
    pub discouraged: bool,
    /// The approval it came from.
    pub approval_id: String,
    /// The operator who granted it.
    pub created_by: String,
    /// Unix milliseconds.
    pub created_at: i64,
    /// Unix milliseconds; `None` until revoked.
    pub expires_at: Option<i64>,
    /// Unix milliseconds of revocation.
    pub revoked_at: Option<i64>,
    /// Who revoked it.
    pub revoked_by: Option<String>,
}

/// The ids of the governance policies behind a verdict ([`Proposal::governed_by`]).
pub type PoliciesOf<'a> = dyn Fn(&Verdict) -> Vec<String> + 'a;

/// A tool call proposed by an agent, ready for [`Store::propose`].
pub struct Proposal<'a> {
    /// The agent id (authenticated by the caller).
    pub agent: &'a str,
    /// Its session id.
    pub session_id: &'a str,
    /// Optional run id.
    pub run_id: Option<&'a str>,
    /// Optional client device id; tokens are bound to it.
    pub device_id: Option<&'a str>,
    /// MPLP trace id (UUID v4) the agent sent; generated when `None`.
    pub trace_id: Option<&'a str>,
    /// The call.
    pub call: &'a ToolCall,
    /// Canonical JSON of its arguments.
    pub canonical_arguments: &'a str,
    /// Canonical JSON of the call.
    pub canonical: &'a str,
    /// SHA-256 of `canonical`.
    pub call_hash: &'a str,
    /// Unix milliseconds.
    pub now: i64,
    /// How long a new approval waits (ms), given the verdict.
    pub timeout_ms: &'a dyn Fn(&Verdict) -> i64,
    /// Per-agent cap on pending approvals.
    pub max_pending: u64,
    /// The MPLP Confirm target when this is not a plain tool call (a submitted plan, a
    /// context, …). Such proposals are never covered by grants; a `plan` target must be a
    /// `draft` of the agent and becomes `proposed` with the held approval.
    pub target: Option<ConfirmTarget<'a>>,
    /// MPLP plan and step the call belongs to: blocked while either has a pending Confirm or
    /// the plan is not approved (the Gatekeeper duty of seed 000).
    pub plan_id: Option<&'a str>,
    /// See `plan_id`.
    pub step_id: Option<&'a str>,
    /// The ids of the governance policies behind a confirm verdict, recorded with a held
    /// call ([`ConfirmContext::policies`]); `None` records none.
    pub governed_by: Option<&'a PoliciesOf<'a>>,
    /// SHA-256 of the governance policy set the verdict came from
    /// ([`ConfirmContext::policy_set_sha256`]).
    pub policy_set_sha256: Option<&'a str>,
}

/// What [`Store::propose`] did.
#[derive(Debug, Clone)]
pub enum Proposed {
    /// Allowed outright (audited `call.allowed`).
    Allowed,
    /// Denied (audited `call.denied`).
    Denied,
    /// A grant covers it: an approved approval with its own token (audited `grant.used`).
    Granted(Box<ApprovalRecord>),
    /// Held: a new pending approval, or (`joined`) the pending one for the identical call.
    Held {
        /// The approval.
        approval: Box<ApprovalRecord>,
        /// True when an identical call of the same session was already pending (AAEP §6.1).
        joined: bool,
    },
    /// The agent has `limit` pending approvals already (`429 TOO_MANY_PENDING`).
    TooManyPending {
        /// The cap.
        limit: u64,
    },
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
    /// Unix milliseconds of minting.
    pub issued_at: i64,
    /// The approval's scope (`once`, `session`, `15m`, `workspace`).
    pub scope: String,
    /// `issuedToClientDeviceId`, when the agent sent a device id.
    pub device_id: Option<String>,
    /// The call hash it binds.
    pub call_hash: String,
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
    /// Optional run id.
    pub run_id: Option<&'a str>,
    /// Optional client device id.
    pub device_id: Option<&'a str>,
    /// MPLP trace id (UUID v4) the agent sent; generated when `None`.
    pub trace_id: Option<&'a str>,
    /// The MPLP Confirm target when it is not the tool call itself (a plan, context, …).
    pub target: Option<ConfirmTarget<'a>>,
    /// What governed the call (policies, policy-set hash, plan and step), stored with it.
    pub context: ConfirmContext,
}

/// The MPLP Confirm target of an approval that is not a plain tool call (MPLP Confirm §2.3):
/// `target_type` `plan`, `context`, `trace`, `extension` or `other`, its UUID v4 `target_id`,
/// and the RFC 6902 diff from its previous submission.
#[derive(Debug, Clone, Copy)]
pub struct ConfirmTarget<'a> {
    /// MPLP `target_type`.
    pub target_type: &'a str,
    /// MPLP `target_id` (UUID v4).
    pub target_id: &'a str,
    /// RFC 6902 patch from the previous submission, when this modifies an earlier one.
    pub diff: Option<&'a Value>,
}

/// Handle to the SQLite store and the token key. Cheap to share behind an `Arc`.
pub struct Store {
    conn: Mutex<Connection>,
    key: Vec<u8>,
    audit_key: ed25519_dalek::SigningKey,
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
    stored::Settlement::of(e).as_str()
}

impl Store {
    /// Opens (creating when needed) `<data_dir>/assent.db`, `<data_dir>/token.key` and the
    /// audit checkpoint key `<data_dir>/audit.key` ([`checkpoint`]), and applies pending
    /// migrations. `token_ttl_ms` is how long a minted token stays redeemable.
    pub fn open(data_dir: &Path, token_ttl_ms: i64) -> Result<Store, StoreError> {
        create_private_dir(data_dir).map_err(io(data_dir))?;
        let key = load_or_create_key(data_dir)?;
        let audit_key = checkpoint::load_or_create_key(data_dir)?;
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
            audit_key,
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
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let id = insert_approval(&tx, n, "pending")?;
        let rec = read_approval(&tx, &id)?.expect("just inserted");
        tx.commit()?;
        Ok(rec)
    }

    /// Gates one proposed call atomically (AAEP §6.1, seed 002): reads the session's earlier
    /// calls, asks `evaluate` for the verdict with them, and in the same transaction
    /// - denies (audited `call.denied`) or allows (`call.allowed`);
    /// - for a confirm verdict without threshold or scope triggers, lets a matching grant
    ///   through as an approved approval with its own token (`grant.used`);
    /// - joins an identical pending call of the same session instead of holding it twice;
    /// - refuses when the agent already has `max_pending` pending approvals
    ///   (`call.refused`), else holds the call as a new pending approval.
    ///
    /// Allowed, granted and held calls count toward later thresholds.
    pub fn propose(
        &self,
        p: &Proposal<'_>,
        evaluate: impl FnOnce(&[PriorCall]) -> Verdict,
    ) -> Result<(Verdict, Proposed), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let plan = p.target.filter(|t| t.target_type == "plan");
        if let Some(t) = plan {
            match plans::read_plan(&tx, t.target_id)? {
                Some(pl) if pl.agent == p.agent && pl.status == "draft" => {}
                Some(pl) if pl.agent == p.agent => {
                    return Err(StoreError::Invalid(format!(
                        "plan {} is {}; only a draft can be submitted",
                        t.target_id, pl.status
                    )));
                }
                _ => return Err(StoreError::Invalid(format!("no plan `{}`", t.target_id))),
            }
        }
        let mut blocked = plans::plan_block(&tx, p.plan_id, p.step_id)?;
        if blocked.is_none()
            && let Some(server) = &p.call.server
        {
            let review: Option<String> = tx
                .prepare_cached("SELECT id FROM tool_reviews WHERE server = ?1 AND tool = ?2 AND status = 'pending' LIMIT 1")?
                .query_row(params![server, p.call.tool], |r| r.get(0))
                .optional()?;
            blocked = review.map(|id| {
                format!(
                    "the definition of {server}/{} changed and awaits an operator's review ({id}; assent tools pending)",
                    p.call.tool
                )
            });
        }
        let prior = prior_calls(&tx, p.agent, p.session_id)?;
        let mut verdict = evaluate(&prior);
        if let Some(why) = blocked
            && verdict.kind != VerdictKind::Deny
        {
            verdict.kind = VerdictKind::Deny;
            verdict.reasons.push(assent_core::Reason {
                file: String::new(),
                rule: "mplp plan".into(),
                text: why.clone(),
            });
            verdict.message = why;
        }
        let call_data = |extra: Value| {
            let mut d = json!({"session_id": p.session_id, "run_id": p.run_id, "device_id": p.device_id,
                "call": p.call, "call_hash": p.call_hash, "verdict": verdict.kind, "reasons": verdict.reasons,
                "risk_tier": verdict.risk_tier, "triggers": verdict.triggers});
            if let (Value::Object(d), Value::Object(e)) = (&mut d, extra) {
                d.extend(e);
            }
            d
        };
        let add_usage = |approval_id: Option<&str>| -> rusqlite::Result<()> {
            tx.prepare_cached("INSERT INTO usage (agent, session_id, tool, server, at, arguments, approval_id) VALUES (?1,?2,?3,?4,?5,?6,?7)")?
                .execute(params![p.agent, p.session_id, p.call.tool, p.call.server, p.now, p.canonical_arguments, approval_id])?;
            Ok(())
        };
        let outcome = match verdict.kind {
            VerdictKind::Deny => {
                audit::append(
                    &tx,
                    p.now,
                    "call.denied",
                    None,
                    p.agent,
                    &call_data(json!({})),
                )?;
                Proposed::Denied
            }
            VerdictKind::Allow => {
                audit::append(
                    &tx,
                    p.now,
                    "call.allowed",
                    None,
                    p.agent,
                    &call_data(json!({})),
                )?;
                add_usage(None)?;
                Proposed::Allowed
            }
            VerdictKind::Confirm => {
                // A grant never stands in for the consent an irreversible call needs each time.
                let grant =
                    if verdict.triggers.is_empty() && p.target.is_none() && !verdict.irreversible {
                        find_grant(&tx, p)?
                    } else {
                        None
                    };
                let joined: Option<String> = tx
                    .prepare_cached("SELECT id FROM approvals WHERE agent = ?1 AND session_id = ?2 AND call_hash = ?3 AND status = 'pending' ORDER BY requested_at LIMIT 1")?
                    .query_row(params![p.agent, p.session_id, p.call_hash], |r| r.get(0))
                    .optional()?;
                let pending = pending_of(&tx, p.agent)?;
                let n = NewApproval {
                    agent: p.agent,
                    session_id: p.session_id,
                    call: p.call,
                    canonical_arguments: p.canonical_arguments,
                    canonical: p.canonical,
                    call_hash: p.call_hash,
                    verdict: &verdict,
                    now: p.now,
                    expires_at: p.now.saturating_add((p.timeout_ms)(&verdict)),
                    run_id: p.run_id,
                    device_id: p.device_id,
                    trace_id: p.trace_id,
                    target: p.target,
                    context: ConfirmContext {
                        policies: p.governed_by.map(|f| f(&verdict)).unwrap_or_default(),
                        policy_set_sha256: p.policy_set_sha256.map(str::to_string),
                        plan_id: p.plan_id.map(str::to_string),
                        step_id: p.step_id.map(str::to_string),
                    },
                };
                if let Some((gid, scope)) = grant {
                    let id = insert_approval(&tx, &n, "approved")?;
                    let actor = format!("grant:{gid}");
                    tx.prepare_cached("UPDATE approvals SET decided_at = ?2, scope = ?3, grant_id = ?4 WHERE id = ?1")?
                        .execute(params![id, p.now, scope, gid])?;
                    let decision_id = uuid::Uuid::new_v4().to_string();
                    let why = format!("covered by grant {gid} (scope {scope})");
                    tx.prepare_cached("INSERT INTO decisions (approval_id, decision, reason, actor, at, decision_id) VALUES (?1,'approve',?2,?3,?4,?5)")?
                        .execute(params![id, why, actor, p.now, decision_id])?;
                    let trace: String = tx
                        .prepare_cached("SELECT trace_id FROM approvals WHERE id = ?1")?
                        .query_row([&id], |r| r.get(0))?;
                    mplp_event(
                        &tx,
                        p.now,
                        "confirm.approved",
                        &id,
                        &trace,
                        &actor,
                        json!({"confirm_id": id, "decision_id": decision_id, "status": "approved", "decided_by_role": actor, "reason": why}),
                    )?;
                    audit::append(
                        &tx,
                        p.now,
                        "grant.used",
                        Some(&id),
                        &actor,
                        &json!({"grant_id": gid, "scope": scope, "call_hash": p.call_hash}),
                    )?;
                    self.mint(
                        &tx,
                        &id,
                        p.agent,
                        p.call_hash,
                        &scope,
                        p.device_id,
                        &actor,
                        p.now,
                    )?;
                    add_usage(Some(&id))?;
                    Proposed::Granted(Box::new(read_approval(&tx, &id)?.expect("inserted")))
                } else if let Some(id) = joined {
                    audit::append(
                        &tx,
                        p.now,
                        "call.held",
                        Some(&id),
                        p.agent,
                        &call_data(json!({"joined": true})),
                    )?;
                    Proposed::Held {
                        approval: Box::new(read_approval(&tx, &id)?.expect("exists")),
                        joined: true,
                    }
                } else if pending >= p.max_pending {
                    audit::append(
                        &tx,
                        p.now,
                        "call.refused",
                        None,
                        p.agent,
                        &call_data(
                            json!({"why": "too many pending approvals", "pending": pending, "limit": p.max_pending}),
                        ),
                    )?;
                    Proposed::TooManyPending {
                        limit: p.max_pending,
                    }
                } else {
                    let id = insert_approval(&tx, &n, "pending")?;
                    add_usage(Some(&id))?;
                    if let Some(t) = plan {
                        tx.prepare_cached(
                            "UPDATE plans SET confirm_id = ?2, submitted = ?3 WHERE plan_id = ?1",
                        )?
                        .execute(params![
                            t.target_id,
                            id,
                            p.canonical_arguments
                        ])?;
                        plans::transition(
                            &tx,
                            t.target_id,
                            "proposed",
                            "plan.submitted",
                            p.agent,
                            json!({"confirm_id": id, "diff": t.diff}),
                            p.now,
                        )?;
                    }
                    Proposed::Held {
                        approval: Box::new(read_approval(&tx, &id)?.expect("inserted")),
                        joined: false,
                    }
                }
            }
        };
        tx.commit()?;
        Ok((verdict, outcome))
    }

    /// The earlier calls of `agent`'s session that count toward thresholds, without approval
    /// `except`'s own call: what an edit of that approval is re-gated with (issue 10 §3).
    pub fn session_calls(
        &self,
        agent: &str,
        session_id: &str,
        except: Option<&str>,
    ) -> Result<Vec<PriorCall>, StoreError> {
        Ok(prior_calls_except(&self.lock(), agent, session_id, except)?)
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
    /// as the check. An approval mints a token (`token.minted`) bound to the edited call when
    /// `d.edited` is set (the audit record holds both calls), and a scope wider than `once`
    /// stores a grant (`grant.created`).
    pub fn decide(
        &self,
        id: &str,
        d: &DecisionInput,
        actor: &str,
        roles: &[String],
        now: i64,
    ) -> Result<ApprovalRecord, DecideError> {
        let kind = d
            .kind
            .ok_or_else(|| DecideError::Invalid("decision is required".into()))?;
        if kind == DecisionKind::Deny && (d.scope.is_grant() || d.edited.is_some() || d.whole_tool)
        {
            return Err(DecideError::Invalid(
                "scope, whole_tool and arguments apply to approvals only".into(),
            ));
        }
        if d.whole_tool && !d.scope.is_grant() {
            return Err(DecideError::Invalid(
                "whole_tool widens a grant: give a scope other than once".into(),
            ));
        }
        self.apply(
            id,
            Event::Decide(kind),
            Some(d),
            d.reason.as_deref(),
            actor,
            Some(roles),
            now,
        )
    }

    /// Cancels a pending approval (the requesting agent or an operator withdrew it).
    pub fn cancel(
        &self,
        id: &str,
        reason: Option<&str>,
        actor: &str,
        now: i64,
    ) -> Result<ApprovalRecord, DecideError> {
        self.apply(id, Event::Cancel, None, reason, actor, None, now)
    }

    /// [`Store::cancel`] by an operator holding `roles` (`None`: the agent itself). Cancelling
    /// is a way of saying no, so an operator may cancel only an approval they could decide
    /// ([`approval::may_decide`]); otherwise `NotApprover`, audited `decision.refused`.
    pub fn cancel_as(
        &self,
        id: &str,
        reason: Option<&str>,
        actor: &str,
        roles: Option<&[String]>,
        now: i64,
    ) -> Result<ApprovalRecord, DecideError> {
        self.apply(id, Event::Cancel, None, reason, actor, roles, now)
    }

    /// Stores a new AAEP subscription of operator `principal` (`aaep.subscribed` audited);
    /// events after the newest one are delivered to it.
    pub fn subscribe(
        &self,
        principal: &str,
        request: &Value,
        honored: &Value,
        now: i64,
    ) -> Result<aaep::Subscription, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let s = aaep::new_subscription(&tx, principal, request, honored, now)?;
        tx.commit()?;
        Ok(s)
    }

    /// One subscription.
    pub fn subscription(&self, id: &str) -> Result<Option<aaep::Subscription>, StoreError> {
        Ok(aaep::read_subscription(&self.lock(), id)?)
    }

    /// Closes subscription `id` of `principal` (`aaep.closed`); `false` when it is not theirs
    /// or closed already. Pending confirmations are not affected (assent has other reply
    /// channels; see docs/conformance.md).
    pub fn close_subscription(
        &self,
        id: &str,
        principal: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = tx
            .prepare_cached("UPDATE aaep_subscriptions SET closed_at = ?3 WHERE id = ?1 AND principal = ?2 AND closed_at IS NULL")?
            .execute(params![id, principal, now])?;
        if n == 1 {
            audit::append(
                &tx,
                now,
                "aaep.closed",
                None,
                principal,
                &json!({"subscription_id": id}),
            )?;
        }
        tx.commit()?;
        Ok(n == 1)
    }

    /// Events for subscription `sub` after `seq`, oldest first, at most `limit`.
    pub fn events_after(
        &self,
        sub: &aaep::Subscription,
        seq: i64,
        limit: u32,
    ) -> Result<Vec<aaep::StoredEvent>, StoreError> {
        Ok(aaep::events_after(&self.lock(), sub, seq, limit)?)
    }

    /// The `seq` of event `event_id` (for `Last-Event-ID`).
    pub fn event_seq(&self, event_id: &str) -> Result<Option<i64>, StoreError> {
        Ok(self
            .lock()
            .prepare_cached("SELECT seq FROM aaep_events WHERE event_id = ?1")?
            .query_row([event_id], |r| r.get(0))
            .optional()?)
    }

    /// The approval whose confirmation carries `reply_token`.
    pub fn approval_by_reply_token(
        &self,
        token: &str,
    ) -> Result<Option<ApprovalRecord>, StoreError> {
        let conn = self.lock();
        let id: Option<String> = conn
            .prepare_cached("SELECT id FROM approvals WHERE reply_token = ?1")?
            .query_row([token], |r| r.get(0))
            .optional()?;
        match id {
            Some(id) => Ok(read_approval(&conn, &id)?),
            None => Ok(None),
        }
    }

    /// Sends the courtesy notice of AAEP §6.3.5 to subscription `sub`: the confirmation with
    /// `token` was already resolved.
    pub fn courtesy_notice(
        &self,
        sub: &str,
        a: &ApprovalRecord,
        token: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        aaep::emit(
            &tx,
            &aaep::resolution(a, now, Some(token)),
            Some(sub),
            Some(&a.id),
            now,
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Emits the countdown events of AAEP §6.4.3 that are due: for pending confirmations whose
    /// timeout exceeds 60 s, one at 50% and one at 10% of the time remaining. Returns how many.
    pub fn emit_countdowns(&self, now: i64) -> Result<usize, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let due: Vec<(String, i64)> = tx
            .prepare_cached(
                // A pre-filter only (the announced deadline is never before expires_at); the
                // marks are computed from ApprovalRecord::announced_deadline below.
                "SELECT id, progress_marks FROM approvals WHERE status = 'pending'
                 AND expires_at + COALESCE(escalate_after_ms, 0) - requested_at > 60000 AND progress_marks != 3
                 AND ((progress_marks & 1 = 0 AND ?1 >= requested_at + (expires_at - requested_at) / 2)
                   OR (progress_marks & 2 = 0 AND ?1 >= expires_at - (expires_at - requested_at) / 10))",
            )?
            .query_map([now], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        let mut n = 0;
        for (id, marks) in due {
            let Some(a) = read_approval(&tx, &id)? else {
                continue;
            };
            let deadline = a.announced_deadline();
            let span = deadline - a.requested_at;
            let late = marks & 2 == 0 && now >= deadline - span / 10;
            let half = marks & 1 == 0 && now >= a.requested_at + span / 2;
            if !a.damaged.is_empty() || span <= 60_000 || !(late || half) {
                continue;
            }
            let (percent, mark) = if late { (90, 3) } else { (50, 1) };
            aaep::emit(
                &tx,
                &aaep::countdown(&a, percent, now),
                None,
                Some(&id),
                now,
            )?;
            tx.prepare_cached("UPDATE approvals SET progress_marks = ?2 WHERE id = ?1")?
                .execute(params![id, marks | mark])?;
            n += 1;
        }
        tx.commit()?;
        Ok(n)
    }

    /// The longest timeout extension (ms) honoured for an open subscription (AAEP §6.4.2),
    /// added to new confirmations.
    pub fn timeout_extension_ms(&self) -> Result<i64, StoreError> {
        let conn = self.lock();
        let mut stmt =
            conn.prepare_cached("SELECT honored FROM aaep_subscriptions WHERE closed_at IS NULL")?;
        let rows: Vec<String> = stmt
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        Ok(rows
            .iter()
            .filter_map(|h| serde_json::from_str::<Value>(h).ok())
            .filter_map(|h| h["assent"]["timeout_extension_seconds"].as_i64())
            .max()
            .unwrap_or(0)
            * 1000)
    }

    #[allow(clippy::too_many_arguments)]
    fn mint(
        &self,
        tx: &rusqlite::Transaction<'_>,
        approval_id: &str,
        agent: &str,
        call_hash: &str,
        scope: &str,
        device_id: Option<&str>,
        actor: &str,
        now: i64,
    ) -> rusqlite::Result<()> {
        let tid = uuid::Uuid::new_v4().to_string();
        let exp = now.saturating_add(self.token_ttl_ms);
        tx.prepare_cached("INSERT INTO tokens (token_id, approval_id, agent, call_hash, issued_at, expires_at, scope, device_id) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)")?.execute(
            params![tid, approval_id, agent, call_hash, now, exp, scope, device_id],
        )?;
        audit::append(
            tx,
            now,
            "token.minted",
            Some(approval_id),
            actor,
            &json!({"token_id": tid, "call_hash": call_hash, "agent": agent, "expires_at": exp,
                    "scope": scope, "device_id": device_id}),
        )
    }

    /// Moves approval `id` out of `pending`. `roles`: the deciding operator's roles, checked
    /// against the approval's approver roles (`None` for expiry and cancellation).
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &self,
        id: &str,
        event: Event,
        input: Option<&DecisionInput>,
        reason: Option<&str>,
        actor: &str,
        roles: Option<&[String]>,
        now: i64,
    ) -> Result<ApprovalRecord, DecideError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let Some(rec) = read_approval(&tx, id)? else {
            return Err(DecideError::NotFound);
        };
        if !rec.damaged.is_empty() {
            audit::append(
                &tx,
                now,
                "decision.refused",
                Some(id),
                actor,
                &json!({"decision": approval_event_name(event), "why": "the stored approval is damaged (unreadable columns)", "damaged": rec.damaged}),
            )?;
            tx.commit()?;
            return Err(DecideError::Damaged(rec.damaged));
        }
        if let Some(roles) = roles {
            let approvers = &rec.approvers;
            if !approval::may_decide(approvers, roles) {
                audit::append(
                    &tx,
                    now,
                    "decision.refused",
                    Some(id),
                    actor,
                    &json!({"decision": approval_event_name(event), "why": "operator lacks an approver role", "approvers": approvers}),
                )?;
                tx.commit()?;
                return Err(DecideError::NotApprover(approvers.clone()));
            }
        }
        let status = rec.status;
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
        let scope = input.map(|d| d.scope).unwrap_or_default();
        if rec.target_type != "other"
            && (scope != GrantScope::Once || input.is_some_and(|d| d.edited.is_some()))
        {
            return Err(DecideError::Invalid(format!(
                "a Confirm on a {} is decided once, as submitted: no scope and no edits",
                rec.target_type
            )));
        }
        if rec.irreversible && scope.is_grant() {
            return Err(DecideError::Invalid(
                "an irreversible action is approved once, with explicit consent each time (seed 001): no session, duration or workspace scope".into(),
            ));
        }
        let discouraged = scope == GrantScope::Workspace && rec.risk_tier >= RiskTier::R3;
        if discouraged && !input.is_some_and(|d| d.confirm_workspace) {
            return Err(DecideError::WorkspaceNeedsConfirmation(
                rec.risk_tier.to_string(),
            ));
        }
        let default_applied = match event {
            Event::Expire(d) => Some(d.as_str()),
            _ => None,
        };
        let edited = input.and_then(|d| d.edited.as_ref());
        if let Some(e) = edited.filter(|_| event == Event::Decide(DecisionKind::Approve)) {
            // What ran is the edit: later thresholds count its arguments, and its own result
            // limit applies too.
            tx.prepare_cached("UPDATE usage SET arguments = ?2 WHERE approval_id = ?1")?
                .execute(params![id, e.canonical_arguments])?;
            if let Some(limit) = input.and_then(|d| d.edited_output_bytes) {
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                tx.prepare_cached("UPDATE approvals SET output_bytes = min(coalesce(output_bytes, ?2), ?2) WHERE id = ?1")?
                    .execute(params![id, limit])?;
            }
        }
        let mints = approval::mints_token(event);
        let scope_wire = mints.then(|| scope.to_wire());
        tx.prepare_cached("UPDATE approvals SET status = ?2, decided_at = ?3, scope = ?4, edited_arguments = ?5, edited_canonical = ?6, edited_hash = ?7 WHERE id = ?1 AND status = 'pending'")?.execute(
            params![id, next.as_str(), now, scope_wire, edited.map(|e| &e.canonical_arguments),
                    edited.map(|e| &e.canonical), edited.map(|e| &e.call_hash)],
        )?;
        let decision_id = uuid::Uuid::new_v4().to_string();
        tx.prepare_cached("INSERT INTO decisions (approval_id, decision, reason, actor, at, default_applied, decision_id) VALUES (?1,?2,?3,?4,?5,?6,?7)")?.execute(
            params![id, name, reason, actor, now, default_applied, decision_id],
        )?;
        let mplp_status = match next {
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Cancelled => "cancelled",
            ApprovalStatus::Expired if approval::mints_token(event) => "approved",
            _ => "rejected",
        };
        mplp_event(
            &tx,
            now,
            &format!("confirm.{mplp_status}"),
            id,
            &rec.trace_id,
            actor,
            json!({"confirm_id": id, "decision_id": decision_id, "status": mplp_status, "decided_by_role": actor, "reason": reason}),
        )?;
        let kind = match event {
            Event::Decide(_) => "decision",
            Event::Expire(_) => "approval.expired",
            Event::Cancel => "approval.cancelled",
        };
        let mut data = json!({"decision": name, "reason": reason, "status": next, "default_applied": default_applied});
        if mints {
            data["scope"] = json!(scope_wire);
        }
        if let Some(e) = edited {
            data["original_call"] = json!({"tool": rec.call.tool, "server": rec.call.server,
                "arguments": rec.call.arguments, "call_hash": rec.call_hash});
            data["modified_call"] = json!({"tool": rec.call.tool, "server": rec.call.server,
                "arguments": e.arguments, "call_hash": e.call_hash});
        }
        audit::append(&tx, now, kind, Some(id), actor, &data)?;
        if mints {
            let hash = edited.map_or(rec.call_hash.as_str(), |e| &e.call_hash);
            let scope_wire = scope.to_wire();
            if scope.is_grant() {
                let gid = uuid::Uuid::new_v4().to_string();
                let whole = input.is_some_and(|d| d.whole_tool);
                let expires =
                    match scope {
                        GrantScope::Duration(s) => Some(now.saturating_add(
                            i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX),
                        )),
                        _ => None,
                    };
                let session = (scope == GrantScope::Session).then_some(&rec.session_id);
                tx.prepare_cached("INSERT INTO grants (id, agent, session_id, tool, server, call_hash, scope, risk_tier, discouraged, approval_id, created_by, created_at, expires_at) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13)")?
                    .execute(params![gid, rec.agent, session, rec.call.tool, rec.call.server, (!whole).then_some(hash),
                        scope_wire, rec.risk_tier.as_str(), discouraged, id, actor, now, expires])?;
                tx.prepare_cached("UPDATE approvals SET grant_id = ?2 WHERE id = ?1")?
                    .execute(params![id, gid])?;
                audit::append(
                    &tx,
                    now,
                    "grant.created",
                    Some(id),
                    actor,
                    &json!({
                    "grant_id": gid, "agent": rec.agent, "session_id": session, "tool": rec.call.tool,
                    "server": rec.call.server, "call_hash": (!whole).then_some(hash), "whole_tool": whole,
                    "scope": scope_wire, "expires_at": expires, "discouraged": discouraged}),
                )?;
            }
            self.mint(
                &tx,
                id,
                &rec.agent,
                hash,
                &scope_wire,
                rec.device_id.as_deref(),
                actor,
                now,
            )?;
        }
        if rec.target_type == "plan" {
            plans::on_confirm_decided(&tx, id, &rec.target_id, mplp_status, actor, reason, now)?;
        }
        let rec = read_approval(&tx, id)?.expect("exists");
        aaep::emit(&tx, &aaep::resolution(&rec, now, None), None, Some(id), now)?;
        tx.commit()?;
        Ok(rec)
    }

    /// Lists grants, newest first; only active ones (not revoked, not expired at `now`) unless
    /// `all`.
    pub fn list_grants(&self, all: bool, now: i64) -> Result<Vec<GrantRecord>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(
            "SELECT id, agent, session_id, tool, server, call_hash, scope, risk_tier, discouraged, approval_id, created_by, created_at, expires_at, revoked_at, revoked_by
             FROM grants WHERE ?1 OR (revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?2)) ORDER BY created_at DESC, rowid DESC",
        )?;
        let rows = stmt
            .query_map(params![all, now], |r| {
                Ok(GrantRecord {
                    id: r.get(0)?,
                    agent: r.get(1)?,
                    session_id: r.get(2)?,
                    tool: r.get(3)?,
                    server: r.get(4)?,
                    call_hash: r.get(5)?,
                    scope: r.get(6)?,
                    risk_tier: r.get(7)?,
                    discouraged: r.get(8)?,
                    approval_id: r.get(9)?,
                    created_by: r.get(10)?,
                    created_at: r.get(11)?,
                    expires_at: r.get(12)?,
                    revoked_at: r.get(13)?,
                    revoked_by: r.get(14)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    /// Revokes grant `id` (`grant.revoked`). `Ok(false)` when there is no such grant or it was
    /// revoked already.
    pub fn revoke_grant(&self, id: &str, actor: &str, now: i64) -> Result<bool, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = tx
            .prepare_cached("UPDATE grants SET revoked_at = ?2, revoked_by = ?3 WHERE id = ?1 AND revoked_at IS NULL")?
            .execute(params![id, now, actor])?;
        if n == 1 {
            let aid: String = tx
                .prepare_cached("SELECT approval_id FROM grants WHERE id = ?1")?
                .query_row([id], |r| r.get(0))?;
            audit::append(
                &tx,
                now,
                "grant.revoked",
                Some(&aid),
                actor,
                &json!({"grant_id": id}),
            )?;
        }
        tx.commit()?;
        Ok(n == 1)
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

    /// Redeems `token` for `agent`'s call with hash `call_hash`, from client device
    /// `device_id`, atomically and once. A token bound to a device (the agent sent a
    /// `device_id` with the call) is refused from any other or no device. Every attempt,
    /// successful or not, is audited (`token.redeemed` / `token.refused`).
    pub fn redeem(
        &self,
        token: &str,
        agent: &str,
        call_hash: &str,
        device_id: Option<&str>,
        now: i64,
    ) -> Result<TokenClaims, RedeemError> {
        let claims = token::verify(&self.key, token).ok();
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let result = (|| -> Result<TokenClaims, RedeemError> {
            let c = claims.clone().ok_or(RedeemError::Invalid)?;
            type Row = (String, String, i64, Option<i64>, Option<String>);
            let row: Option<Row> = tx
                .prepare_cached("SELECT agent, call_hash, expires_at, used_at, device_id FROM tokens WHERE token_id = ?1 AND approval_id = ?2")?.query_row(
                    params![c.tid, c.aid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
                .optional()?;
            let (tagent, thash, exp, used, tdevice) = row.ok_or(RedeemError::Invalid)?;
            if tagent != agent || c.agent != agent {
                return Err(RedeemError::WrongAgent);
            }
            if used.is_some() {
                return Err(RedeemError::Used);
            }
            if now >= exp {
                return Err(RedeemError::Expired);
            }
            if tdevice.is_some() && tdevice.as_deref() != device_id {
                return Err(RedeemError::DeviceMismatch);
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
                &json!({"token_id": c.tid, "call_hash": call_hash, "device_id": device_id}),
            )?,
            Err(RedeemError::Store(_)) => {}
            Err(e) => audit::append(
                &tx,
                now,
                "token.refused",
                aid,
                agent,
                &json!({"token_id": claims.as_ref().map(|c| c.tid.clone()), "call_hash": call_hash, "device_id": device_id, "error": e.to_string()}),
            )?,
        }
        tx.commit()?;
        result
    }
    /// The MPLP trace events (`confirm.*`) of approval `id`, oldest first, as stored in the
    /// audit chain.
    pub fn mplp_events(&self, id: &str) -> Result<Vec<Value>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(
            "SELECT data FROM audit WHERE approval_id = ?1 AND kind LIKE 'confirm.%' ORDER BY seq",
        )?;
        let rows: Vec<String> = stmt
            .query_map([id], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        Ok(rows
            .iter()
            .filter_map(|s| serde_json::from_str(s).ok())
            .collect())
    }

    /// Stores a clarification question with a fresh reply token and emits
    /// `aaep:agent.awaiting.clarification` (`clarification.requested` audited). `Ok(Err(limit))`
    /// when the agent already has `max_pending` approvals and questions waiting (audited
    /// `clarification.refused`; nothing else stored).
    #[allow(clippy::too_many_arguments)]
    pub fn create_clarification(
        &self,
        agent: &str,
        session_id: &str,
        question: &str,
        kinds: &[String],
        choices: &[Value],
        context: Option<&str>,
        now: i64,
        expires_at: i64,
        max_pending: u64,
    ) -> Result<Result<aaep::Clarification, u64>, StoreError> {
        let id = uuid::Uuid::new_v4().to_string();
        let token = aaep::random_id("rpl_");
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let pending = pending_of(&tx, agent)?;
        if pending >= max_pending {
            audit::append(
                &tx,
                now,
                "clarification.refused",
                None,
                agent,
                &json!({"session_id": session_id, "why": "too many pending approvals and questions", "pending": pending, "limit": max_pending}),
            )?;
            tx.commit()?;
            return Ok(Err(max_pending));
        }
        tx.prepare_cached("INSERT INTO clarifications (id, agent, session_id, question, kinds, choices, context, reply_token, requested_at, expires_at, status) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,'pending')")?
            .execute(params![id, agent, session_id, question, json!(kinds).to_string(), json!(choices).to_string(), context, token, now, expires_at])?;
        audit::append(
            &tx,
            now,
            "clarification.requested",
            None,
            agent,
            &json!({"clarification_id": id, "session_id": session_id, "question": question, "accepted_response_kinds": kinds}),
        )?;
        let c = aaep::read_clarification(&tx, "id", &id)?.expect("inserted");
        aaep::emit(&tx, &aaep::awaiting_clarification(&c), None, None, now)?;
        tx.commit()?;
        Ok(Ok(c))
    }

    /// A clarification by id, or (`by_token`) by reply token.
    pub fn clarification(
        &self,
        key: &str,
        by_token: bool,
    ) -> Result<Option<aaep::Clarification>, StoreError> {
        let by = if by_token { "reply_token" } else { "id" };
        Ok(aaep::read_clarification(&self.lock(), by, key)?)
    }

    /// Clarifications, newest first, optionally only those with `status`.
    pub fn list_clarifications(
        &self,
        status: Option<&str>,
    ) -> Result<Vec<aaep::Clarification>, StoreError> {
        let conn = self.lock();
        let ids: Vec<String> = conn
            .prepare_cached("SELECT id FROM clarifications WHERE (?1 IS NULL OR status = ?1) ORDER BY requested_at DESC LIMIT 500")?
            .query_map([status], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let mut out = Vec::new();
        for id in ids {
            out.extend(aaep::read_clarification(&conn, "id", &id)?);
        }
        Ok(out)
    }

    /// Records the answer `response` (already validated against the accepted kinds) by
    /// `actor`; the first answer wins. `Ok(None)` when the clarification is not pending (or
    /// does not exist).
    pub fn answer_clarification(
        &self,
        id: &str,
        response: &Value,
        actor: &str,
        now: i64,
    ) -> Result<Option<aaep::Clarification>, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = tx
            .prepare_cached("UPDATE clarifications SET status = 'answered', response = ?2, answered_by = ?3, answered_at = ?4 WHERE id = ?1 AND status = 'pending' AND expires_at > ?4")?
            .execute(params![id, response.to_string(), actor, now])?;
        if n == 0 {
            return Ok(None);
        }
        let c = aaep::read_clarification(&tx, "id", id)?.expect("exists");
        audit::append(
            &tx,
            now,
            "clarification.answered",
            None,
            actor,
            &json!({"clarification_id": id, "response": response}),
        )?;
        aaep::emit(&tx, &aaep::clarification_resolved(&c, now), None, None, now)?;
        tx.commit()?;
        Ok(Some(c))
    }

    /// Expires pending clarifications whose time is up; returns how many.
    pub fn expire_clarifications(&self, now: i64) -> Result<usize, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let ids: Vec<String> = tx
            .prepare_cached(
                "SELECT id FROM clarifications WHERE status = 'pending' AND expires_at <= ?1",
            )?
            .query_map([now], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        for id in &ids {
            tx.prepare_cached("UPDATE clarifications SET status = 'expired' WHERE id = ?1")?
                .execute([id])?;
            let c = aaep::read_clarification(&tx, "id", id)?.expect("exists");
            audit::append(
                &tx,
                now,
                "clarification.expired",
                None,
                "system:expiry",
                &json!({"clarification_id": id}),
            )?;
            aaep::emit(&tx, &aaep::clarification_resolved(&c, now), None, None, now)?;
        }
        tx.commit()?;
        Ok(ids.len())
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

/// Inserts an approval row with `status` and its `approval.requested` audit record; returns
/// its id. The human summary is generated from, and verified against, the canonical arguments.
fn insert_approval(
    tx: &rusqlite::Transaction<'_>,
    n: &NewApproval<'_>,
    status: &str,
) -> Result<String, StoreError> {
    let id = uuid::Uuid::new_v4().to_string();
    let args = n.canonical_arguments;
    let v = n.verdict;
    let summary = HumanSummary::generate(n.call, args);
    summary
        .verify(args)
        .map_err(|e| StoreError::Invalid(format!("human summary check failed: {e}")))?;
    let mut rules: Vec<String> = v
        .reasons
        .iter()
        .map(|r| format!("{}#{}", r.file, r.rule))
        .collect();
    rules.sort();
    let group_key = format!(
        "{}|{}|{}|{}",
        n.agent,
        n.call.server.as_deref().unwrap_or(""),
        n.call.tool,
        rules.join(",")
    );
    let j = |x: &dyn erased::Ser| x.to_json();
    let (esc_to, esc_after) = match &v.escalation {
        Some(e) => (
            serde_json::to_string(&e.escalate_to).expect("roles"),
            Some(i64::try_from(e.after_seconds.saturating_mul(1000)).unwrap_or(i64::MAX)),
        ),
        None => ("[]".to_string(), None),
    };
    let trace_id = n
        .trace_id
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let span_id = uuid::Uuid::new_v4().to_string();
    let (target_type, target_id, diff) = match &n.target {
        Some(t) => (
            t.target_type,
            t.target_id.to_string(),
            t.diff.map(|d| d.to_string()),
        ),
        None => ("other", uuid::Uuid::new_v4().to_string(), None),
    };
    tx.prepare_cached("INSERT INTO approvals (id, agent, session_id, tool, server, arguments, canonical, call_hash, message, risk_tier, irreversible, reasons, approvers, default_decision, requested_at, expires_at, status,
            run_id, device_id, group_key, human_summary, triggers, suggested_alternatives, escalate_to, escalate_after_ms, output_bytes, trace_id, span_id, target_id, target_type, target_diff, in_client, side_effects, rollback, dry_run_tool, redact)
         VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23,?24,?25,?26,?27,?28,?29,?30,?31,?32,?33,?34,?35,?36)")?.execute(
        params![id, n.agent, n.session_id, n.call.tool, n.call.server, args, n.canonical, n.call_hash, v.message,
                v.risk_tier.as_str(), v.irreversible, j(&v.reasons), j(&v.approvers), v.default_decision.as_str(), n.now, n.expires_at, status,
                n.run_id, n.device_id, group_key, summary.text, j(&v.triggers), j(&v.suggested_alternatives), esc_to, esc_after,
                v.output_bytes.map(|b| b.min(i64::MAX as u64) as i64), trace_id, span_id, target_id, target_type, diff, v.in_client_approval,
                j(&v.side_effects), j(&v.rollback), v.dry_run_tool, j(&v.redact)],
    )?;
    audit::append(
        tx,
        n.now,
        "approval.requested",
        Some(&id),
        n.agent,
        &json!({"session_id": n.session_id, "run_id": n.run_id, "device_id": n.device_id, "call": n.call,
                "call_hash": n.call_hash, "verdict": "confirm", "reasons": v.reasons, "risk_tier": v.risk_tier,
                "irreversible": v.irreversible, "message": v.message, "expires_at": n.expires_at,
                "default_decision": v.default_decision, "triggers": v.triggers}),
    )?;
    confirm::record(tx, &id, &n.context)?;
    // A tool call of a plan step is shown with the step as its MPLP target (see
    // `docs/conformance.md`); the stored target id stays the call's own.
    let shown_target = match (&n.context.step_id, target_type) {
        (Some(step), "other") => step.clone(),
        _ => target_id.clone(),
    };
    mplp_event(
        tx,
        n.now,
        "confirm.requested",
        &id,
        &trace_id,
        n.agent,
        json!({"confirm_id": id, "target_type": target_type, "target_id": shown_target, "requested_by_role": n.agent}),
    )?;
    if status == "pending" {
        // AAEP §6.2: a fresh reply token, stored so it stays unique and single-use across
        // restarts; the confirmation event is written with the approval.
        let token = aaep::random_id("rpl_");
        tx.prepare_cached("UPDATE approvals SET reply_token = ?2 WHERE id = ?1")?
            .execute(params![id, token])?;
        let rec = read_approval(tx, &id)?.expect("just inserted");
        aaep::emit(
            tx,
            &aaep::awaiting_confirmation(&rec, &token),
            None,
            Some(&id),
            n.now,
        )?;
    }
    Ok(id)
}

/// Appends an MPLP trace event (`common/events.schema.json`: UUID v4 `event_id`, dotted
/// `event_type`, `source`, `timestamp`, `trace_id`, `data`) to the audit chain with `kind` =
/// `event_type`, linking the Confirm to its trace (MPLP evidence chain, seed 000 §4.2). The
/// `data` of an approval whose call named an MPLP plan or step carries `plan_id`/`step_id`.
pub(crate) fn mplp_event(
    tx: &rusqlite::Transaction<'_>,
    now: i64,
    event_type: &str,
    approval_id: &str,
    trace_id: &str,
    actor: &str,
    mut data: Value,
) -> rusqlite::Result<()> {
    let ctx = confirm::read(tx, approval_id)?;
    if let Value::Object(d) = &mut data {
        for (k, v) in [("plan_id", ctx.plan_id), ("step_id", ctx.step_id)] {
            if let Some(v) = v {
                d.insert(k.into(), Value::String(v));
            }
        }
    }
    let ev = json!({
        "event_id": uuid::Uuid::new_v4().to_string(), "event_type": event_type, "source": "assent.confirm",
        "timestamp": rfc3339(now), "trace_id": trace_id, "data": data,
    });
    audit::append(tx, now, event_type, Some(approval_id), actor, &ev)
}

/// Unix milliseconds as RFC 3339 UTC.
pub fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

mod erased {
    /// Serialises to a JSON string (for JSON columns).
    pub trait Ser {
        fn to_json(&self) -> String;
    }
    impl<T: serde::Serialize> Ser for T {
        fn to_json(&self) -> String {
            serde_json::to_string(self).expect("serialisable")
        }
    }
}

/// The earlier calls of `agent`'s session that count toward thresholds: allowed ones, and
/// those whose approval is pending, approved or expired into an approval.
fn prior_calls(tx: &Connection, agent: &str, session_id: &str) -> rusqlite::Result<Vec<PriorCall>> {
    prior_calls_except(tx, agent, session_id, None)
}

/// [`prior_calls`] without the usage of approval `except` (the call an edit replaces).
fn prior_calls_except(
    tx: &Connection,
    agent: &str,
    session_id: &str,
    except: Option<&str>,
) -> rusqlite::Result<Vec<PriorCall>> {
    let mut stmt = tx.prepare_cached(
        "SELECT u.tool, u.server, u.at, u.arguments FROM usage u LEFT JOIN approvals a ON a.id = u.approval_id
         WHERE u.agent = ?1 AND u.session_id = ?2 AND (?3 IS NULL OR u.approval_id IS NOT ?3)
           AND (a.id IS NULL OR a.status IN ('pending','approved') OR (a.status = 'expired' AND a.default_decision = 'approve'))
         ORDER BY u.at",
    )?;
    stmt.query_map(params![agent, session_id, except], |r| {
        let args: String = r.get(3)?;
        Ok(PriorCall {
            tool: r.get(0)?,
            server: r.get(1)?,
            at_ms: r.get(2)?,
            arguments: serde_json::from_str(&args).unwrap_or(Value::Null),
        })
    })?
    .collect()
}

/// How many approvals and clarification questions of `agent` wait for a person: what
/// `max_pending_per_agent` caps (issue 10 §16).
fn pending_of(conn: &Connection, agent: &str) -> rusqlite::Result<u64> {
    conn.prepare_cached(
        "SELECT (SELECT count(*) FROM approvals WHERE agent = ?1 AND status = 'pending')
              + (SELECT count(*) FROM clarifications WHERE agent = ?1 AND status = 'pending')",
    )?
    .query_row([agent], |r| r.get(0))
}

/// An active grant covering the proposal: same agent, tool and server; same call hash unless
/// widened to the tool; same session for `session` grants; not expired or revoked. Returns
/// `(grant id, scope)`.
fn find_grant(
    tx: &rusqlite::Transaction<'_>,
    p: &Proposal<'_>,
) -> rusqlite::Result<Option<(String, String)>> {
    tx.prepare_cached(
        "SELECT id, scope FROM grants WHERE agent = ?1 AND tool = ?2 AND server IS ?3 AND revoked_at IS NULL
           AND (expires_at IS NULL OR expires_at > ?4) AND (session_id IS NULL OR session_id = ?5)
           AND (call_hash IS NULL OR call_hash = ?6)
         ORDER BY created_at LIMIT 1",
    )?
    .query_row(
        params![p.agent, p.call.tool, p.call.server, p.now, p.session_id, p.call_hash],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .optional()
}

fn read_approval(conn: &Connection, id: &str) -> rusqlite::Result<Option<ApprovalRecord>> {
    let rec = conn
        .prepare_cached("SELECT id, agent, session_id, tool, server, arguments, canonical, call_hash, message, risk_tier, irreversible, reasons, approvers, default_decision, requested_at, expires_at, status, decided_at,
            run_id, device_id, group_key, human_summary, triggers, suggested_alternatives, escalate_to, escalate_after_ms, escalated_at, output_bytes, scope, grant_id, edited_arguments, edited_canonical, edited_hash,
            trace_id, span_id, target_type, target_id, reply_token, target_diff, in_client, side_effects, rollback, dry_run_tool, redact
            FROM approvals WHERE id = ?1")?.query_row(
            [id],
            approval_row,
        )
        .optional()?;
    let Some(mut rec) = rec else { return Ok(None) };
    let mut stmt = conn.prepare_cached(
        "SELECT decision, reason, actor, at, default_applied, decision_id FROM decisions WHERE approval_id = ?1 ORDER BY rowid",
    )?;
    let rows: Vec<(DecisionRecord, Vec<String>)> = stmt
        .query_map([id], decision_row)?
        .collect::<Result<_, _>>()?;
    for (d, damaged) in rows {
        rec.damaged.extend(damaged);
        rec.decisions.push(d);
    }
    rec.token = conn
        .prepare_cached("SELECT token_id, expires_at, used_at, issued_at, scope, device_id, call_hash FROM tokens WHERE approval_id = ?1")?
        .query_row([id], |r| {
            Ok(TokenInfo {
                token_id: r.get(0)?,
                expires_at: r.get(1)?,
                used_at: r.get(2)?,
                issued_at: r.get(3)?,
                scope: r.get(4)?,
                device_id: r.get(5)?,
                call_hash: r.get(6)?,
            })
        })
        .optional()?;
    Ok(Some(rec))
}

/// One `approvals` row (columns in `read_approval`'s SELECT order) read strictly: unreadable
/// columns are named in `damaged` and hold their most restrictive value ([`stored::Columns`]).
/// `decisions` and `token` are left empty. `Err` only for a wrong column index or a
/// NOT NULL integer/text column of the wrong type.
fn approval_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ApprovalRecord> {
    let mut c = stored::Columns::default();
    let arguments = c.json(r, 5, "arguments", Value::Null)?;
    let reasons = c.json(r, 11, "reasons", Vec::new())?;
    let approvers = c.json(
        r,
        12,
        "approvers",
        vec![stored::UNREADABLE_ROLE.to_string()],
    )?;
    let risk_tier = c.parsed(r, 9, "risk_tier", RiskTier::parse, RiskTier::R4)?;
    let default_decision = c.parsed(
        r,
        13,
        "default_decision",
        DefaultDecision::parse,
        DefaultDecision::Reject,
    )?;
    let status = c.parsed(
        r,
        16,
        "status",
        ApprovalStatus::parse,
        ApprovalStatus::Cancelled,
    )?;
    let scope = c.parsed_opt(
        r,
        28,
        "scope",
        |s| GrantScope::parse(s).ok(),
        Some(GrantScope::Once),
    )?;
    let escalate_to = c.list(r, 24, "escalate_to")?;
    let after: Option<i64> = r.get(25)?;
    let edited_args = c.parsed_opt(
        r,
        30,
        "edited_arguments",
        |a| {
            serde_json::from_str::<Value>(a)
                .ok()
                .map(|v| (v, a.to_string()))
        },
        None,
    )?;
    let edited = match (
        edited_args,
        r.get::<_, Option<String>>(31)?,
        r.get::<_, Option<String>>(32)?,
    ) {
        (Some((arguments, a)), Some(c), Some(h)) => Some(EditedCall {
            arguments,
            canonical_arguments: a,
            canonical: c,
            call_hash: h,
        }),
        _ => None,
    };
    let triggers = c.list(r, 22, "triggers")?;
    let suggested_alternatives = c.list(r, 23, "suggested_alternatives")?;
    let target_diff = c.parsed_opt(r, 38, "target_diff", |d| serde_json::from_str(d).ok(), None)?;
    let side_effects = c.list(r, 40, "side_effects")?;
    let rollback = c.list(r, 41, "rollback")?;
    let redact = c.list(r, 43, "redact")?;
    Ok(ApprovalRecord {
        id: r.get(0)?,
        agent: r.get(1)?,
        session_id: r.get(2)?,
        call: ToolCall {
            tool: r.get(3)?,
            server: r.get(4)?,
            arguments,
        },
        canonical: r.get(6)?,
        call_hash: r.get(7)?,
        message: r.get(8)?,
        risk_tier,
        irreversible: r.get(10)?,
        reasons,
        approvers,
        default_decision,
        requested_at: r.get(14)?,
        expires_at: r.get(15)?,
        status,
        decided_at: r.get(17)?,
        decisions: Vec::new(),
        token: None,
        run_id: r.get(18)?,
        device_id: r.get(19)?,
        group_key: r.get(20)?,
        human_summary: r.get(21)?,
        triggers,
        suggested_alternatives,
        escalation: after.map(|a| Escalation {
            escalate_to,
            after_seconds: (a / 1000) as u64,
        }),
        escalated_at: r.get(26)?,
        output_bytes: r.get::<_, Option<i64>>(27)?.map(|b| b as u64),
        scope,
        grant_id: r.get(29)?,
        edited,
        trace_id: r.get::<_, Option<String>>(33)?.unwrap_or_default(),
        span_id: r.get::<_, Option<String>>(34)?.unwrap_or_default(),
        target_type: r.get(35)?,
        target_id: r.get::<_, Option<String>>(36)?.unwrap_or_default(),
        reply_token: r.get(37)?,
        target_diff,
        in_client_approval: r.get(39)?,
        side_effects,
        rollback,
        dry_run_tool: r.get(42)?,
        redact,
        damaged: c.damaged,
    })
}

/// One `decisions` row (`decision, reason, actor, at, default_applied, decision_id`) read
/// strictly, with the names of its unreadable columns (`decisions.decision`,
/// `decisions.default_applied`).
fn decision_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(DecisionRecord, Vec<String>)> {
    let mut c = stored::Columns::default();
    let d = DecisionRecord {
        decision: c.parsed(
            r,
            0,
            "decisions.decision",
            Settlement::parse,
            Settlement::Deny,
        )?,
        reason: r.get(1)?,
        actor: r.get(2)?,
        at: r.get(3)?,
        default_applied: c.parsed_opt(
            r,
            4,
            "decisions.default_applied",
            DefaultDecision::parse,
            Some(DefaultDecision::Reject),
        )?,
        decision_id: r.get::<_, Option<String>>(5)?.unwrap_or_default(),
    };
    Ok((d, c.damaged))
}

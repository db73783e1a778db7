//! The store's error types: [`StoreError`] (infrastructure and invalid data),
//! [`DecideError`] (why a decision, cancellation or expiry was not applied) and
//! [`RedeemError`] (why a token was not redeemed). No logic beyond the conversions.

use assent_core::approval::AlreadyDecided;
use std::path::PathBuf;

/// Store errors. `Sqlite` and `Io` are infrastructure failures: callers fail closed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    /// SQLite failed (locked past the busy timeout, disk full, corrupt file).
    Sqlite(#[from] rusqlite::Error),
    #[error("database error: {0}")]
    /// The storage kernel failed ([`crate::db`]: Postgres, or a misuse of the kernel; its
    /// SQLite errors stay `Sqlite`).
    Database(crate::db::DbError),
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

impl StoreError {
    /// Whether this is a row of the wrong stored type ([`crate::db::DbError::is_damaged_row`]).
    pub fn is_damaged_row(&self) -> bool {
        matches!(self, StoreError::Database(e) if e.is_damaged_row())
    }
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
    /// `SELF_APPROVAL` (403): separation of duties (issue 14 §2) — the decider owns the agent
    /// or the call acts for them (why, here); audited as `decision.refused`.
    #[error("{0}")]
    SelfApproval(String),
    /// `ALREADY_VOTED` (409): the principal (named) has voted on this approval, which needs a
    /// quorum of distinct people (issue 14 §1); audited as `decision.refused`.
    #[error("`{0}` has already voted on this approval; a quorum counts each person once")]
    AlreadyVoted(String),
    /// `workspace` scope, or a timed one outlasting a `session` grant, on an R3/R4 tool
    /// without the explicit confirmation flag (the tier, the scope as written).
    #[error(
        "scope `{scope}` on a {tier} tool is discouraged and needs explicit confirmation (confirm_workspace: true, or --yes-workspace): it lets the agent make the call without asking {}",
        if scope == "workspace" { "until the grant is revoked" } else { "for longer than a session grant may last" }
    )]
    WorkspaceNeedsConfirmation {
        /// The approval's risk tier (`R3`).
        tier: String,
        /// The scope asked for, as written (`workspace`, `30d`).
        scope: String,
    },
    /// `PASSKEY_REQUIRED` (403): the approval needs a passkey-signed approval (issue 14 §4)
    /// and none came, or the one that came is not the decider's or not for this approval,
    /// call and decision (why, here); audited as `decision.refused`.
    #[error("{0}")]
    PasskeyRequired(String),
    /// A scope or an edit was given with a deny, or an edit changed the tool.
    #[error("{0}")]
    Invalid(String),
    /// `APPROVAL_DAMAGED` (409): stored columns of the approval (named here) could not be
    /// read, so nobody may decide, cancel or expire it (issue 10 §8, fail closed). The attempt
    /// was audited as `decision.refused`.
    #[error("the stored approval is damaged (unreadable column(s): {}); nobody may decide it", .0.join(", "))]
    Damaged(Vec<String>),
    /// `PLAN_STOPPED` (409): approving a call held under a plan that runs no calls now
    /// (cancelled, rejected back to draft, finished); denying it is still taken. Audited as
    /// `decision.refused`.
    #[error("the call was held under plan `{plan_id}`, which is {status}: it cannot be approved")]
    PlanStopped {
        /// The plan's id.
        plan_id: String,
        /// Its status now.
        status: String,
    },
    /// `TOOL_UNDER_REVIEW` (409): approving a call whose MCP tool's definition changed since
    /// and awaits an operator's review ([`crate::pins`]: the gateway's review or the agent's
    /// own); denying it is still taken. Audited as `decision.refused`. Found by review: an
    /// upstream that changed a tool while a call of it was held had that call approved, shown
    /// as it was held, and run against the unreviewed definition.
    #[error(
        "the definition of {server}/{tool} changed since this call was held and awaits an operator's review ({review}): accept or reject the review first (assent tools pending), or deny the call"
    )]
    ToolUnderReview {
        /// The review's id.
        review: String,
        /// The MCP server alias.
        server: String,
        /// The tool.
        tool: String,
    },
    /// `SESSION_CHANGED` (409): the approval's session took in more (untrusted output,
    /// private data, egress, a changed tool definition) after the caller re-gated the decision
    /// against it ([`crate::DecisionInput::session_seen`]); audited as `decision.refused`,
    /// nothing approved. The caller reads the approval again and decides again.
    #[error(
        "the session took in more since this decision was checked against it (its risk may have risen): nothing was decided; read the approval again and decide again"
    )]
    SessionChanged,
    /// `RULES_TIGHTENED` (409): the rules in force, changed since the approval was held, ask
    /// more of the call than it was held under ([`assent_core::rules_now::tightened`]; why);
    /// audited as `decision.refused`, nothing approved. A deny is still taken.
    #[error("{0}")]
    RulesTightened(String),
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
    /// 403 `NOT_EXECUTOR`: an executor presented a token for a call on a server or tool it
    /// does not execute, or of an agent it does not execute for.
    #[error(
        "executor `{executor}` does not execute this call's server or tool for this token's agent"
    )]
    NotExecutor {
        /// The executor's principal name.
        executor: String,
    },
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
    /// `PLAN_STOPPED` (409): the call was held under a plan that no longer runs calls
    /// (cancelled, rejected, failed or completed since the token was minted).
    #[error("the call's plan {plan_id} is {status}: its calls no longer run")]
    PlanStopped {
        /// The plan the call named.
        plan_id: String,
        /// Its status now.
        status: String,
    },
    /// `SETTLEMENT_UNSEALED` (409): the approval's settlement (its status, decision rows,
    /// their key bindings, scope, edit or votes) does not hold its seal
    /// ([`crate::settlement_seal`]): it was changed behind the gateway's back, or was settled
    /// before migration 0035 and never sealed; or the approval's terms, which since migration
    /// 0058 hold the plan ids its plan's stop reaches it by, do not hold theirs
    /// ([`crate::approval_seal`]); or a grant that let its call through, or that grant's
    /// source call, does not (`tokens/origin.rs`). The token stays unused; start-up voids it
    /// when its settlement's seal is the one that does not hold.
    #[error(
        "the approval's terms or settlement, or the grant that let its call through or that grant's source call, do not hold their seal: they were changed in the database behind the gateway's back, so nothing vouches for the consent this token was minted under"
    )]
    Unsealed,
    /// `TOOL_UNDER_REVIEW` (409): the call's MCP tool's definition changed since it was
    /// approved (or held) and awaits an operator's review; the token stays unused and redeems
    /// once the review is accepted (found by review, as [`DecideError::ToolUnderReview`]).
    #[error(
        "the definition of {server}/{tool} changed and awaits an operator's review ({review}): the token runs nothing until the review is accepted"
    )]
    ToolUnderReview {
        /// The review's id.
        review: String,
        /// The MCP server alias.
        server: String,
        /// The tool.
        tool: String,
    },
    /// `RULES_TIGHTENED` (409): the rules in force, changed since the approval was held, ask
    /// more of its call than it was held and approved under (why:
    /// [`assent_core::rules_now::tightened`]); the token stays unused.
    #[error("{0}")]
    RulesTightened(String),
    /// `SESSION_CANCELLED` (409): the call's session is over for its agent (cancelled, or its
    /// cancellation under way: `crate::session_over`); the token stays unused.
    #[error("the call's session {session_id} was cancelled by `{by}`: its calls no longer run")]
    SessionCancelled {
        /// The session.
        session_id: String,
        /// Who cancelled it.
        by: String,
    },
    #[error(transparent)]
    /// The store failed; the token was not consumed.
    Store(#[from] StoreError),
}

impl crate::db::Settles for StoreError {}

impl crate::db::Settles for DecideError {
    /// The refusals `decide.rs`'s `admit` audited (`decision.refused`, `decision.late`)
    /// commit; every other error rolls back.
    fn keeps_writes(&self) -> bool {
        matches!(
            self,
            DecideError::NotApprover(_)
                | DecideError::Damaged(_)
                | DecideError::AlreadyDecided(_)
                | DecideError::AlreadyVoted(_)
                | DecideError::SelfApproval(_)
                | DecideError::PasskeyRequired(_)
                | DecideError::PlanStopped { .. }
                | DecideError::ToolUnderReview { .. }
                | DecideError::SessionChanged
                | DecideError::RulesTightened(_)
        )
    }
}

impl crate::db::Settles for RedeemError {
    /// Every refusal was audited and commits (with what the redemption wrote before it); a
    /// store failure rolls back.
    fn keeps_writes(&self) -> bool {
        !matches!(self, RedeemError::Store(_))
    }
}

impl From<crate::db::DbError> for StoreError {
    /// SQLite's errors as `Sqlite`, as before the kernel; text Postgres cannot store (a NUL
    /// character, SQLSTATE 22021 or 22P05, which SQLite stores) as `Invalid`, a backstop for
    /// input the edge should have refused; the rest as `Database`.
    fn from(e: crate::db::DbError) -> Self {
        use postgres::error::SqlState;
        match e {
            crate::db::DbError::Sqlite(e) => Self::Sqlite(e),
            crate::db::DbError::Postgres(p)
                if p.code().is_some_and(|c| {
                    *c == SqlState::CHARACTER_NOT_IN_REPERTOIRE
                        || *c == SqlState::UNTRANSLATABLE_CHARACTER
                }) =>
            {
                Self::Invalid(format!("text the database cannot store: {p}"))
            }
            e => Self::Database(e),
        }
    }
}
impl From<crate::db::DbError> for DecideError {
    fn from(e: crate::db::DbError) -> Self {
        Self::Store(e.into())
    }
}
impl From<crate::db::DbError> for RedeemError {
    fn from(e: crate::db::DbError) -> Self {
        Self::Store(e.into())
    }
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

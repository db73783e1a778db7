//! Results of forwarded calls (issue 4 "Results"): what a proxy, the hub or a REST agent
//! reports of a call it forwarded (`POST /v1/tool-results`), appended to the audit chain as
//! `call.result` and taken into the call's session risk in the same transaction.

use crate::audit;
use crate::db::{self, Conn, OptionalExtension as _};
use crate::error::StoreError;
use crate::params;
use crate::store::Store;
use assent_core::ApprovalStatus;
use assent_core::result_link::{self, Linked, Prior, Refused, Reporter, Unlinked};
use serde_json::Value;

/// [`Store::record_result`]'s refusal of an outcome (`not_run`, `no_answer`) for a call whose
/// result is recorded.
pub const RESULT_TWICE: &str = "this call already has a result recorded; an outcome saying it did not run or answer is refused";
/// [`Store::record_result`]'s refusal of a result naming no approval of its agent.
pub const RESULT_NO_APPROVAL: &str = "approval_id names no approval of this agent";

/// The most reports (`call.result` records: results and outcomes) one reporter may make of
/// one approval's call ([`result_link::MAX_REPORTS`], 8, counted per [`Reporter`]). Found by
/// review: an agent could post reports for its redeemed approval without end, each appended to
/// the audit chain, and every later outcome read and parsed all of them under the write lock.
pub const MAX_RESULTS_PER_APPROVAL: usize = result_link::MAX_REPORTS;

/// [`Store::record_result`]'s refusal of a report past [`MAX_RESULTS_PER_APPROVAL`].
pub const RESULT_TOO_MANY: &str = "this call already has 8 reports of this reporter recorded (results or outcomes); no more are recorded";

/// Why [`Store::record_result`] recorded nothing.
#[derive(Debug, thiserror::Error)]
pub enum ResultError {
    /// `approval_id` names no approval of the agent ([`RESULT_NO_APPROVAL`]).
    #[error("{RESULT_NO_APPROVAL}")]
    NoApproval,
    /// An outcome for a call whose result is recorded, by its reporter or the hub
    /// ([`RESULT_TWICE`], [`result_link::admit`]).
    #[error("{RESULT_TWICE}")]
    Recorded,
    /// A report for a call its reporter made [`MAX_RESULTS_PER_APPROVAL`] reports of already
    /// ([`RESULT_TOO_MANY`]).
    #[error("{RESULT_TOO_MANY}")]
    TooMany,
    /// `approval_id` did not clear the reported call ([`result_link::check`]): not approved,
    /// its token never redeemed, or redeemed for another call.
    #[error("approval {id}: {why}")]
    NotCleared {
        /// The approval named.
        id: String,
        /// Its status.
        status: ApprovalStatus,
        /// Why it is not linked.
        why: Unlinked,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl db::Settles for ResultError {}

impl From<db::DbError> for ResultError {
    fn from(e: db::DbError) -> Self {
        Self::Store(e.into())
    }
}

/// A forwarded call's result, reported to [`Store::record_result`].
#[derive(Debug, Clone, Copy)]
pub struct ReportedResult<'a> {
    /// The agent whose call it was.
    pub agent: &'a str,
    /// Its session.
    pub session_id: &'a str,
    /// The call's tool.
    pub tool: &'a str,
    /// The call's MCP server alias.
    pub server: Option<&'a str>,
    /// The approval the call ran under, when it was held (or covered by a grant).
    pub approval_id: Option<&'a str>,
    /// The reported call's hash (its tool, server and arguments, canonicalised).
    pub call_hash: &'a str,
    /// The `call.result` audit data (call hash, result SHA-256, size, `outcome`,
    /// `reported_by`: [`Reporter::as_str`] of `reporter`).
    pub data: &'a Value,
    /// Who reports it: the hub of the gateway's own process, or the agent's key alone.
    pub reporter: Reporter,
    /// What the call brings into its session (`Registry::effects_of`).
    pub effects: assent_core::session_risk::Effects,
}

impl Store {
    /// Appends `call.result` for a forwarded call's result `r` (issue 4 "Results"): `r.data`
    /// holds the call hash and the result's SHA-256 and size; linked to `r.approval_id`. In the
    /// same transaction the result's session takes in what the call brings (`r.effects`,
    /// issue 16 §3: untrusted output, private data).
    ///
    /// Refused (nothing appended) when `r.approval_id` names no approval of `r.agent`
    /// ([`ResultError::NoApproval`]); when that approval did not clear the reported call
    /// ([`ResultError::NotCleared`], [`result_link::check`]: it was not approved, its token was
    /// never redeemed, or was redeemed for another call than `r.call_hash`; found by review: a
    /// result was linked to a pending or denied approval, so the audit showed a result of a call
    /// that never ran, and such a fake early result made the hub's true `not_run` refused); or
    /// when `r.data` is an outcome (`not_run`, `no_answer`: it has an `outcome`) and the
    /// approval's call has a result recorded already that `r.reporter` may not contradict
    /// ([`ResultError::Recorded`]: for the agent any result, for the hub its own); or when
    /// `r.reporter` made [`MAX_RESULTS_PER_APPROVAL`] reports of the call already
    /// ([`ResultError::TooMany`]); the rule is [`result_link::admit`]. An agent cannot
    /// contradict what the proxy or hub reported (`not_run` after the call ran; found by
    /// review), and the agent's made-up result or reports do not silence the hub that forwarded
    /// the call (found by review). A result is always appended within the bound, also after an
    /// outcome: found by review of the first fix, which kept only the first report, an agent
    /// reporting `not_run` first had the hub's true result refused. Checked in the write
    /// transaction, through the `audit_redeemed` (migration 0053) and `audit_results` indexes.
    pub fn record_result(&self, r: &ReportedResult<'_>, now: i64) -> Result<(), ResultError> {
        self.write(|tx| {
            if let Some(id) = r.approval_id {
                cleared(**tx, id, r)?;
                let prior = reports(**tx, id)?;
                let outcome = r.data.get("outcome").is_some();
                result_link::admit(&prior, r.reporter, outcome).map_err(|e| match e {
                    Refused::Recorded => ResultError::Recorded,
                    Refused::TooMany => ResultError::TooMany,
                })?;
            }
            audit::append(**tx, now, "call.result", r.approval_id, r.agent, r.data)?;
            let call = (r.tool, r.server);
            crate::session_risk::ran(**tx, r.agent, r.session_id, call, r.effects, now)?;
            Ok(())
        })
    }
}

/// `Ok` when approval `id` is `r.agent`'s and cleared the call `r` reports
/// ([`result_link::check`]): its status, whether a token was minted for it, and the call hash
/// of its `token.redeemed` record (the audit chain's word, not the token row's `used_at`, which
/// a voided token has too).
fn cleared(tx: Conn<'_>, id: &str, r: &ReportedResult<'_>) -> Result<(), ResultError> {
    let status: Option<String> = tx
        .prepare_cached("SELECT status FROM approvals WHERE id = ?1 AND agent = ?2")?
        .query_row(params![id, r.agent], |r| r.get(0))
        .optional()?;
    let status = status.ok_or(ResultError::NoApproval)?;
    // An unreadable status links nothing (fail closed): read as still pending.
    let status = ApprovalStatus::parse(&status).unwrap_or(ApprovalStatus::Pending);
    let minted = tx
        .prepare_cached("SELECT token_id FROM tokens WHERE approval_id = ?1")?
        .query_row(params![id], |r| r.get::<String>(0))
        .optional()?
        .is_some();
    // Read only for an approval that may have cleared a call (a report naming a pending or
    // refused one reads no more), through index `audit_redeemed` (migration 0053; found by
    // review: this look-up read the whole audit log under the write lock).
    let may_clear = minted && matches!(status, ApprovalStatus::Approved | ApprovalStatus::Expired);
    let redeemed: Option<String> = if may_clear {
        tx.prepare_cached(
            "SELECT data FROM audit WHERE approval_id = ?1 AND kind = 'token.redeemed' ORDER BY seq LIMIT 1",
        )?
        .query_row(params![id], |r| r.get(0))
        .optional()?
    } else {
        None
    };
    let redeemed_for = redeemed
        .and_then(|d| serde_json::from_str::<Value>(&d).ok())
        .and_then(|v| v.get("call_hash")?.as_str().map(str::to_string));
    let linked = Linked {
        status,
        minted,
        redeemed_for: redeemed_for.as_deref(),
    };
    result_link::check(&linked, r.call_hash).map_err(|why| ResultError::NotCleared {
        id: id.to_string(),
        status,
        why,
    })
}
/// Approval `id`'s reports (`call.result` records): who made each and whether it was an
/// outcome, at most twice [`MAX_RESULTS_PER_APPROVAL`] of them (each reporter's bound; a
/// database from before the bound may hold more), through index `audit_results` (migration
/// 0045). A record that cannot be read counts as a result of no known reporter (fail closed).
fn reports(tx: Conn<'_>, id: &str) -> db::Result<Vec<Prior>> {
    let data: Vec<String> = tx
        .prepare_cached(
            "SELECT data FROM audit WHERE approval_id = ?1 AND kind = 'call.result' LIMIT ?2",
        )?
        .query_map(params![id, 2 * MAX_RESULTS_PER_APPROVAL as i64], |r| {
            r.get(0)
        })?;
    Ok(data.iter().map(|d| prior(d)).collect())
}

/// A `call.result` record's data `d` as a [`Prior`] report.
fn prior(d: &str) -> Prior {
    let Ok(v) = serde_json::from_str::<Value>(d) else {
        return Prior {
            reporter: None,
            outcome: false,
        };
    };
    let reporter = v.get("reported_by").and_then(Value::as_str);
    Prior {
        reporter: reporter.and_then(Reporter::parse),
        outcome: v.get("outcome").is_some(),
    }
}

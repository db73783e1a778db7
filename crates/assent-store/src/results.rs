//! Results of forwarded calls (issue 4 "Results"): what a proxy, the hub or a REST agent
//! reports of a call it forwarded (`POST /v1/tool-results`), appended to the audit chain as
//! `call.result` and taken into the call's session risk in the same transaction.

use crate::audit;
use crate::db::{self, Conn, OptionalExtension as _};
use crate::error::StoreError;
use crate::params;
use crate::store::Store;
use serde_json::Value;

/// [`Store::record_result`]'s refusal of an outcome (`not_run`, `no_answer`) for a call whose
/// result is recorded.
pub const RESULT_TWICE: &str = "this call already has a result recorded; an outcome saying it did not run or answer is refused";
/// [`Store::record_result`]'s refusal of a result naming no approval of its agent.
pub const RESULT_NO_APPROVAL: &str = "approval_id names no approval of this agent";

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
    /// The approval the call ran under, when it was held.
    pub approval_id: Option<&'a str>,
    /// The `call.result` audit data (call hash, result SHA-256, size).
    pub data: &'a Value,
    /// What the call brings into its session (`Registry::effects_of`).
    pub effects: assent_core::session_risk::Effects,
}

impl Store {
    /// Appends `call.result` for a forwarded call's result `r` (issue 4 "Results"): `r.data`
    /// holds the call hash and the result's SHA-256 and size; linked to `r.approval_id` when
    /// it is an approval of `r.agent`. In the same transaction the result's session takes in
    /// what the call brings (`r.effects`, issue 16 §3: untrusted output, private data).
    ///
    /// Refused (`StoreError::Invalid`, nothing appended) when `r.approval_id` names no approval
    /// of `r.agent`, or when `r.data` is an outcome (`not_run`, `no_answer`: it has an
    /// `outcome`) and the approval's call has a result recorded already: an agent cannot
    /// contradict what the proxy or hub reported (`not_run` after the call ran; found by
    /// review). A result is always appended, also after an outcome: found by review of the
    /// first fix, which kept only the first report, an agent reporting `not_run` first had the
    /// hub's true result refused, and it is the hub that ran the call. Checked in the write
    /// transaction, through the `audit_results` index (migration 0045).
    pub fn record_result(&self, r: &ReportedResult<'_>, now: i64) -> Result<(), StoreError> {
        self.write(|tx| {
            let link: Option<String> = match r.approval_id {
                Some(id) => tx
                    .prepare_cached("SELECT id FROM approvals WHERE id = ?1 AND agent = ?2")?
                    .query_row(params![id, r.agent], |r| r.get(0))
                    .optional()?,
                None => None,
            };
            if r.approval_id.is_some() && link.is_none() {
                return Err(StoreError::Invalid(RESULT_NO_APPROVAL.into()));
            }
            if let Some(id) = link.as_deref()
                && r.data.get("outcome").is_some()
                && ran(**tx, id)?
            {
                return Err(StoreError::Invalid(RESULT_TWICE.into()));
            }
            audit::append(**tx, now, "call.result", link.as_deref(), r.agent, r.data)?;
            let call = (r.tool, r.server);
            crate::session_risk::ran(**tx, r.agent, r.session_id, call, r.effects, now)?;
            Ok(())
        })
    }
}

/// Whether approval `id`'s call has a result recorded (a `call.result` without an `outcome`).
fn ran(tx: Conn<'_>, id: &str) -> db::Result<bool> {
    let reports: Vec<String> = tx
        .prepare_cached("SELECT data FROM audit WHERE approval_id = ?1 AND kind = 'call.result'")?
        .query_map(params![id], |r| r.get(0))?;
    Ok(reports
        .iter()
        .any(|d| serde_json::from_str::<Value>(d).map_or(true, |v| v.get("outcome").is_none())))
}

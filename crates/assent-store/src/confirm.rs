//! What governed a held call, recorded when it is held (migration 0010): the governance
//! policies behind its verdict, the SHA-256 of the policy set then loaded, the MPLP plan
//! and step the call named and (migration 0047) the agent whose plan gated it. The MPLP
//! Confirm of the approval shows them (its `governance` block, `target_id` and
//! `trace.attributes`) even after the policies change; the plan's stop reaches the call by
//! the recorded agent even after the delegations change (`plans::held_under`).

use crate::db::{self, Conn, OptionalExtension};
use crate::error::StoreError;
use crate::params;
use crate::sql::{from_row, json_or_default};
use crate::store::Store;
use serde::Serialize;

/// What governed one held call (see the module docs). `Default`: nothing recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ConfirmContext {
    /// Ids of the governance policies whose rules left a reason in the verdict, sorted.
    pub policies: Vec<String>,
    /// SHA-256 (hex) of the governance policy set loaded when the call was held
    /// (`Registry::policy_set_sha256`).
    pub policy_set_sha256: Option<String>,
    /// The MPLP plan (UUID v4) the call named.
    pub plan_id: Option<String>,
    /// The MPLP plan step (UUID v4) the call named.
    pub step_id: Option<String>,
    /// The agent whose plan (`plan_id`) gated the call when it was held: the plan's
    /// registered agent, the caller itself or an orchestrator declaring it a local delegate
    /// then. `None` when the plan did not exist yet, or for a call held before migration 0047.
    /// Stopping the plan reaches the call by it whatever the delegations are now
    /// ([`assent_core::policy::plan_reaches_held`]).
    pub plan_owner: Option<String>,
}

impl ConfirmContext {
    fn is_empty(&self) -> bool {
        self == &ConfirmContext::default()
    }
}

/// Stores `ctx` for approval `id` (nothing when it is empty).
pub(crate) fn record(tx: Conn<'_>, id: &str, ctx: &ConfirmContext) -> db::Result<()> {
    if ctx.is_empty() {
        return Ok(());
    }
    let policies = serde_json::to_string(&ctx.policies).expect("strings serialise");
    tx.prepare_cached(
        "INSERT INTO confirm_context (approval_id, policies, policy_set_sha256, plan_id, step_id, plan_owner) VALUES (?1,?2,?3,?4,?5,?6)",
    )?
    .execute(params![
        id,
        policies,
        ctx.policy_set_sha256,
        ctx.plan_id,
        ctx.step_id,
        ctx.plan_owner
    ])?;
    Ok(())
}

/// The context recorded for approval `id` (the default when none was).
pub(crate) fn read(conn: Conn<'_>, id: &str) -> db::Result<ConfirmContext> {
    let row = conn
        .prepare_cached(
            "SELECT policies, policy_set_sha256, plan_id, step_id, plan_owner FROM confirm_context WHERE approval_id = ?1",
        )?
        .query_row([id], |r| {
            from_row!(r => ConfirmContext {
                policy_set_sha256, plan_id, step_id, plan_owner,
                policies: json_or_default(r, "policies")?,
            })
        })
        .optional()?;
    Ok(row.unwrap_or_default())
}

impl Store {
    /// What governed approval `id` when it was held ([`ConfirmContext`]; the default for an
    /// approval held before migration 0010 or with nothing to record).
    pub fn confirm_context(&self, id: &str) -> Result<ConfirmContext, StoreError> {
        Ok(read(self.lock().conn(), id)?)
    }
}

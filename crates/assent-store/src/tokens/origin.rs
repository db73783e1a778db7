//! The plans a grant-minted token answers to besides its own call's: those of the calls whose
//! approval made the grants that let it through (`grants.approval_id`). A grant made from a
//! call held under a plan is consent to a step of that plan, and the plan's stop takes it back
//! (`grants_revoke.rs`, `withdraw_plan_consent`); that revocation finds the grants by the plan ids
//! recorded with their calls, which a database writer can clear (the call's seal then fails,
//! and the grant covers no new call, but tokens it minted before were still redeemable: found
//! by review). The redemption checks the source call's plan itself ([`grant_origins`]), as
//! it checks its own call's ([`plan_runs`], which also gives the policy set the call was held
//! under, as its seal holds it).

use crate::db::{self, Conn};
use crate::error::RedeemError;
use crate::seal::SealKey;
use crate::tokens::sealed::{SEALED_COLUMNS, StoredGrantSeal};
use assent_core::policy::Delegations;

/// The approval ids whose calls made the grants that let approval `aid`'s call through, other
/// than `aid` itself, read from the sealed approving decision (`grant:<gid>`) and
/// `approvals.grant_id` ([`crate::consent`]); each grant's row must hold its seal under `key`
/// ([`crate::seal::Sealed::Grant`]): `Err(gid)` for the first that does not (its
/// `approval_id` may have been pointed at another call, so nothing says which plan it answers
/// to), `Err("(unreadable)")` when a column holds another type than the gateway writes. A
/// grant whose row is gone is left to [`crate::consent::withdrawn_grant`], which voids the
/// token. Reads by the `decisions_approval` index and primary keys.
pub(crate) fn grant_origins(
    conn: Conn<'_>,
    key: &SealKey,
    aid: &str,
) -> db::Result<Result<Vec<String>, String>> {
    let sql = format!(
        "SELECT {SEALED_COLUMNS} FROM grants \
         WHERE id IN ( \
           SELECT substr(actor, 7) FROM decisions \
           WHERE approval_id = ?1 AND decision = 'approve' AND substr(actor, 1, 6) = 'grant:' \
           UNION SELECT grant_id FROM approvals WHERE id = ?1 AND grant_id IS NOT NULL) \
         ORDER BY id"
    );
    let rows = crate::sql::rows(conn, &sql, crate::params![aid], StoredGrantSeal::read);
    // A column of another type than the gateway writes: nothing vouches for the grant.
    let rows = match rows {
        Err(e) if e.is_damaged_row() => return Ok(Err("(unreadable)".into())),
        rows => rows?,
    };
    let mut out = Vec::new();
    for g in rows {
        if !g.holds(key) {
            return Ok(Err(g.id));
        }
        if g.approval_id != aid {
            out.push(g.approval_id);
        }
    }
    Ok(Ok(out))
}

/// [`plan_runs`] for each call whose grant let approval `aid`'s call through
/// ([`grant_origins`], whose rows must hold their seal under `grant_key`, else `Unsealed`):
/// a token minted under a grant made from a call held under a plan does not outlive that
/// plan's stop either, even when the source call's plan ids were cleared so that the stop did
/// not find and revoke the grant (found by review). Checked by `tokens.rs`'s `consume` once
/// the token is known unused and its grants standing (a revoked grant voids it first).
pub(super) fn origin_plans_run(
    tx: Conn<'_>,
    aid: &str,
    grant_key: &SealKey,
    with: (&(SealKey, SealKey), &Delegations),
) -> Result<(), RedeemError> {
    let origins = grant_origins(tx, grant_key, aid)
        .map_err(|e| RedeemError::Store(e.into()))?
        .map_err(|_| RedeemError::Unsealed)?;
    origins
        .iter()
        .try_for_each(|o| plan_runs(tx, o, with).map(drop))
}

/// The policy-set hash approval `aid` was held under, as its seal holds it
/// ([`crate::approval_seal::Holding::policy_set`]), unless it was held under a plan that no
/// longer runs calls (`PlanStopped`: found by review, cancelling a plan left its approved
/// calls' tokens redeemable) or its terms do not hold their seal under `keys.0`, from which the
/// plan ids the stop reaches the call by are read (`Unsealed`: found by review, clearing
/// `plan_id` in `confirm_context` released a token from its plan's stop). Checked by
/// `tokens.rs`'s `consume` once the token is the presenter's, before its other refusals.
pub(super) fn plan_runs(
    tx: Conn<'_>,
    aid: &str,
    (keys, delegations): (&(SealKey, SealKey), &Delegations),
) -> Result<Option<String>, RedeemError> {
    use crate::plans::CallPlan;
    let store = |e: db::DbError| RedeemError::Store(e.into());
    let held = crate::approval_seal::holding(tx, &keys.0, aid).map_err(store)?;
    let held_under = held
        .as_ref()
        .and_then(|h| h.policy_set().map(str::to_string));
    let plan = crate::plans::plan_of_held(tx, held, (&keys.1, delegations)).map_err(store)?;
    match plan {
        CallPlan::Unsealed => Err(RedeemError::Unsealed),
        plan => match plan.stopped() {
            Some((plan_id, status)) => Err(RedeemError::PlanStopped { plan_id, status }),
            None => Ok(held_under),
        },
    }
}

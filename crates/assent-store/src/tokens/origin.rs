//! The plans a grant-minted token answers to besides its own call's: those of the calls whose
//! approval made the grants that let it through (`grants.approval_id`). A grant made from a
//! call held under a plan is consent to a step of that plan, and the plan's stop takes it back
//! (`grants_revoke.rs`, `withdraw_plan_consent`); that revocation finds the grants by the plan ids
//! recorded with their calls, which a database writer can clear (the call's seal then fails,
//! and the grant covers no new call, but tokens it minted before were still redeemable: found
//! by review). The redemption checks the source call's plan itself ([`grant_origins`]).

use crate::db::{self, Conn};
use crate::seal::SealKey;
use crate::tokens::sealed::{SEALED_COLUMNS, StoredGrantSeal};

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

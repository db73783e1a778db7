//! The plans a grant-minted token answers to besides its own call's: those of the calls whose
//! approval made the grants that let it through (`grants.approval_id`). A grant made from a
//! call held under a plan is consent to a step of that plan, and the plan's stop takes it back
//! (`grants_revoke.rs`, `withdraw_plan_consent`); that revocation finds the grants by the plan ids
//! recorded with their calls, which a database writer can clear (the call's seal then fails,
//! and the grant covers no new call, but tokens it minted before were still redeemable: found
//! by review). The redemption checks the source call's plan itself ([`grant_origins`]).

use crate::db::{self, Conn};
use crate::seal::SealKey;
use crate::tokens::cover::GrantSeal;

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
    type Cols = (String, String, Option<String>, String, Option<String>);
    type More = (Option<String>, String, Option<i64>, String, i64);
    type Row = (Cols, More, (Option<String>, String, String));
    let rows: db::Result<Vec<Row>> = crate::sql::rows(
        conn,
        "SELECT g.id, g.agent, g.session_id, g.tool, g.server, g.call_hash, g.scope, g.expires_at, \
         g.approval_id, g.created_at, g.key_binding, g.created_by, g.seal FROM grants g \
         WHERE g.id IN ( \
           SELECT substr(actor, 7) FROM decisions \
           WHERE approval_id = ?1 AND decision = 'approve' AND substr(actor, 1, 6) = 'grant:' \
           UNION SELECT grant_id FROM approvals WHERE id = ?1 AND grant_id IS NOT NULL) \
         ORDER BY g.id",
        crate::params![aid],
        |r| {
            let a = (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?);
            let b = (r.get(5)?, r.get(6)?, r.get(7)?, r.get(8)?, r.get(9)?);
            Ok((a, b, (r.get(10)?, r.get(11)?, r.get(12)?)))
        },
    );
    // A column of another type than the gateway writes: nothing vouches for the grant.
    let rows = match rows {
        Err(e) if e.is_damaged_row() => return Ok(Err("(unreadable)".into())),
        rows => rows?,
    };
    let mut out = Vec::new();
    for ((id, agent, session, tool, server), (hash, scope, exp, origin, at), (bound, by, s)) in
        &rows
    {
        let row = GrantSeal {
            cols: (
                id,
                agent,
                session.as_deref(),
                tool,
                server.as_deref(),
                hash.as_deref(),
                scope,
                *exp,
                origin,
                *at,
            ),
            binding: bound.as_deref(),
            created_by: by,
        };
        if !row.holds(key, s) {
            return Ok(Err(id.clone()));
        }
        if origin != aid {
            out.push(origin.clone());
        }
    }
    Ok(Ok(out))
}

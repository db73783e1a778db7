//! Whose consent a settled approval rests on, read from what the settlement seal covers
//! ([`crate::settlement_seal`]: the approving `decisions` rows and their actors), not only from
//! `approvals.grant_id`, which no seal covers.
//!
//! A call a grant let through is decided by `grant:<gid>` (`propose.rs`, `use_grant`): its
//! consent is that of the grant's maker (`grants.created_by`). Found by review: the check of
//! which tokens a removed operator's consent stood behind compared the decision's actor with
//! the operator's name, so the tokens minted under a grant of theirs that had already expired
//! (and so was not revoked by the reload) stayed redeemable; and the redeem-time check of a
//! revoked grant joined on `approvals.grant_id`, so a database writer who nulled it let the
//! tokens of a revoked grant redeem.

use crate::db::{self, Conn};
use crate::params;
use serde_json::{Value, json};

/// The approving decisions of approval `aid` as the consent they rest on: `(principal, key
/// binding)` — a person's decision as its actor with the binding it was made with
/// (`decisions.key_binding`, migration 0052; `None` for a decision made before it, which is
/// weighed by its decider's name and roles alone, as before, and for an agent's user's in the
/// client), a grant's (`grant:<gid>`) as that grant's maker with the binding it was made with
/// (`grants.created_by`, `grants.key_binding`; kept as `grant:<gid>`, no binding, when no such
/// grant row exists, which stands for no one), and likewise the grant `approvals.grant_id`
/// names when it is not the one `aid`'s own decision made. Quorum votes are not among them
/// (`votes.principal` names the voter). Reads by the `decisions_approval` index and primary
/// keys. Unordered, no duplicates.
pub(crate) fn approving_deciders(
    conn: Conn<'_>,
    aid: &str,
) -> db::Result<Vec<(String, Option<String>)>> {
    crate::sql::rows(
        conn,
        "SELECT COALESCE(g.created_by, d.actor), \
         CASE WHEN substr(d.actor, 1, 6) = 'grant:' THEN g.key_binding ELSE d.key_binding END \
         FROM decisions d \
         LEFT JOIN grants g ON substr(d.actor, 1, 6) = 'grant:' AND g.id = substr(d.actor, 7) \
         WHERE d.approval_id = ?1 AND d.decision = 'approve' \
         UNION SELECT g.created_by, g.key_binding FROM approvals a \
         JOIN grants g ON g.id = a.grant_id AND g.approval_id <> a.id WHERE a.id = ?1",
        params![aid],
        db::tuple,
    )
}

/// A grant that let approval `aid`'s call through and no longer stands, as the record of
/// voiding its token says it: `{"grant_id", "why", "revoked_by"}` (`revoked_by` the principal
/// who revoked it, `null` for a grant row that is gone: nothing vouches for the consent then,
/// so it fails closed). The covering grants are read from the approving decision's sealed
/// actor `grant:<gid>` and from `approvals.grant_id`: either suffices, so a writer clearing
/// the unsealed column does not hide the grant. The grant `aid`'s own decision made is not
/// one (that call a person approved): a grant named only by `approvals.grant_id` whose
/// `grants.approval_id` is `aid`. One the sealed decision names let `aid`'s call through
/// whatever `grants.approval_id` says (found by review: a writer who pointed a revoked grant's
/// `approval_id` at a call it had let through made its token the grant's "own" approval's, and
/// it redeemed). `None` when every covering grant stands (expiry aside: a token minted before
/// its grant expired redeems until its own expiry). Reads by the `decisions_approval` index
/// and primary keys.
pub(crate) fn withdrawn_grant(conn: Conn<'_>, aid: &str) -> db::Result<Option<Value>> {
    type Row = (
        String,
        String,
        Option<String>,
        Option<String>,
        (Option<i64>, Option<String>),
    );
    let covering: Vec<Row> = crate::sql::rows(
        conn,
        "SELECT c.gid, c.found, g.id, g.approval_id, g.revoked_at, g.revoked_by FROM ( \
           SELECT substr(actor, 7) AS gid, 'decision' AS found FROM decisions \
           WHERE approval_id = ?1 AND decision = 'approve' AND substr(actor, 1, 6) = 'grant:' \
           UNION SELECT grant_id, 'column' FROM approvals WHERE id = ?1 AND grant_id IS NOT NULL \
         ) c LEFT JOIN grants g ON g.id = c.gid ORDER BY c.gid, c.found",
        params![aid],
        |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                (r.get(4)?, r.get(5)?),
            ))
        },
    )?;
    Ok(covering
        .into_iter()
        .find_map(|(gid, found, row, origin, (revoked_at, by))| match row {
            None => Some(json!({"grant_id": gid, "why": "the grant it was let through by is gone", "revoked_by": null})),
            Some(_) if found == "column" && origin.as_deref() == Some(aid) => None,
            Some(_) => revoked_at.map(|_| json!({"grant_id": gid, "why": "the grant was revoked", "revoked_by": by})),
        }))
}

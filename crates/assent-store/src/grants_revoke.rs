//! Revoking the grants whose consent is gone (issue 14 §6, §8): those made by an operator a
//! reload or restart removed, changed or stripped of the role they decided with
//! ([`crate::Store::revoke_grants_unless`], the rule being
//! `assent_core::grant_standing::grant_stands`), and those made from a call held under a plan
//! that stopped ([`withdraw_plan_consent`], which voids its calls' tokens too, the rule being
//! `assent_core::transitions::plan_runs_calls`). Each revocation is a `grant.revoked` record
//! (actor, `grant_id`, `created_by`, `why`) in the transaction that revokes it, as
//! `Store::revoke_grant` writes for an operator's `DELETE /v1/grants/{id}`, so `audit verify`
//! finds it; the tokens the grant minted and that are not yet redeemed are voided in the same
//! transaction ([`crate::voided::void_grant_tokens`]).

use crate::audit;
use crate::db::{self, Conn};
use crate::error::StoreError;
use crate::params;
use assent_core::policy::plan_reaches_held;
use serde_json::json;

/// An active grant (not revoked, not expired) as a principal change weighs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantOrigin {
    /// The grant's id (UUID v4).
    pub grant_id: String,
    /// The approval whose decision made it.
    pub approval_id: String,
    /// The principal whose decision made it (`grants.created_by`).
    pub created_by: String,
    /// What stood behind that decision, as the server said when it was made
    /// (`grants.key_binding`, migration 0048; see `DecisionInput::decider_key`): the binding
    /// of the operator key it was made with, or the channel's. `None` for a grant made before
    /// the migration.
    pub key_binding: Option<String>,
    /// The roles that could decide that approval: its approver roles and those its escalation
    /// steps added (empty: any operator). `None` when the approval is gone or unreadable (the
    /// grant covers no call then anyway).
    pub approvers: Option<Vec<String>>,
}

/// Whether a grant stands, as [`crate::Store::revoke_grants_unless`] asks.
type Stands<'a> = dyn Fn(&GrantOrigin) -> bool + 'a;

impl crate::store::Store {
    /// Revokes every active grant (not revoked, not expired at `now`) for which
    /// `stands(origin)` is false: `revoked_at`/`revoked_by` set and a `grant.revoked` record
    /// (actor `by`; `grant_id`, `created_by`, `why`), in one transaction. The server calls it
    /// when a reload removes or changes an operator (after the new configuration is in force,
    /// for a grant made with the old key meanwhile) and at start-up for the grants whose
    /// maker the configuration no longer has as an operator who may decide their approval,
    /// or who made them with a key (or channel) that is not theirs any more
    /// ([`GrantOrigin::key_binding`]).
    /// Found by review: a stolen key's `workspace`/`whole_tool` grants outlived its removal.
    /// Returns how many were revoked. Errors: the store's.
    pub fn revoke_grants_unless(
        &self,
        stands: impl Fn(&GrantOrigin) -> bool,
        by: &str,
        why: &str,
        now: i64,
    ) -> Result<usize, StoreError> {
        // Read first: most start-ups and reloads revoke nothing, and need no write lock.
        if active_grants(self.lock().conn(), now)?.iter().all(&stands) {
            return Ok(0);
        }
        self.write(|tx| revoke_grants_in(tx, &stands, by, why, now))
    }
}

impl crate::store::Store {
    /// Revokes every active grant (not revoked, not expired at `now`) made by one of `names`,
    /// each with its `grant.revoked` record (actor `by`, reason `why`), and voids the
    /// outstanding tokens of the approvals whose consent rested on one of them
    /// ([`crate::voided::void_approved_by`]), in one transaction; how many grants. What a
    /// reload that removes or changes operators does after the new configuration is in force
    /// ([`revoke_grants_of_in`]), for a decision made with the old key meanwhile. Errors: the
    /// store's.
    pub fn revoke_grants_of(
        &self,
        names: &[String],
        by: &str,
        why: &str,
        now: i64,
    ) -> Result<usize, StoreError> {
        self.write(|tx| {
            let n = revoke_grants_of_in(**tx, names, (by, why), now)?;
            crate::voided::void_approved_by(**tx, names, (by, why), now)?;
            Ok::<_, StoreError>(n)
        })
    }
}

/// Revokes, on `tx`, the active grants made by one of `names` (actor and reason `(by, why)`),
/// reading only the grants' own rows: a reload's transaction asks for a few names' grants and
/// needs no approval read (found by review: every active grant's approval was read whole inside
/// the reload's write transaction, a cost that grew with every grant ever made). How many.
pub(crate) fn revoke_grants_of_in(
    tx: Conn<'_>,
    names: &[String],
    (by, why): (&str, &str),
    now: i64,
) -> db::Result<usize> {
    let mut n = 0;
    for name in names {
        let sql = format!(
            "SELECT id, approval_id FROM grants WHERE created_by = ?1 AND revoked_at IS NULL \
             AND {} ORDER BY created_at, id",
            crate::sql::grant_unexpired_at("?2")
        );
        let rows: Vec<(String, String)> =
            crate::sql::rows(tx, &sql, params![name, now], db::tuple)?;
        for (gid, aid) in rows {
            n += revoke(tx, &gid, &aid, name, (by, why), now)?;
        }
    }
    Ok(n)
}

/// [`crate::Store::revoke_grants_unless`] inside the write transaction `tx`.
fn revoke_grants_in(
    tx: &db::Tx<'_>,
    stands: &Stands<'_>,
    by: &str,
    why: &str,
    now: i64,
) -> Result<usize, StoreError> {
    let mut n = 0;
    for g in active_grants(**tx, now)? {
        if stands(&g) {
            continue;
        }
        n += revoke(
            **tx,
            &g.grant_id,
            &g.approval_id,
            &g.created_by,
            (by, why),
            now,
        )?;
    }
    Ok(n)
}

/// Takes back what was consented to under plan `plan_id`, whose agent is `owner`, now that the
/// plan runs no calls (it is `status`), in the plan's transition with its actor `by`:
/// - it revokes the active grants made from a call held under the plan: the grant was consent
///   to a step of the plan, and the plan's stop takes it back, as it stops the tokens approved
///   under it (found by review: a `workspace` grant made under a plan kept letting the tool's
///   calls through after the plan was cancelled);
/// - when the plan ran calls until now (`stopped`: approved, then cancelled), it voids
///   ([`crate::voided::void_token`]) the tokens of the calls held under it that are neither
///   redeemed nor expired at `now`. The redemption refuses them anyway while the plan's row
///   reads stopped (`tokens.rs`, `plan_runs`); voided, they stay refused when the row is put
///   back whole as it was before the stop, seal and all, which no seal catches (found by
///   review: such a row revived every unredeemed token of the plan until `audit verify` named
///   it). A plan created, revised or submitted voids nothing: a token of a call that named
///   its id before it existed is refused until the plan is approved, as before.
///
/// Reached are the calls the plan gated when they were held (its agent's own, or a delegate's
/// with the plan's agent recorded) and those of its agent's `delegates` now (found by review: a
/// delegate's call held under the plan's id before the plan existed recorded no agent, and its
/// grant outlived the stop that cancelled its held calls and tokens): never another agent's
/// call that merely named the id ([`assent_core::policy::plan_reaches_held`]). A call whose
/// agent or recorded plan agent holds another type than the gateway writes is reached (found by
/// review: on SQLite such a column, written by a database writer, failed the read, and with it
/// the plan's cancellation); a grant or token whose own id does not read as text is passed
/// over (no redemption or coverage can name it). Reads by `confirm_context_plan` (migration
/// 0059). Returns how many grants were revoked and how many tokens voided.
pub(crate) fn withdraw_plan_consent(
    tx: Conn<'_>,
    plan_id: &str,
    (owner, delegates): (&str, &[String]),
    (status, stopped): (&str, bool),
    by: &str,
    now: i64,
) -> db::Result<(usize, usize)> {
    let reached =
        |caller: &Option<String>, gated_by: &Option<Option<String>>| match (caller, gated_by) {
            (Some(caller), Some(gated_by)) => {
                plan_reaches_held(caller, gated_by.as_deref(), owner, delegates)
            }
            _ => true,
        };
    let why = format!("the plan {plan_id} its call was approved under is {status}");
    type Read = (Option<String>, Option<Option<String>>);
    type Grant = (Option<(String, String)>, Option<String>, Read);
    let grants: Vec<Grant> = crate::sql::rows(
        tx,
        "SELECT g.id, g.approval_id, g.created_by, a.agent, c.plan_owner FROM grants g \
         JOIN approvals a ON a.id = g.approval_id JOIN confirm_context c ON c.approval_id = g.approval_id \
         WHERE c.plan_id = ?1 AND g.revoked_at IS NULL ORDER BY g.created_at, g.id",
        params![plan_id],
        |r| {
            let ids = r.get(0).ok().zip(r.get(1).ok());
            Ok((ids, r.get(2).ok(), (r.get(3).ok(), r.get(4).ok())))
        },
    )?;
    let mut revoked = 0;
    for (ids, made_by, (caller, gated_by)) in grants {
        if let Some((gid, aid)) = ids.filter(|_| reached(&caller, &gated_by)) {
            let made_by = made_by.as_deref().unwrap_or("(unreadable)");
            revoked += revoke(tx, &gid, &aid, made_by, (by, &why), now)?;
        }
    }
    if !stopped {
        return Ok((revoked, 0));
    }
    type Token = (Option<(String, String)>, Read);
    let tokens: Vec<Token> = crate::sql::rows(
        tx,
        "SELECT t.token_id, t.approval_id, a.agent, c.plan_owner FROM confirm_context c \
         JOIN approvals a ON a.id = c.approval_id JOIN tokens t ON t.approval_id = c.approval_id \
         WHERE c.plan_id = ?1 AND t.used_at IS NULL AND t.expires_at > ?2 \
         ORDER BY t.issued_at, t.token_id",
        params![plan_id, now],
        |r| {
            let ids = r.get(0).ok().zip(r.get(1).ok());
            Ok((ids, (r.get(2).ok(), r.get(3).ok())))
        },
    )?;
    let mut voided = 0;
    for (ids, (caller, gated_by)) in tokens {
        if let Some((tid, aid)) = ids.filter(|_| reached(&caller, &gated_by)) {
            let data = json!({"plan_id": plan_id, "why": why});
            voided += usize::from(crate::voided::void_token(tx, (&tid, &aid), by, data, now)?);
        }
    }
    Ok((revoked, voided))
}

/// Takes back what was consented to in session `session_id` of `agent` when the session is
/// cancelled (AAEP §4.1.4, §6.8), in the cancellation's transaction with its actor `by`: it
/// voids ([`crate::voided::void_token`]) the tokens of the session's calls that are neither
/// redeemed nor expired at `now` (those its grants minted among them: a `session` grant covers
/// calls of its session only), then revokes the active `session` grants made in it (each
/// `grant.revoked`). A cancelled session runs nothing more, as a
/// stopped plan does (found by review: after an operator cancelled a session, the agent's next
/// call in it was let through by the session grant without anyone seeing it, and a call approved
/// before the cancellation still redeemed its token). Grants of a wider scope made in the
/// session (`workspace`, timed) are consent beyond it and stay. Reads by `grants`' agent index
/// and `approvals_session`. Returns the ids of the grants revoked and how many tokens voided.
pub(crate) fn withdraw_session_consent(
    tx: Conn<'_>,
    (agent, session_id): (&str, &str),
    by: &str,
    now: i64,
) -> db::Result<(Vec<String>, usize)> {
    let why = format!("the session {session_id} it was made in was cancelled");
    let tokens: Vec<(String, String)> = crate::sql::rows(
        tx,
        "SELECT t.token_id, t.approval_id FROM approvals a JOIN tokens t ON t.approval_id = a.id \
         WHERE a.session_id = ?2 AND a.agent = ?1 AND t.used_at IS NULL AND t.expires_at > ?3 \
         ORDER BY t.issued_at, t.token_id",
        params![agent, session_id, now],
        db::tuple,
    )?;
    let mut voided = 0;
    for (tid, aid) in &tokens {
        let data = json!({"session_id": session_id, "why": why});
        voided += usize::from(crate::voided::void_token(tx, (tid, aid), by, data, now)?);
    }
    let sql = format!(
        "SELECT id, approval_id, created_by FROM grants WHERE agent = ?1 AND session_id = ?2 \
         AND revoked_at IS NULL AND {} ORDER BY created_at, id",
        crate::sql::grant_unexpired_at("?3")
    );
    let grants: Vec<(String, String, String)> =
        crate::sql::rows(tx, &sql, params![agent, session_id, now], db::tuple)?;
    let mut revoked = Vec::new();
    for (gid, aid, made_by) in grants {
        if revoke(tx, &gid, &aid, &made_by, (by, &why), now)? > 0 {
            revoked.push(gid);
        }
    }
    Ok((revoked, voided))
}

/// Revokes grant `gid` of approval `aid`, made by `made_by`, if not yet revoked, with its
/// `grant.revoked` record (actor and reason `(by, why)`), and voids the tokens minted under it
/// and not yet redeemed ([`crate::voided::void_grant_tokens`]). Returns 1 when it did, else 0.
fn revoke(
    tx: Conn<'_>,
    gid: &str,
    aid: &str,
    made_by: &str,
    (by, why): (&str, &str),
    now: i64,
) -> db::Result<usize> {
    let n = tx
        .prepare_cached(
            "UPDATE grants SET revoked_at = ?2, revoked_by = ?3 WHERE id = ?1 AND revoked_at IS NULL",
        )?
        .execute(params![gid, now, by])?;
    if n > 0 {
        let data = json!({"grant_id": gid, "created_by": made_by, "why": why});
        audit::append(tx, now, "grant.revoked", Some(aid), by, &data)?;
        crate::voided::void_grant_tokens(tx, (gid, aid), (by, why), now)?;
    }
    Ok(n)
}

/// Every active grant (not revoked, not expired at `now`), oldest first, with what could
/// decide its approval.
fn active_grants(conn: Conn<'_>, now: i64) -> db::Result<Vec<GrantOrigin>> {
    let sql = format!(
        "SELECT id, approval_id, created_by, key_binding FROM grants \
         WHERE revoked_at IS NULL AND {} ORDER BY created_at, id",
        crate::sql::grant_unexpired_at("?1")
    );
    let rows: Vec<(String, String, String, Option<String>)> =
        crate::sql::rows(conn, &sql, params![now], db::tuple)?;
    let mut out = Vec::with_capacity(rows.len());
    for (grant_id, approval_id, created_by, key_binding) in rows {
        let approvers = crate::record::read_approval(conn, &approval_id)?
            .filter(|rec| rec.damaged.is_empty())
            .map(|rec| {
                let mut roles = rec.terms.approvers.clone();
                roles.extend(rec.escalated_roles());
                roles
            });
        out.push(GrantOrigin {
            grant_id,
            approval_id,
            created_by,
            key_binding,
            approvers,
        });
    }
    Ok(out)
}

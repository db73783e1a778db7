//! Which stored grant stands in for a proposed call (seed 002 "Approve with scope"): one that
//! covers it ([`grant::covers`]), whose seal holds, whose approval was held under terms at
//! least as strict as the rules ask now ([`grant::origin_covers`]) and whose creator could
//! approve the call under separation of duties ([`grant::creator_conflict`]). Grants are
//! created, listed and revoked in `tokens.rs`.

use crate::db::{self, Conn};
use crate::seal::SealKey;
use crate::sql;
use assent_core::ToolCall;
use assent_core::grant;
use serde_json::{Value, json};

/// A `grants` row's sealed columns ([`crate::seal`]): `[id, agent, session_id, tool, server,
/// call_hash, scope, expires_at, approval_id, created_at]` — what decides which calls it
/// covers and where it came from (`revoked_at` is not: a revocation undone is found by `audit
/// verify`).
type GrantColumns<'a> = (
    &'a str,
    &'a str,
    Option<&'a str>,
    &'a str,
    Option<&'a str>,
    Option<&'a str>,
    &'a str,
    Option<i64>,
    &'a str,
    i64,
);

/// The sealed value of a `grants` row's columns `g` ([`GrantColumns`]), followed by its
/// `key_binding` when it has one (migration 0048; as a vote's seal, migration 0038): a grant
/// made before keeps its seal, and a binding cleared, copied in or changed behind the
/// gateway's back breaks it (the grant then covers nothing).
pub(crate) fn grant_columns(g: GrantColumns<'_>, binding: Option<&str>) -> Value {
    let mut v = json!([g.0, g.1, g.2, g.3, g.4, g.5, g.6, g.7, g.8, g.9]);
    if let Some(b) = binding {
        v.as_array_mut().expect("an array").push(json!(b));
    }
    v
}

/// The grants that cover `agent`'s call ([`grant::covers`]: same tool and server, same call
/// hash unless widened to the tool, same session for `session` grants, not expired at `now`
/// or revoked), oldest first. Returns `(grant id, scope, approval id, created_by)` each;
/// [`covering_grant`] keeps the first whose approval still stands for the verdict
/// ([`origin_weaker`]) and whose creator could approve the call.
fn find_grants(
    tx: Conn<'_>,
    seal: &SealKey,
    agent: &str,
    session_id: &str,
    call: &ToolCall,
    call_hash: &str,
    now: i64,
) -> db::Result<Vec<(String, String, String, String)>> {
    type Row = (
        (String, String, Option<String>, Option<String>, Option<i64>),
        bool,
        (String, i64, String, String, Option<String>),
    );
    let rows: Vec<Row> = sql::rows(
        tx,
        "SELECT id, scope, session_id, call_hash, expires_at, revoked_at IS NOT NULL, approval_id, created_at, seal, created_by, key_binding FROM grants
         WHERE agent = ?1 AND tool = ?2 AND server IS NOT DISTINCT FROM ?3 ORDER BY created_at, rowid",
        crate::params![agent, call.tool, call.server],
        |r| {
            let row = (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?);
            let origin = (r.get(6)?, r.get(7)?, r.get(8)?, r.get(9)?, r.get(10)?);
            Ok((row, r.get(5)?, origin))
        },
    )?;
    // A row whose seal is not its own covers nothing ([`crate::seal`]).
    let rows = rows.into_iter().filter(
        |((id, scope, session, hash, exp), _, (aid, at, s, _, bound))| {
            let cols = (
                id.as_str(),
                agent,
                session.as_deref(),
                call.tool.as_str(),
                call.server.as_deref(),
                hash.as_deref(),
                scope.as_str(),
                *exp,
                aid.as_str(),
                *at,
            );
            seal.holds(&grant_columns(cols, bound.as_deref()), s)
        },
    );
    let c = grant::CallView {
        agent,
        session_id,
        tool: &call.tool,
        server: call.server.as_deref(),
        call_hash,
        now,
    };
    Ok(rows
        .filter(
            |((_, _, session, hash, expires_at), revoked, (_, created_at, ..))| {
                let g = grant::GrantView {
                    agent,
                    session_id: session.as_deref(),
                    tool: &call.tool,
                    server: call.server.as_deref(),
                    call_hash: hash.as_deref(),
                    expires_at: *expires_at,
                    created_at: *created_at,
                    revoked: *revoked,
                };
                grant::covers(&g, &c)
            },
        )
        .map(|((id, scope, ..), _, (aid, _, _, by, _))| (id, scope, aid, by))
        .collect())
}

/// Who a grant's creator is to separation of duties (`Proposal::duties_of`): given their name,
/// `(owns, aka)` as `DecisionInput::decider_owns` and `decider_aka` (the agents they own, the
/// other names they go by).
pub type DutiesOf<'a> = dyn Fn(&str) -> (Vec<String>, Vec<String>) + 'a;

/// A proposed call, as [`covering_grant`] looks for a grant for it.
pub(crate) struct GrantCall<'a> {
    /// The proposing agent.
    pub agent: &'a str,
    /// Its session.
    pub session_id: &'a str,
    /// The principal it acts for (`on_behalf_of`), as the agent said.
    pub on_behalf_of: Option<&'a str>,
    /// The call.
    pub call: &'a ToolCall,
    /// Its `call_hash`.
    pub call_hash: &'a str,
    /// Unix milliseconds.
    pub now: i64,
}

/// The first grant (`(grant id, scope)`) that may stand in for call `c` whose verdict asks
/// `terms` and whose first wait is `wait_ms`: it covers the call ([`find_grants`], under the
/// grant seal `keys[0]`), its approval still stands for the verdict ([`origin_weaker`], under
/// the approval seal `keys[1]`), and its creator could approve the call themselves
/// ([`grant::creator_conflict`], with what `duties_of(created_by)` says of them: the agents
/// they own and their other names; `None` knows only the name). `None`: the call is held.
pub(crate) fn covering_grant(
    tx: Conn<'_>,
    keys: &[SealKey; 2],
    c: &GrantCall<'_>,
    terms: &assent_core::gatekeeper::ApprovalTerms,
    wait_ms: i64,
    duties_of: Option<&DutiesOf<'_>>,
) -> db::Result<Option<(String, String)>> {
    let (agent, session, hash) = (c.agent, c.session_id, c.call_hash);
    let grants = find_grants(tx, &keys[0], agent, session, c.call, hash, c.now)?;
    for (gid, scope, aid, by) in grants {
        let approvers = match origin_weaker(tx, &keys[1], &aid, terms, wait_ms)? {
            Ok(approvers) => approvers,
            Err(axis) => {
                tracing::info!(grant_id = %gid, approval_id = %aid, axis,
                    "a grant covers the call but its approval was held under weaker terms than the rules ask now: the call is held");
                continue;
            }
        };
        // Its approval was held under a plan that runs no calls now (cancelled, or its Confirm
        // rejected): the grant stands for nothing (found by review: a grant made after the
        // plan's stop covered the same call proposed again under no plan, so the agent got
        // out of its plan's stop). The plan's agent recorded with the call decides which
        // plan reaches it; a delegation configured now is not needed for that.
        if let Some((plan_id, status)) =
            crate::plans::plan_of_call(tx, &aid, &assent_core::policy::NO_DELEGATIONS)?
            && !assent_core::transitions::plan_runs_calls(&status)
        {
            tracing::info!(grant_id = %gid, approval_id = %aid, plan_id, status,
                "a grant covers the call but its approval was held under a plan that stopped: the call is held");
            continue;
        }
        // The grant's `created_by` and whoever approved its approval (the same person, unless
        // a column was edited: `created_by` is not under the grant's seal, the decision is
        // under the settlement's) must each be free to approve the call.
        let conflict = std::iter::once(by).chain(approvers).find_map(|name| {
            let (owns, aka) = duties_of.map_or_else(Default::default, |f| f(&name));
            let creator = assent_core::duties::Decider {
                name: &name,
                owns: &owns,
                aka: &aka,
            };
            grant::creator_conflict(terms, agent, c.on_behalf_of, &creator)
        });
        match conflict {
            None => return Ok(Some((gid, scope))),
            Some(why) => tracing::info!(grant_id = %gid, approval_id = %aid, why,
                "a grant covers the call but its creator may not approve it (separation of duties): the call is held"),
        }
    }
    Ok(None)
}

/// Why the approval `aid` a grant came from does not stand in for a call whose verdict asks
/// `terms` and whose first wait is `wait_ms` (when an `on_timeout` step happens; `Ok`: it
/// does, with the actors of its approving decisions): its row is gone or damaged, its seal does not hold under `key`
/// (`"approval seal"`: an approval settled before its terms were sealed, migration 0029,
/// or edited since), or it was held under weaker terms ([`grant::origin_covers`]: the axis,
/// e.g. `"approvers"`). Found by review: a grant kept covering calls after a reload changed
/// their approvers, raised their tier or turned on separation of duties.
fn origin_weaker(
    tx: Conn<'_>,
    key: &SealKey,
    aid: &str,
    terms: &assent_core::gatekeeper::ApprovalTerms,
    wait_ms: i64,
) -> db::Result<Result<Vec<String>, &'static str>> {
    let Some(origin) = crate::record::read_approval(tx, aid)? else {
        return Ok(Err("approval gone"));
    };
    if !origin.damaged.is_empty() || !crate::approval_seal::holds(tx, key, aid)? {
        return Ok(Err("approval seal"));
    }
    let schedule = (origin.escalation_schedule.as_ref()).map(|s| (s, origin.requested_at));
    let taken = origin.escalated_roles();
    let covers = grant::origin_covers(&origin.terms, &taken, schedule, terms, wait_ms);
    let approve = assent_core::approval::Settlement::Approve;
    let approvers = origin
        .decisions
        .into_iter()
        .filter(|d| d.decision == approve);
    Ok(covers
        .map(|()| approvers.map(|d| d.actor).collect())
        .map_err(|w| w.as_str()))
}

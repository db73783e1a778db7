//! Which stored grant stands in for a proposed call (seed 002 "Approve with scope"): one that
//! covers it ([`grant::covers`]), whose seal holds, whose approval was held under terms at
//! least as strict as the rules ask now ([`grant::origin_covers`]) and whose creator could
//! approve the call under separation of duties ([`grant::creator_conflict`]). Grants are
//! created, listed and revoked in `tokens.rs`.

use crate::db::{self, Conn};
use crate::seal::SealKey;
use crate::sql;
use crate::tokens::sealed::{SEALED_COLUMNS, StoredGrantSeal};
use assent_core::ToolCall;
use assent_core::grant;

/// The grants that cover `agent`'s call ([`grant::covers`]: same tool and server, same call
/// hash unless widened to the tool, same session for `session` grants, not expired at `now`
/// or revoked, holding its seal; a damaged row is left out), oldest first. Returns `(grant
/// id, scope, approval id, created_by)` each;
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
    let sql = format!(
        "SELECT {SEALED_COLUMNS}, revoked_at IS NOT NULL FROM grants \
         WHERE agent = ?1 AND tool = ?2 AND server IS NOT DISTINCT FROM ?3 \
         ORDER BY created_at, rowid"
    );
    // A row with a sealed column of another type than the gateway writes covers nothing and
    // is left out, as in every listing (`audit verify` names it). Found by review: it failed
    // every proposal of the agent's tool as a store error.
    let rows: Vec<Option<(StoredGrantSeal, bool)>> = sql::rows(
        tx,
        &sql,
        crate::params![agent, call.tool, call.server],
        |r| match StoredGrantSeal::read(r) {
            Ok(g) => Ok(Some((g, r.get(13)?))),
            Err(e) if e.is_damaged_row() => Ok(None),
            Err(e) => Err(e),
        },
    )?;
    let c = grant::CallView {
        agent,
        session_id,
        tool: &call.tool,
        server: call.server.as_deref(),
        call_hash,
        now,
    };
    // A row whose seal is not its own covers nothing ([`crate::seal`]).
    Ok(rows
        .into_iter()
        .flatten()
        .filter(|(g, revoked)| {
            let view = grant::GrantView {
                agent: &g.agent,
                session_id: g.session_id.as_deref(),
                tool: &g.tool,
                server: g.server.as_deref(),
                call_hash: g.call_hash.as_deref(),
                expires_at: g.expires_at,
                created_at: g.created_at,
                revoked: *revoked,
            };
            grant::covers(&view, &c) && g.holds(seal)
        })
        .map(|(g, _)| (g.id, g.scope, g.approval_id, g.created_by))
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
    /// The delegations in force ([`crate::Store::set_rules`]): whose plans stop it.
    pub delegations: &'a assent_core::policy::Delegations,
    /// The key of plan seals ([`crate::plans::read_plan`]).
    pub plans: &'a crate::seal::SealKey,
}

/// The first grant (`(grant id, scope)`) that may stand in for call `c` whose verdict asks
/// `terms` and whose first wait is `wait_ms`: it covers the call ([`find_grants`], under the
/// grant seal `keys[0]`), its approval still stands for the verdict ([`origin_weaker`], under
/// the approval seal `keys[1]` and the settlement seal `keys[2]`), and its creator could
/// approve the call themselves ([`grant::creator_conflict`], with what `duties_of(created_by)`
/// says of them: the agents they own and their other names; `None` knows only the name).
/// `None`: the call is held.
pub(crate) fn covering_grant(
    tx: Conn<'_>,
    keys: &[SealKey; 3],
    c: &GrantCall<'_>,
    terms: &assent_core::gatekeeper::ApprovalTerms,
    wait_ms: i64,
    duties_of: Option<&DutiesOf<'_>>,
) -> db::Result<Option<(String, String)>> {
    let (agent, session, hash) = (c.agent, c.session_id, c.call_hash);
    let grants = find_grants(tx, &keys[0], agent, session, c.call, hash, c.now)?;
    for (gid, scope, aid, by) in grants {
        let approvers = match origin_weaker(tx, [&keys[1], &keys[2]], &aid, terms, wait_ms)? {
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
        // out of its plan's stop). The plan's agent recorded with the call, or a delegation
        // in force, decides which plan reaches it.
        let reached = (&keys[1], c.plans, c.delegations);
        if let Some((plan_id, status)) = crate::plans::plan_of_call(tx, &aid, reached)?.stopped() {
            tracing::info!(grant_id = %gid, approval_id = %aid, plan_id, status,
                "a grant covers the call but its approval was held under a plan that stopped: the call is held");
            continue;
        }
        // The grant's `created_by` and whoever approved its approval (the same person, unless
        // a column was edited: `created_by` is under the seal of grants made since it is
        // sealed, not of those made before; the decision is under the settlement's) must each
        // be free to approve the call.
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
/// does, with the actors of its approving decisions): its row is gone or damaged, its seal
/// does not hold under `terms_key` (`"approval seal"`: an approval settled before its terms
/// were sealed, migration 0029, or edited since), its settlement's does not hold under
/// `settled_key` (`"settlement seal"`: found by review, the approving decisions' actors were
/// read unchecked, so renaming them and the `created_by` of a grant sealed before its maker
/// was let a creator cover their own call under separation of duties), or it was held under
/// weaker terms ([`grant::origin_covers`]: the axis, e.g. `"approvers"`). Found by review: a
/// grant kept covering calls after a reload changed their approvers, raised their tier or
/// turned on separation of duties.
fn origin_weaker(
    tx: Conn<'_>,
    [terms_key, settled_key]: [&SealKey; 2],
    aid: &str,
    terms: &assent_core::gatekeeper::ApprovalTerms,
    wait_ms: i64,
) -> db::Result<Result<Vec<String>, &'static str>> {
    let Some(origin) = crate::record::read_approval(tx, aid)? else {
        return Ok(Err("approval gone"));
    };
    if !origin.damaged.is_empty() || !crate::approval_seal::holds(tx, terms_key, aid)? {
        return Ok(Err("approval seal"));
    }
    if !crate::settlement_seal::holds(tx, settled_key, aid)? {
        return Ok(Err("settlement seal"));
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

#[cfg(test)]
mod tests {
    use crate::db::Database;
    use crate::seal::Sealed;
    use crate::store::Store;
    use crate::tokens::sealed::{SEALED_COLUMNS, StoredGrantSeal};
    use crate::{DecisionInput, Proposal, Proposed};
    use assent_core::approval::GrantScope;
    use assent_core::{CanonicalCall, ToolCall};
    use serde_json::json;

    use crate::test_kit::Bare;

    /// Agent `bot`'s `pay` call in session `s1` at `now`: whether a grant covers it (`None`)
    /// or the id of the approval it is held for.
    fn pay(s: &Store, now: i64) -> Option<String> {
        let reg = crate::test_kit::bot_pays();
        let call = ToolCall::new("pay", None, json!({"amount": 5})).unwrap();
        let v = assent_core::evaluate(&reg, "bot", &call);
        let call = CanonicalCall::new(call).unwrap();
        let ttl = |_: &assent_core::Verdict| 60_000;
        let p = Proposal::for_call("bot", "s1", &call, now, &ttl, u64::MAX);
        match s.propose(&p, |_| v.clone()).unwrap().1 {
            Proposed::Granted(_) => None,
            Proposed::Held { approval, .. } => Some(approval.id),
            other => panic!("{other:?}"),
        }
    }

    /// Whether a grant covers [`pay`] at `now`.
    fn covered(s: &Store, now: i64) -> bool {
        pay(s, now).is_none()
    }

    /// Runs `sql` on `s` behind the gateway's back.
    fn edit(s: &Store, sql: &str) {
        s.write(|tx| tx.execute(sql, []).map(drop)).unwrap();
    }

    /// Reseals the one grant of `s` the way grants were sealed before their maker was (the
    /// columns and key binding, no prefix): a grant made before this version.
    fn seal_the_old_way(s: &Store) {
        let key = s.seal_key(Sealed::Grant);
        s.write(|tx| {
            let sql = format!("SELECT {SEALED_COLUMNS} FROM grants");
            let g = tx.query_row(&sql, [], StoredGrantSeal::read)?;
            let row = g.sealed();
            let old = key.seal(&row.columns(false));
            assert!(row.holds(&key, &old), "the form before still holds");
            assert!(
                !row.holds(&key, &format!("v2:{old}")),
                "not as the new form"
            );
            tx.execute("UPDATE grants SET seal = ?1", crate::params![old])?;
            Ok::<_, crate::db::DbError>(())
        })
        .unwrap();
    }

    /// A grant made before its maker was sealed (its seal over the columns and key binding
    /// only) still covers its calls and is listed as active, on either backend; one made now is
    /// sealed over its maker (`v2:`).
    #[test]
    fn a_grant_sealed_before_its_maker_was_still_covers() {
        let lite = tempfile::tempdir().unwrap();
        let mut dbs = vec![Database::Sqlite {
            path: lite.path().join("assent.db"),
        }];
        dbs.extend(assent_testkit::pg::fresh_schema().map(|url| Database::Postgres { url }));
        for db in &dbs {
            let dir = tempfile::tempdir().unwrap();
            crate::keys::init(dir.path()).unwrap();
            let s = Store::open_database(
                dir.path(),
                dir.path(),
                db,
                60_000,
                std::sync::Arc::new(Bare),
            )
            .unwrap();
            let held = pay(&s, 1_000).expect("held");
            let session = DecisionInput {
                scope: GrantScope::Session,
                ..DecisionInput::approve()
            };
            s.decide(&held, &session, "alice", &[], 1_500).unwrap();
            assert!(covered(&s, 2_000), "the new grant covers");
            let read = "SELECT seal, key_binding FROM grants";
            let (seal, bound): (String, Option<String>) = s
                .aside(|c| c.query_row(read, [], crate::db::tuple))
                .unwrap();
            assert!(
                seal.starts_with("v2:") && bound.is_none(),
                "{seal} {bound:?}"
            );
            // Made with no key binding: the maker moved into the binding's place with the
            // prefix stripped reads as a seal of the form before over the same list unless
            // the two forms' lists differ (they do: the new one is tagged, 13 long).
            let downgrade = "UPDATE grants SET seal = substr(seal, 4), key_binding = created_by";
            edit(&s, downgrade);
            assert!(!covered(&s, 2_500), "a downgraded grant covers nothing");
            edit(
                &s,
                &format!("UPDATE grants SET seal = '{seal}', key_binding = NULL"),
            );
            seal_the_old_way(&s);
            assert!(covered(&s, 3_000), "a grant sealed the old way covers");
            assert_eq!(s.list_grants(false, 3_000, 10, None).unwrap().0.len(), 1);
            // Attack (found by review): whoever approved the grant's approval is judged as its
            // creator, so a writer renaming that decision's actor (and an old grant's unsealed
            // maker) could pass separation of duties. The settlement's seal vouches for it.
            edit(&s, "UPDATE decisions SET actor = 'mallory'");
            assert!(!covered(&s, 3_500), "covered under a renamed approver");
        }
    }
}

//! The cross-check of MPLP plans (`assent audit verify`, check `state`): each plan's status
//! against the newest audit record that moved it, and, under the gateway's own key, its
//! row's seal ([`crate::plans`], migration 0058). At run time a plan whose seal does not hold
//! reads as damaged and runs nothing; what a seal cannot catch is a row put back whole as it
//! was, seal and all (a cancelled plan's approved row restored, lifting the block on calls
//! naming its steps; the stop voided its calls' tokens): its status then disagrees with its
//! newest record, which this names.
//! And the sessions cancelled ([`sessions`]): each one a record names keeps its row.
//! Called by [`crate::integrity::cross_check_on`] (statuses) and `verify_snapshot` (seals),
//! in their snapshot.

use crate::audit::{json_of, text_at};
use crate::db::{self, Conn, OptionalExtension as _};
use crate::seal::SealKey;
use crate::sql;
use std::collections::HashMap;
use std::ops::ControlFlow;

/// A problem found: the audit record concerned (`seq`), if any, and what is wrong.
type Found = (Option<i64>, String);

/// The status a plan has after a record of `kind` ([`crate::plans::transition`]'s kinds,
/// `assent_core::transitions`): `None` for a kind that moves no plan.
fn status_after(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "plan.created" | "plan.updated" | "plan.rejected" => "draft",
        "plan.submitted" => "proposed",
        "plan.approved" => "approved",
        "plan.cancelled" => "cancelled",
        _ => return None,
    })
}

/// Every plan's stored status must be what its newest `plan.*` record left it, and every
/// plan a record names must have its row (the gateway deletes no plan). Records name their
/// plan in `data.plan_id` (since the change that made every plan record name it; a plan
/// whose records all predate it, or were archived by a run before retention carried each
/// plan's newest record, `retention_carry::carry_plans`, is not compared). Linear in plans
/// and plan records.
pub(crate) fn plans(conn: Conn<'_>, out: &mut Vec<Found>) -> db::Result<()> {
    let mut newest: HashMap<String, (i64, String)> = HashMap::new();
    conn.prepare_cached(
        "SELECT seq, kind, data FROM audit WHERE kind IN ('plan.created', 'plan.updated', 'plan.submitted', 'plan.approved', 'plan.rejected', 'plan.cancelled') ORDER BY seq",
    )?
    .for_each([], |r| {
        let (seq, kind): (i64, String) = (r.get(0)?, r.get(1)?);
        if let Some(id) = text_at(&json_of(r)?["data"], "plan_id") {
            // The gateway creates a plan id once (it refuses one whose row exists): a second
            // creation means the first row was deleted in between (found by review: a stopped
            // plan's row deleted and its id registered again left the newest record agreeing
            // with the new row, so the deletion went unnamed).
            if let (Some((earlier, _)), "plan.created") = (newest.get(&id), kind.as_str()) {
                out.push((Some(seq), format!(
                    "plan {id} was created again by record {seq} after record {earlier} named it: its row was deleted behind the gateway's back in between"
                )));
            }
            newest.insert(id, (seq, kind));
        }
        Ok(ControlFlow::Continue(()))
    })?;
    let rows: Vec<(String, String)> = sql::rows(
        conn,
        "SELECT CAST(plan_id AS TEXT), CAST(status AS TEXT) FROM plans ORDER BY created_at, plan_id",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    for (id, status) in rows {
        // A plan no record names: its records predate the naming, or were archived.
        let Some((seq, kind)) = newest.remove(&id) else {
            continue;
        };
        let want = status_after(&kind).unwrap_or("?");
        if want != status {
            out.push((Some(seq), format!(
                "plan {id} is {status}, but its newest record {seq} ({kind}) left it {want}: it was changed behind the gateway's back (a row put back as it was, seal and all, lets calls naming the plan run again)"
            )));
        }
    }
    let mut deleted: Vec<(i64, String, String)> = newest
        .into_iter()
        .map(|(id, (seq, kind))| (seq, id, kind))
        .collect();
    deleted.sort();
    for (seq, id, kind) in deleted {
        out.push((Some(seq), format!(
            "plan {id} has audit record {seq} ({kind}) but no row: it was deleted behind the gateway's back"
        )));
    }
    Ok(())
}

/// Every plan's row must hold its seal under `key` (the gateway's [`crate::seal::Sealed::Plan`]
/// key): one that does not reads as damaged at run time ([`crate::plans::DAMAGED`]), and is
/// named here. A plan with no seal made before migration 0058 was applied (by
/// `assent_schema.applied_at`) is not named: it reads damaged at run time like any other, and
/// naming it would fail every `audit verify` of a gateway upgraded with plans, for good (the
/// gateway deletes no plan). A database writer who clears a plan's seal and moves its
/// `created_at` or that `applied_at` back hides it from this check, not from the run time's.
pub(crate) fn seals(conn: Conn<'_>, key: &SealKey, out: &mut Vec<Found>) -> db::Result<()> {
    let since: Option<i64> = conn
        .prepare_cached("SELECT applied_at FROM assent_schema WHERE version = 58")?
        .query_row([], |r| r.get(0))
        .optional()?;
    let since = since.unwrap_or(i64::MAX);
    let rows: Vec<(String, Option<i64>, bool)> = sql::rows(
        conn,
        "SELECT CAST(plan_id AS TEXT), created_at, seal IS NULL FROM plans ORDER BY created_at, plan_id",
        [],
        // A time of another type than the gateway writes: the read of the row names it.
        |r| Ok((r.get(0)?, r.get(1).ok(), r.get(2)?)),
    )?;
    for (id, created_at, unsealed) in rows {
        if unsealed && created_at.is_some_and(|t| t < since) {
            continue;
        }
        let damaged = crate::plans::read_plan(conn, key, &id)?
            .is_none_or(|p| p.status == crate::plans::DAMAGED);
        if damaged {
            out.push((None, format!(
                "plan {id}'s stored row does not hold its seal: it was changed behind the gateway's back; it runs no calls"
            )));
        }
    }
    Ok(())
}

/// Every session a `session.cancelled` record names (`data.agent`, `data.session_id`) must
/// still have its `cancelled_sessions` row: the gateway deletes none once announced, and
/// without it the agent's calls in the session would run again (found by review of the refusal
/// of such calls). A row with no record (a cancellation under way, or cut short) only refuses
/// calls, and is not named. Linear in those records.
pub(crate) fn sessions(conn: Conn<'_>, out: &mut Vec<Found>) -> db::Result<()> {
    let mut named: Vec<(i64, String, String)> = Vec::new();
    conn.prepare_cached(
        "SELECT seq, data FROM audit WHERE kind = 'session.cancelled' ORDER BY seq",
    )?
    .for_each([], |r| {
        let seq: i64 = r.get(0)?;
        let data = &json_of(r)?;
        if let (Some(a), Some(s)) = (text_at(data, "agent"), text_at(data, "session_id")) {
            named.push((seq, a, s));
        }
        Ok(ControlFlow::Continue(()))
    })?;
    let mut seen = std::collections::HashSet::new();
    for (seq, agent, session) in named {
        if !seen.insert((agent.clone(), session.clone())) {
            continue;
        }
        let row: Option<i64> = conn
            .prepare_cached(
                "SELECT 1 FROM cancelled_sessions WHERE agent = ?1 AND session_id = ?2",
            )?
            .query_row(crate::params![agent, session], |r| r.get(0))
            .optional()?;
        if row.is_none() {
            out.push((Some(seq), format!(
                "session {session} of agent {agent} was cancelled (record {seq}), but its cancelled_sessions row is gone: it was deleted behind the gateway's back, and the agent's calls in the session run again"
            )));
        }
    }
    Ok(())
}

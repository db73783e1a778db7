//! Per-session windows kept incrementally (issue 13 §5): what a proposal's rate and cost
//! thresholds read, bounded by the policy's windows instead of the session's history. The
//! rule (which list answers as the history does) is core's
//! [`assent_core::triggers::window`]; this file keeps its data, in the proposal's transaction.
//!
//! - Every call is a `usage` row. Its `folded` state says how it is read: `0` (*live*: its
//!   approval is pending, or settled since the session's last proposal) is read as it is, with
//!   its arguments; `1` (settled and counting: allowed, approved, expired into an approval) is
//!   in the session's totals and, while inside the longest rate window, read with its time;
//!   `2` (settled and not counting: rejected, cancelled, expired into a rejection) is not read.
//! - `usage_totals` holds, per session, tool, server and cost argument, the sum over the
//!   calls in state `1`; `usage_tracked` the arguments a session keeps totals of (filled from
//!   the history the first time a policy names one).
//! - A proposal first *folds* the session's settled live calls ([`fold`]): each moves to `1`
//!   (adding its costs) or `2`. Until then a settled call is read live with the status it has
//!   now, so a decision never has to touch the totals: a rejection, a cancellation or an
//!   approved edit (which rewrites the call's arguments) counts as it should from the moment it
//!   commits. Live calls are few: the agent's pending approvals are capped
//!   (`max_pending_per_agent`), and a proposal folds all settled ones.

use crate::db::{self, Conn, OptionalExtension as _};
use crate::params;
use crate::sql::json_or_default;
use assent_core::triggers::PriorCall;
use assent_core::triggers::window::{Folded, WindowNeeds, add_cost, compact};
use serde_json::Value;
use std::collections::BTreeMap;

/// `usage.folded` of a live call.
const LIVE: i64 = 0;
/// `usage.folded` of a settled call that counts (its costs are in `usage_totals`).
const COUNTS: i64 = 1;
/// `usage.folded` of a settled call that does not count.
const GONE: i64 = 2;

/// Which calls count toward thresholds, as SQL over `approvals a` (NULL when the call had no
/// approval: allowed outright): allowed ones, and those whose approval is pending, approved or
/// expired into an approval — the default its expiry *applied* (`decisions.default_applied`),
/// not the one stored: found by review, a call whose timeout rejected it though its default
/// was approve (the session took in untrusted output meanwhile, its plan stopped) counted as
/// run, and held the session's later calls.
pub(super) const COUNTING: &str = "(a.id IS NULL OR a.status IN ('pending','approved') OR (a.status = 'expired' AND EXISTS (SELECT 1 FROM decisions d WHERE d.approval_id = a.id AND d.default_applied = 'approve')))";

/// One call of the session: its tool, server and key for the totals.
type Key = (String, Option<String>);

/// Records a call of `agent`'s session in `usage` (what later thresholds count), linked to its
/// approval. A call without one (allowed outright) is settled at once: its costs join the
/// session's tracked totals; a call with one stays live until a later proposal folds it.
pub(crate) fn record_call(
    tx: Conn<'_>,
    agent: &str,
    session_id: &str,
    call: &assent_core::ToolCall,
    canonical_arguments: &str,
    at: i64,
    approval_id: Option<&str>,
) -> db::Result<()> {
    let folded = if approval_id.is_none() { COUNTS } else { LIVE };
    tx.execute(
        "INSERT INTO usage (agent, session_id, tool, server, at, arguments, approval_id, folded) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)",
        params![agent, session_id, call.tool, call.server, at, canonical_arguments, approval_id, folded],
    )?;
    if folded == COUNTS {
        let key = (call.tool.clone(), call.server.clone());
        for a in tracked(tx, agent, session_id)? {
            add_total(tx, agent, session_id, &key, &a, &call.arguments)?;
        }
    }
    Ok(())
}

/// Folds the session's settled live calls: each that counts moves to state `1` and adds its
/// costs to the tracked totals, each that does not to `2`. Reads the live calls only.
pub(crate) fn fold(tx: Conn<'_>, agent: &str, session_id: &str) -> db::Result<()> {
    let settled = tx.query_map(
        &format!(
            "SELECT u.approval_id, u.tool, u.server, u.arguments, CASE WHEN {COUNTING} THEN 1 ELSE 0 END AS counts FROM usage u JOIN approvals a ON a.id = u.approval_id
             WHERE u.agent = ?1 AND u.session_id = ?2 AND u.folded = 0 AND a.status <> 'pending'"
        ),
        params![agent, session_id],
        |r| {
            let key: Key = (r.get("tool")?, r.get("server")?);
            let counts = r.get::<i64>("counts")? != 0;
            Ok((r.get::<String>("approval_id")?, key, json_or_default(r, "arguments")?, counts))
        },
    )?;
    if settled.is_empty() {
        return Ok(());
    }
    let args = tracked(tx, agent, session_id)?;
    for (id, key, arguments, counts) in settled {
        if counts {
            for a in &args {
                add_total(tx, agent, session_id, &key, a, &arguments)?;
            }
        }
        tx.execute(
            "UPDATE usage SET folded = ?2 WHERE approval_id = ?1",
            params![id, if counts { COUNTS } else { GONE }],
        )?;
    }
    Ok(())
}

/// Starts keeping totals of each of `arguments` the session does not keep yet, from its
/// settled counting calls (the history is read once per session and argument, when a policy
/// first names it).
pub(crate) fn track(
    tx: Conn<'_>,
    agent: &str,
    session_id: &str,
    arguments: &[String],
) -> db::Result<()> {
    let have = tracked(tx, agent, session_id)?;
    let new: Vec<&String> = arguments.iter().filter(|a| !have.contains(a)).collect();
    if new.is_empty() {
        return Ok(());
    }
    let sums = history_totals(tx, agent, session_id, &new)?;
    for ((tool, server), totals) in sums {
        for (a, t) in totals {
            tx.execute(
                "INSERT INTO usage_totals (agent, session_id, tool, server, argument, total) VALUES (?1,?2,?3,?4,?5,?6)",
                params![agent, session_id, tool, server, a, t.to_string()],
            )?;
        }
    }
    for a in new {
        tx.execute(
            "INSERT INTO usage_tracked (agent, session_id, argument) VALUES (?1,?2,?3)",
            params![agent, session_id, a],
        )?;
    }
    Ok(())
}

/// The session's earlier calls as core's compact list ([`compact`]) for `needs` at `now`: the
/// totals of `needs.cost_arguments` per tool (kept ones, or summed from the history for one the
/// session does not keep yet), the settled counting calls inside the longest rate window, and
/// the live calls that count. Without approval `except`'s call (the call an edit replaces).
pub(crate) fn window(
    tx: Conn<'_>,
    agent: &str,
    session_id: &str,
    except: Option<&str>,
    needs: &WindowNeeds,
    now: i64,
) -> db::Result<Vec<PriorCall>> {
    let mut folded = folded_totals(tx, agent, session_id, &needs.cost_arguments)?;
    let recent = match needs.rate_since(now) {
        None => Vec::new(),
        Some(since) => tx.query_map(
            "SELECT tool, server, at FROM usage WHERE agent = ?1 AND session_id = ?2 AND at > ?3 AND folded = 1
               AND (CAST(?4 AS TEXT) IS NULL OR approval_id IS DISTINCT FROM ?4)",
            params![agent, session_id, since, except],
            |r| {
                Ok(PriorCall {
                    tool: r.get("tool")?,
                    server: r.get("server")?,
                    at_ms: r.get("at")?,
                    arguments: Value::Null,
                })
            },
        )?,
    };
    let live = tx.query_map(
        &format!(
            "SELECT u.tool, u.server, u.at, u.arguments FROM usage u JOIN approvals a ON a.id = u.approval_id
             WHERE u.agent = ?1 AND u.session_id = ?2 AND u.folded = 0 AND {COUNTING}
               AND (CAST(?3 AS TEXT) IS NULL OR u.approval_id IS DISTINCT FROM ?3)
             ORDER BY u.at"
        ),
        params![agent, session_id, except],
        prior_call,
    )?;
    if let Some(id) = except {
        // A settled counting call is in the totals: take its costs out again.
        let gone: Option<(Key, Value)> = tx
            .query_row(
                "SELECT tool, server, arguments FROM usage WHERE approval_id = ?1 AND agent = ?2 AND session_id = ?3 AND folded = 1",
                params![id, agent, session_id],
                |r| Ok(((r.get("tool")?, r.get("server")?), json_or_default(r, "arguments")?)),
            )
            .optional()?;
        if let Some(((tool, server), arguments)) = gone
            && let Some(f) = folded
                .iter_mut()
                .find(|f| f.tool == tool && f.server == server)
        {
            for (a, t) in &mut f.totals {
                *t -= add_cost(0.0, &arguments, a);
            }
        }
    }
    Ok(compact(&folded, recent, live))
}

/// The arguments the session keeps totals of.
fn tracked(tx: Conn<'_>, agent: &str, session_id: &str) -> db::Result<Vec<String>> {
    tx.query_map(
        "SELECT argument FROM usage_tracked WHERE agent = ?1 AND session_id = ?2",
        params![agent, session_id],
        |r| r.get(0),
    )
}

/// Adds the cost of `arguments` at `argument` to the session's total for tool `key`.
fn add_total(
    tx: Conn<'_>,
    agent: &str,
    session_id: &str,
    key: &Key,
    argument: &str,
    arguments: &Value,
) -> db::Result<()> {
    let (tool, server) = key;
    let old: Option<String> = tx
        .query_row(
            "SELECT total FROM usage_totals WHERE agent = ?1 AND session_id = ?2 AND argument = ?3 AND tool = ?4 AND server IS NOT DISTINCT FROM ?5",
            params![agent, session_id, argument, tool, server],
            |r| r.get(0),
        )
        .optional()?;
    match old {
        Some(old) => {
            let total = add_cost(parse_total(&old)?, arguments, argument);
            tx.execute(
                "UPDATE usage_totals SET total = ?6 WHERE agent = ?1 AND session_id = ?2 AND argument = ?3 AND tool = ?4 AND server IS NOT DISTINCT FROM ?5",
                params![agent, session_id, argument, tool, server, total.to_string()],
            )?;
        }
        None => {
            let total = add_cost(0.0, arguments, argument);
            tx.execute(
                "INSERT INTO usage_totals (agent, session_id, tool, server, argument, total) VALUES (?1,?2,?3,?4,?5,?6)",
                params![agent, session_id, tool, server, argument, total.to_string()],
            )?;
        }
    }
    Ok(())
}

/// A stored total; `Err(Column)` when the text is not a number (such a damaged row fails the
/// proposal closed rather than counting as zero). A number a database writer lowered (even
/// below zero) is taken as stored: the totals are not sealed (SECURITY.md, "Nor is everything
/// sealed yet").
fn parse_total(text: &str) -> db::Result<f64> {
    text.parse().map_err(|_| db::DbError::Column {
        column: "usage_totals.total".into(),
        why: format!("{text:?} is not a number"),
    })
}

/// Totals of `arguments` per tool over the session's settled counting calls, summed from
/// the history (the calls in state `1`, in order).
fn history_totals(
    tx: Conn<'_>,
    agent: &str,
    session_id: &str,
    arguments: &[&String],
) -> db::Result<BTreeMap<Key, Vec<(String, f64)>>> {
    let mut sums: BTreeMap<Key, Vec<(String, f64)>> = BTreeMap::new();
    let calls = tx.query_map(
        "SELECT tool, server, arguments FROM usage WHERE agent = ?1 AND session_id = ?2 AND folded = 1 ORDER BY at",
        params![agent, session_id],
        |r| Ok(((r.get("tool")?, r.get("server")?), json_or_default(r, "arguments")?)),
    )?;
    for (key, args) in calls {
        let totals = sums
            .entry(key)
            .or_insert_with(|| arguments.iter().map(|a| ((*a).clone(), 0.0)).collect());
        for (a, t) in totals.iter_mut() {
            *t = add_cost(*t, &args, a);
        }
    }
    Ok(sums)
}

/// The session totals of `arguments` per tool: kept ones from `usage_totals`, the others
/// summed from the history (read-only; a proposal starts keeping them with [`track`]).
fn folded_totals(
    tx: Conn<'_>,
    agent: &str,
    session_id: &str,
    arguments: &[String],
) -> db::Result<Vec<Folded>> {
    if arguments.is_empty() {
        return Ok(Vec::new());
    }
    let have = tracked(tx, agent, session_id)?;
    let mut by_key: BTreeMap<Key, Vec<(String, f64)>> = BTreeMap::new();
    for a in arguments.iter().filter(|a| have.contains(a)) {
        let rows = tx.query_map(
            "SELECT tool, server, total FROM usage_totals WHERE agent = ?1 AND session_id = ?2 AND argument = ?3",
            params![agent, session_id, a],
            |r| Ok(((r.get("tool")?, r.get("server")?), r.get::<String>("total")?)),
        )?;
        for (key, total) in rows {
            by_key
                .entry(key)
                .or_default()
                .push((a.clone(), parse_total(&total)?));
        }
    }
    let missing: Vec<&String> = arguments.iter().filter(|a| !have.contains(a)).collect();
    if !missing.is_empty() {
        for (key, totals) in history_totals(tx, agent, session_id, &missing)? {
            by_key.entry(key).or_default().extend(totals);
        }
    }
    Ok(by_key
        .into_iter()
        .map(|((tool, server), totals)| Folded {
            tool,
            server,
            totals,
        })
        .collect())
}

/// A `usage` row read with its arguments (`tool`, `server`, `at`, `arguments`) as the
/// thresholds see it.
pub(super) fn prior_call(r: &db::Row<'_>) -> db::Result<PriorCall> {
    Ok(PriorCall {
        tool: r.get("tool")?,
        server: r.get("server")?,
        at_ms: r.get("at")?,
        arguments: json_or_default(r, "arguments")?,
    })
}

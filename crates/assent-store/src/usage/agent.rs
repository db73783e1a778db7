//! The agent-wide window: what `rate.per: agent` and `cost.max_per_agent` thresholds count
//! (core's [`assent_core::triggers::window::WindowNeeds::agent_since`]). The agent chooses its
//! session id, so these read the agent's counting calls in all its sessions inside the longest
//! agent-wide window, as they are (with arguments): an index range over `usage(agent, at)`
//! (migration 0046), newest first and at most one more than core's
//! [`assent_core::triggers::window::AGENT_CALLS_CAP`] (more, and the agent-wide thresholds
//! hold the call), so its cost is bounded whatever the window holds. A call no rule covering
//! it counts per agent never reads it ([`WindowNeeds::for_call`]).

use super::windows::{COUNTING, prior_call};
use crate::db::{self, Conn};
use crate::params;
use assent_core::triggers::PriorCall;
use assent_core::triggers::window::{AGENT_CALLS_CAP, WindowNeeds};

/// The most rows of an agent's window a read looks at, counting or not (4 × the cap): past it
/// the window is not read whole (found by review: the agent's own cancelled calls, which do
/// not count, were scanned each with a look-up of its approval, under the write lock).
const RAW_CAP: usize = 4 * AGENT_CALLS_CAP;

/// The counting calls of `agent` in any of its sessions (allowed, pending, approved, expired
/// into an approval) proposed after [`WindowNeeds::agent_since`] `now` (Unix ms), without
/// approval `except`'s call (the call an edit replaces): the newest
/// [`AGENT_CALLS_CAP`] + 1 of them at most, oldest first, found among the newest [`RAW_CAP`]
/// rows of the window. More than the cap tells core the window was not read whole: when the
/// newest `RAW_CAP` rows held fewer counting ones, entries dated before every window (which no
/// threshold counts) make up the list. Empty, without a read, when no rule of `needs` counts
/// per agent.
pub(crate) fn agent_window(
    tx: Conn<'_>,
    agent: &str,
    except: Option<&str>,
    needs: &WindowNeeds,
    now: i64,
) -> db::Result<Vec<PriorCall>> {
    let Some(since) = needs.agent_since(now) else {
        return Ok(Vec::new());
    };
    // The newest rows of the window, counting or not, at most `RAW_CAP`; of those the
    // counting ones, at most one past the cap.
    let mut calls = tx.query_map(
        &format!(
            "SELECT u.tool, u.server, u.at, u.arguments FROM (
                SELECT tool, server, at, arguments, approval_id FROM usage
                 WHERE agent = ?1 AND at > ?2
                   AND (CAST(?3 AS TEXT) IS NULL OR approval_id IS DISTINCT FROM ?3)
                 ORDER BY at DESC LIMIT {RAW_CAP}) u
             LEFT JOIN approvals a ON a.id = u.approval_id
             WHERE {COUNTING}
             ORDER BY u.at DESC LIMIT {}",
            AGENT_CALLS_CAP + 1
        ),
        params![agent, since, except],
        prior_call,
    )?;
    if calls.len() <= AGENT_CALLS_CAP {
        let raw: i64 = tx
            .prepare_cached(&format!(
                "SELECT count(*) FROM (SELECT 1 FROM usage WHERE agent = ?1 AND at > ?2 LIMIT {RAW_CAP}) w"
            ))?
            .query_row(params![agent, since], |r| r.get(0))?;
        if raw >= RAW_CAP as i64 {
            // Not read whole: entries dated before every window (counted by no threshold)
            // take the list past the cap, which tells core so.
            let unread = PriorCall {
                tool: String::new(),
                server: None,
                at_ms: i64::MIN,
                arguments: serde_json::Value::Null,
            };
            calls.resize(AGENT_CALLS_CAP + 1, unread);
        }
    }
    calls.reverse();
    Ok(calls)
}

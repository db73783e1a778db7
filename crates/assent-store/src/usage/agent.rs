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

/// The counting calls of `agent` in any of its sessions (allowed, pending, approved, expired
/// into an approval) proposed after [`WindowNeeds::agent_since`] `now` (Unix ms), without
/// approval `except`'s call (the call an edit replaces): the newest
/// [`AGENT_CALLS_CAP`] + 1 of them at most, oldest first (more than the cap tells core the
/// window was not read whole). Empty, without a read, when no rule of `needs` counts per
/// agent.
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
    let mut calls = tx.query_map(
        &format!(
            "SELECT u.tool, u.server, u.at, u.arguments FROM usage u LEFT JOIN approvals a ON a.id = u.approval_id
             WHERE u.agent = ?1 AND u.at > ?2 AND {COUNTING}
               AND (CAST(?3 AS TEXT) IS NULL OR u.approval_id IS DISTINCT FROM ?3)
             ORDER BY u.at DESC LIMIT {}",
            AGENT_CALLS_CAP + 1
        ),
        params![agent, since, except],
        prior_call,
    )?;
    calls.reverse();
    Ok(calls)
}

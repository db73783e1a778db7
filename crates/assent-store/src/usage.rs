//! What counts toward thresholds and caps: the session's earlier calls (`usage` rows whose
//! approval still stands) for rate and cost triggers, the agent's calls in all its sessions for
//! the agent-wide ones ([`agent`]), and how many approvals and questions of an agent wait for a
//! person (`max_pending_per_agent`). Reads only, but for [`windows`]' upkeep.

use crate::db::{self, Conn};
use crate::error::StoreError;
use crate::sql::{self, from_row, json_or_default};
use crate::store::Store;
use assent_core::triggers::PriorCall;
use assent_core::triggers::window::WindowNeeds;

pub(crate) mod agent;
pub(crate) mod windows;

impl Store {
    /// The earlier calls of `agent`'s session that count toward thresholds, without approval
    /// `except`'s own call: what an edit of that approval is re-gated with (issue 10 §3).
    pub fn session_calls(
        &self,
        agent: &str,
        session_id: &str,
        except: Option<&str>,
    ) -> Result<Vec<PriorCall>, StoreError> {
        Ok(prior_calls_except(
            self.lock().conn(),
            agent,
            session_id,
            except,
        )?)
    }
}

impl Store {
    /// What an edit of approval `except` is re-gated with (issue 10 §3), bounded by the policy's
    /// windows (issue 13 §5): the session's earlier calls as core's compact list
    /// ([`assent_core::triggers::window::compact`]) for `needs` at `now` (Unix ms), without
    /// `except`'s own call. Answers every threshold of the policy set `needs` came from as
    /// [`Store::session_calls`] does.
    pub fn session_window(
        &self,
        agent: &str,
        session_id: &str,
        except: Option<&str>,
        needs: &WindowNeeds,
        now: i64,
    ) -> Result<Vec<PriorCall>, StoreError> {
        self.read(|c| windows::window(c, agent, session_id, except, needs, now))
    }
}

impl Store {
    /// What an edit of approval `except` is re-gated with for the agent-wide thresholds
    /// (`rate.per: agent`, `cost.max_per_agent`): `agent`'s counting calls in all its sessions
    /// inside the longest agent-wide window of `needs` at `now` (Unix ms), without `except`'s
    /// own call, oldest first; empty (nothing read) when no rule counts per agent. At most
    /// [`assent_core::triggers::window::AGENT_CALLS_CAP`] counting calls are read (and one
    /// more, to say the cap was passed), looking at up to four times as many rows.
    pub fn agent_window(
        &self,
        agent: &str,
        except: Option<&str>,
        needs: &WindowNeeds,
        now: i64,
    ) -> Result<Vec<PriorCall>, StoreError> {
        self.read(|c| agent::agent_window(c, agent, except, needs, now))
    }
}

/// What an edit of a held call is re-gated with, read in one snapshot
/// ([`Store::edit_observations`]).
#[derive(Debug, Clone)]
pub struct EditObservations {
    /// The session's earlier calls the windows reach ([`Store::session_window`]).
    pub prior: Vec<PriorCall>,
    /// The agent's calls the agent-wide windows reach ([`Store::agent_window`]).
    pub agent: Vec<PriorCall>,
    /// What the session has taken in, for the held call ([`Store::session_risk`]).
    pub risk: assent_core::session_risk::SessionRisk,
    /// How many calls the session (or agent) had made and approvals had had decided lately,
    /// when these were read ([`CallsSeen`]).
    pub calls: CallsSeen,
}

/// How many calls an agent's session (or, when some rule counts per agent, the agent) had
/// made, and how many of their approvals had been decided, since `since` (Unix ms) when a
/// decision was re-gated against its windows: `count`. Inside the decision's write
/// transaction the store counts again ([`calls_since`]) and refuses the decision when it
/// grew ([`crate::DecisionInput::calls_seen`]): a call added, or another approval decided
/// (an edit changes what a call counts for without adding one; found by review, two edits
/// checked at once each passed a cost threshold the pair exceeded). `since` is
/// [`CALLS_MARGIN_MS`] before the read, so that a proposal stamped before the read but
/// committed after it (its time is taken before it waits for the write lock) is counted too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallsSeen {
    /// Unix ms.
    pub since: i64,
    /// The session counted; `None`: every session of the agent.
    pub session: Option<String>,
    /// Calls and decisions counted at or after `since`.
    pub count: i64,
}

/// How far before a read [`CallsSeen::since`] lies: past the longest a proposal's write waits
/// for the lock (10 s) and the replicas' clock bound, with room.
pub const CALLS_MARGIN_MS: i64 = 60_000;

/// How many calls `agent` (in `session`, or in all its sessions) made, and how many decisions
/// were taken on its approvals there, at or after `since` (Unix ms; indexes `usage(agent,
/// at)`, migration 0046, and `decisions(approval_id)`). Neither table loses rows, so the count
/// only grows.
pub(crate) fn calls_since(
    conn: Conn<'_>,
    agent: &str,
    session: Option<&str>,
    since: i64,
) -> db::Result<i64> {
    conn.prepare_cached(
        "SELECT (SELECT count(*) FROM usage WHERE agent = ?1 AND at >= ?2            AND (CAST(?3 AS TEXT) IS NULL OR session_id = ?3))          + (SELECT count(*) FROM decisions d JOIN approvals a ON a.id = d.approval_id            WHERE a.agent = ?1 AND d.at >= ?2 AND (CAST(?3 AS TEXT) IS NULL OR a.session_id = ?3))",
    )?
    .query_row(crate::params![agent, since, session], |r| r.get(0))
}

impl Store {
    /// [`Store::session_window`] (by `needs`), [`Store::agent_window`] (by `wide`: the
    /// agent-wide needs of the rules covering `call`) and [`Store::session_risk`] of `call`,
    /// all read in one snapshot, so that a proposal landing between them cannot be counted in
    /// one and not the other (issue 10 §3, issue 16 §3). The agent window is read at most to
    /// its cap ([`assent_core::triggers::window::AGENT_CALLS_CAP`] counting calls).
    #[allow(clippy::too_many_arguments)]
    pub fn edit_observations(
        &self,
        (agent, session_id): (&str, &str),
        except: Option<&str>,
        call: &assent_core::ToolCall,
        (needs, wide): (&WindowNeeds, &WindowNeeds),
        now: i64,
    ) -> Result<EditObservations, StoreError> {
        let conn = self.lock();
        Ok(conn.conn().snapshot(|c| {
            Ok(EditObservations {
                prior: windows::window(c, agent, session_id, except, needs, now)?,
                agent: agent::agent_window(c, agent, except, wide, now)?,
                risk: crate::session_risk::read(c, agent, session_id, call)?,
                calls: {
                    let since = now.saturating_sub(CALLS_MARGIN_MS);
                    // The session alone unless some rule covering the call counts per agent:
                    // found by review, the agent's unrelated calls in other sessions refused
                    // decisions (and turned an AAEP accept into a reject).
                    let session = wide.longest_agent_seconds.is_none().then_some(session_id);
                    CallsSeen {
                        since,
                        session: session.map(str::to_string),
                        count: calls_since(c, agent, session, since)?,
                    }
                },
            })
        })?)
    }
}

/// What a proposal of `agent`'s session at `now` (Unix ms) is gated with, in its transaction:
/// the session's earlier counting calls (the whole history without `needs`; core's compact
/// list for `needs`, whose cost arguments the session starts keeping totals of) and the agent's
/// calls in the agent-wide window of `needs` (empty without `needs` or when no rule counts per
/// agent).
pub(crate) fn observed(
    tx: Conn<'_>,
    agent: &str,
    session_id: &str,
    needs: Option<&WindowNeeds>,
    now: i64,
) -> db::Result<(Vec<PriorCall>, Vec<PriorCall>)> {
    let Some(n) = needs else {
        return Ok((prior_calls(tx, agent, session_id)?, Vec::new()));
    };
    windows::track(tx, agent, session_id, &n.cost_arguments)?;
    let prior = windows::window(tx, agent, session_id, None, n, now)?;
    Ok((prior, agent::agent_window(tx, agent, None, n, now)?))
}

/// The earlier calls of `agent`'s session that count toward thresholds: allowed ones, and
/// those whose approval is pending, approved or expired into an approval.
pub(crate) fn prior_calls(
    tx: Conn<'_>,
    agent: &str,
    session_id: &str,
) -> db::Result<Vec<PriorCall>> {
    prior_calls_except(tx, agent, session_id, None)
}

/// [`prior_calls`] without the usage of approval `except` (the call an edit replaces).
pub(crate) fn prior_calls_except(
    tx: Conn<'_>,
    agent: &str,
    session_id: &str,
    except: Option<&str>,
) -> db::Result<Vec<PriorCall>> {
    sql::rows(
        tx,
        &format!(
            "SELECT u.tool, u.server, u.at AS at_ms, u.arguments FROM usage u LEFT JOIN approvals a ON a.id = u.approval_id
         WHERE u.agent = ?1 AND u.session_id = ?2 AND (CAST(?3 AS TEXT) IS NULL OR u.approval_id IS DISTINCT FROM ?3)
           AND {}
         ORDER BY u.at",
            windows::COUNTING
        ),
        crate::params![agent, session_id, except],
        |r| from_row!(r => PriorCall { tool, server, at_ms, arguments: json_or_default(r, "arguments")? }),
    )
}

/// How many approvals and clarification questions of `agent` wait for a person: what
/// `max_pending_per_agent` caps (issue 10 §16).
pub(crate) fn pending_of(conn: Conn<'_>, agent: &str) -> db::Result<u64> {
    conn.prepare_cached(
        "SELECT (SELECT count(*) FROM approvals WHERE agent = ?1 AND status = 'pending')
              + (SELECT count(*) FROM clarifications WHERE agent = ?1 AND status = 'pending')",
    )?
    .query_row([agent], |r| r.get(0))
}

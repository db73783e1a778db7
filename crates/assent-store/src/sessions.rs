//! Cancellations that reach further than one approval. A session (AAEP §6.8; issue 10 §6,
//! §7): every pending approval the canceller may decide, every pending clarification (their
//! reply tokens die with them), and one `aaep:agent.session.cancelled` per agent and session,
//! ever. A plan ([`Store::cancel_plan`]): its Confirm or the plan itself, then the tool calls
//! held under it.

use crate::audit;
use crate::db::{self, Change, Conn};
use crate::emit::emit;
use crate::error::{DecideError, StoreError};
use crate::events::{AaepEvent, Envelopes};
use crate::params;
use crate::plans;
use crate::record::ApprovalRecord;
use crate::sql;
use crate::store::Store;
use assent_core::approval::Canceller;
use serde_json::json;

/// What [`Store::cancel_session`] did.
#[derive(Debug, Clone, Default)]
pub struct SessionCancelled {
    /// The approvals it cancelled.
    pub cancelled: Vec<crate::record::ApprovalRecord>,
    /// Pending approvals it left pending: the operator holds none of their approver roles.
    pub refused: Vec<String>,
    /// The clarifications it cancelled.
    pub clarifications: Vec<String>,
    /// The agents whose session was announced cancelled now (each only the first time).
    pub announced: Vec<String>,
    /// The `session` grants made in the session that it revoked (`grant.revoked` each).
    pub grants_revoked: Vec<String>,
    /// How many tokens of the session's calls, neither redeemed nor expired, it voided
    /// (`token.voided` each, those of the revoked grants included).
    pub tokens_voided: usize,
}

impl Store {
    /// Cancels session `session_id` for `who` (the agent itself: only its own requests; an
    /// operator: only the approvals their roles let them decide):
    /// pending approvals (each audited `approval.cancelled`), pending clarifications
    /// (`clarification.cancelled`, an `agent.state.changed` for each), first marking the
    /// session over for each agent it reaches (their calls in it refused from then on,
    /// [`Proposed::SessionCancelled`](crate::Proposed::SessionCancelled), unless it leaves one
    /// of theirs pending: [`close`]), the consent given in it
    /// (its `session` grants revoked, the tokens of its calls not yet redeemed voided, whatever
    /// their approvers: that only stops calls from running;
    /// `crate::grants_revoke::withdraw_session_consent`), and, for every agent of
    /// the session with nothing left pending, `aaep:agent.session.cancelled` the first time
    /// only (`session.cancelled` audited), even when nothing was pending.
    pub fn cancel_session(
        &self,
        session_id: &str,
        who: &Canceller<'_>,
        reason: Option<&str>,
        now: i64,
    ) -> Result<SessionCancelled, StoreError> {
        let (agent, actor) = (who.agent(), who.name());
        // Over first: no call of its agents is held in it while its pending ones are cancelled
        // (found by review: such a call was left pending, and the session never announced).
        let mut marked = self.write(|tx| {
            let mut marked = Vec::new();
            for a in session_agents(**tx, session_id, agent)? {
                if end(**tx, (&a, session_id), actor, now)? {
                    marked.push(a);
                }
            }
            Ok::<_, StoreError>(marked)
        })?;
        let ids: Vec<String> = sql::column(
            self.lock().conn(),
            "SELECT id FROM approvals WHERE session_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR agent = ?2) AND status = 'pending' ORDER BY requested_at",
            crate::params![session_id, agent],
        )?;
        let mut out = SessionCancelled::default();
        for id in ids {
            match self.cancel_as(&id, who, reason, now) {
                Ok(r) => out.cancelled.push(r),
                Err(DecideError::NotApprover(_) | DecideError::Damaged(_)) => out.refused.push(id),
                Err(DecideError::Store(e)) => return Err(e),
                Err(_) => {} // decided meanwhile
            }
        }
        self.write(|tx| {
            out.clarifications =
                cancel_clarifications(**tx, &*self.envelopes, session_id, agent, actor, now)?;
            for c in &out.clarifications {
                tx.changed(Change::Clarification(c.clone()));
            }
            for a in session_agents(**tx, session_id, agent)? {
                // An agent whose first call in it came while it was being cancelled.
                if end(**tx, (&a, session_id), actor, now)? {
                    marked.push(a.clone());
                }
                let (grants, tokens) = crate::grants_revoke::withdraw_session_consent(
                    **tx,
                    (&a, session_id),
                    actor,
                    now,
                )?;
                out.grants_revoked.extend(grants);
                out.tokens_voided += tokens;
                let n = out.cancelled.iter().filter(|x| x.agent == a).count();
                let how = Closing {
                    who,
                    reason,
                    cancelled: n,
                    marked: marked.contains(&a),
                    now,
                };
                if close(**tx, &*self.envelopes, (&a, session_id), how)? {
                    out.announced.push(a);
                }
            }
            Ok(out)
        })
    }

    /// Cancels a plan (`plan.cancelled`): a `proposed` plan through its pending Confirm (which
    /// is cancelled and recorded, [`Store::cancel_as`]), any other plan not yet finished
    /// directly, by `who` (the agent itself: only its own plans). Cancelling is saying no, so an operator without the Confirm's
    /// approver roles is refused (`plans::PlanError::Decide(NotApprover)`, audited
    /// `decision.refused`) and the plan stays `proposed`; so is a damaged Confirm. Then the
    /// tool calls held under the plan are cancelled (each `approval.cancelled`), whatever
    /// their approvers, and returned with the plan: the calls of the plan's agent and of
    /// `delegates`, the agents it declares local delegates (from the operator's agent files,
    /// `assent_core::policy::Delegations::delegates_of`), only: a plan belongs to the agent
    /// that registered it ([`plans::held_under`]).
    pub fn cancel_plan(
        &self,
        id: &str,
        who: &Canceller<'_>,
        delegates: &[String],
        reason: Option<&str>,
        now: i64,
    ) -> Result<(plans::PlanRecord, Vec<ApprovalRecord>), plans::PlanError> {
        let (agent, actor) = (who.agent(), who.name());
        let p = self
            .plan(id)?
            .filter(|p| agent.is_none_or(|a| a == p.agent))
            .ok_or_else(|| plans::PlanError::NotFound(id.to_string()))?;
        let confirm_cancelled = p.status == "proposed";
        let first_confirm = p.confirm_id.clone();
        if let (true, Some(c)) = (confirm_cancelled, &p.confirm_id) {
            match self.cancel_as(c, who, reason, now) {
                Ok(_) | Err(DecideError::AlreadyDecided(_)) => {}
                Err(DecideError::Store(e)) => return Err(e.into()),
                Err(e) => return Err(plans::PlanError::Decide(e)),
            }
        }
        let key = self.seal_key(crate::seal::Sealed::Plan);
        let plan = self.write(|tx| {
            let p = plans::read_plan_to_change(**tx, &key, id)?
                .ok_or_else(|| plans::PlanError::NotFound(id.to_string()))?;
            match p.status.as_str() {
                // Its row is left as it is (what a database writer made of it stays for
                // `audit verify` to see, and is sealed by no one); it runs no calls already,
                // and its held calls are cancelled below.
                "cancelled" | plans::DAMAGED => Ok(p),
                "completed" | "failed" => Err(plans::PlanError::WrongState(
                    p.status,
                    "a finished plan cannot be cancelled",
                )),
                // Submitted since it was read (or rejected and submitted again, under another
                // Confirm): its Confirm is pending and was not cancelled (found by review: the
                // plan was cancelled beside a live Confirm).
                "proposed" if !confirm_cancelled || p.confirm_id != first_confirm => {
                    Err(plans::PlanError::WrongState(
                        p.status,
                        "the plan was submitted while it was being cancelled; cancel it again",
                    ))
                }
                _ => {
                    let written = plans::transition(
                        **tx,
                        (&key, &self.delegations()),
                        id,
                        ("cancelled", "plan.cancelled"),
                        actor,
                        json!({"reason": reason}),
                        now,
                    )?;
                    // Read intact under its lock just above: written and sealed as returned.
                    written.ok_or_else(|| {
                        plans::PlanError::WrongState(plans::DAMAGED.into(), plans::DAMAGED_WHY)
                    })
                }
            }
        })?;
        // The calls held under the plan go with it, its delegates' too: stopping a plan stops
        // them, whatever their approvers (found by review: one held while the plan was
        // approved stayed pending and then ran under it).
        let held = plans::held_under(self.lock().conn(), id, delegates)?;
        let mut cancelled = Vec::new();
        for aid in held.iter().filter(|a| Some(*a) != first_confirm.as_ref()) {
            match self.cancel(aid, reason, actor, now) {
                Ok(a) => cancelled.push(a),
                Err(DecideError::Store(e)) => return Err(e.into()),
                Err(DecideError::AlreadyDecided(_)) => {}
                // Damaged: nobody can approve it; it stays pending, said here.
                Err(e) => tracing::warn!(approval_id = %aid, plan_id = %id, error = %e,
                    "a call held under a cancelled plan could not be cancelled"),
            }
        }
        Ok((plan, cancelled))
    }
}

/// Marks agent `agent`'s session `session_id` over, cancelled by `actor` at `now`, unless it
/// is already (`cancelled_sessions`, `announced` 0 until [`close`] announces it or takes the
/// mark back; migration 0071). Whether it wrote the mark.
fn end(tx: Conn<'_>, (agent, session_id): (&str, &str), actor: &str, now: i64) -> db::Result<bool> {
    let fresh = tx
        .prepare_cached("INSERT INTO cancelled_sessions (agent, session_id, at, actor, announced) VALUES (?1,?2,?3,?4,0) ON CONFLICT DO NOTHING")?
        .execute(params![agent, session_id, now, actor])?;
    Ok(fresh > 0)
}

/// How [`close`] ends one agent's session: the cancellation's canceller and reason, how many
/// of the agent's approvals it cancelled, whether it marked the session over itself
/// ([`end`]), and when.
struct Closing<'a> {
    who: &'a Canceller<'a>,
    reason: Option<&'a str>,
    cancelled: usize,
    marked: bool,
    now: i64,
}

/// The end of a session's cancellation for agent `agent`, in its last transaction. With a call
/// of the agent still pending in it (one the canceller may not decide, or under `deny:
/// quorum`), the session is not over — a call left to be decided could otherwise be approved
/// and run in a session over (found by review) — and the mark this cancellation wrote is taken
/// back. With none, the session is over and, the first time, announced:
/// `aaep:agent.session.cancelled` and a `session.cancelled` record (`agent`, `session_id`,
/// `approvals`, `reason`), which `audit verify` holds the mark to
/// ([`crate::integrity_plans::sessions`]: a mark deleted behind the gateway's back would let the
/// session's calls run again). Whether it announced.
fn close(
    tx: Conn<'_>,
    env: &dyn Envelopes,
    (agent, session_id): (&str, &str),
    how: Closing<'_>,
) -> db::Result<bool> {
    let left: i64 = tx
        .prepare_cached("SELECT count(*) FROM approvals WHERE agent = ?1 AND session_id = ?2 AND status = 'pending'")?
        .query_row(params![agent, session_id], |r| r.get(0))?;
    if left > 0 {
        if how.marked {
            tx.prepare_cached("DELETE FROM cancelled_sessions WHERE agent = ?1 AND session_id = ?2 AND announced = 0")?
                .execute(params![agent, session_id])?;
        }
        return Ok(false);
    }
    let fresh = tx
        .prepare_cached("UPDATE cancelled_sessions SET announced = 1 WHERE agent = ?1 AND session_id = ?2 AND announced = 0")?
        .execute(params![agent, session_id])?;
    if fresh == 0 {
        return Ok(false);
    }
    let ev = AaepEvent::SessionCancelled {
        agent,
        session: session_id,
        by_operator: how.who.agent().is_none(),
        cancelled: how.cancelled,
        at: how.now,
    };
    emit(tx, env, &ev, None, None, how.now)?;
    let data = json!({"agent": agent, "session_id": session_id, "approvals": how.cancelled, "reason": how.reason});
    audit::append(
        tx,
        how.now,
        "session.cancelled",
        None,
        how.who.name(),
        &data,
    )?;
    Ok(true)
}

/// The agents a cancellation of `session_id` reaches: `agent` alone (its own cancel), or
/// every agent of the session ([`agents_of`]).
fn session_agents(tx: Conn<'_>, session_id: &str, agent: Option<&str>) -> db::Result<Vec<String>> {
    match agent {
        Some(a) => Ok(vec![a.to_string()]),
        None => agents_of(tx, session_id),
    }
}

/// Cancels the pending clarifications of the session (of `agent` only, when given); returns
/// their ids. Their reply tokens no longer match a pending question.
fn cancel_clarifications(
    tx: Conn<'_>,
    env: &dyn Envelopes,
    session_id: &str,
    agent: Option<&str>,
    actor: &str,
    now: i64,
) -> Result<Vec<String>, StoreError> {
    let ids: Vec<String> = sql::column(
        tx,
        "SELECT id FROM clarifications WHERE session_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR agent = ?2) AND status = 'pending' ORDER BY requested_at",
        crate::params![session_id, agent],
    )?;
    for id in &ids {
        tx.prepare_cached(
            "UPDATE clarifications SET status = 'cancelled' WHERE id = ?1 AND status = 'pending'",
        )?
        .execute([id])?;
        let c = crate::clarifications::read_clarification(tx, "id", id)?.expect("exists");
        audit::append(
            tx,
            now,
            "clarification.cancelled",
            None,
            actor,
            &json!({"clarification_id": id, "session_id": session_id}),
        )?;
        let ev = AaepEvent::ClarificationResolved {
            clarification: &c,
            at: now,
        };
        emit(tx, env, &ev, None, None, now)?;
    }
    Ok(ids)
}

/// Every agent that ever proposed a call or asked a question in `session_id`, sorted
/// bytewise in Rust (a Postgres `ORDER BY` would follow the database's collation). Each part
/// by an index (found by review: the questions and the calls were scanned whole, inside the
/// operator's write transaction): approvals and questions by session; the calls by the
/// index of `(agent, session_id, at)`, one probe per distinct agent, the agents found by
/// skipping through `(agent, at)` (a loose index scan: a few probes per agent, not a row per
/// call).
fn agents_of(conn: Conn<'_>, session_id: &str) -> db::Result<Vec<String>> {
    let mut agents: Vec<String> = sql::column(
        conn,
        "SELECT agent FROM approvals WHERE session_id = ?1 UNION SELECT agent FROM clarifications WHERE session_id = ?1
         UNION SELECT a FROM (
           WITH RECURSIVE seen(a) AS (
             SELECT min(agent) FROM usage
             UNION ALL SELECT (SELECT min(agent) FROM usage WHERE agent > seen.a) FROM seen WHERE seen.a IS NOT NULL)
           SELECT a FROM seen WHERE a IS NOT NULL
             AND EXISTS (SELECT 1 FROM usage u WHERE u.agent = seen.a AND u.session_id = ?1)) called",
        [session_id],
    )?;
    agents.sort();
    Ok(agents)
}

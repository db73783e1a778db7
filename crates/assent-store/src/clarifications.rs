//! Clarification questions (AAEP `agent.awaiting.clarification`): asking under the
//! per-agent pending cap, reading, answering (first answer wins) and expiring them, each
//! writing its AAEP event ([`crate::events`]). The [`aaep::Clarification`] type is in
//! [`crate::aaep`]; the envelopes are rendered by the server.

use crate::aaep::{self, Clarification};
use crate::audit;
use crate::db::{self, Change, Conn, OptionalExtension as _};
use crate::emit::emit;
use crate::error::StoreError;
use crate::events::AaepEvent;
use crate::kit::ordered_id;
use crate::params;
use crate::sql::{self, from_row, json_or_default};
use crate::store::Store;

/// The most clarifications one [`Store::list_clarifications`] answers (newest first).
pub const MAX_CLARIFICATIONS_LISTED: usize = 500;
use crate::usage::pending_of;
use assent_core::clarification::ClarificationStatus;
use serde_json::{Value, json};

/// Why [`Store::create_clarification`] stored no question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskRefused {
    /// The agent has this many (`max_pending_per_agent`) approvals and questions waiting
    /// (`429 TOO_MANY_PENDING`).
    TooMany(u64),
    /// The agent's session was cancelled (`409 SESSION_CANCELLED`).
    SessionCancelled {
        /// When (Unix ms).
        at: i64,
        /// By whom.
        by: String,
    },
}

impl Store {
    /// Stores a clarification question with a fresh reply token and emits
    /// `aaep:agent.awaiting.clarification` (`clarification.requested` audited). `Ok(Err(_))`,
    /// audited `clarification.refused` and nothing else stored, when the agent already has
    /// `max_pending` approvals and questions waiting ([`AskRefused::TooMany`]) or its session
    /// was cancelled ([`AskRefused::SessionCancelled`]: AAEP §4.1.4, no event of a session
    /// follows its terminal one).
    #[allow(clippy::too_many_arguments)]
    pub fn create_clarification(
        &self,
        agent: &str,
        session_id: &str,
        question: &str,
        kinds: &[String],
        choices: &[Value],
        context: Option<&str>,
        now: i64,
        expires_at: i64,
        max_pending: u64,
    ) -> Result<Result<aaep::Clarification, AskRefused>, StoreError> {
        let id = uuid::Uuid::new_v4().to_string();
        let token = ordered_id("rpl_", now);
        self.write(|tx| {
        if let Some((at, by)) = crate::session_over::cancelled_at(**tx, agent, session_id)? {
            let why = json!({"session_id": session_id, "why": "the session was cancelled", "cancelled_at": at, "cancelled_by": by});
            audit::append(**tx, now, "clarification.refused", None, agent, &why)?;
            return Ok(Err(AskRefused::SessionCancelled { at, by }));
        }
        let pending = pending_of(**tx, agent)?;
        if pending >= max_pending {
            audit::append(
                **tx,
                now,
                "clarification.refused",
                None,
                agent,
                &json!({"session_id": session_id, "why": "too many pending approvals and questions", "pending": pending, "limit": max_pending}),
            )?;
            return Ok(Err(AskRefused::TooMany(max_pending)));
        }
        tx.prepare_cached("INSERT INTO clarifications (id, agent, session_id, question, kinds, choices, context, reply_token, requested_at, expires_at, status) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,'pending')")?
            .execute(params![id, agent, session_id, question, json!(kinds).to_string(), json!(choices).to_string(), context, token, now, expires_at])?;
        audit::append(
            **tx,
            now,
            "clarification.requested",
            None,
            agent,
            &json!({"clarification_id": id, "session_id": session_id, "question": question, "accepted_response_kinds": kinds}),
        )?;
        let c = read_clarification(**tx, "id", &id)?.expect("inserted");
        let ev = AaepEvent::AwaitingClarification { clarification: &c };
        emit(**tx, &*self.envelopes, &ev, None, None, now)?;
        tx.changed(Change::Clarification(c.id.clone()));
        Ok(Ok(c))
        })
    }

    /// A clarification by id, or (`by_token`) by reply token.
    pub fn clarification(
        &self,
        key: &str,
        by_token: bool,
    ) -> Result<Option<aaep::Clarification>, StoreError> {
        let by = if by_token { "reply_token" } else { "id" };
        Ok(read_clarification(self.lock().conn(), by, key)?)
    }

    /// Clarifications, newest first, optionally only those with `status`: at most
    /// [`MAX_CLARIFICATIONS_LISTED`], and no more once those read reach `max_bytes` (question,
    /// context, choices and response, as stored; the first is always listed), and whether more
    /// matched (older ones left off). Read in one snapshot beside the writer ([`Store::aside`])
    /// through the index of `(requested_at, id)` or `(status, requested_at, id)` (migration
    /// 0068): found by review, the list sorted the whole history on the writer, and an agent
    /// asking large questions that timed out at once grew it by 75 KB a second.
    pub fn list_clarifications(
        &self,
        status: Option<&str>,
        max_bytes: usize,
    ) -> Result<(Vec<aaep::Clarification>, bool), StoreError> {
        let limit = MAX_CLARIFICATIONS_LISTED as i64 + 1;
        self.aside(|conn| {
            let mut ids: Vec<String> = match status {
                None => sql::column(
                    conn,
                    "SELECT id FROM clarifications ORDER BY requested_at DESC, id DESC LIMIT ?1",
                    params![limit],
                )?,
                Some(status) => sql::column(
                    conn,
                    "SELECT id FROM clarifications WHERE status = ?1 ORDER BY requested_at DESC, id DESC LIMIT ?2",
                    params![status, limit],
                )?,
            };
            let mut truncated = ids.len() > MAX_CLARIFICATIONS_LISTED;
            ids.truncate(MAX_CLARIFICATIONS_LISTED);
            let (mut out, mut bytes) = (Vec::new(), 0usize);
            for id in ids {
                if bytes >= max_bytes && !out.is_empty() {
                    truncated = true;
                    break;
                }
                if let Some(c) = read_clarification(conn, "id", &id)? {
                    bytes += listed_bytes(&c);
                    out.push(c);
                }
            }
            Ok((out, truncated))
        })
    }

    /// Records the answer `response` (already validated against the accepted kinds) by
    /// `actor`; the first answer wins. `Ok(None)` when the clarification is not pending (or
    /// does not exist).
    pub fn answer_clarification(
        &self,
        id: &str,
        response: &Value,
        actor: &str,
        now: i64,
    ) -> Result<Option<aaep::Clarification>, StoreError> {
        self.write(|tx| {
            let n = tx
                .prepare_cached("UPDATE clarifications SET status = 'answered', response = ?2, answered_by = ?3, answered_at = ?4 WHERE id = ?1 AND status = 'pending' AND expires_at > ?4")?
                .execute(params![id, response.to_string(), actor, now])?;
            if n == 0 {
                return Ok(None);
            }
            let c = read_clarification(**tx, "id", id)?.expect("exists");
            let data = json!({"clarification_id": id, "response": response});
            audit::append(**tx, now, "clarification.answered", None, actor, &data)?;
            let ev = AaepEvent::ClarificationResolved {
                clarification: &c,
                at: now,
            };
            emit(**tx, &*self.envelopes, &ev, None, None, now)?;
            tx.changed(Change::Clarification(id.to_string()));
            Ok(Some(c))
        })
    }

    /// Expires pending clarifications whose time is up; returns how many. Announces a change
    /// (on PostgreSQL a NOTIFY to every replica) only when it expired one (found by review: the
    /// once-a-second sweep woke every event stream of every replica while nothing happened).
    pub fn expire_clarifications(&self, now: i64) -> Result<usize, StoreError> {
        self.write_unannounced(|tx| {
            let ids: Vec<String> = sql::column(
                **tx,
                "SELECT id FROM clarifications WHERE status = 'pending' AND expires_at <= ?1",
                [now],
            )?;
            for id in &ids {
                tx.prepare_cached("UPDATE clarifications SET status = 'expired' WHERE id = ?1")?
                    .execute([id])?;
                let c = read_clarification(**tx, "id", id)?.expect("exists");
                let data = json!({"clarification_id": id});
                audit::append(
                    **tx,
                    now,
                    "clarification.expired",
                    None,
                    "system:expiry",
                    &data,
                )?;
                let ev = AaepEvent::ClarificationResolved {
                    clarification: &c,
                    at: now,
                };
                emit(**tx, &*self.envelopes, &ev, None, None, now)?;
                tx.changed(Change::Clarification(id.clone()));
                tx.changed(Change::Events);
            }
            Ok(ids.len())
        })
    }
}

/// One clarification, found by column `by` (`id` or `reply_token`) equal to `key`.
/// About how many bytes clarification `c` adds to a list: its question, context, choices and
/// response as stored.
fn listed_bytes(c: &Clarification) -> usize {
    let choices: usize = c.choices.iter().map(|v| v.to_string().len()).sum();
    let response = c.response.as_ref().map_or(0, |v| v.to_string().len());
    c.question.len() + c.context.as_ref().map_or(0, String::len) + choices + response + 200
}

pub(crate) fn read_clarification(
    conn: Conn<'_>,
    by: &str,
    key: &str,
) -> db::Result<Option<aaep::Clarification>> {
    let sql = format!(
        "SELECT id, agent, session_id, question, kinds, choices, context, reply_token, requested_at, expires_at, status, response, answered_by, answered_at FROM clarifications WHERE {by} = ?1"
    );
    conn.prepare_cached(&sql)?
        .query_row([key], |r| {
            let kinds: Vec<Value> = json_or_default(r, "kinds")?;
            let response: Option<String> = r.get("response")?;
            let status: String = r.get("status")?;
            from_row!(r => Clarification {
                id, agent, session_id, question, context, requested_at, expires_at,
                answered_by, answered_at,
                reply_token: Some(r.get("reply_token")?),
                status: ClarificationStatus::parse(&status).unwrap_or(ClarificationStatus::Cancelled),
                accepted_response_kinds: kinds.iter().filter_map(|v| v.as_str().map(str::to_string)).collect(),
                choices: json_or_default(r, "choices")?,
                response: response.and_then(|s| serde_json::from_str(&s).ok()),
            })
        })
        .optional()
}

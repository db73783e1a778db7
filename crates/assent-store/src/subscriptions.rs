//! AAEP subscriptions (AAEP §6.4): subscribing, closing, reading the event stream after a
//! sequence number, courtesy notices and the honoured timeout extension. The subscription
//! type is in [`crate::aaep`]; the envelopes are rendered by the server ([`crate::events`]).

use crate::aaep::{self, Subscription};
use crate::audit;
use crate::db::{self, Change, Conn, OptionalExtension as _};
use crate::emit::emit;
use crate::error::StoreError;
use crate::events::AaepEvent;
use crate::kit::random_id;
use crate::params;
use crate::record::ApprovalRecord;
use crate::sql::{self, from_row, json_or_default};
use crate::store::Store;
use serde_json::{Value, json};

impl Store {
    /// Stores a new AAEP subscription of operator `principal` (`aaep.subscribed` audited);
    /// events after the newest one are delivered to it.
    ///
    /// `resume_after`: the sequence number of an event the subscriber already has (an SSE
    /// client reconnecting without a `subscription_id`, with `Last-Event-ID`); the new
    /// subscription then starts after it (at most [`RESUME_WINDOW`] events back), not at the
    /// newest event, so the broadcast events of the gap are delivered (found by review: every
    /// confirmation raised while such a client was disconnected was lost, and an approving
    /// default then ran unseen).
    pub fn subscribe(
        &self,
        principal: &str,
        request: &Value,
        honored: &Value,
        resume_after: Option<i64>,
        now: i64,
    ) -> Result<aaep::Subscription, StoreError> {
        self.write(|tx| {
            tx.changed(Change::Subscriptions);
            let new = (principal, request, honored, resume_after);
            let sub = new_subscription(**tx, new, now)?;
            close_beyond_cap(tx, principal, &sub.id, now)?;
            Ok(sub)
        })
    }

    /// One subscription.
    pub fn subscription(&self, id: &str) -> Result<Option<aaep::Subscription>, StoreError> {
        Ok(read_subscription(self.lock().conn(), id)?)
    }

    /// Closes subscription `id` of `principal` (`aaep.closed`); `false` when it is not theirs
    /// or closed already. Pending confirmations are not affected (assent has other reply
    /// channels; see docs/conformance.md).
    pub fn close_subscription(
        &self,
        id: &str,
        principal: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.write(|tx| {
            let n = tx
                .prepare_cached("UPDATE aaep_subscriptions SET closed_at = ?3 WHERE id = ?1 AND principal = ?2 AND closed_at IS NULL")?
                .execute(params![id, principal, now])?;
            if n == 1 {
                tx.changed(Change::Subscriptions);
                let data = json!({"subscription_id": id});
                audit::append(**tx, now, "aaep.closed", None, principal, &data)?;
            }
            Ok(n == 1)
        })
    }

    /// Closes every open subscription of `principal` (`aaep.closed` each, actor `by`): a
    /// reload removed the operator or changed their key or roles. Found by review: their
    /// subscriptions stayed open, and the timeout extension one had asked for kept lengthening
    /// every new confirmation's timeout. Returns how many closed.
    pub fn close_subscriptions_of(
        &self,
        principal: &str,
        by: &str,
        now: i64,
    ) -> Result<usize, StoreError> {
        self.write(|tx| close_subscriptions_in(tx, principal, by, now))
    }

    /// Closes every open subscription whose principal is none of `operators` (`aaep.closed`
    /// each, actor `by`): at start-up, those of operators the configuration no longer has
    /// (found by review: removed by editing the file and restarting, their subscriptions, and
    /// the timeout extension one had asked for, stayed). Returns how many closed.
    pub fn close_subscriptions_except(
        &self,
        operators: &[String],
        by: &str,
        now: i64,
    ) -> Result<usize, StoreError> {
        let owners: Vec<String> = sql::column(
            self.lock().conn(),
            "SELECT DISTINCT principal FROM aaep_subscriptions WHERE closed_at IS NULL",
            [],
        )?;
        let mut n = 0;
        for gone in owners.iter().filter(|o| !operators.contains(o)) {
            n += self.close_subscriptions_of(gone, by, now)?;
        }
        Ok(n)
    }

    /// Events for subscription `sub` after `seq`, oldest first, at most `limit`.
    pub fn events_after(
        &self,
        sub: &aaep::Subscription,
        seq: i64,
        limit: u32,
    ) -> Result<Vec<aaep::StoredEvent>, StoreError> {
        Ok(read_events_after(self.lock().conn(), sub, seq, limit)?)
    }

    /// Where a stream of open subscription `sub` opened again resumes: after `last` (the
    /// `seq` its `Last-Event-ID` names) or else after the subscription's start, but never
    /// more than [`RESUME_WINDOW`] events back from the newest, nor before its start (found by
    /// review: only a new subscription was held to the window, so a long-lived one replayed
    /// its whole history, through the store, on every reconnect).
    pub fn resume_point(
        &self,
        sub: &aaep::Subscription,
        last: Option<i64>,
    ) -> Result<i64, StoreError> {
        let head: i64 = self.lock().conn().query_row(
            "SELECT coalesce(max(seq), 0) FROM aaep_events",
            [],
            |r| r.get(0),
        )?;
        let from = last.unwrap_or(sub.start_seq).max(sub.start_seq);
        Ok(resume_start(head, from).max(sub.start_seq))
    }

    /// The broadcast confirmation events (`aaep:agent.awaiting.confirmation`) whose approval
    /// is still pending and question events (`aaep:agent.awaiting.clarification`) whose
    /// clarification is, with `seq` after `from` and at most `to`, oldest first, at most
    /// `limit`: what a stream resuming at `to` — the resume window's edge — although its
    /// `Last-Event-ID` named `from` is sent first, page by page (the next page after the last
    /// `seq` sent), so nothing still waiting is skipped (found by review: enough events after
    /// a confirmation, such as an agent proposing and cancelling in a loop, pushed it out of a
    /// reconnecting subscriber's window, and its approving default then ran unseen; found by
    /// review since, only the oldest 64 were sent, fewer than one agent may hold pending, and
    /// no question at all). Read through the pending approvals and questions (migrations 0041
    /// and 0069 index their events), never the skipped part of the log.
    pub fn still_awaiting(
        &self,
        from: i64,
        to: i64,
        limit: u32,
    ) -> Result<Vec<aaep::StoredEvent>, StoreError> {
        Ok(sql::rows(
            self.lock().conn(),
            // `CROSS JOIN`: SQLite then reads the pending approvals first and each one's event
            // by the index, never the skipped part of the log (found by review).
            "SELECT seq, event_id, type, critical, data FROM (
               SELECT e.seq, e.event_id, e.type, e.critical, e.data FROM approvals a
               CROSS JOIN aaep_events e
               WHERE a.status = 'pending' AND e.approval_id = a.id
                 AND e.type = 'aaep:agent.awaiting.confirmation'
                 AND e.subscription_id IS NULL AND e.seq > ?1 AND e.seq <= ?2
               UNION ALL
               SELECT e.seq, e.event_id, e.type, e.critical, e.data FROM clarifications c
               CROSS JOIN aaep_events e
               WHERE c.status = 'pending' AND e.clarification_id = c.id
                 AND e.type = 'aaep:agent.awaiting.clarification'
                 AND e.subscription_id IS NULL AND e.seq > ?1 AND e.seq <= ?2) waiting
             ORDER BY seq LIMIT ?3",
            crate::params![from, to, limit],
            stored_event,
        )?)
    }

    /// The `seq` of event `event_id` (for `Last-Event-ID`).
    pub fn event_seq(&self, event_id: &str) -> Result<Option<i64>, StoreError> {
        Ok(self
            .lock()
            .conn()
            .prepare_cached("SELECT seq FROM aaep_events WHERE event_id = ?1")?
            .query_row([event_id], |r| r.get(0))
            .optional()?)
    }

    /// Sends the courtesy notice of AAEP §6.3.5 to subscription `sub`: the confirmation with
    /// `token` (of approval `a`) was already resolved. At most once per subscription, approval
    /// and kind ([`COURTESY_CONFIRMATION`]), recorded in `aaep_courtesy_sent` (migration 0042)
    /// in the same transaction, so it holds across replicas and restarts: `false` when it was
    /// sent before (nothing is written, and no stream is woken). Found by review: every late
    /// reply sent one more, so a subscriber could grow the event log (and wake every stream)
    /// as fast as it could post the same reply.
    pub fn courtesy_notice(
        &self,
        sub: &str,
        a: &ApprovalRecord,
        token: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let notice = AaepEvent::Resolution {
            approval: a,
            at: now,
            courtesy_for: Some(token),
        };
        let env = &*self.envelopes;
        self.write_unannounced(|tx| {
            let first = tx
                .prepare_cached(
                    "INSERT INTO aaep_courtesy_sent (subscription_id, approval_id, kind, at) \
                     VALUES (?1, ?2, ?3, ?4) ON CONFLICT (subscription_id, approval_id, kind) DO NOTHING",
                )?
                .execute(params![sub, a.id, COURTESY_CONFIRMATION, now])?;
            if first == 0 {
                return Ok(false);
            }
            tx.changed(Change::Events);
            emit(**tx, env, &notice, Some(sub), Some(&a.id), now)?;
            Ok(true)
        })
    }

    /// Closes bare stream subscription `id` of `principal` (one `GET /aaep/v1/events` opened
    /// without a `subscription_id`) whose last stream ended when its stream marks
    /// ([`Store::stream_marks`]) were `marks`, unless a stream marked it seen since
    /// ([`Store::touch_subscription`]: one reopened it by id, here or on another replica, or a
    /// stream there is still open) or it is closed already; `aaep.closed` audited, saying why.
    /// `true` when it closed. One compare-and-close statement, in the database, comparing no
    /// clock: found by review, the close compared the ending replica's clock with the time
    /// another replica's stream wrote, so a clock skew over the grace's margin closed a live
    /// subscription, and a reopen by id accepted at the very end of the grace was closed under
    /// its stream. Before that, it stayed open, counted against the operator's
    /// [`MAX_OPEN_PER_OPERATOR`] and was read again on every change.
    pub fn close_ended_stream(
        &self,
        id: &str,
        principal: &str,
        marks: i64,
        now: i64,
    ) -> Result<bool, StoreError> {
        // Unannounced: no stream is left on it to wake, and a bare subscription extends no
        // timeout (found by review: each close woke every stream of every replica).
        self.write_unannounced(|tx| {
            let n = tx
                .prepare_cached(
                    "UPDATE aaep_subscriptions SET closed_at = ?4 WHERE id = ?1 AND principal = ?2 \
                     AND closed_at IS NULL AND stream_marks = ?3",
                )?
                .execute(params![id, principal, marks, now])?;
            if n == 1 {
                let why = "its stream ended (a stream opened without a subscription_id)";
                let data = json!({"subscription_id": id, "why": why});
                audit::append(**tx, now, "aaep.closed", None, principal, &data)?;
            }
            Ok(n == 1)
        })
    }

    /// How many times streams marked open subscription `id` seen ([`Store::touch_subscription`];
    /// a count kept in the database, no clock): what a bare stream's close compares
    /// ([`Store::close_ended_stream`]). `None` when it is closed or not stored.
    pub fn stream_marks(&self, id: &str) -> Result<Option<i64>, StoreError> {
        Ok(self
            .lock()
            .conn()
            .prepare_cached(
                "SELECT stream_marks FROM aaep_subscriptions WHERE id = ?1 AND closed_at IS NULL",
            )?
            .query_row(params![id], |r| r.get(0))
            .optional()?)
    }

    /// Prunes the AAEP log and subscriptions (run by the audit retention sweep,
    /// [`Store::archive_audit`]): events older than `cutoff` (Unix ms) among the `max` oldest,
    /// except the newest event (the sequence's head) and those of a pending approval (a
    /// subscriber that reconnects still needs its confirmation), and subscriptions closed
    /// before `cutoff` or, open, whose stream was last seen before it
    /// ([`Store::touch_subscription`]; found by review: one was made for every event stream
    /// opened without an id and never closed, and each held call read them all for their
    /// timeout extensions), at most `max` of them, and the courtesy notices sent record of
    /// subscriptions no longer stored (`aaep_courtesy_sent`), at most `max`. Returns how many
    /// rows went. A stream reopened
    /// with a `Last-Event-ID` naming a pruned event resumes [`RESUME_WINDOW`] events back (the
    /// server's `/aaep/v1/events`). Before, neither
    /// table was ever pruned: every approval's events and every stream's subscription stayed
    /// for good.
    pub fn prune_aaep(&self, cutoff: i64, max: i64) -> Result<usize, StoreError> {
        let max = max.max(1);
        Ok(self.write_unannounced(|tx| -> db::Result<usize> {
            let events = tx.execute(
                "DELETE FROM aaep_events WHERE seq IN (SELECT e.seq FROM \
                   (SELECT seq, at, approval_id FROM aaep_events ORDER BY seq LIMIT ?2) e \
                 WHERE e.at < ?1 AND e.seq < (SELECT max(seq) FROM aaep_events) \
                   AND NOT EXISTS (SELECT 1 FROM approvals p WHERE p.id = e.approval_id AND p.status = 'pending'))",
                params![cutoff, max],
            )?;
            let subscriptions = tx.execute(
                "DELETE FROM aaep_subscriptions WHERE id IN (SELECT id FROM aaep_subscriptions \
                 WHERE coalesce(closed_at, last_seen_at, created_at) < ?1 \
                 ORDER BY coalesce(closed_at, last_seen_at, created_at) LIMIT ?2)",
                params![cutoff, max],
            )?;
            if subscriptions > 0 {
                // Their timeout extensions no longer count (every replica re-reads them).
                tx.changed(Change::Subscriptions);
            }
            // The courtesy notices sent to subscriptions no longer stored (none can reply).
            // By the whole key, so at most `max` rows (found by review: by subscription, every
            // row of each of `max` subscriptions went).
            let courtesy = tx.execute(
                "DELETE FROM aaep_courtesy_sent WHERE (subscription_id, approval_id, kind) IN \
                 (SELECT c.subscription_id, c.approval_id, c.kind FROM aaep_courtesy_sent c \
                  WHERE NOT EXISTS (SELECT 1 FROM aaep_subscriptions s WHERE s.id = c.subscription_id) \
                  LIMIT ?1)",
                params![max],
            )?;
            Ok(events + subscriptions + courtesy)
        })?)
    }

    /// Notes that a stream of open subscription `id` is open at `now` (Unix ms) and adds one
    /// to its stream marks ([`Store::stream_marks`]): called when a stream is reopened by id
    /// (before it is accepted); while streams stay open, their gateway marks them all at once
    /// ([`Store::touch_subscriptions`]: every 5 s on a bare stream's subscription, hourly on
    /// others), so that retention ([`Store::prune_aaep`]) keeps the
    /// subscriptions in use and a bare stream's close ([`Store::close_ended_stream`]) leaves a
    /// subscription in use alone. `true` when it is open (it was marked); a reopen refused
    /// here lost the race to the close. A bookkeeping write: it wakes nothing.
    pub fn touch_subscription(&self, id: &str, now: i64) -> Result<bool, StoreError> {
        self.write_unannounced(|tx| {
            let n = tx.execute(
                "UPDATE aaep_subscriptions SET last_seen_at = ?2, stream_marks = stream_marks + 1 \
                 WHERE id = ?1 AND closed_at IS NULL",
                params![id, now],
            )?;
            Ok(n == 1)
        })
    }

    /// [`Store::touch_subscription`] for every open subscription among `ids` at once, in one
    /// write transaction (statements of at most [`TOUCH_CHUNK`] ids each): what a gateway's
    /// streams keeper writes once per interval for all the streams open in its process, so
    /// that 1,000 open streams cost one write per interval, not 1,000 (found by review: each
    /// bare stream wrote its own mark every 5 s through the one write lock, some 200
    /// serialised writes a second). Each open one gets `last_seen_at = now` (Unix ms) and one
    /// more stream mark; closed or unknown ids are left alone. Returns how many were marked.
    /// A bookkeeping write: it wakes nothing.
    pub fn touch_subscriptions(&self, ids: &[String], now: i64) -> Result<usize, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        self.write_unannounced(|tx| {
            let mut marked = 0;
            for chunk in ids.chunks(TOUCH_CHUNK) {
                // A fixed number of slots (the statement cache's key stays one of three
                // texts), the rest filled with the chunk's first id (listed twice, marked once).
                let width = [8, 64, TOUCH_CHUNK]
                    .into_iter()
                    .find(|w| *w >= chunk.len())
                    .unwrap_or(TOUCH_CHUNK);
                let slots: Vec<String> = (0..width).map(|i| format!("?{}", i + 2)).collect();
                let sql = format!(
                    "UPDATE aaep_subscriptions SET last_seen_at = ?1, stream_marks = stream_marks + 1 \
                     WHERE closed_at IS NULL AND id IN ({})",
                    slots.join(", ")
                );
                let mut values: Vec<&dyn db::ToValue> = vec![&now];
                let pad = std::iter::repeat_n(&chunk[0], width - chunk.len());
                values.extend(chunk.iter().chain(pad).map(|id| id as &dyn db::ToValue));
                marked += tx.execute(&sql, values.as_slice())?;
            }
            Ok(marked)
        })
    }

    /// The open subscriptions a bare stream opened (`subscriber_id` `sse:{principal}`), at
    /// most `max` of them, oldest first: `(id, principal, stream marks)`. Read twice by a
    /// gateway's sweep, an interval longer than a bare stream's grace apart: one whose marks
    /// did not change in between has no stream open anywhere (an open one marks it every few
    /// seconds) and is closed ([`Store::close_unstreamed`]).
    pub fn bare_stream_marks(&self, max: i64) -> Result<Vec<(String, String, i64)>, StoreError> {
        Ok(sql::rows(
            self.lock().conn(),
            "SELECT id, principal, stream_marks FROM aaep_subscriptions \
             WHERE closed_at IS NULL AND subscriber_id = 'sse:' || principal \
             ORDER BY created_at, id LIMIT ?1",
            params![max.max(1)],
            db::tuple,
        )?)
    }

    /// Closes each bare stream subscription `(id, principal, marks)` of `idle` whose stream
    /// marks are still `marks` (no stream marked it since they were read, here or on another
    /// replica) and that is still open: `aaep.closed` audited once, saying `why`. One
    /// compare-and-close statement each, in one write transaction, comparing no clock, so a
    /// subscription is closed exactly once whichever replicas (and grace closes,
    /// [`Store::close_ended_stream`]) try at once. Returns the ids closed. What closes a bare
    /// stream's subscription whose gateway died during its grace (found by review: it stayed
    /// open until retention, counted against the operator's [`MAX_OPEN_PER_OPERATOR`]).
    pub fn close_unstreamed(
        &self,
        idle: &[(String, String, i64)],
        why: &str,
        now: i64,
    ) -> Result<Vec<String>, StoreError> {
        if idle.is_empty() {
            return Ok(Vec::new());
        }
        self.write_unannounced(|tx| {
            let mut closed = Vec::new();
            for (id, principal, marks) in idle {
                let n = tx
                    .prepare_cached(
                        "UPDATE aaep_subscriptions SET closed_at = ?4 WHERE id = ?1 AND principal = ?2 \
                         AND closed_at IS NULL AND stream_marks = ?3 AND subscriber_id = 'sse:' || principal",
                    )?
                    .execute(params![id, principal, marks, now])?;
                if n == 1 {
                    let data = json!({"subscription_id": id, "why": why});
                    audit::append(**tx, now, "aaep.closed", None, principal, &data)?;
                    closed.push(id.clone());
                }
            }
            Ok(closed)
        })
    }

    /// The longest timeout extension (ms) honoured for an open subscription (AAEP §6.4.2),
    /// added to new confirmations.
    pub fn timeout_extension_ms(&self) -> Result<i64, StoreError> {
        let honored = sql::json_values(
            self.lock().conn(),
            "SELECT honored FROM aaep_subscriptions WHERE closed_at IS NULL",
            [],
        )?;
        Ok(honored
            .iter()
            .filter_map(|h| h["assent"]["timeout_extension_seconds"].as_i64())
            .max()
            .unwrap_or(0)
            .saturating_mul(1000))
    }
}

/// The most ids one statement of [`Store::touch_subscriptions`] lists (SQLite allows 32,766
/// parameters, PostgreSQL 65,535; statements stay small).
pub const TOUCH_CHUNK: usize = 500;

/// The kind of courtesy notice [`Store::courtesy_notice`] sends: a late `confirmation.reply`
/// (a row of `aaep_courtesy_sent.kind`).
pub const COURTESY_CONFIRMATION: &str = "confirmation";

/// How many events back a new subscription may resume (`resume_after`): an older
/// `Last-Event-ID` resumes this many events back, so a reconnect cannot replay the whole log
/// (found by review). Any pending confirmation is far newer at any realistic rate.
pub const RESUME_WINDOW: i64 = 10_000;

/// Where a subscription resuming after event `resume` starts when the newest is `head`: there,
/// but never before `head - RESUME_WINDOW` nor after `head`.
fn resume_start(head: i64, resume: i64) -> i64 {
    resume.clamp(head.saturating_sub(RESUME_WINDOW).max(0), head.max(0))
}

/// The most AAEP subscriptions one operator holds open: opening one more closes their oldest
/// (`aaep.closed`, saying why; its stream ends). Found by review: subscriptions had no cap —
/// every `GET /aaep/v1/events` without an id opened one more, every reconnect included — and
/// every open one is read again on each change by its streams and by the timeout extension,
/// so one operator key opening thousands stalled the store for every agent.
pub const MAX_OPEN_PER_OPERATOR: usize = 16;

/// Closes `principal`'s open subscriptions beyond [`MAX_OPEN_PER_OPERATOR`], oldest first,
/// keeping `new` (just opened) and the newest others. Runs in the write transaction that
/// inserted `new`, and every write transaction of every replica is serialised (SQLite
/// `BEGIN IMMEDIATE`; PostgreSQL's schema-wide advisory write lock, taken with `BEGIN` before
/// any statement reads: [`crate::db::Conn::write`]), so the count always sees every other
/// replica's committed subscriptions and two replicas subscribing at once cannot both pass
/// the cap (store test `two_replicas_subscribing_at_once_never_pass_an_operators_cap`).
fn close_beyond_cap(
    tx: &crate::db::Tx<'_>,
    principal: &str,
    new: &str,
    now: i64,
) -> Result<(), StoreError> {
    // The last closed are the newest, and those a client opened on purpose (by `POST`, not a
    // bare stream's `sse:`), so the subscriptions left by bare streams go first.
    let open: Vec<String> = sql::column(
        **tx,
        "SELECT id FROM aaep_subscriptions WHERE principal = ?1 AND closed_at IS NULL AND id != ?2
         ORDER BY CASE WHEN subscriber_id LIKE 'sse:%' THEN 0 ELSE 1 END DESC, created_at DESC, id DESC",
        params![principal, new],
    )?;
    for id in open.iter().skip(MAX_OPEN_PER_OPERATOR - 1) {
        tx.prepare_cached("UPDATE aaep_subscriptions SET closed_at = ?2 WHERE id = ?1")?
            .execute(params![id, now])?;
        let why = format!("the operator opened more than {MAX_OPEN_PER_OPERATOR} subscriptions");
        let data = json!({"subscription_id": id, "why": why});
        audit::append(**tx, now, "aaep.closed", None, principal, &data)?;
    }
    Ok(())
}

/// Stores a new subscription of `principal` starting after the newest event (or after
/// `resume_after`, [`resume_start`]); audits `aaep.subscribed`.
fn new_subscription(
    tx: Conn<'_>,
    (principal, request, honored, resume_after): (&str, &Value, &Value, Option<i64>),
    now: i64,
) -> db::Result<aaep::Subscription> {
    let id = random_id("sub_");
    let head: i64 = tx.query_row("SELECT coalesce(max(seq), 0) FROM aaep_events", [], |r| {
        r.get(0)
    })?;
    let start = resume_after.map_or(head, |r| resume_start(head, r));
    let sid = request["subscriber_id"].as_str().unwrap_or("anonymous");
    tx.prepare_cached("INSERT INTO aaep_subscriptions (id, principal, subscriber_id, request, honored, start_seq, created_at) VALUES (?1,?2,?3,?4,?5,?6,?7)")?
        .execute(params![id, principal, sid, request.to_string(), honored.to_string(), start, now])?;
    audit::append(
        tx,
        now,
        "aaep.subscribed",
        None,
        principal,
        &json!({"subscription_id": id, "subscriber_id": sid, "honored_capabilities": honored}),
    )?;
    Ok(aaep::Subscription {
        id,
        principal: principal.to_string(),
        subscriber_id: sid.to_string(),
        honored: honored.clone(),
        start_seq: start,
        closed_at: None,
    })
}

/// One stored subscription.
fn read_subscription(conn: Conn<'_>, id: &str) -> db::Result<Option<aaep::Subscription>> {
    conn.prepare_cached("SELECT id, principal, subscriber_id, honored, start_seq, closed_at FROM aaep_subscriptions WHERE id = ?1")?
        .query_row([id], |r| {
            from_row!(r => Subscription {
                id, principal, subscriber_id, start_seq, closed_at,
                honored: json_or_default(r, "honored")?,
            })
        })
        .optional()
}

/// Events for `sub` after `after_seq` (and after its start), oldest first, at most `limit`,
/// each with its `sequence_number`.
fn read_events_after(
    conn: Conn<'_>,
    sub: &aaep::Subscription,
    after_seq: i64,
    limit: u32,
) -> db::Result<Vec<aaep::StoredEvent>> {
    sql::rows(
        conn,
        "SELECT seq, event_id, type, critical, data FROM aaep_events
         WHERE seq > ?1 AND (subscription_id IS NULL OR subscription_id = ?2) ORDER BY seq LIMIT ?3",
        crate::params![after_seq.max(sub.start_seq), sub.id, limit],
        stored_event,
    )
}

/// One `aaep_events` row (`seq, event_id, type, critical, data`), its `sequence_number` set.
/// A `data` that is no JSON object (the store writes only objects: the row was edited) is
/// passed on as `{"damaged": …}`, logged, so the streams go past it (found by review: setting
/// its `sequence_number` panicked, ending every stream that reached it, again at each resume).
fn stored_event(r: &db::Row<'_>) -> db::Result<aaep::StoredEvent> {
    let seq: i64 = r.get(0)?;
    let mut v: Value = json_or_default(r, 4)?;
    if !v.is_object() {
        tracing::error!(
            seq,
            "an AAEP event row's data is not a JSON object: passed on as damaged"
        );
        v = json!({"damaged": "the stored event is not a JSON object"});
    }
    v["sequence_number"] = json!(seq);
    Ok(aaep::StoredEvent {
        seq,
        event_id: r.get(1)?,
        ty: r.get(2)?,
        critical: r.get(3)?,
        data: v,
    })
}

/// [`Store::close_subscriptions_of`] inside the write transaction `tx` (also the reload's
/// [`Store::revoke_and_audit`]).
pub(crate) fn close_subscriptions_in(
    tx: &db::Tx<'_>,
    principal: &str,
    by: &str,
    now: i64,
) -> Result<usize, StoreError> {
    let ids: Vec<String> = sql::column(
        **tx,
        "SELECT id FROM aaep_subscriptions WHERE principal = ?1 AND closed_at IS NULL",
        [principal],
    )?;
    for id in &ids {
        tx.prepare_cached(
            "UPDATE aaep_subscriptions SET closed_at = ?2 WHERE id = ?1 AND closed_at IS NULL",
        )?
        .execute(params![id, now])?;
        let data = json!({"subscription_id": id, "principal": principal});
        audit::append(**tx, now, "aaep.closed", None, by, &data)?;
    }
    if !ids.is_empty() {
        tx.changed(Change::Subscriptions);
    }
    Ok(ids.len())
}

#[cfg(test)]
mod tests {
    use super::{RESUME_WINDOW, resume_start};

    /// Found by review: any `Last-Event-ID` was a starting point, so each reconnect naming
    /// the first event replayed the whole log through the writer's connection.
    #[test]
    fn a_resume_starts_at_most_the_window_back_and_never_ahead() {
        let head = 50_000;
        assert_eq!(resume_start(head, 49_990), 49_990);
        assert_eq!(resume_start(head, 1), head - RESUME_WINDOW);
        assert_eq!(resume_start(head, -5), head - RESUME_WINDOW);
        assert_eq!(resume_start(head, i64::MAX), head);
        assert_eq!(resume_start(10, 3), 3);
        assert_eq!(resume_start(0, 7), 0);
    }
}

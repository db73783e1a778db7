//! Reading the audit log as an event stream (the dashboard's audit view, outgoing webhooks)
//! and the webhooks' delivery state: each webhook's cursor into the log and its dead letters.

use crate::audit::AuditRecord;
use crate::db::{self, OptionalExtension as _, ToValue};
use crate::error::StoreError;
use crate::params;
use crate::sql::{self, from_row};
use crate::store::Store;
use assent_core::template::plain_line;
use serde::Serialize;
use serde_json::Value;

/// The most audit kinds [`Store::audit_after`] filters on.
const MAX_KINDS: usize = 32;

/// A webhook delivery that failed every attempt.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetter {
    /// Row id.
    pub id: i64,
    /// The webhook's name in the config.
    pub webhook: String,
    /// The audit record it was about.
    pub audit_seq: i64,
    /// The event type sent (`approval.requested`, `approval.resolved`).
    pub event: String,
    /// The body that was sent (JSON).
    pub body: String,
    /// How many attempts were made.
    pub attempts: i64,
    /// The last failure.
    pub last_error: String,
    /// Unix milliseconds.
    pub failed_at: i64,
}

/// A delivery cursor as read by [`Store::webhook_cursor`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CursorState {
    /// The last audit `seq` delivered or given up on.
    pub last_seq: i64,
    /// The lease's holder (a random id per process), if any.
    pub holder: Option<String>,
    /// Whether the lease is free: no holder, or its lease ran out.
    pub free: bool,
}

impl Store {
    /// Audit records with `seq > after` whose kind is in `kinds` (all kinds when empty),
    /// oldest first, at most `limit`.
    pub fn audit_after(
        &self,
        after: i64,
        kinds: &[&str],
        limit: u32,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        // `kind IN (?3, ?4, …)`, one parameter per kind (no `json_each` on Postgres); the
        // callers pass a fixed list, so the text (the statement cache's key) is stable.
        if kinds.len() > MAX_KINDS {
            return Err(StoreError::Invalid(format!(
                "at most {MAX_KINDS} audit kinds may be asked for, not {}",
                kinds.len()
            )));
        }
        let filter = if kinds.is_empty() {
            String::new()
        } else {
            let marks: Vec<String> = (3..3 + kinds.len()).map(|i| format!("?{i}")).collect();
            format!(" AND kind IN ({})", marks.join(","))
        };
        let sql = format!(
            "SELECT seq, at, kind, approval_id, actor, data, prev_hash, hash FROM audit
             WHERE seq > ?1{filter} ORDER BY seq LIMIT ?2"
        );
        let mut p: Vec<&dyn ToValue> = vec![&after, &limit];
        p.extend(kinds.iter().map(|k| k as &dyn ToValue));
        Ok(sql::rows(
            self.lock().conn(),
            &sql,
            p.as_slice(),
            AuditRecord::read,
        )?)
    }

    /// The newest `limit` audit records, newest first.
    pub fn audit_tail(&self, limit: u32) -> Result<Vec<AuditRecord>, StoreError> {
        Ok(sql::rows(
            self.lock().conn(),
            "SELECT seq, at, kind, approval_id, actor, data, prev_hash, hash FROM audit ORDER BY seq DESC LIMIT ?1",
            [limit],
            AuditRecord::read,
        )?)
    }

    /// The sequence number of the newest audit record (0 when empty).
    pub fn audit_head_seq(&self) -> Result<i64, StoreError> {
        let guard = self.lock();
        let conn = guard.conn();
        Ok(conn.query_row("SELECT COALESCE(MAX(seq), 0) FROM audit", [], |r| r.get(0))?)
    }

    /// Takes or renews `webhook`'s delivery lease for `holder` (a random id per process)
    /// until `now + lease_ms` (Unix ms; on PostgreSQL `now` is the database's clock, the
    /// caller's is ignored), issue 13 §2: replicas of one database deliver each
    /// event once because only the lease's holder delivers and moves the cursor. A webhook
    /// never started begins at the end of the log (it gets the events from now on). Returns
    /// the cursor (the last audit record delivered or given up on) when `holder` holds the
    /// lease now, `None` while another holder's lease runs. A lease that ends more than
    /// `2 × lease_ms` after `now` is taken as lapsed (no holder writes one: a planted lease). Writes without
    /// waking the event streams (renewals would wake every replica's delivery loop).
    pub fn lease_webhook(
        &self,
        webhook: &str,
        holder: &str,
        now: i64,
        lease_ms: i64,
    ) -> Result<Option<i64>, StoreError> {
        Ok(self.write_unannounced(|tx| {
            // On PostgreSQL the database's clock judges leases: replicas whose clocks differ
            // would otherwise each see the other's lease run out early and deliver twice
            // (found by review). SQLite's writers share one machine's clock.
            let now = tx.shared_clock_ms(now)?;
            let until = now.saturating_add(lease_ms);
            let beyond = now.saturating_add(lease_ms.saturating_mul(2));
            tx.execute(
                "INSERT INTO webhook_cursors (webhook, last_seq)
                 SELECT CAST(?1 AS TEXT), COALESCE(MAX(seq), 0) FROM audit WHERE true
                 ON CONFLICT(webhook) DO NOTHING",
                [webhook],
            )?;
            let taken = tx.execute(
                &format!(
                    "UPDATE webhook_cursors SET holder = ?2, lease_until = ?4
                     WHERE webhook = ?1 AND (holder = ?2 OR {})",
                    lapsed_lease_sql("?3", "?5")
                ),
                params![webhook, holder, now, until, beyond],
            )?;
            if taken == 0 {
                return Ok::<_, db::DbError>(None);
            }
            // A cursor past the end of the log (no writer of ours puts it there) is brought
            // back to the end: nothing lies past the head, so nothing is skipped (found by
            // review: planted at 9e18 it silenced the webhook for good, since cursors only
            // move forward).
            let back = tx.execute(
                "UPDATE webhook_cursors SET last_seq = (SELECT COALESCE(MAX(seq), 0) FROM audit)
                 WHERE webhook = ?1 AND last_seq > (SELECT COALESCE(MAX(seq), 0) FROM audit)",
                [webhook],
            )?;
            if back > 0 {
                tracing::error!(
                    webhook,
                    "a delivery cursor past the end of the audit log (edited in the database?) was brought back to its end"
                );
            }
            tx.query_row(
                "SELECT last_seq FROM webhook_cursors WHERE webhook = ?1",
                [webhook],
                |r| r.get(0),
            )
            .map(Some)
        })?)
    }

    /// `webhook`'s delivery cursor as any replica reads it, without a write (no transaction,
    /// no write lock): `None` when it was never started. Whether its lease is free is judged
    /// at `now` (Unix ms) — on PostgreSQL by the database's clock, the caller's ignored — for
    /// leases of `lease_ms`, as [`Store::lease_webhook`] judges it (one ending more than
    /// `2 × lease_ms` ahead is lapsed). A replica that does not hold the lease reads this
    /// on each wake-up and tries [`Store::lease_webhook`] only when records lie past the
    /// cursor and the lease is free or lapsed (found by review: every replica not holding
    /// the lease took the write transaction, under the cluster-wide write lock, at every
    /// local write and `NOTIFY`, for each webhook and the Slack bot).
    pub fn webhook_cursor(
        &self,
        webhook: &str,
        now: i64,
        lease_ms: i64,
    ) -> Result<Option<CursorState>, StoreError> {
        let guard = self.lock();
        let conn = guard.conn();
        let ahead = lease_ms.saturating_mul(2);
        // PostgreSQL: the clock in the text, `?2` the allowed run; SQLite: `?2` the clock.
        let (clock, run) = match conn.backend() {
            db::Backend::Postgres => (crate::db::PG_CLOCK_MS, "CAST(?2 AS BIGINT)"),
            db::Backend::Sqlite => ("CAST(?2 AS BIGINT)", "CAST(?3 AS BIGINT)"),
        };
        let sql = format!(
            "SELECT last_seq, holder, CASE WHEN {} THEN 1 ELSE 0 END
             FROM webhook_cursors WHERE webhook = ?1",
            lapsed_lease_sql(clock, &format!("{clock} + {run}"))
        );
        let read = |r: &db::Row<'_>| {
            Ok(CursorState {
                last_seq: r.get(0)?,
                holder: r.get(1)?,
                free: r.get::<i64>(2)? == 1,
            })
        };
        Ok(match conn.backend() {
            db::Backend::Postgres => conn.query_row(&sql, params![webhook, ahead], read),
            db::Backend::Sqlite => conn.query_row(&sql, params![webhook, now, ahead], read),
        }
        .optional()?)
    }

    /// Counts one more attempt at delivering audit record `seq` on `webhook`, if `holder` holds
    /// its cursor's lease and the cursor is still before `seq`: the attempt's number (1 for the
    /// first at that record, then on across restarts, lease take-overs and failed renewals),
    /// or `None` when `holder` may not deliver it (another replica took the lease, or the
    /// record was delivered or given up). Found by review: the count lived in the delivering
    /// task, so any of those began the event again at attempt 1 and the first backoff, and a
    /// failing receiver was tried past `max_attempts`, never dead-lettered.
    ///
    /// The same write renews the lease to `lease_ms` from its commit (judged, as every lease
    /// is, by the database's clock on PostgreSQL and by `now` on SQLite), so the attempt that
    /// follows has the whole lease to run in. Found by review: the lease was renewed by an
    /// earlier write, and the wait for this one's turn (up to the write lock's 10 s) plus a
    /// slow receiver could outlast it, so another replica took the lease mid-attempt and sent
    /// the same event (a second Slack card of one approval) while this one was still sending.
    pub fn count_webhook_attempt(
        &self,
        webhook: &str,
        holder: &str,
        seq: i64,
        (now, lease_ms): (i64, i64),
    ) -> Result<Option<u32>, StoreError> {
        Ok(self.write_unannounced(|tx| {
            let until = tx.shared_clock_ms(now)?.saturating_add(lease_ms);
            let n = tx.execute(
                "UPDATE webhook_cursors
                 SET attempts = CASE WHEN attempt_seq = ?3 THEN attempts + 1 ELSE 1 END,
                     attempt_seq = ?3, lease_until = ?4
                 WHERE webhook = ?1 AND holder = ?2 AND last_seq < ?3",
                params![webhook, holder, seq, until],
            )?;
            if n == 0 {
                return Ok::<_, db::DbError>(None);
            }
            let attempts: i64 = tx.query_row(
                "SELECT attempts FROM webhook_cursors WHERE webhook = ?1",
                [webhook],
                |r| r.get(0),
            )?;
            Ok(Some(u32::try_from(attempts).unwrap_or(u32::MAX)))
        })?)
    }

    /// Moves `webhook`'s cursor forward to `seq` (delivered, or skipped, up to there) if
    /// `holder` still holds its lease. `false`: another replica took the lease (this one was
    /// paused past it) and delivers from its own reading of the cursor; stop delivering.
    pub fn advance_webhook(
        &self,
        webhook: &str,
        holder: &str,
        seq: i64,
    ) -> Result<bool, StoreError> {
        Ok(self.write_unannounced(|tx| advance(tx, webhook, holder, seq))?)
    }

    /// Records a delivery that failed every attempt and moves the cursor past it, in one
    /// transaction, if `holder` still holds the webhook's lease (`false`: it does not, and
    /// nothing was written). Its `last_error` is kept to [`MAX_LAST_ERROR`] characters, control,
    /// line-separating and invisible (bidirectional, zero-width) characters replaced by spaces.
    pub fn dead_letter(&self, d: &DeadLetter, holder: &str) -> Result<bool, StoreError> {
        Ok(self.write_unannounced(|tx| {
            if !advance(tx, &d.webhook, holder, d.audit_seq)? {
                return Ok::<_, db::DbError>(false);
            }
            let last_error = capped_error(&d.last_error);
            tx.execute(
                "INSERT INTO webhook_dead_letters (webhook, audit_seq, event, body, attempts, last_error, failed_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![d.webhook, d.audit_seq, d.event, d.body, d.attempts, last_error, d.failed_at],
            )?;
            Ok(true)
        })?)
    }

    /// Gives `webhook`'s lease up (graceful shutdown) so another replica takes over at once.
    pub fn release_webhook(&self, webhook: &str, holder: &str) -> Result<(), StoreError> {
        self.write_unannounced(|tx| {
            tx.execute(
                "UPDATE webhook_cursors SET holder = NULL, lease_until = 0 WHERE webhook = ?1 AND holder = ?2",
                [webhook, holder],
            )
            .map(drop)
        })?;
        Ok(())
    }

    /// Prunes what the webhooks leave behind (run by the audit retention sweep,
    /// [`Store::archive_audit`]): card links that expired by `now` (used or not: a link opens a
    /// card only until its approval's deadline), and dead letters that failed before `cutoff`
    /// (Unix ms), at most `max` rows of each. Returns how many rows went. Before, neither table
    /// was ever pruned.
    pub fn prune_outbox(&self, cutoff: i64, max: i64, now: i64) -> Result<usize, StoreError> {
        let max = max.max(1);
        Ok(self.write_unannounced(|tx| -> db::Result<usize> {
            let links = tx.execute(
                "DELETE FROM card_links WHERE token_sha256 IN (SELECT token_sha256 FROM card_links WHERE expires_at <= ?1 LIMIT ?2)",
                params![now, max],
            )?;
            let dead = tx.execute(
                "DELETE FROM webhook_dead_letters WHERE id IN (SELECT id FROM webhook_dead_letters WHERE failed_at < ?1 ORDER BY id LIMIT ?2)",
                params![cutoff, max],
            )?;
            Ok(links + dead)
        })?)
    }

    /// Stores a single-use link to `approval_id`'s card (by the SHA-256 of its token, hex),
    /// valid until `expires_at` (Unix ms).
    pub fn create_card_link(
        &self,
        token_sha256: &str,
        approval_id: &str,
        expires_at: i64,
    ) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO card_links (token_sha256, approval_id, expires_at) VALUES (?1, ?2, ?3)",
                params![token_sha256, approval_id, expires_at],
            )?;
            Ok(())
        })
    }

    /// Whether the card link whose token has SHA-256 `token_sha256` (lowercase hex) exists, is
    /// unused and has not expired at `now` (Unix ms), by a read only: it stays unused. What
    /// `GET /ui/l/{token}` asks without a dashboard session (found by review: a mail link
    /// scanner or chat preview fetching the link used it up before its operator signed in).
    pub fn card_link_live(&self, token_sha256: &str, now: i64) -> Result<bool, StoreError> {
        let live: Option<i64> = self
            .lock()
            .conn()
            .prepare_cached(
                "SELECT 1 FROM card_links WHERE token_sha256 = ?1 AND used_at IS NULL AND expires_at > ?2",
            )?
            .query_row(params![token_sha256, now], |r| r.get(0))
            .optional()?;
        Ok(live.is_some())
    }

    /// Uses a card link: the approval id when the link exists, is unused and has not expired
    /// (it is then marked used, atomically); `None` otherwise. A link that is not live is
    /// found by a read, without the write transaction (found by review: every `GET
    /// /ui/l/{anything}`, which needs no credentials, took the one writer every agent shares).
    pub fn use_card_link(
        &self,
        token_sha256: &str,
        now: i64,
    ) -> Result<Option<String>, StoreError> {
        if !self.card_link_live(token_sha256, now)? {
            return Ok(None);
        }
        self.write(|tx| {
            Ok(tx
                .query_row(
                    "UPDATE card_links SET used_at = ?2
                     WHERE token_sha256 = ?1 AND used_at IS NULL AND expires_at > ?2
                     RETURNING approval_id",
                    params![token_sha256, now],
                    |r| r.get(0),
                )
                .optional()?)
        })
    }

    /// Appends a dry run of approval `approval_id`'s call (`dry_run` audit record: the tool,
    /// who ran it, and its result or error, kept up to 64 KiB).
    pub fn record_dry_run(
        &self,
        approval_id: &str,
        actor: &str,
        tool: &str,
        outcome: &Result<Value, String>,
        now: i64,
    ) -> Result<(), StoreError> {
        let data = match outcome {
            Ok(r) => {
                let text = r.to_string();
                let hash = assent_core::canonical::sha256_hex(text.as_bytes());
                if text.len() > 65_536 {
                    serde_json::json!({"tool": tool, "result_sha256": hash, "result_truncated": text.chars().take(65_536).collect::<String>()})
                } else {
                    serde_json::json!({"tool": tool, "result_sha256": hash, "result": r})
                }
            }
            Err(e) => serde_json::json!({"tool": tool, "error": e}),
        };
        self.write(|tx| {
            Ok(crate::audit::append(
                **tx,
                now,
                "dry_run",
                Some(approval_id),
                actor,
                &data,
            )?)
        })
    }

    /// The newest dry run of approval `approval_id`, if any (the `kind` term as the partial
    /// index `audit_approval` has it, migration 0031).
    pub fn last_dry_run(&self, approval_id: &str) -> Result<Option<AuditRecord>, StoreError> {
        let guard = self.lock();
        let conn = guard.conn();
        Ok(conn
            .prepare_cached(
                "SELECT seq, at, kind, approval_id, actor, data, prev_hash, hash FROM audit
                 WHERE approval_id = ?1 AND kind = 'dry_run' ORDER BY seq DESC LIMIT 1",
            )?
            .query_row([approval_id], AuditRecord::read)
            .optional()?)
    }

    /// Dead letters newest first: at most `limit`, only those with `id < before_id` when given
    /// (paging: pass [`DeadLetterPage::next`] to get the next page), each `last_error` read to
    /// at most [`MAX_LAST_ERROR`] characters and cleaned as [`Store::dead_letter`] keeps it
    /// (rows written before that, or by another writer, too); the page ends early once its
    /// bodies and errors reach [`DEAD_LETTER_PAGE_BYTES`] (at least one), so a page may hold fewer
    /// than `limit` with more below it. Found by review: `?limit=1000` read every row whole,
    /// 1 MiB errors included; and a page cut by bytes gave no sign that more followed, so a
    /// client taking a short page for the last stopped early — [`DeadLetterPage::next`] says
    /// whether one does (checked by reading whether any dead letter lies below the page).
    pub fn dead_letters(
        &self,
        before_id: Option<i64>,
        limit: i64,
    ) -> Result<DeadLetterPage, StoreError> {
        let guard = self.lock();
        let conn = guard.conn();
        let limit = limit.max(1);
        let (mut letters, mut bytes) = (Vec::new(), 0usize);
        conn.prepare_cached(
            "SELECT id, webhook, audit_seq, event, body, attempts, SUBSTR(last_error, 1, 2000) AS last_error, failed_at
             FROM webhook_dead_letters WHERE CAST(?1 AS BIGINT) IS NULL OR id < ?1
             ORDER BY id DESC LIMIT ?2",
        )?
        .for_each(crate::params![before_id, limit], |r| {
            let d: db::Result<DeadLetter> = from_row!(r => DeadLetter {
                id, webhook, audit_seq, event, body, attempts, last_error, failed_at
            });
            // Rows written before errors were cleaned, or by another writer, are cleaned here.
            let mut d = d?;
            d.last_error = capped_error(&d.last_error);
            bytes = bytes.saturating_add(d.body.len() + d.last_error.len());
            letters.push(d);
            Ok(match bytes >= DEAD_LETTER_PAGE_BYTES {
                true => std::ops::ControlFlow::Break(()),
                false => std::ops::ControlFlow::Continue(()),
            })
        })?;
        let stopped = letters.len() as i64 >= limit || bytes >= DEAD_LETTER_PAGE_BYTES;
        let last = letters.last().map(|d| d.id);
        let next = match (stopped, last) {
            (true, Some(last)) => conn
                .prepare_cached("SELECT id FROM webhook_dead_letters WHERE id < ?1 LIMIT 1")?
                .query_row([last], |r| r.get::<i64>(0))
                .optional()?
                .map(|_| last),
            _ => None,
        };
        Ok(DeadLetterPage { letters, next })
    }
}

/// One page of [`Store::dead_letters`].
#[derive(Debug, Clone)]
pub struct DeadLetterPage {
    /// The dead letters, newest first.
    pub letters: Vec<DeadLetter>,
    /// The `before_id` of the next page (this page's last id) when more dead letters lie
    /// below this page (it was full or cut by bytes and some remain); `None` on the last page.
    pub next: Option<i64>,
}

/// The most characters of a dead letter's `last_error` kept.
pub const MAX_LAST_ERROR: usize = 2_000;

/// About the most bytes of bodies and errors one page of [`Store::dead_letters`] holds (as
/// the approvals listing's page, 1 MiB).
pub const DEAD_LETTER_PAGE_BYTES: usize = 1 << 20;

/// `e` as a dead letter keeps it: one plain line ([`plain_line`]: control characters, the
/// line separators U+2028/2029 and the default-ignorable (invisible) characters replaced by
/// spaces), at most [`MAX_LAST_ERROR`] characters. Attack (found by review): a receiver's error
/// holding U+202E reversed how the rest of the line reads wherever an operator reads the dead
/// letter (terminal, dashboard, log viewer).
fn capped_error(e: &str) -> String {
    plain_line(e, MAX_LAST_ERROR, "")
}

/// The SQL condition under which a webhook cursor's lease is free to take at `now` (an SQL
/// expression): no holder, its lease ran out, or it ends after `beyond` (`now + 2 × LEASE`),
/// which no holder renewing every attempt writes. Attack (found by review): a database writer
/// planting `holder = 'ghost', lease_until = 9e18` stopped the webhook's (or Slack bot's)
/// delivery silently for ever; such a lease is now taken as lapsed.
fn lapsed_lease_sql(now: &str, beyond: &str) -> String {
    format!("(holder IS NULL OR lease_until < {now} OR lease_until > {beyond})")
}

/// Moves the cursor to `seq` when `holder` holds the lease and it is behind `seq`; whether
/// `holder` holds it.
fn advance(tx: &db::Tx<'_>, webhook: &str, holder: &str, seq: i64) -> db::Result<bool> {
    tx.execute(
        "UPDATE webhook_cursors SET last_seq = CASE WHEN last_seq < ?3 THEN ?3 ELSE last_seq END
         WHERE webhook = ?1 AND holder = ?2",
        params![webhook, holder, seq],
    )
    .map(|n| n == 1)
}

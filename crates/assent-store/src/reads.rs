//! The store's read-only approval queries: one approval, a list by status, the approval of
//! an AAEP reply token. Reading a row strictly is `record.rs`; this file writes nothing.

use crate::db::{self, Conn, OptionalExtension as _};
use crate::error::StoreError;
use crate::record::{ApprovalRecord, approval_row, decisions_of, read_approval};
use crate::seal::Sealed;
use crate::sql;
use crate::store::Store;
use crate::tokens::signed_token;
use assent_core::approval::ApprovalStatus;

/// One page of a listing: its approvals, and the cursor of the next page (`(requested_at,
/// rowid)` of this page's last row; `None` on the last page).
pub(crate) type Page = (Vec<ApprovalRecord>, Option<(i64, i64)>);

impl Store {
    /// Runs `f` in one read snapshot. On Postgres on a read session beside the writer
    /// session ([`crate::readers::Readers::read`]), so reads do not queue behind the writes'
    /// round trips; on SQLite on the writer connection, between group commits: measured with
    /// `bench/replicas.py`, SQLite read connections beside the writer halved the median
    /// decision-to-wake time at 64 agents but doubled its p99 at 16 (each read on another
    /// connection starts with a page cache the writer's commits invalidated), so SQLite keeps
    /// its reads on the writer (BENCHMARKS.md, B3 over HTTP).
    ///
    /// Inside a batch that holds its write transaction open (`batch.rs`), on the writer
    /// session on both backends: a call of the batch reads what the batch wrote (a read
    /// session would not see it), and is answered only after the batch's commit.
    pub(crate) fn read<T>(&self, f: impl Fn(Conn<'_>) -> db::Result<T>) -> Result<T, StoreError> {
        let in_batch = crate::db::HOLDS_BATCH.with(|h| h.get());
        match self.database {
            crate::db::Database::Postgres { .. } if !in_batch => {
                self.readers.read(&self.database, f)
            }
            _ => Ok(self.lock().conn().snapshot(&f)?),
        }
    }

    /// Reads one approval with its decisions and token info (on a read session, beside the
    /// writer: `readers.rs`); a token row whose seal does not hold is left out
    /// ([`Store::vouched`]), here and in every read of this file.
    pub fn get_approval(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        Ok(self
            .read(|c| read_approval(c, id))?
            .map(|r| self.vouched(r)))
    }

    /// Approval `id` when it may be acted on as shown: its terms and standing hold their seal
    /// under this gateway's key ([`crate::approval_seal`]), its stored call hashes to its
    /// `call_hash` ([`ApprovalRecord::call_intact`]) and no column is `damaged`; `None` for a
    /// row planted or edited behind the gateway's back (or no such approval). For what runs
    /// something on an approval's behalf without deciding it, the dashboard's dry run (found by
    /// review: a dry run ran whatever tool an edited row named, with no seal checked). Read on
    /// one snapshot.
    pub fn intact_approval(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        let key = self.seal_key(Sealed::Approval);
        let found = self.read(|c| {
            let Some(rec) = read_approval(c, id)? else {
                return Ok(None);
            };
            let sealed = crate::approval_seal::holds(c, &key, id)?;
            Ok((sealed && rec.damaged.is_empty() && rec.call_intact()).then_some(rec))
        })?;
        Ok(found.map(|r| self.vouched(r)))
    }

    /// [`Store::get_approval`] and, when `with_token` and the approval has a minted token, its
    /// signed token string (what [`Store::token_string`] gives), read in one snapshot on a
    /// read session: the agent's long-poll answer, which does not wait for the writer.
    pub fn approval_and_token(
        &self,
        id: &str,
        with_token: bool,
    ) -> Result<(Option<ApprovalRecord>, Option<String>), StoreError> {
        let (rec, token) = self.read(|c| {
            let rec = read_approval(c, id)?;
            let minted = rec.as_ref().is_some_and(|r| r.token.is_some());
            let token = if with_token && minted {
                signed_token(c, &self.key, &self.seal_key(Sealed::Token), id)?
            } else {
                None
            };
            Ok((rec, token))
        })?;
        Ok((rec.map(|r| self.vouched(r)), token))
    }

    /// Lists approvals, newest first, optionally only those with `status`, at most `limit`
    /// (one snapshot on a read session). Whole records, with no bound on their bytes: for the
    /// store's own callers and tests; the server lists with [`Store::approval_page`] and
    /// [`Store::approval_summaries`].
    pub fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>, StoreError> {
        let (listed, _) = self.read(|c| page(c, status, limit, None, usize::MAX, read_approval))?;
        Ok(listed.into_iter().map(|a| self.vouched(a)).collect())
    }

    /// One page of approvals, newest first (by `requested_at`, then insertion order), only
    /// those with `status` when given, starting after `before` (`None`: the newest), read in one
    /// snapshot beside the writer (`Store::aside`): at most `limit` whole records, and
    /// the page ends early once the call text it holds (each record's canonical call, edited
    /// call, message and summary, in bytes) reaches `max_bytes` — at least one record, so a
    /// page holds at most `max_bytes` plus one record. Also the cursor of the next page
    /// (`(requested_at, rowid)` of this page's last row; `None` on the last page). Found by
    /// review: a listing read up to 5,000 whole records (arguments parsed, then copied into
    /// the answer) on the writer's connection, so an agent proposing 256 KiB calls and
    /// cancelling each at once made every listing hold gigabytes and stall the gateway.
    /// A pending record's `damaged` also names what no seal vouches for (`seal`, `call`), as
    /// [`Store::checked_approval`] does: the page is what an operator reviews from
    /// (`assent pending`, `assent watch`), and a call edited behind the gateway's back is not
    /// shown there as the agent's request (found by review: the card, webhooks and Slack said
    /// so, the listing did not). The check reads a pending row's terms again and hashes its
    /// call: about twice a plain page's work, still bounded by `max_bytes`. Errors: the
    /// database cannot be read (a damaged row is left out, as in every listing).
    pub fn approval_page(
        &self,
        status: Option<ApprovalStatus>,
        limit: u32,
        before: Option<(i64, i64)>,
        max_bytes: usize,
    ) -> Result<Page, StoreError> {
        let keys = self.standing_keys();
        let checked = |c: Conn<'_>, id: &str| crate::receipts::read_checked(c, &keys, id);
        let (listed, next) = self.aside(|c| page(c, status, limit, before, max_bytes, checked))?;
        Ok((listed.into_iter().map(|a| self.vouched(a)).collect(), next))
    }

    /// [`Store::approval_page`] as summaries, with no byte bound: each record without its
    /// call's arguments, canonical text, edit, target diff or human summary (`arguments`
    /// `null`, the texts empty, no edit), its message cut to 1,024 characters (then `…`: a
    /// message template may quote an argument), without votes or token, with its decisions; for
    /// lists that show none of those (the dashboard's queue, history and a card's similar
    /// calls). A summary is for showing only: never decide, sign or run anything from one
    /// ([`ApprovalRecord::call_intact`] does not hold for it).
    pub fn approval_summaries(
        &self,
        status: Option<ApprovalStatus>,
        limit: u32,
        before: Option<(i64, i64)>,
    ) -> Result<Page, StoreError> {
        self.aside(|c| page(c, status, limit, before, usize::MAX, read_summary))
    }

    /// How many approvals are pending, per risk tier (`("R2", 3)`, …; tiers with none are
    /// left out), for the server's `/metrics` (issue 15 §2). One grouped count on a read
    /// session, served by the index of pending approvals.
    pub fn pending_by_tier(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.read(|conn| {
            crate::sql::rows(
                conn,
                "SELECT risk_tier, count(*) FROM approvals WHERE status = 'pending' GROUP BY risk_tier ORDER BY risk_tier",
                crate::params![],
                db::tuple,
            )
        })
    }

    /// The approval whose confirmation carries `reply_token`.
    pub fn approval_by_reply_token(
        &self,
        token: &str,
    ) -> Result<Option<ApprovalRecord>, StoreError> {
        let rec = self.read(|conn| {
            let id: Option<String> = conn
                .prepare_cached("SELECT id FROM approvals WHERE reply_token = ?1")?
                .query_row([token], |r| r.get(0))
                .optional()?;
            match id {
                Some(id) => read_approval(conn, &id),
                None => Ok(None),
            }
        })?;
        Ok(rec.map(|r| self.vouched(r)))
    }
}

/// The rows of one listing page after `before`: `(id, requested_at, rowid)`, newest first, at
/// most `limit` + 1 (the one more says whether a next page exists). The pending ones by a
/// statement of their own, with the status written out: a partial index
/// (`approvals_pending_expires`, small) serves only a query whose condition names its own,
/// which a bound parameter does not (Postgres's generic plan of a prepared statement; found by
/// review). Every other listing reads `approvals_requested` from its newest end.
fn keys(
    conn: Conn<'_>,
    status: Option<ApprovalStatus>,
    limit: u32,
    before: Option<(i64, i64)>,
) -> db::Result<Vec<(String, i64, i64)>> {
    let (at, row) = before.unwrap_or((i64::MAX, i64::MAX));
    let n = i64::from(limit) + 1;
    let key = db::tuple;
    const AFTER: &str = "requested_at <= ?1 AND (requested_at < ?1 OR rowid < ?2)";
    const ORDER: &str = "ORDER BY requested_at DESC, rowid DESC";
    const COLUMNS: &str = "SELECT CAST(id AS TEXT), requested_at, rowid FROM approvals";
    match status {
        Some(ApprovalStatus::Pending) => sql::rows(
            conn,
            &format!("{COLUMNS} WHERE status = 'pending' AND {AFTER} {ORDER} LIMIT ?3"),
            crate::params![at, row, n],
            key,
        ),
        Some(s) => sql::rows(
            conn,
            &format!("{COLUMNS} WHERE status = ?4 AND {AFTER} {ORDER} LIMIT ?3"),
            crate::params![at, row, n, s.as_str()],
            key,
        ),
        None => sql::rows(
            conn,
            &format!("{COLUMNS} WHERE {AFTER} {ORDER} LIMIT ?3"),
            crate::params![at, row, n],
            key,
        ),
    }
}

/// The call text of `a` a listing page counts against its byte budget, in bytes: its
/// canonical call, edited call, message and human summary (what an agent can make large).
fn weight(a: &ApprovalRecord) -> usize {
    let edited = a
        .edited
        .as_ref()
        .map_or(0, |e| e.canonical.len() + e.canonical_arguments.len());
    // What else an agent sizes and the listing returns: a resubmitted plan's diff, the
    // terms' lists (found by review: left out, a page of plan approvals with large diffs
    // passed the budget).
    let lists = serde_json::to_string(&(
        &a.target_diff,
        &a.terms.reasons,
        &a.terms.triggers,
        &a.terms.suggested_alternatives,
        &a.terms.side_effects,
        &a.terms.rollback,
    ))
    .map_or(0, |s| s.len());
    a.canonical.len() + edited + a.terms.message.len() + a.human_summary.len() + lists
}

/// One listing page (see [`Store::approval_page`]) with each row read by `read`.
fn page(
    conn: Conn<'_>,
    status: Option<ApprovalStatus>,
    limit: u32,
    before: Option<(i64, i64)>,
    max_bytes: usize,
    read: impl Fn(Conn<'_>, &str) -> db::Result<Option<ApprovalRecord>>,
) -> db::Result<Page> {
    let keys = keys(conn, status, limit.max(1), before)?;
    let (mut out, mut bytes) = (Vec::with_capacity(keys.len().min(1024)), 0usize);
    for (i, (id, _, _)) in keys.iter().enumerate() {
        if i == limit.max(1) as usize || bytes >= max_bytes {
            let (_, at, row) = keys[i - 1];
            return Ok((out, Some((at, row))));
        }
        match read(conn, id) {
            Ok(Some(a)) => {
                bytes = bytes.saturating_add(weight(&a));
                out.push(a);
            }
            Ok(None) => {}
            // A row with a value of another type than the gateway writes (SQLite keeps
            // what it is given: edited behind its back) cannot be shown; it no longer
            // fails the whole listing (found by review). `audit verify` names it.
            Err(e) if e.is_damaged_row() => {}
            Err(e) => return Err(e),
        }
    }
    Ok((out, None))
}

/// Approval `id` as a summary (see [`Store::approval_summaries`]): its row without the call's
/// texts, and its decisions.
fn read_summary(conn: Conn<'_>, id: &str) -> db::Result<Option<ApprovalRecord>> {
    // The columns of `read_approval`, in its order, with the large ones left out.
    let rec = conn
        .prepare_cached("SELECT id, agent, session_id, tool, server, 'null', '', call_hash, CASE WHEN length(message) > 1024 THEN substr(message, 1, 1024) || '…' ELSE message END, risk_tier, irreversible, reasons, approvers, default_decision, requested_at, expires_at, status, decided_at,
            run_id, device_id, group_key, '', triggers, suggested_alternatives, escalate_to, escalate_after_ms, escalated_at, output_bytes, scope, grant_id, NULL, NULL, NULL,
            trace_id, span_id, target_type, target_id, reply_token, NULL, in_client, side_effects, rollback, dry_run_tool, redact, quorum, on_behalf_of, separation_of_duties,
            escalation, escalation_schedule, escalation_steps, require_passkey, NULL, traceparent
            FROM approvals WHERE id = ?1")?
        .query_row([id], approval_row)
        .optional()?;
    let Some(mut rec) = rec else { return Ok(None) };
    rec.decisions = decisions_of(conn, id)?
        .into_iter()
        .map(|(d, _)| d)
        .collect();
    Ok(Some(rec))
}

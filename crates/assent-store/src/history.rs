//! The recorded proposals, read back from the audit log for replay and suggestions (issue 16
//! §1–§2): every `call.allowed`, `call.denied` and `approval.requested` record in sequence order,
//! with what became of a held call (its approval's status, grant, settling decision). Read only,
//! in pages of at most [`MAX_PAGE`] records and about [`PAGE_BYTES`] of stored record text,
//! each in its own read snapshot, so a long history never holds the writer; both backends, the
//! SQL written once.
//!
//! A record that cannot be read as a proposal (its `data` not the shape the store writes, a
//! status or tier that does not parse) is counted in [`Page::unreadable`], never guessed at.

use crate::db::{self, Conn, Database};
use crate::error::StoreError;
use crate::store::Store;
use assent_core::approval::ApprovalStatus;
use assent_core::replay::{BLOCK_RULE, Recorded, StandingGrant, Was};
use assent_core::{Reason, RiskTier, ToolCall};
use serde_json::Value;

/// The most records one page reads.
pub const MAX_PAGE: u32 = 2000;

/// A page stops taking records once their stored `data` text reaches this many bytes (8 MiB),
/// so a page holds at most this plus one record, whatever its `limit`. Found by review: a page
/// of [`MAX_PAGE`] calls, each with arguments up to the gateway's `max_arguments_bytes`
/// (256 KiB by default, configurable higher), read about 512 MB at once. The sizes are read
/// first (`octet_length`, which neither backend needs the text for), then only the records
/// that fit, in the same snapshot.
pub const PAGE_BYTES: u64 = 8 << 20;

/// Which records to read: sequence numbers after `after_seq`, proposals at or after `since_ms`
/// and before `until_ms` (Unix ms; `None`: unbounded), at most `limit` records (capped at
/// [`MAX_PAGE`]).
#[derive(Debug, Clone, Copy)]
pub struct Query {
    /// Read records with a larger sequence number (0: from the start).
    pub after_seq: i64,
    /// Inclusive lower bound of the proposal time, Unix ms.
    pub since_ms: Option<i64>,
    /// Exclusive upper bound of the proposal time, Unix ms.
    pub until_ms: Option<i64>,
    /// Records per page.
    pub limit: u32,
}

/// One page of the history.
#[derive(Debug, Clone, Default)]
pub struct Page {
    /// The proposals read, in sequence order.
    pub recorded: Vec<Recorded>,
    /// Records of a proposal kind that could not be read as one.
    pub unreadable: u64,
    /// The last sequence number read (the next page's `after_seq`); `None` when the page was
    /// empty.
    pub last_seq: Option<i64>,
    /// Whether the page was full (more may follow): it read `limit` records, or stopped at
    /// [`PAGE_BYTES`].
    pub full: bool,
    /// The stored `data` text of the records read (readable or not), in bytes: what a reader
    /// that keeps the proposals counts against a bound of its own.
    pub bytes: u64,
}

const PAGE_SQL: &str = "SELECT a.seq, a.at, a.kind, a.actor, a.data, p.status, p.grant_id, p.decided_at, \
     (SELECT d.actor FROM decisions d WHERE d.approval_id = p.id AND d.decision IN ('approve','deny','expire') ORDER BY d.at, d.rowid LIMIT 1), \
     p.edited_hash, \
     (SELECT t.used_at FROM tokens t WHERE t.approval_id = p.id) \
     FROM audit a LEFT JOIN approvals p ON p.id = a.approval_id \
     WHERE a.seq > ?1 AND a.kind IN ('call.allowed','call.denied','approval.requested') \
     AND a.at >= ?2 AND a.at < ?3 ORDER BY a.seq LIMIT ?4";

/// The sequence numbers and stored `data` sizes of the records [`PAGE_SQL`] would read.
const SIZES_SQL: &str = "SELECT a.seq, CAST(octet_length(a.data) AS BIGINT) FROM audit a \
     WHERE a.seq > ?1 AND a.kind IN ('call.allowed','call.denied','approval.requested') \
     AND a.at >= ?2 AND a.at < ?3 ORDER BY a.seq LIMIT ?4";

/// One raw row of [`PAGE_SQL`].
struct Row {
    seq: i64,
    at: i64,
    kind: String,
    actor: String,
    data: String,
    status: Option<String>,
    grant_id: Option<String>,
    decided_at: Option<i64>,
    decided_by: Option<String>,
    edited_hash: Option<String>,
    used_at: Option<i64>,
}

/// How many of the records whose stored `data` sizes are `sizes` (bytes, in reading order) a
/// page takes: up to the one that brings their sum to [`PAGE_BYTES`] or past it (so at least
/// one), and that sum.
pub(crate) fn within_bytes(sizes: impl IntoIterator<Item = i64>) -> (usize, u64) {
    let (mut take, mut bytes) = (0usize, 0u64);
    for size in sizes {
        if bytes >= PAGE_BYTES {
            break;
        }
        bytes += u64::try_from(size).unwrap_or(0);
        take += 1;
    }
    (take, bytes)
}

/// Reads one page of `q` on `conn` (inside a read snapshot, so the sizes read first and the
/// records read after are of the same rows): at most `q.limit` records, and no more once their
/// stored text reaches [`PAGE_BYTES`] (at least one).
pub fn read_page(conn: Conn<'_>, q: &Query) -> db::Result<Page> {
    let limit = q.limit.clamp(1, MAX_PAGE);
    let (since, until) = (
        q.since_ms.unwrap_or(i64::MIN),
        q.until_ms.unwrap_or(i64::MAX),
    );
    let sizes = crate::sql::rows(
        conn,
        SIZES_SQL,
        crate::params![q.after_seq, since, until, i64::from(limit)],
        |r| Ok((r.get::<i64>(0)?, r.get::<i64>(1)?)),
    )?;
    let (take, bytes) = within_bytes(sizes.iter().map(|(_, size)| *size));
    let rows = crate::sql::rows(
        conn,
        PAGE_SQL,
        crate::params![q.after_seq, since, until, take as i64],
        |r| {
            Ok(Row {
                seq: r.get(0)?,
                at: r.get(1)?,
                kind: r.get(2)?,
                actor: r.get(3)?,
                data: r.get(4)?,
                status: r.get(5)?,
                grant_id: r.get(6)?,
                decided_at: r.get(7)?,
                decided_by: r.get(8)?,
                edited_hash: r.get(9)?,
                used_at: r.get(10)?,
            })
        },
    )?;
    let mut page = Page {
        full: rows.len() == limit as usize || take < sizes.len(),
        last_seq: rows.last().map(|r| r.seq),
        bytes,
        ..Page::default()
    };
    for row in rows {
        match recorded(row) {
            Some(rec) => page.recorded.push(rec),
            None => page.unreadable += 1,
        }
    }
    Ok(page)
}

/// The proposal `row` records, or `None` when it cannot be read as one.
fn recorded(row: Row) -> Option<Recorded> {
    let data: Value = serde_json::from_str(&row.data).ok()?;
    let call: ToolCall = serde_json::from_value(data.get("call")?.clone()).ok()?;
    let call = ToolCall::new(call.tool, call.server, call.arguments).ok()?;
    let reasons: Vec<Reason> = serde_json::from_value(data.get("reasons")?.clone()).ok()?;
    let risk_tier = RiskTier::parse(data.get("risk_tier")?.as_str()?)?;
    let was = match row.kind.as_str() {
        "call.allowed" => Was::Allowed,
        "call.denied" => Was::Denied {
            blocked: reasons.iter().any(|r| r.rule == BLOCK_RULE),
        },
        // A grant stood in for a person (its decision's actor is `grant:ID`); an approval a
        // person made that created a grant carries `grant_id` too, and is theirs.
        _ if row.grant_id.is_some()
            && row
                .decided_by
                .as_deref()
                .is_some_and(|d| d.starts_with("grant:")) =>
        {
            Was::Granted
        }
        _ => Was::Held {
            status: ApprovalStatus::parse(row.status.as_deref()?)?,
            decided_by: row.decided_by,
            decided_at_ms: row.decided_at,
            edited: row.edited_hash.is_some(),
        },
    };
    // When a held call's token was redeemed (a grant's call marked its session when
    // proposed).
    let redeemed_at_ms = row.used_at.filter(|_| matches!(was, Was::Held { .. }));
    Some(Recorded {
        redeemed_at_ms,
        seq: row.seq,
        at_ms: row.at,
        agent: row.actor,
        session_id: data.get("session_id")?.as_str()?.to_string(),
        call,
        risk_tier,
        reasons,
        was,
    })
}

/// Calls `each` with every page of the history in `[since_ms, until_ms)`, in order, until a
/// page is not full or `each` returns `false`. Returns the unreadable records counted.
pub fn for_each_page(
    read: &mut dyn FnMut(&Query) -> Result<Page, StoreError>,
    since_ms: Option<i64>,
    until_ms: Option<i64>,
    each: &mut dyn FnMut(Vec<Recorded>) -> bool,
) -> Result<u64, StoreError> {
    let mut q = Query {
        after_seq: 0,
        since_ms,
        until_ms,
        limit: MAX_PAGE,
    };
    let mut unreadable = 0;
    loop {
        let page = read(&q)?;
        unreadable += page.unreadable;
        let (full, last) = (page.full, page.last_seq);
        if !each(page.recorded) || !full {
            return Ok(unreadable);
        }
        match last {
            Some(s) => q.after_seq = s,
            None => return Ok(unreadable),
        }
    }
}

/// [`for_each_page`] over `database` opened read-only (SQLite) or on a session of its own
/// (PostgreSQL): what `assent replay` and `assent suggest` read, with no gateway running.
///
/// Errors: no database there, an unreachable one, a failed query.
pub fn for_each_offline(
    database: &Database,
    since_ms: Option<i64>,
    until_ms: Option<i64>,
    each: &mut dyn FnMut(Vec<Recorded>) -> bool,
) -> Result<u64, StoreError> {
    let conn = offline(database)?;
    let mut read = |q: &Query| Ok(conn.conn().snapshot(|c| read_page(c, q))?);
    for_each_page(&mut read, since_ms, until_ms, each)
}

/// The grants standing at `now` (Unix ms) on `conn`: not revoked and not expired
/// ([`crate::sql::grant_unexpired_at`]), as a replay weighs them
/// ([`assent_core::replay::Replayer::with_standing_grants`]). Their seals are not checked (the
/// command line has no key to check them with): a planted row covers no live call, but
/// counting it can only make a replay find more loosened calls, never hide one.
pub fn standing_grants(conn: Conn<'_>, now: i64) -> db::Result<Vec<StandingGrant>> {
    let sql = format!(
        "SELECT agent, session_id, tool, server, call_hash, expires_at, created_at FROM grants
          WHERE revoked_at IS NULL AND {}",
        crate::sql::grant_unexpired_at("?1")
    );
    crate::sql::rows(conn, &sql, crate::params![now], |r| {
        Ok(StandingGrant {
            agent: r.get(0)?,
            session_id: r.get(1)?,
            tool: r.get(2)?,
            server: r.get(3)?,
            call_hash: r.get(4)?,
            expires_at: r.get(5)?,
            created_at: r.get(6)?,
        })
    })
}

/// `database` opened for reading with no gateway running: read-only (SQLite), or a session of
/// its own (PostgreSQL).
fn offline(database: &Database) -> Result<db::Connection, StoreError> {
    Ok(match database {
        Database::Sqlite { path } => {
            let dir = path.parent().unwrap_or(std::path::Path::new("."));
            db::Connection::Sqlite(crate::open::open_read_only(dir)?)
        }
        Database::Postgres { .. } => database.connect()?,
    })
}

/// [`standing_grants`] of `database` opened as [`for_each_offline`] opens it.
///
/// Errors: no database there, an unreachable one, a failed query.
pub fn standing_grants_offline(
    database: &Database,
    now: i64,
) -> Result<Vec<StandingGrant>, StoreError> {
    let conn = offline(database)?;
    Ok(conn.conn().snapshot(|c| standing_grants(c, now))?)
}

impl Store {
    /// One page of the history (a read snapshot of its own: see [`Store::read`]).
    pub fn history_page(&self, q: &Query) -> Result<Page, StoreError> {
        self.read(|c| read_page(c, q))
    }

    /// [`standing_grants`] at `now`, in a snapshot beside the writer ([`Store::aside`]).
    pub fn standing_grants(&self, now: i64) -> Result<Vec<StandingGrant>, StoreError> {
        self.aside(|c| standing_grants(c, now))
    }
}

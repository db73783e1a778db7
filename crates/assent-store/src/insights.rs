//! Insights for the people who approve (issue 16 §4): over a time range `[since, until)` (Unix
//! ms), how many prompts people saw per UTC day; per tool, agent and operator how those ended
//! (approved, rejected, expired, cancelled, still pending), the approval rate and the time to a
//! person's decision (median and p90, nearest rank); decisions made in under
//! [`RUBBER_STAMP_MS`] of the card being raised; and per tool the calls that needed nobody
//! (allowed or denied outright, covered by a grant). Reads only.
//!
//! A prompt is an approval that waited for a person: an approval covered by a grant (decided
//! by `grant:<id>` the moment it was made) is counted as granted, not as a prompt. An
//! operator's figures are the cards they decided (approve or deny).
//!
//! Bounded: the range is at most [`MAX_RANGE_MS`]; each list holds the [`LIST_CAP`] keys with
//! the most prompts (its `total` says how many there were). Counts and percentiles are
//! computed in SQL (GROUP BY and window functions, one text for both engines), so no
//! approval row is loaded into memory; the outright verdicts are in the audit log only
//! (`call.allowed`, `call.denied`, the tool inside the record's JSON), read in chunks of
//! [`AUDIT_CHUNK`] records and about [`crate::history::PAGE_BYTES`] of stored text in time
//! order, at most [`MAX_AUDIT_RECORDS`] of them, of at most [`MAX_OUTRIGHT_TOOLS`] tools
//! (`outright_truncated` says so). The time ranges are indexed (migration 0023:
//! `approvals(requested_at)`, `audit(at, seq)`), so a narrow range of a long history reads
//! that range only. Every read runs beside the writer (on SQLite a connection
//! of its own), so gating is not held up while insights are computed.

use crate::db::{self, Conn};
use crate::error::StoreError;
use crate::sql::{self, from_row};
use crate::store::Store;
use std::collections::HashMap;

/// The longest range [`Store::insights`] answers: 366 days, in ms.
pub const MAX_RANGE_MS: i64 = 366 * DAY_MS;
/// How many keys each per-tool, per-agent, per-operator and outright list holds at most
/// (those with the most prompts, or the most outright verdicts).
pub const LIST_CAP: usize = 50;
/// A person's decision made sooner than this after the card was raised (ms) counts as a
/// rubber stamp.
pub const RUBBER_STAMP_MS: i64 = 2_000;
/// How many outright verdicts of the audit log are read in one chunk at most (fewer once
/// their stored text reaches [`crate::history::PAGE_BYTES`]).
pub const AUDIT_CHUNK: i64 = 2_000;
/// How many outright verdicts one request reads at most.
pub const MAX_AUDIT_RECORDS: u64 = 500_000;
/// How many tools' outright verdicts one request counts at most: past it, verdicts of a tool
/// not yet counted are left out (`outright_truncated`). Found by review: an agent calling
/// ever new undeclared tools (each denied outright and recorded under its name of up to 256
/// bytes) made every insights page build a map of up to [`MAX_AUDIT_RECORDS`] names, some
/// hundreds of MB, and copy it once more.
pub const MAX_OUTRIGHT_TOOLS: usize = 10_000;
/// One UTC day, in ms.
pub const DAY_MS: i64 = 86_400_000;

/// What [`Store::insights`] found over `[since, until)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Insights {
    /// The range's start, Unix ms (inclusive).
    pub since: i64,
    /// The range's end, Unix ms (exclusive).
    pub until: i64,
    /// Prompts per UTC day, every day the range touches (0 where none), oldest first.
    pub days: Vec<DayCount>,
    /// All prompts together (its `key` is empty).
    pub overall: Figures,
    /// Per tool (the tool's name, without its MCP server).
    pub tools: Breakdown,
    /// Per agent id.
    pub agents: Breakdown,
    /// Per operator: the cards each decided (approve or deny); `expired`, `cancelled` and
    /// `pending` are 0.
    pub operators: Breakdown,
    /// Per tool, the calls that needed nobody, most first, at most [`LIST_CAP`].
    pub outright: Vec<Outright>,
    /// How many tools had calls that needed nobody (`outright` may be cut to [`LIST_CAP`]).
    pub outright_total: u64,
    /// Whether the audit log held more than [`MAX_AUDIT_RECORDS`] outright verdicts in the
    /// range, so `allowed`/`denied` count only the first ones, or verdicts of more than
    /// [`MAX_OUTRIGHT_TOOLS`] tools, so those of the tools past it are not counted.
    pub outright_truncated: bool,
}

/// Prompts raised on one UTC day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayCount {
    /// The day's start, Unix ms (a multiple of [`DAY_MS`]).
    pub day: i64,
    /// Approvals that waited for a person, requested that day.
    pub prompts: u64,
}

/// One dimension's figures, cut to the [`LIST_CAP`] keys with the most prompts.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Breakdown {
    /// Most prompts first (ties by key).
    pub rows: Vec<Figures>,
    /// How many keys there were in all.
    pub total: u64,
}

/// How the prompts of one key (a tool, an agent, an operator) ended.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Figures {
    /// The tool, agent or operator.
    pub key: String,
    /// Approvals that waited for a person.
    pub prompts: u64,
    /// Of those, approved.
    pub approved: u64,
    /// Rejected (denied by a person).
    pub rejected: u64,
    /// Expired (nobody decided in time; the default applied).
    pub expired: u64,
    /// Cancelled (by the agent or an operator).
    pub cancelled: u64,
    /// Still waiting.
    pub pending: u64,
    /// Decided by a person sooner than [`RUBBER_STAMP_MS`] after being raised.
    pub rubber_stamped: u64,
    /// Median time from the card being raised to a person's decision, ms (nearest rank);
    /// `None` when nobody decided one.
    pub median_ms: Option<i64>,
    /// 90th percentile of the same, ms (nearest rank).
    pub p90_ms: Option<i64>,
}

impl Figures {
    /// `approved / (approved + rejected)`: the share of a person's decisions that approved;
    /// `None` when a person decided none.
    pub fn approval_rate(&self) -> Option<f64> {
        let decided = self.approved + self.rejected;
        (decided > 0).then(|| self.approved as f64 / decided as f64)
    }
}

/// The calls of one tool that needed nobody.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outright {
    /// The tool.
    pub tool: String,
    /// Allowed by the policy (`call.allowed`).
    pub allowed: u64,
    /// Denied by the policy (`call.denied`).
    pub denied: u64,
    /// Covered by an earlier approval's grant (`grant.used`).
    pub granted: u64,
}

impl Store {
    /// The insights over `[since, until)` (Unix ms; see the module doc). `Invalid` when
    /// `until <= since` or the range is longer than [`MAX_RANGE_MS`].
    pub fn insights(&self, since: i64, until: i64) -> Result<Insights, StoreError> {
        if until <= since {
            return Err(StoreError::Invalid("until must be after since".into()));
        }
        if until.saturating_sub(since) > MAX_RANGE_MS {
            return Err(StoreError::Invalid(
                "the range is longer than 366 days".into(),
            ));
        }
        let (per_day, overall, tools, agents, operators, granted) = self.aside(|c| {
            Ok((
                prompts_per_day(c, since, until)?,
                breakdown(c, Dimension::Overall, since, until)?,
                breakdown(c, Dimension::Tool, since, until)?,
                breakdown(c, Dimension::Agent, since, until)?,
                breakdown(c, Dimension::Operator, since, until)?,
                granted_per_tool(c, since, until)?,
            ))
        })?;
        let (verdicts, outright_truncated) = self.outright_verdicts(since, until)?;
        let (outright, outright_total) = merge_outright(verdicts, granted);
        Ok(Insights {
            since,
            until,
            days: fill_days(since, until, &per_day),
            overall: overall.rows.into_iter().next().unwrap_or_default(),
            tools,
            agents,
            operators,
            outright,
            outright_total,
            outright_truncated,
        })
    }

    /// Runs `f` in one read snapshot beside the writer: on SQLite on a connection of its own
    /// (a WAL reader, so the aggregates never hold the writer's connection and gating goes on
    /// while they run), on Postgres on a read session ([`Store::read`]).
    pub(crate) fn aside<T>(&self, f: impl Fn(Conn<'_>) -> db::Result<T>) -> Result<T, StoreError> {
        match &self.database {
            db::Database::Sqlite { .. } => {
                let own = self.database.connect()?;
                Ok(own.conn().snapshot(&f)?)
            }
            db::Database::Postgres { .. } => self.read(f),
        }
    }

    /// Per tool, `(allowed, denied)` outright in `[since, until)` from the audit log, in one
    /// snapshot beside the writer ([`Store::aside`]), read in chunks of [`AUDIT_CHUNK`]
    /// records and about [`crate::history::PAGE_BYTES`] (memory stays bounded), and whether
    /// [`MAX_AUDIT_RECORDS`] or [`MAX_OUTRIGHT_TOOLS`] cut it.
    fn outright_verdicts(&self, since: i64, until: i64) -> Result<(Verdicts, bool), StoreError> {
        self.aside(|c| outright_in(c, since, until))
    }
}

/// [`Store::outright_verdicts`] on session `c`.
fn outright_in(c: Conn<'_>, since: i64, until: i64) -> db::Result<(Verdicts, bool)> {
    let mut out = Verdicts::new();
    // Keyset paging in the order of index `audit_at` (`at`, `seq`; migration 0023): each chunk
    // starts where the last one ended, so the range is read once.
    // A chunk also stops at about `history::PAGE_BYTES` of stored text, its records' sizes read
    // first (found by review: 2,000 records at a time, whatever their size, were 512 MiB in
    // memory for calls whose arguments an agent had padded to 256 KiB).
    let (mut from, mut after, mut read, mut cut) = (since, 0_i64, 0_u64, false);
    loop {
        let sizes: Vec<i64> = sql::rows(
            c,
            &format!("SELECT CAST(octet_length(data) AS BIGINT) {OUTRIGHT_CHUNK}"),
            crate::params![from, until, after, AUDIT_CHUNK],
            |r| r.get(0),
        )?;
        let (take, _) = crate::history::within_bytes(sizes);
        let chunk: Vec<(i64, i64, String, String)> = sql::rows(
            c,
            &format!("SELECT seq, at, kind, data {OUTRIGHT_CHUNK}"),
            crate::params![from, until, after, take as i64],
            db::tuple,
        )?;
        let Some(last) = chunk.last() else {
            return Ok((out, cut));
        };
        (after, from) = (last.0, last.1);
        for (_, _, kind, data) in &chunk {
            if read >= MAX_AUDIT_RECORDS {
                return Ok((out, true));
            }
            read += 1;
            let Some(tool) = tool_of(data) else { continue };
            if out.len() >= MAX_OUTRIGHT_TOOLS && !out.contains_key(&tool) {
                cut = true;
                continue;
            }
            let e = out.entry(tool).or_default();
            if kind == "call.allowed" {
                e.0 += 1;
            } else {
                e.1 += 1;
            }
        }
    }
}

/// The rest of [`outright_in`]'s reads of one chunk after its `SELECT` list: the outright
/// verdicts from `at` `?1` (after `seq` `?3` at that instant) to before `?2`, `?4` of them.
const OUTRIGHT_CHUNK: &str = "FROM audit WHERE at >= ?1 AND at < ?2 AND (at > ?1 OR seq > ?3)
    AND kind IN ('call.allowed', 'call.denied') ORDER BY at, seq LIMIT ?4";

/// Per tool, how many calls were allowed and denied outright.
type Verdicts = HashMap<String, (u64, u64)>;

/// The tool of an outright verdict's audit data (`{"call": {"tool": …}, …}`); `None` for a
/// record that is not of that shape (the store wrote it, so that is damage, left out).
fn tool_of(data: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Call {
        tool: String,
    }
    #[derive(serde::Deserialize)]
    struct Record {
        call: Call,
    }
    serde_json::from_str::<Record>(data)
        .ok()
        .map(|r| r.call.tool)
}

/// The keys the figures are grouped by.
#[derive(Clone, Copy)]
enum Dimension {
    /// Everything together.
    Overall,
    /// `approvals.tool`.
    Tool,
    /// `approvals.agent`.
    Agent,
    /// The actor of the person's decision.
    Operator,
}

impl Dimension {
    /// The key's SQL expression, and an extra condition on the row.
    fn sql(self) -> (&'static str, &'static str) {
        match self {
            Dimension::Overall => ("CAST('' AS TEXT)", ""),
            Dimension::Tool => ("a.tool", ""),
            Dimension::Agent => ("a.agent", ""),
            Dimension::Operator => ("h.actor", "AND h.actor IS NOT NULL"),
        }
    }
}

/// Approvals requested in `[?1, ?2)` that a grant did not cover: the prompts.
const PROMPTS: &str = "a.requested_at >= ?1 AND a.requested_at < ?2
    AND NOT EXISTS (SELECT 1 FROM decisions g WHERE g.approval_id = a.id AND substr(g.actor, 1, 6) = 'grant:')";

/// The figures of `dim` in `[since, until)`: counts by status, rubber stamps, and the median
/// and p90 of the time to a person's decision by nearest rank (`ROW_NUMBER` over each key's
/// decision times; rank `ceil(n·p/100)` is `(n·p + 99) / 100` in integer arithmetic), the
/// [`LIST_CAP`] keys with the most prompts, and how many keys there were.
fn breakdown(c: Conn<'_>, dim: Dimension, since: i64, until: i64) -> db::Result<Breakdown> {
    let (key, extra) = dim.sql();
    let text = format!(
        "WITH p AS (
           SELECT {key} AS k, a.status AS status, h.at - a.requested_at AS ms
           FROM approvals a LEFT JOIN decisions h ON h.approval_id = a.id AND h.decision IN ('approve', 'deny')
           WHERE {PROMPTS} {extra}),
         r AS (SELECT k, ms, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ms) AS rn, COUNT(*) OVER (PARTITION BY k) AS n
               FROM p WHERE ms IS NOT NULL),
         q AS (SELECT k, MAX(CASE WHEN rn = (n * 50 + 99) / 100 THEN ms END) AS median_ms,
                         MAX(CASE WHEN rn = (n * 90 + 99) / 100 THEN ms END) AS p90_ms
               FROM r GROUP BY k),
         c AS (SELECT k, COUNT(*) AS prompts,
                      SUM(CASE WHEN status = 'approved' THEN 1 ELSE 0 END) AS approved,
                      SUM(CASE WHEN status = 'rejected' THEN 1 ELSE 0 END) AS rejected,
                      SUM(CASE WHEN status = 'expired' THEN 1 ELSE 0 END) AS expired,
                      SUM(CASE WHEN status = 'cancelled' THEN 1 ELSE 0 END) AS cancelled,
                      SUM(CASE WHEN status = 'pending' THEN 1 ELSE 0 END) AS pending,
                      SUM(CASE WHEN ms IS NOT NULL AND ms < ?3 THEN 1 ELSE 0 END) AS rubber_stamped
               FROM p GROUP BY k)
         SELECT c.k AS key, c.prompts, c.approved, c.rejected, c.expired, c.cancelled, c.pending,
                c.rubber_stamped, q.median_ms, q.p90_ms, (SELECT COUNT(*) FROM c) AS total
         FROM c LEFT JOIN q ON q.k = c.k ORDER BY c.prompts DESC, c.k LIMIT ?4"
    );
    let mut total = 0_u64;
    let rows = sql::rows(
        c,
        &text,
        crate::params![since, until, RUBBER_STAMP_MS, LIST_CAP as i64],
        |r| {
            total = r.get("total")?;
            from_row!(r => Figures { key, prompts, approved, rejected, expired, cancelled, pending,
                                     rubber_stamped, median_ms, p90_ms })
        },
    )?;
    Ok(Breakdown { rows, total })
}

/// Prompts per UTC day number (`requested_at / DAY_MS`) in `[since, until)`, days with none
/// left out.
fn prompts_per_day(c: Conn<'_>, since: i64, until: i64) -> db::Result<Vec<(i64, u64)>> {
    sql::rows(
        c,
        &format!(
            "SELECT a.requested_at / {DAY_MS} AS day, COUNT(*) AS n FROM approvals a WHERE {PROMPTS}
             GROUP BY a.requested_at / {DAY_MS} ORDER BY day"
        ),
        crate::params![since, until],
        db::tuple,
    )
}

/// Per tool, the approvals in `[since, until)` a grant covered.
fn granted_per_tool(c: Conn<'_>, since: i64, until: i64) -> db::Result<Vec<(String, u64)>> {
    sql::rows(
        c,
        "SELECT a.tool, COUNT(*) FROM approvals a JOIN decisions g ON g.approval_id = a.id AND substr(g.actor, 1, 6) = 'grant:'
         WHERE a.requested_at >= ?1 AND a.requested_at < ?2 GROUP BY a.tool",
        crate::params![since, until],
        db::tuple,
    )
}

/// Every UTC day `[since, until)` touches with its prompts from `counted` (day numbers).
fn fill_days(since: i64, until: i64, counted: &[(i64, u64)]) -> Vec<DayCount> {
    let first = since.div_euclid(DAY_MS);
    let last = (until - 1).div_euclid(DAY_MS);
    let by_day: HashMap<i64, u64> = counted.iter().copied().collect();
    (first..=last)
        .map(|d| DayCount {
            day: d * DAY_MS,
            prompts: by_day.get(&d).copied().unwrap_or(0),
        })
        .collect()
}

/// The outright verdicts and grant uses per tool, most first (ties by name), cut to
/// [`LIST_CAP`], and how many tools there were.
fn merge_outright(verdicts: Verdicts, granted: Vec<(String, u64)>) -> (Vec<Outright>, u64) {
    // Counts by tool, each name moved once into its row (never copied).
    let mut by_tool: HashMap<String, (u64, u64, u64)> = verdicts
        .into_iter()
        .map(|(tool, (allowed, denied))| (tool, (allowed, denied, 0)))
        .collect();
    for (tool, n) in granted {
        by_tool.entry(tool).or_default().2 = n;
    }
    let total = by_tool.len() as u64;
    let mut list: Vec<Outright> = by_tool
        .into_iter()
        .map(|(tool, (allowed, denied, granted))| Outright {
            tool,
            allowed,
            denied,
            granted,
        })
        .collect();
    list.sort_by(|a, b| {
        let n = |o: &Outright| o.allowed + o.denied + o.granted;
        n(b).cmp(&n(a)).then_with(|| a.tool.cmp(&b.tool))
    });
    list.truncate(LIST_CAP);
    (list, total)
}

//! Learning samples (MPLP Confirm module §5, seed 001): every settled Confirm is a labelled
//! example of what a person allowed or refused. One sample per decided approval, in the shape
//! of the MPLP learning schemas (`learning/mplp-learning-sample-core.schema.json`; a plan's
//! Confirm also fits `mplp-learning-sample-intent.schema.json`):
//!
//! - a plan: `sample_family: intent_resolution`, input `intent_id` (the plan id) and
//!   `raw_request_summary` (its objective), output `final_intent_summary`, `plan_id`,
//!   `plan_step_count`, `plan_structure` (the steps) and `resolution_quality_label`;
//! - a tool call or another target: `sample_family: confirm_decision`, input the exact call
//!   (tool, server, arguments, `call_hash`), state the gatekeeper's view (risk tier, reasons,
//!   triggers), output the outcome (status, decision, who, scope, the edited arguments).
//!
//! Both carry the seed's `feedback` (`source`, `type`, `quality_label`, `details`) and a `meta`
//! with `human_feedback_label` and the MPLP `confirm.*` event ids. The sample id is the id of
//! the deciding MPLP decision, so exporting twice gives the same ids.
//!
//! Read in pages (keyset paging, [`SampleCursor`]): oldest decision first, in the total order
//! of `(decided_at, id)`, each page at most `limit` samples and about [`PAGE_BYTES`] of JSON
//! text. Found by review: the export read every settled approval into one list (each sample's
//! masked arguments copied twice), so an agent that proposed ~250 KiB calls and cancelled them
//! in a loop grew one export's memory without bound. A settlement is stamped with the time it
//! is made, so an approval settled while a reader pages mostly comes after its cursor. Not
//! always: a reader whose page ends at the newest decisions can miss one settled there in the
//! same moment — stamped before a settlement committed ahead of it (PostgreSQL transactions
//! commit in any order), by a replica whose clock runs behind, or after the clock stepped
//! back. An export of a settled past (what training reads) is whole.
//!
//! Redaction: a rule's `redact` paths are masked in the arguments, the message, the reasons
//! and the decision's reason (`feedback.details`, as webhooks mask it); a plan's
//! `diff_from_previous` is left out (`null`) when the plan's rule redacts anything, since an
//! RFC 6902 operation may carry a redacted value under a parent path (`/steps/0` with the whole
//! step), as a `test` op, or from the previous revision the redactor never saw (found by
//! review: the diff went out raw while the plan's own arguments were masked).

use crate::db::{self, Conn, Database};
use crate::error::StoreError;
use crate::kit::rfc3339;
use crate::record::{ApprovalRecord, read_approval};
use crate::sql;
use serde_json::{Value, json};
use std::fmt;

/// A page stops taking samples once their JSON text reaches this many bytes (8 MiB), so a
/// page holds at most this plus one sample, whatever its `limit`.
pub const PAGE_BYTES: usize = 8 << 20;

fn sample(conn: Conn<'_>, a: &ApprovalRecord) -> db::Result<Option<Value>> {
    let Some(last) = a.decisions.last() else {
        return Ok(None);
    };
    let approved = a.went_ahead();
    let (source, kind, label) = match last.decision.as_str() {
        "cancel" => ("user", "cancellation", "not_reviewed"),
        "expire" => (
            "timeout",
            if approved { "approval" } else { "rejection" },
            "not_reviewed",
        ),
        // No one saw a grant's call (found by review: an "approved", "good" sample each, an
        // agent with one grant minted thousands, with arguments no person saw).
        "approve" if last.actor.starts_with("grant:") => ("grant", "approval", "not_reviewed"),
        // The agent's user answering in the client (`user-of:AGENT`) is relayed by the agent's
        // own key, which could steer it: no operator reviewed it (found by review: the agent
        // approving its own calls minted "approved", "good" samples).
        "approve" if last.actor.starts_with("user-of:") => {
            ("agent_user", "approval", "not_reviewed")
        }
        _ if last.actor.starts_with("user-of:") => ("agent_user", "rejection", "not_reviewed"),
        "approve" => ("user", "approval", "approved"),
        _ => ("user", "rejection", "rejected"),
    };
    let quality = match (kind, label) {
        (_, "not_reviewed") => "unknown",
        ("approval", _) => "good",
        _ => "poor",
    };
    // The records' `event_id`s, read in Rust (SQLite's `json_extract` has no portable form);
    // the `kind` term as the partial index `audit_approval` has it (migration 0031).
    let events: Vec<String> = sql::json_values(
        conn,
        "SELECT data FROM audit WHERE approval_id = ?1 AND kind LIKE 'confirm.%' ORDER BY seq",
        [&a.id],
    )?
    .iter()
    .filter_map(|d| d["event_id"].as_str().map(str::to_string))
    .collect();
    // An export leaves the gateway: a rule's `redact` paths are masked, also in the decision's
    // reason (an operator may quote the value; webhooks mask it the same way).
    let r = a.redactor();
    let details = last.reason.as_deref().map(|x| r.text(x));
    let feedback = json!({"source": source, "type": kind, "quality_label": quality,
                          "details": details, "decided_by": last.actor});
    let meta = json!({"source_flow_id": "assent.confirm", "source_event_ids": events,
                      "human_feedback_label": label, "approval_id": a.id, "trace_id": a.trace_id,
                      "target_type": a.target_type, "target_id": a.target_id});
    let created = rfc3339(a.decided_at.unwrap_or(last.at));
    let args = r.arguments(&a.call.arguments);
    if a.target_type == "plan" {
        // The diff is not masked op by op (see the module documentation): left out instead.
        let diff = if r.is_empty() {
            a.target_diff.as_ref()
        } else {
            None
        };
        let steps = &args["steps"];
        return Ok(Some(json!({
            "sample_id": last.decision_id, "sample_family": "intent_resolution",
            "created_at": created,
            "input": {"intent_id": a.target_id, "raw_request_summary": args["objective"],
                      "intent_text": args["objective"],
                      "context": {"context_id": args["context_id"]}},
            "state": {"existing_plan_count": 0, "diff_from_previous": diff},
            "output": {"final_intent_summary": args["title"], "plan_id": a.target_id,
                       "plan_step_count": steps.as_array().map_or(0, Vec::len),
                       "plan_structure": steps,
                       "resolution_quality_label": match quality { "good" => "good", "poor" => "bad", _ => "unknown" }},
            "feedback": feedback, "meta": meta,
        })));
    }
    let output_args = match &a.edited {
        Some(e) => r.arguments(&e.arguments),
        None => args.clone(),
    };
    let mut v = json!({
        "sample_id": last.decision_id, "sample_family": "confirm_decision",
        "created_at": created,
        "input": {"agent": a.agent, "session_id": a.session_id, "tool": a.call.tool,
                  "server": a.call.server, "arguments": null, "call_hash": a.call_hash,
                  "message": r.text(&a.terms.message), "human_summary": r.summary(&a.call)},
        "state": {"risk_tier": a.terms.risk_tier, "irreversible": a.terms.irreversible,
                  // Reasons quote the clause with the argument's value: masked too.
                  "reasons": a.terms.reasons.iter().map(|x| json!({"file": x.file, "rule": x.rule, "text": r.text(&x.text)})).collect::<Vec<_>>(),
                  "triggers": a.terms.triggers, "approvers": a.terms.approvers,
                  "default_decision": a.terms.default_decision},
        "output": {"status": a.status, "decision": last.decision, "decided_by": last.actor,
                   "scope": a.scope, "arguments_changed": a.edited.is_some(),
                   "arguments": null,
                   "approved_call_hash": a.edited.as_ref().map_or(a.call_hash.as_str(), |e| e.call_hash.as_str())},
        "feedback": feedback, "meta": meta,
    });
    // Moved in, not copied again by `json!` (the arguments are the bulk of a sample).
    v["input"]["arguments"] = args;
    v["output"]["arguments"] = output_args;
    Ok(Some(v))
}

/// Where a page of learning samples starts: just after the settled approval decided at
/// `decided_at` (Unix ms; an approval settled without one is read as `-1`, first) with id
/// `id`, in the export's total order `(decided_at, id)` (ids compared byte by byte on both
/// backends: SQLite's `BINARY`, PostgreSQL's `COLLATE "C"`). Its text ([`fmt::Display`],
/// [`SampleCursor::parse`]) is opaque to clients: `<decided_at>.<id as lowercase hex>`, only
/// URL-safe characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleCursor {
    decided_at: i64,
    id: String,
}

impl SampleCursor {
    /// The longest text [`SampleCursor::parse`] reads, in bytes.
    pub const MAX_TEXT: usize = 512;

    /// The cursor `text` stands for (a previous page's `next`); `None` when it is not one:
    /// longer than [`SampleCursor::MAX_TEXT`], not `<integer>.<hex>`, or an id that is empty,
    /// not UTF-8 or holds a control character (none is ever stored; PostgreSQL text cannot
    /// hold a NUL).
    pub fn parse(text: &str) -> Option<Self> {
        if text.len() > Self::MAX_TEXT {
            return None;
        }
        let (at, id) = text.split_once('.')?;
        let decided_at: i64 = at.parse().ok()?;
        let id = String::from_utf8(hex::decode(id).ok()?).ok()?;
        let ok = decided_at.to_string() == at && !id.is_empty() && !id.contains(char::is_control);
        let cursor = ok.then_some(SampleCursor { decided_at, id })?;
        // Only the text this gateway writes (lowercase hex, no sign or zero padding).
        (cursor.to_string() == text).then_some(cursor)
    }
}

impl fmt::Display for SampleCursor {
    /// `<decided_at>.<id as lowercase hex>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.decided_at, hex::encode(&self.id))
    }
}

/// One page of learning samples, oldest decision first.
#[derive(Debug, Clone, Default)]
pub struct SamplePage {
    /// The samples (see the module documentation for their shape).
    pub samples: Vec<Value>,
    /// Where the next page starts; `None` when this page ends the export. A page may hold
    /// fewer samples than asked for and still have a next one (it stopped at [`PAGE_BYTES`]).
    pub next: Option<SampleCursor>,
}

/// The JSON text length of `v` in bytes, counted without building the text.
fn text_len(v: &Value) -> usize {
    assent_core::json::json_len(v)
}

/// The page of at most `limit` samples (at least 1) after `after` (`None`: from the first),
/// on session `conn`: the settled approvals' keys read `limit + 1` at a time (one more, to
/// know whether a next page exists), then each approval read and turned into its sample until
/// the page is full or holds [`PAGE_BYTES`]. An approval with no decision row gives no sample
/// but is passed (the cursor moves over it).
pub(crate) fn page(
    conn: Conn<'_>,
    after: Option<&SampleCursor>,
    limit: u32,
) -> db::Result<SamplePage> {
    let limit = limit.max(1);
    let (at, id) = after.map_or((i64::MIN, ""), |c| (c.decided_at, c.id.as_str()));
    let keys: Vec<(String, i64)> = sql::rows(
        conn,
        "SELECT CAST(id AS TEXT), COALESCE(decided_at, -1) FROM approvals
         WHERE status != 'pending' AND COALESCE(decided_at, -1) >= ?1
           AND (COALESCE(decided_at, -1) > ?1 OR id > ?2)
         ORDER BY COALESCE(decided_at, -1), id LIMIT ?3",
        crate::params![at, id, i64::from(limit) + 1],
        db::tuple,
    )?;
    let mut out = SamplePage::default();
    let mut bytes = 0;
    for (i, (id, _)) in keys.iter().enumerate() {
        if i == limit as usize || bytes >= PAGE_BYTES {
            let (id, decided_at) = keys[i - 1].clone();
            out.next = Some(SampleCursor { decided_at, id });
            break;
        }
        if let Some(a) = read_approval(conn, id)?
            && let Some(s) = sample(conn, &a)?
        {
            bytes += text_len(&s);
            out.samples.push(s);
        }
    }
    Ok(out)
}

impl crate::store::Store {
    /// One page of learning samples ([`SamplePage`]: at most `limit` samples, at least 1, and
    /// about [`PAGE_BYTES`]) after `after` (`None`: the first page), read in one snapshot
    /// beside the writer (`Store::aside`; found by review: holding the writer's connection
    /// for the whole history stalled every proposal). Errors: the database cannot be read,
    /// or a settled approval's row is damaged.
    pub fn learning_samples(
        &self,
        after: Option<&SampleCursor>,
        limit: u32,
    ) -> Result<SamplePage, StoreError> {
        self.aside(|c| page(c, after, limit))
    }
}

/// Every learning sample of a database with no gateway needed (SQLite opened read-only, so
/// the gateway may keep running; PostgreSQL on a session of its own), page by page: an
/// iterator of pages (each `Vec` at most `limit` samples and about [`PAGE_BYTES`]), each read
/// in a snapshot of its own, oldest decision first; it ends after the last page, or after the
/// first error (`Err`: the database cannot be read, or a row is damaged).
pub struct OfflinePages {
    conn: db::Connection,
    limit: u32,
    /// `Some(after)` while a page is still to read; `None` once done.
    next: Option<Option<SampleCursor>>,
}

impl OfflinePages {
    /// Opens `database` for reading pages of `limit` samples (at least 1). SQLite: the store's
    /// file in the directory of `path` (`assent.db`, whatever file `path` names). Errors: no
    /// SQLite database there (`Invalid`, none is created), an unreachable PostgreSQL one.
    pub fn open(database: &Database, limit: u32) -> Result<Self, StoreError> {
        let conn = match database {
            Database::Sqlite { path } => {
                let dir = path.parent().unwrap_or(std::path::Path::new("."));
                db::Connection::Sqlite(crate::open::open_read_only(dir)?)
            }
            Database::Postgres { .. } => database.connect()?,
        };
        Ok(OfflinePages {
            conn,
            limit,
            next: Some(None),
        })
    }
}

impl Iterator for OfflinePages {
    type Item = Result<Vec<Value>, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        let after = self.next.take()?;
        let limit = self.limit;
        match self
            .conn
            .conn()
            .snapshot(|c| page(c, after.as_ref(), limit))
        {
            Ok(p) => {
                self.next = p.next.map(Some);
                Some(Ok(p.samples))
            }
            Err(e) => Some(Err(e.into())),
        }
    }
}

//! The dashboard's read-only views: the queue of pending approvals and questions (page,
//! fragment and the SSE change signal), the approval card, history and the audit view. Forms
//! that change something are [`super::forms`].

use crate::error::ApiError;
use crate::formats::rfc3339;
use crate::state::{AppState, now_ms};
use crate::store_call::Expired;
use askama::Template;
use assent_core::approval::ApprovalStatus;
use assent_core::template::{visible, visible_json_pretty};
use assent_store::ApprovalRecord;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};

use super::page::{Message, page, page_with, secured};
use super::session::{Operator, SignedIn, session_cookie, still_signed_in};
use super::streams::StreamSlot;
use serde::Deserialize;
use serde_json::Value;
use std::time::{Duration, Instant};

/// One pending approval in the queue.
#[derive(Clone)]
pub(crate) struct Item {
    id: String,
    agent: String,
    target: String,
    risk_tier: String,
    risk_level: String,
    irreversible: bool,
    message: String,
    expires_at: String,
    expires_ms: i64,
    left: String,
}

/// Similar pending approvals (same agent, server, tool and rules), shown together.
struct Group {
    title: String,
    items: Vec<Item>,
}

/// A pending clarification question.
struct Question {
    id: String,
    agent: String,
    question: String,
    context: String,
    yes_no: bool,
    numeric: bool,
    choices: Vec<(String, String)>,
    expires_at: String,
    expires_ms: i64,
    left: String,
}

fn left(expires_ms: i64) -> String {
    let s = (expires_ms - now_ms()) / 1000;
    if s <= 0 {
        "expired".into()
    } else if s >= 60 {
        format!("{}m {}s left", s / 60, s % 60)
    } else {
        format!("{s}s left")
    }
}

fn target(a: &ApprovalRecord) -> String {
    match &a.call.server {
        Some(s) => format!("{s}/{}", a.call.tool),
        None => a.call.tool.clone(),
    }
}

fn level(tier: assent_core::RiskTier) -> String {
    tier.risk_level().to_string()
}

fn item(a: &ApprovalRecord) -> Item {
    Item {
        id: a.id.clone(),
        agent: a.agent.clone(),
        target: target(a),
        risk_tier: a.terms.risk_tier.to_string(),
        risk_level: level(a.terms.risk_tier),
        irreversible: a.terms.irreversible,
        message: a.terms.message.clone(),
        expires_at: rfc3339(a.expires_at),
        expires_ms: a.expires_at,
        left: left(a.expires_at),
    }
}

#[derive(Template)]
#[template(path = "queue.html")]
struct QueuePage {
    who: String,
    csrf: String,
    groups: Vec<Group>,
    questions: Vec<Question>,
    count: usize,
}

#[derive(Template)]
#[template(path = "queue_items.html")]
struct QueueItems {
    csrf: String,
    groups: Vec<Group>,
    questions: Vec<Question>,
    count: usize,
}

/// The most pending approvals the queue (and a card's similar calls) lists.
const QUEUE_MAX: u32 = 500;

/// Up to [`QUEUE_MAX`] pending approvals, newest first, as summaries (no arguments: the
/// queue and a card's similar calls show none), read beside the writer. Found by review: they
/// were read whole on the store's executor, up to twice a second per open tab, so an agent
/// keeping calls of 256 KiB pending made every queue refresh parse megabytes on the writer.
async fn pending_summaries(st: &AppState) -> Result<Vec<ApprovalRecord>, ApiError> {
    let pending = Some(ApprovalStatus::Pending);
    let read = st.store_call_apart(move |s| s.approval_summaries(pending, QUEUE_MAX, None));
    Ok(read.await?.0)
}

async fn pending(st: &AppState) -> Result<(Vec<Group>, Vec<Question>, usize), ApiError> {
    let expired = Expired::default();
    let found = expired.clone();
    st.store_call(move |s| found.sweep(s, now_ms())).await?;
    // Every pending question (each agent's capped by `max_pending_per_agent`), beside the writer.
    let questions = st
        .store_call_apart(move |s| s.list_clarifications(Some("pending"), usize::MAX))
        .await?
        .0;
    st.expired(expired.take());
    let list = pending_summaries(st).await?;
    let count = list.len();
    // Oldest first (most urgent), grouped by similarity in order of first appearance.
    let mut groups: Vec<(String, Group)> = Vec::new();
    for a in list.iter().rev() {
        match groups.iter_mut().find(|(k, _)| *k == a.group_key) {
            Some((_, g)) => g.items.push(item(a)),
            None => groups.push((
                a.group_key.clone(),
                Group {
                    title: format!("{} → {}", a.agent, target(a)),
                    items: vec![item(a)],
                },
            )),
        }
    }
    let questions = questions
        .into_iter()
        .map(|c| Question {
            yes_no: c.accepts("yes_no"),
            numeric: c.accepts("numeric"),
            choices: c
                .choices
                .iter()
                .map(|ch| {
                    let v = match &ch["value"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    // The agent writes both: the label shown and the value recorded under the
                    // operator's name. A label that is not its value is shown with it (found
                    // by review: "No" could record "delete_prod").
                    let l = match ch["label"].as_str() {
                        Some(l) if l != v => format!("{} (records “{}”)", visible(l), visible(&v)),
                        _ => visible(&v).into_owned(),
                    };
                    (v, l)
                })
                .collect(),
            id: c.id,
            agent: c.agent,
            question: visible(&c.question).into_owned(),
            context: visible(c.context.as_deref().unwrap_or_default()).into_owned(),
            expires_at: rfc3339(c.expires_at),
            expires_ms: c.expires_at,
            left: left(c.expires_at),
        })
        .collect();
    Ok((
        groups.into_iter().map(|(_, g)| g).collect(),
        questions,
        count,
    ))
}

/// `GET /ui`: the queue page (pending approvals in groups, pending questions).
pub(crate) async fn queue_page(State(st): State<AppState>, op: Operator) -> Response {
    match pending(&st).await {
        Ok((groups, questions, count)) => page(&QueuePage {
            who: op.principal.name,
            csrf: op.session.csrf,
            groups,
            questions,
            count,
        }),
        Err(e) => secured(e.into_response()),
    }
}

/// The queue's contents alone, for the live refresh.
pub(crate) async fn queue_fragment(State(st): State<AppState>, signed: SignedIn) -> Response {
    let Some(op) = signed.operator() else {
        return secured(ApiError::unauthenticated().into_response());
    };
    match pending(&st).await {
        Ok((groups, questions, count)) => page(&QueueItems {
            csrf: op.session.csrf,
            groups,
            questions,
            count,
        }),
        Err(e) => secured(e.into_response()),
    }
}

/// The least time between two `changed` events of one dashboard stream: changes within it
/// make one event (found by review: every proposal had every open tab re-read the whole queue,
/// so agents proposing in a loop kept the store busy with dashboards' reads).
const EVENTS_EVERY: Duration = Duration::from_millis(500);

/// How often a quiet dashboard stream checks that its session still signs someone in.
const SESSION_CHECK_EVERY: Duration = Duration::from_secs(10);

/// `GET /ui/events`: an SSE stream with a `changed` event when an approval or clarification
/// changes — the first at once, then at most one per [`EVENTS_EVERY`] (and a comment every
/// 15 s to keep proxies from closing it). The stream ends once its session no longer signs
/// anyone in (signed out, removed, re-keyed, expired), checked before each event and every
/// [`SESSION_CHECK_EVERY`] while nothing changes, and when a ninth stream of its session opens
/// ([`StreamSlot`]: at most [`super::streams::MAX_STREAMS_PER_SESSION`], the oldest ends).
pub(crate) async fn events(
    State(st): State<AppState>,
    signed: SignedIn,
    headers: HeaderMap,
) -> Response {
    let session = session_cookie(&st, &headers);
    let (true, Some(session)) = (signed.is_some(), session) else {
        return secured(ApiError::unauthenticated().into_response());
    };
    let slot = StreamSlot::take(session);
    let rx = st.changes.subscribe();
    let init = (st, headers, rx, slot, false);
    let stream =
        futures_util::stream::unfold(init, |(st, headers, mut rx, slot, again)| async move {
            if again {
                tokio::time::sleep(EVENTS_EVERY).await;
            }
            loop {
                tokio::select! {
                    r = rx.changed() => { r.ok()?; break; }
                    () = slot.ended() => return None,
                    () = tokio::time::sleep(SESSION_CHECK_EVERY) => {
                        still_signed_in(&st, &headers).await?;
                    }
                }
            }
            if slot.is_ended() {
                return None;
            }
            still_signed_in(&st, &headers).await?;
            let n = *rx.borrow_and_update();
            Some((
                Ok::<_, std::convert::Infallible>(
                    Event::default().event("changed").data(n.to_string()),
                ),
                (st, headers, rx, slot, true),
            ))
        });
    secured(
        Sse::new(crate::executor::stream_in_lane(stream))
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
            .into_response(),
    )
}

/// The approval card (`card.html`).
#[derive(Template)]
#[template(path = "card.html")]
pub(crate) struct Card {
    who: String,
    csrf: String,
    error: String,
    /// What of the approval's record is unreadable or vouched for by no seal (`damaged`,
    /// joined: a column name, `tokens.seal`, and while pending `votes.seal`, `seal`, `call`);
    /// empty when none is.
    damaged: String,
    id: String,
    status: String,
    pending: bool,
    agent: String,
    session_id: String,
    target: String,
    arguments: String,
    canonical_arguments: String,
    call_hash: String,
    /// SHA-256 of the policy set the call was held under (empty when none was recorded).
    policy_set_sha256: String,
    risk_tier: String,
    risk_level: String,
    irreversible: bool,
    message: String,
    human_summary: String,
    reasons: Vec<(String, String)>,
    triggers: Vec<String>,
    side_effects: Vec<String>,
    rollback: Vec<String>,
    alternatives: Vec<String>,
    approvers: Vec<String>,
    /// Who may not approve under separation of duties (empty when it is off): the agent's
    /// owners and the person the call acts for.
    not_by: String,
    /// A quorum's progress (`1 of 2 approvals (finance 1 of 2: alice)`) and each vote cast;
    /// empty without a quorum.
    quorum: String,
    votes: Vec<String>,
    /// Approving needs a passkey (issue 14 §4).
    require_passkey: bool,
    /// The escalation schedule (`lead at T (joined); cfo at T; default decision at D`);
    /// empty without one.
    escalation: String,
    default_decision: String,
    expires_at: String,
    expires_ms: i64,
    left: String,
    decisions: Vec<String>,
    scope: String,
    edited: String,
    similar: Vec<Item>,
    dry_run_tool: String,
    /// The dry-run button is offered: a rule names a dry-run tool, the call's server is an
    /// MCP upstream of this gateway, and the approval is pending.
    dry_run_available: bool,
    /// The newest dry run: who ran it and when, and its result (or error).
    dry_run_by: String,
    dry_run_result: String,
}

/// The separation-of-duties line of the card: `the owners of agent A` and, when the call
/// acts for someone, `P (the call acts for them)`; empty when separation of duties is off.
fn not_by(a: &ApprovalRecord) -> String {
    if !a.terms.separation_of_duties {
        return String::new();
    }
    match &a.on_behalf_of {
        Some(p) => format!(
            "the owners of agent {}, nor {p} (the call acts for them)",
            a.agent
        ),
        None => format!("the owners of agent {}", a.agent),
    }
}

/// One vote as the card lists it: `approve by alice at T: reason`.
fn vote_line(v: &assent_store::VoteRecord) -> String {
    let why = v
        .reason
        .as_deref()
        .map(|r| format!(": {}", visible(r)))
        .unwrap_or_default();
    let signed = if v.passkey.is_some() {
        " (passkey-signed)"
    } else {
        ""
    };
    format!(
        "{} by {} at {}{signed}{why}",
        v.decision.as_str(),
        v.principal,
        rfc3339(v.at)
    )
}

/// An approval with what its card shows besides: similar pending calls, the newest dry run.
pub(crate) struct Loaded {
    pub(crate) rec: ApprovalRecord,
    pub(crate) similar: Vec<Item>,
    pub(crate) dry_run: Option<assent_store::audit::AuditRecord>,
}

/// Approval `id` with what its card shows (similar pending approvals, the dry-run tool);
/// `None` when there is no such approval.
pub(crate) async fn load(st: &AppState, id: &str) -> Result<Option<Loaded>, ApiError> {
    let id = id.to_string();
    let expired = Expired::default();
    let found = expired.clone();
    let (rec, dry_run) = st
        .store_call(move |s| {
            found.sweep(s, now_ms())?;
            // What no seal vouches for is named in `damaged`, and the card says so.
            Ok((s.checked_approval(&id)?, s.last_dry_run(&id)?))
        })
        .await?;
    st.expired(expired.take());
    let pending = match &rec {
        Some(_) => pending_summaries(st).await?,
        None => Vec::new(),
    };
    Ok(rec.map(|r| {
        let similar = pending
            .iter()
            .filter(|a| a.group_key == r.group_key && a.id != r.id)
            .map(item)
            .collect();
        Loaded {
            rec: r,
            similar,
            dry_run,
        }
    }))
}

/// The card of `l` for operator `op`, with `error` shown above the decision options.
pub(crate) fn card(st: &AppState, op: &Operator, l: &Loaded, error: &str) -> Card {
    let (a, similar) = (&l.rec, l.similar.clone());
    let roles = op.principal.roles().unwrap_or_default();
    let dry_run_available = a.status == ApprovalStatus::Pending
        && assent_core::approval::may_decide(&a.terms.approvers, roles)
        && a.terms.dry_run_tool.is_some()
        && a.call
            .server
            .as_deref()
            .is_some_and(|s| st.dry_run.as_ref().is_some_and(|d| d.serves(s)));
    let (dry_run_by, dry_run_result) = match &l.dry_run {
        Some(r) => {
            let data: Value = serde_json::from_str(&r.data).unwrap_or(Value::Null);
            // What the dry-run tool answered may echo the agent's arguments: its bidi and
            // invisible characters are made visible next to the Decide form, as the
            // arguments are (found by review).
            let shown = match data.get("error") {
                Some(e) => format!("failed: {}", visible(e.as_str().unwrap_or(""))),
                None => visible_json_pretty(
                    data.get("result")
                        .or(data.get("result_truncated"))
                        .unwrap_or(&Value::Null),
                ),
            };
            (format!("{} at {}", r.actor, rfc3339(r.at)), shown)
        }
        None => (String::new(), String::new()),
    };
    // Shown and edited as JSON whose C1 and bidi characters are `\uXXXX` escapes (the same
    // value, so an unchanged form is no edit): an agent's argument cannot act on the page.
    let pretty = visible_json_pretty(&a.call.arguments);
    Card {
        who: op.principal.name.clone(),
        csrf: op.session.csrf.clone(),
        error: error.to_string(),
        damaged: a.damaged.join(", "),
        id: a.id.clone(),
        status: a.status.as_str().to_string(),
        pending: a.status == ApprovalStatus::Pending,
        agent: a.agent.clone(),
        session_id: a.session_id.clone(),
        target: target(a),
        arguments: pretty,
        canonical_arguments: visible(&a.canonical_arguments()).into_owned(),
        call_hash: a.call_hash.clone(),
        policy_set_sha256: a.policy_set_sha256.clone().unwrap_or_default(),
        risk_tier: a.terms.risk_tier.to_string(),
        risk_level: level(a.terms.risk_tier),
        irreversible: a.terms.irreversible,
        message: a.terms.message.clone(),
        human_summary: a.human_summary.clone(),
        reasons: a.terms.reasons.iter().map(reason_line).collect(),
        triggers: a.terms.triggers.clone(),
        side_effects: a.terms.side_effects.clone(),
        rollback: a.terms.rollback.clone(),
        alternatives: a.terms.suggested_alternatives.clone(),
        approvers: a.terms.approvers.clone(),
        not_by: not_by(a),
        quorum: a
            .quorum_tally()
            .map(|(_, t)| t.describe())
            .unwrap_or_default(),
        votes: a.votes.iter().map(vote_line).collect(),
        require_passkey: a.terms.require_passkey,
        escalation: crate::formats::schedule(a)
            .map(|s| s.describe())
            .unwrap_or_default(),
        default_decision: a.terms.default_decision.as_str().to_string(),
        expires_at: rfc3339(a.expires_at),
        expires_ms: a.expires_at,
        left: left(a.expires_at),
        decisions: a.decisions.iter().map(decision_line).collect(),
        scope: a.scope.map(|s| s.to_wire()).unwrap_or_default(),
        edited: a
            .edited
            .as_ref()
            .map(|e| visible(&e.canonical_arguments).into_owned())
            .unwrap_or_default(),
        similar,
        dry_run_tool: a.terms.dry_run_tool.clone().unwrap_or_default(),
        dry_run_available,
        dry_run_by,
        dry_run_result,
    }
}

/// A reason as the card lists it: (its file and rule, its text).
fn reason_line(r: &assent_core::Reason) -> (String, String) {
    let src = if r.file.is_empty() {
        r.rule.clone()
    } else {
        format!("{} {}", r.file, r.rule)
    };
    (src, r.text.clone())
}

/// A decision as the card lists it: `approve by alice at T (passkey-signed): reason`, the
/// reason [`visible`] (an agent writes it when it cancels its own call).
fn decision_line(d: &assent_store::DecisionRecord) -> String {
    let mut line = format!("{} by {} at {}", d.decision, d.actor, rfc3339(d.at));
    if d.passkey.is_some() {
        line.push_str(" (passkey-signed)");
    }
    if let Some(r) = d.reason.as_deref().filter(|r| !r.is_empty()) {
        line.push_str(&format!(": {}", visible(r)));
    }
    line
}

/// `GET /ui/approvals/{id}`: the approval card.
pub(crate) async fn card_page(
    State(st): State<AppState>,
    Path(id): Path<String>,
    op: Operator,
) -> Response {
    match load(&st, &id).await {
        Ok(Some(l)) => page(&card(&st, &op, &l, "")),
        Ok(None) => not_found(&op, "No such approval."),
        Err(e) => secured(e.into_response()),
    }
}

/// `404` with a page saying `text`.
pub(crate) fn not_found(op: &Operator, text: &str) -> Response {
    page_with(
        StatusCode::NOT_FOUND,
        &Message {
            title: "Not found".into(),
            text: text.into(),
            who: op.principal.name.clone(),
            csrf: op.session.csrf.clone(),
        },
    )
}

/// History filters (`/ui/history?agent=&tool=&status=&decided_by=`); empty means any.
#[derive(Deserialize, Default)]
pub(crate) struct Filters {
    #[serde(default)]
    agent: String,
    #[serde(default)]
    tool: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    decided_by: String,
}

struct Row {
    id: String,
    requested_at: String,
    agent: String,
    target: String,
    risk_tier: String,
    status: String,
    decided_by: String,
    reason: String,
}

#[derive(Template)]
#[template(path = "history.html")]
struct History {
    who: String,
    csrf: String,
    agent: String,
    tool: String,
    status: String,
    decided_by: String,
    statuses: Vec<&'static str>,
    rows: Vec<Row>,
}

/// `GET /ui/history[?agent=&tool=&status=&decided_by=]`: approvals, newest first (at most
/// 500 of the newest 1,000), read as summaries beside the writer (found by review: 1,000 whole
/// records, arguments parsed, on the store's executor).
pub(crate) async fn history_page(
    State(st): State<AppState>,
    Query(q): Query<Filters>,
    op: Operator,
) -> Response {
    let read = st.store_call_apart(|s| s.approval_summaries(None, 1000, None));
    let list = match read.await {
        Ok((l, _)) => l,
        Err(e) => return secured(e.into_response()),
    };
    let want = |filter: &str, value: &str| filter.is_empty() || filter == value;
    let rows = list
        .iter()
        .filter_map(|a| {
            let last = a.decisions.last();
            let by = last.map(|d| d.actor.clone()).unwrap_or_default();
            let keep = want(&q.agent, &a.agent)
                && (q.tool.is_empty() || q.tool == a.call.tool || q.tool == target(a))
                && want(&q.status, a.status.as_str())
                && want(&q.decided_by, &by);
            keep.then(|| Row {
                id: a.id.clone(),
                requested_at: rfc3339(a.requested_at),
                agent: a.agent.clone(),
                target: target(a),
                risk_tier: a.terms.risk_tier.to_string(),
                status: a.status.as_str().to_string(),
                decided_by: by,
                reason: last
                    .and_then(|d| d.reason.as_deref())
                    .map(|r| visible(r).into_owned())
                    .unwrap_or_default(),
            })
        })
        .take(500)
        .collect();
    page(&History {
        who: op.principal.name,
        csrf: op.session.csrf,
        agent: q.agent,
        tool: q.tool,
        status: q.status,
        decided_by: q.decided_by,
        statuses: vec!["pending", "approved", "rejected", "expired", "cancelled"],
        rows,
    })
}

struct AuditRow {
    seq: i64,
    at: String,
    kind: String,
    approval_id: String,
    actor: String,
}

#[derive(Template)]
#[template(path = "audit.html")]
struct Audit {
    who: String,
    csrf: String,
    verifies: bool,
    records: i64,
    head: String,
    broken: String,
    rows: Vec<AuditRow>,
}

/// `GET /ui/audit`: whether the audit chain verifies ([`super::chain::verified`]), and its
/// newest records.
pub(crate) async fn audit_page(State(st): State<AppState>, op: Operator) -> Response {
    let (store, asked) = (std::sync::Arc::downgrade(&st.store), Instant::now());
    let res = st
        .store_call_apart(move |s| {
            Ok((super::chain::verified(s, store, asked)?, s.audit_tail(200)?))
        })
        .await;
    let (report, tail) = match res {
        Ok(r) => r,
        Err(e) => return secured(e.into_response()),
    };
    page(&Audit {
        who: op.principal.name,
        csrf: op.session.csrf,
        verifies: report.broken.is_none(),
        records: report.records,
        head: report.head,
        broken: report
            .broken
            .map(|(seq, why)| format!("record {seq}: {why}"))
            .unwrap_or_default(),
        rows: tail
            .into_iter()
            .map(|r| AuditRow {
                seq: r.seq,
                at: rfc3339(r.at),
                kind: r.kind,
                approval_id: r.approval_id.unwrap_or_default(),
                actor: r.actor,
            })
            .collect(),
    })
}

//! Reading approvals: `GET /v1/approvals` (operators; by status, grouped by similarity) and
//! `GET /v1/approvals/{id}` (its agent or an operator; a long-poll with `?wait=`, in the
//! assent, `approval-request` or MPLP Confirm format). An approval past its expiry is settled
//! before it is read. Deciding and cancelling are [`crate::decide`]; routes are mounted by
//! [`crate::router`](mod@crate::router).

use crate::body::{Body, to_value};
use crate::error::ApiError;
use crate::extract::Polled;
use crate::extract::{ListApprovals, Operator};
use crate::formats::{self, approval};
use crate::state::{AppState, now_ms};
use crate::waiters::{Look, approval_key};
use assent_api::approvals::{ApprovalGroup, ApprovalGroups, ApprovalList};
use assent_core::ApprovalStatus;
use assent_store::{ApprovalRecord, ConfirmContext};
use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::collections::HashMap;

/// About the most call text one page of `GET /v1/approvals` holds, in bytes (each listed
/// approval's canonical call, edited call, message and summary): a page ends early once it
/// reaches it, with a `Link` to the next (`Store::approval_page`). 1 MiB: four calls at the
/// body limit's 256 KiB of arguments, a few hundred ordinary ones.
pub const LIST_PAGE_BYTES: usize = 1 << 20;

/// The most approvals one page of `GET /v1/approvals` lists (`limit`, default
/// [`LIST_DEFAULT_LIMIT`]).
pub const LIST_MAX_LIMIT: u32 = 1000;

/// The `limit` of `GET /v1/approvals` when none is given.
pub const LIST_DEFAULT_LIMIT: u32 = 500;

/// What `GET /v1/approvals` was asked for: the status (`None`: all), the page's `limit`,
/// whether to group similar approvals, and the cursor to continue before (`None`: newest).
struct ListQuery {
    status: Option<ApprovalStatus>,
    limit: u32,
    group: bool,
    before: Option<(i64, i64)>,
}

/// A page cursor as `GET /v1/approvals` (and the other paged listings: grants, tool reviews)
/// writes it in its `Link`: `<time>.<rowid>`, both decimal integers (opaque to clients).
pub(crate) fn cursor_text((at, row): (i64, i64)) -> String {
    format!("{at}.{row}")
}

/// The cursor `text` stands for; `None` unless it is exactly what [`cursor_text`] writes.
pub(crate) fn parse_cursor(text: &str) -> Option<(i64, i64)> {
    let (at, row) = text.split_once('.')?;
    let c = (at.parse().ok()?, row.parse().ok()?);
    (cursor_text(c) == text).then_some(c)
}

/// The query of `GET /v1/approvals`: `status` (`None`: all), `limit` (1 to
/// [`LIST_MAX_LIMIT`], default [`LIST_DEFAULT_LIMIT`]), whether to group similar approvals,
/// and `before` (a previous page's cursor); `400` naming the parameter for anything else.
fn list_query(q: &HashMap<String, String>) -> Result<ListQuery, ApiError> {
    crate::extract::only_keys(q, &["status", "limit", "group", "before"])?;
    let status = match q.get("status").map(String::as_str) {
        None | Some("all") => None,
        Some(s) => Some(ApprovalStatus::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!("unknown status `{s}` (expected pending, approved, rejected, expired, cancelled or all)"))
        })?),
    };
    let group = match q.get("group").map(String::as_str) {
        None => false,
        Some("similar") => true,
        Some(g) => {
            return Err(ApiError::bad_request(format!(
                "unknown group `{g}` (expected similar)"
            )));
        }
    };
    let (limit, before) = page_query(q, LIST_DEFAULT_LIMIT)?;
    Ok(ListQuery {
        status,
        limit,
        group,
        before,
    })
}

/// A paged listing's `limit` (1 to [`LIST_MAX_LIMIT`], `default` when absent) and `before`
/// (a previous page's cursor, exactly as its `Link` gave it; `None`: the first page) from
/// query `q`; `400` naming the parameter otherwise. Shared by every listing paged with
/// [`cursor_text`] cursors (approvals, grants, tool reviews).
pub(crate) fn page_query(
    q: &HashMap<String, String>,
    default: u32,
) -> Result<(u32, Option<(i64, i64)>), ApiError> {
    let limit = match q.get("limit") {
        None => default,
        Some(l) => l
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=LIST_MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "limit must be an integer from 1 to {LIST_MAX_LIMIT}"
                ))
            })?,
    };
    let before = match q.get("before") {
        None => None,
        Some(b) => Some(parse_cursor(b).ok_or_else(|| {
            ApiError::bad_request(
                "before must be the cursor of a previous page's Link rel=\"next\" (as given)",
            )
        })?),
    };
    Ok((limit, before))
}

/// The `Link` header of a paged listing's page that has a next one: `</v1/PATH?QUERY&before=
/// CURSOR>; rel="next"`, `target` being the path and query up to the cursor (`QUERY` made of
/// the listing's own fixed words and numbers: nothing a client sent is echoed).
pub(crate) fn page_link(target: &str, next: (i64, i64)) -> Result<HeaderValue, ApiError> {
    let link = format!("<{target}&before={}>; rel=\"next\"", cursor_text(next));
    HeaderValue::from_str(&link).map_err(ApiError::unavailable)
}

/// The `Link` header of a listing page that has a next one: the same query from `next` on.
fn next_link(q: &ListQuery, next: (i64, i64)) -> Result<HeaderValue, ApiError> {
    let status = q.status.map_or("all", ApprovalStatus::as_str);
    let group = if q.group { "&group=similar" } else { "" };
    let target = format!("/v1/approvals?status={status}&limit={}{group}", q.limit);
    page_link(&target, next)
}

/// `GET /v1/approvals[?status=S&limit=N&group=similar&before=CURSOR]` (operators): newest
/// first, or in groups of similar approvals (same agent, server, tool and rules; oldest group
/// first), one page at a time: `limit` approvals and about [`LIST_PAGE_BYTES`] of call text,
/// so a page may hold fewer; while more follow, the answer has `Link:
/// </v1/approvals?…&before=CURSOR>; rel="next"`. Read beside the writer (the store's
/// executor only applies due expiries first).
#[utoipa::path(get, path = "/v1/approvals", tag = "decide",
    params(("status" = Option<String>, Query, description = "`all` (default), `pending`, `approved`, `rejected`, `expired` or `cancelled`"),
           ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "At most this many (default 500); a page also ends after about 1 MiB of call text"),
           ("group" = Option<String>, Query, description = "`similar`: in groups of similar approvals (of this page)"),
           ("before" = Option<String>, Query, description = "The opaque cursor of the next page, from the previous answer's `Link` header (`rel=\"next\"`)")),
    responses((status = 200, description = "`{approvals}`, or `{groups}` (ApprovalGroups) with `group=similar`", body = assent_api::approvals::ApprovalList,
        headers(("Link" = String, description = "`</v1/approvals?status=S&limit=N&before=CURSOR>; rel=\"next\"` while more may follow; absent on the last page")))),
    security(("operator_key" = [])))]
pub(crate) async fn list_approvals(
    State(st): State<AppState>,
    _op: Operator<ListApprovals>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let q = list_query(&q)?;
    // Due expiries on the executor (a write), then the page beside it: a page of large calls
    // never holds the writer's connection (found by review).
    let expired = st.store_call(|s| s.expire_due(now_ms())).await?;
    st.expired(expired);
    let (status, limit, before) = (q.status, q.limit, q.before);
    let (list, next) = st
        .store_call_apart(move |s| s.approval_page(status, limit, before, LIST_PAGE_BYTES))
        .await?;
    let mut resp = if q.group {
        let mut groups: Vec<(String, Vec<&ApprovalRecord>)> = Vec::new();
        for a in list.iter().rev() {
            match groups.iter_mut().find(|(k, _)| *k == a.group_key) {
                Some((_, v)) => v.push(a),
                None => groups.push((a.group_key.clone(), vec![a])),
            }
        }
        let groups = groups
            .iter()
            .map(|(_, v)| ApprovalGroup {
                agent: v[0].agent.clone(),
                server: v[0].call.server.clone(),
                tool: v[0].call.tool.clone(),
                reasons: v[0].terms.reasons.clone(),
                count: v.len(),
                approvals: v.iter().map(|a| approval(a, None)).collect(),
            })
            .collect();
        Body(ApprovalGroups { groups }).into_response()
    } else {
        let approvals = list.iter().map(|a| approval(a, None)).collect();
        Body(ApprovalList { approvals }).into_response()
    };
    if let Some(next) = next {
        resp.headers_mut()
            .insert(header::LINK, next_link(&q, next)?);
    }
    Ok(resp)
}

/// One read of an approval: the approvals that had to be expired first, the record, the
/// token string (for its agent), and MPLP events and Confirm context when asked for.
type Read = (
    Vec<String>,
    Option<ApprovalRecord>,
    Option<String>,
    (Vec<Value>, ConfirmContext),
);

/// One trip to the blocking pool: reads approval `id` (and the token for its agent); an
/// approval past its expiry is settled first (the sweep does it within a second anyway).
async fn read_once(
    st: &AppState,
    id: &str,
    is_agent: bool,
    want_events: bool,
) -> Result<Read, ApiError> {
    let id = id.to_string();
    st.store_read(move |s| {
        // Ahead of the writes queued with it on the executor (and on a read session on
        // Postgres): a decided approval's long-poll does not wait for their commit. An
        // operator (who gets no token) is shown, while it is pending, what no seal vouches
        // for in `damaged`, as the dashboard's card shows it (a record changed outside
        // assent is not the agent's request).
        let look = |s: &assent_store::Store| match is_agent {
            true => s.approval_and_token(&id, true),
            false => Ok((s.checked_approval(&id)?, None)),
        };
        let (mut rec, mut token) = look(s)?;
        let overdue = rec
            .as_ref()
            .is_some_and(|r| r.status == ApprovalStatus::Pending && r.expires_at <= now_ms());
        let mut expired = Vec::new();
        if overdue {
            expired = s.expire_due(now_ms())?;
            (rec, token) = look(s)?;
        }
        let events = if want_events {
            (s.mplp_events(&id)?, s.confirm_context(&id)?)
        } else {
            Default::default()
        };
        Ok((expired, rec, token, events))
    })
    .await
}

/// Approval `id` as the decision that settled it on this replica handed it to its long-polls
/// ([`AppState::decided`]), with the token string for its agent (signed here, not on the store's
/// executor): a woken long-poll answers without queueing a read behind the store's next batch.
/// `None` when no settled record was handed over (the long-poll's first look, a change made on
/// another replica, an expiry) or for `format=mplp`, whose events are read from the store.
fn settled_here(
    st: &AppState,
    id: &str,
    is_agent: bool,
    format: &str,
) -> Option<(ApprovalRecord, Option<String>)> {
    if format == "mplp" {
        return None;
    }
    let settled = st.waiters.settled(&approval_key(id))?;
    let rec = settled.downcast_ref::<ApprovalRecord>()?.clone();
    let token = (is_agent && rec.token.is_some())
        .then(|| st.store.token_of(&rec))
        .flatten();
    Some((rec, token))
}

/// The `format` of `GET /v1/approvals/{id}` (`assent` when absent); `400` for an unknown
/// query parameter or format.
fn get_format(q: &HashMap<String, String>) -> Result<&str, ApiError> {
    crate::extract::only_keys(q, &["wait", "format"])?;
    let format = q.get("format").map(String::as_str).unwrap_or("assent");
    if !["assent", "approval-request", "mplp"].contains(&format) {
        return Err(ApiError::bad_request(format!(
            "unknown format `{format}` (expected assent, approval-request or mplp)"
        )));
    }
    Ok(format)
}

/// `GET /v1/approvals/{id}[?wait=S&format=F]` (its agent, with its token, or an operator): the
/// approval; with `wait`, once it leaves `pending` or after `wait` seconds (at most 60). An
/// agent gets the same `404` for another agent's approval as for a missing id.
#[utoipa::path(get, path = "/v1/approvals/{id}", tag = "decide",
    params(("id" = String, Path, description = "The item's id"), ("wait" = Option<u64>, Query, maximum = 60, description = "Long-poll: seconds to wait for a change (0 to 60)"), ("format" = Option<String>, Query, pattern = "^(assent|approval-request|mplp)$", description = "`assent` (default), `approval-request` or `mplp`")),
    responses((status = 200, description = "The approval; with `format=approval-request` the seed 002 ApprovalRequest, with `format=mplp` the MPLP Confirm", body = assent_api::approvals::Approval)),
    security(("agent_key" = []), ("operator_key" = [])))]
pub(crate) async fn get_approval(
    State(st): State<AppState>,
    read: Polled,
) -> Result<Json<Value>, ApiError> {
    let Polled {
        principal: p,
        id,
        query: q,
        wait,
    } = read;
    let format = get_format(&q)?;
    let is_agent = p.agent_id().is_some();
    let (st, id, p) = (&st, &id, &p);
    let look = || async move {
        // Each look, not only the request's start: a long-poll outlives a reload, and what it
        // answers may carry the approval's token (found by review: a key a reload removed
        // while its long-poll waited still collected the token of the approval decided next).
        if is_agent && !crate::decide::agent_key_stands(st, p) {
            return Err(ApiError::unauthenticated());
        }
        let (expired, rec, token, events) = match settled_here(st, id, is_agent, format) {
            Some((rec, token)) => {
                if crate::executor::probe::on()
                    && let Some(at) = st.waiters.woken_at(&approval_key(id))
                {
                    crate::executor::probe::line(|| {
                        format!("lp woke={}", at.elapsed().as_micros())
                    });
                }
                (Vec::new(), Some(rec), token, Default::default())
            }
            None => read_once(st, id, is_agent, format == "mplp").await?,
        };
        // Again once read: a reload may have landed while the store was read.
        if is_agent && !crate::decide::agent_key_stands(st, p) {
            return Err(ApiError::unauthenticated());
        }
        st.expired(expired);
        // An agent sees only its own approvals; others get the same 404 as a missing id.
        let rec = rec
            .filter(|r| p.sees(&r.agent))
            .ok_or_else(|| ApiError::not_found(format!("no approval `{id}`")))?;
        let rec = match is_agent {
            true => formats::agent_view(rec),
            false => rec,
        };
        let body = match format {
            "approval-request" => to_value(&formats::approval_request(&rec)),
            "mplp" => formats::mplp_confirm_json(&rec, &events.0, &events.1),
            _ => to_value(&approval(&rec, token)),
        };
        if rec.status != ApprovalStatus::Pending {
            return Ok(Look::Done(body));
        }
        // Wake at its own expiry too.
        let until_expiry = crate::waiters::recheck_after(rec.expires_at, now_ms());
        Ok(Look::Pending(body, until_expiry))
    };
    let span = crate::telemetry::step_span(crate::telemetry::Step::Wait);
    // Only an id that could be one (a UUID is 36 bytes; found by review: a 60 KB id in the
    // path, unchecked, went into every span of a loop of such requests, crowding the OTLP
    // queue so that real spans were dropped).
    if id.len() <= 64 {
        crate::telemetry::record(&span, "assent.approval_id", id);
    }
    let body = tracing::Instrument::instrument(
        st.waiters.long_poll(&approval_key(id), &p.name, wait, look),
        span.clone(),
    )
    .await?;
    if let Some(s) = body.get("status").and_then(Value::as_str) {
        crate::telemetry::record(&span, "assent.outcome", s);
    }
    Ok(Json(body))
}

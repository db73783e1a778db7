//! MCP tool-list pinning over HTTP (issue 4; see `assent_store::pins`):
//!
//! - `POST /v1/tools/check` (agent; the MCP proxy): `{"agent", "server", "tools": [TOOL...]}`
//!   with the upstream's `tools/list` entries → `{"tools": [{"name", "state": "pinned" |
//!   "first_use" | "held", "review_id"?, "review_status"?, "pinned"?}]}`; or, instead of the
//!   tools, `"handshake": {"instructions"?, "serverInfo"?}`, the server's own words, pinned as
//!   the pseudo-tool `(server)` → `{"tools": [], "handshake": STATE}`. An agent's report
//!   pins and holds for that agent alone; the gateway's own MCP hub's (it adds the process's
//!   `hub_token`) for every agent (`assent_store::pins::PinScope`). `429
//!   TOO_MANY_PENDING_REVIEWS` past the reporter's pending reviews per server.
//! - `GET /v1/tools/reviews[?status=pending|accepted|rejected|all]` (operator): reviews with the
//!   new and the pinned definition and an RFC 6902 `diff` between them.
//! - `GET /v1/tools/reviews/{id}?wait=S` (an operator; an agent its own relay's and the hub's;
//!   another's is `404` like an unknown id): one review; `wait` long-polls while it is pending.
//! - `POST /v1/tools/reviews/{id}/accept`, `…/reject` (operator): `409 ALREADY_DECIDED` after
//!   the first decision.
//! - `GET /v1/tools/pins` (operator).
//!
//! Routes are mounted by [`crate::router`](mod@crate::router).

use crate::agent_json::{AgentJson, AgentJsonOneRefusal, from_own_hub};
use crate::approvals::{LIST_PAGE_BYTES, page_link, page_query};
use crate::body::{Body, to_value};
use crate::error::ApiError;
use crate::extract::Polled;
use crate::extract::{ListToolPins, ListToolReviews, Operator};
use crate::extract::{ReportTools, ReviewTools};
use crate::state::{AppState, now_ms};
use crate::waiters::{Look, review_key};
use assent_api::tools::ToolReviewList;
use assent_api::tools::{ToolCheckRequest, ToolCheckResponse, ToolPinList};
use assent_core::pin::{PinState, ReviewStatus, ToolReview};
use assent_store::pins::{PinCheckError, PinScope};
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::collections::HashMap;
use std::time::Duration;

/// The most tool definitions one report may carry.
const MAX_TOOLS: usize = 10_000;

/// A review as the API shows it: the store's row with the RFC 6902 `diff` from the pinned to
/// the new definition when one was pinned.
fn review(mut r: ToolReview) -> ToolReview {
    if let Some(p) = &r.pinned {
        r.diff = Some(crate::diff::json_diff(p, &r.definition));
    }
    r
}

/// `POST /v1/tools/check` (the agent itself): pins or holds its upstream's tool list — for
/// the agent alone (its own relay), or for every agent when the gateway's own MCP hub reports
/// (`hub_token`). `429 TOO_MANY_PENDING_REVIEWS` past the reporter's cap of pending reviews
/// per server (nothing stored).
#[utoipa::path(post, path = "/v1/tools/check", tag = "around",
    request_body = assent_api::tools::ToolCheckRequest,
    responses((status = 200, description = "OK", body = assent_api::tools::ToolCheckResponse)),
    security(("agent_key" = [])))]
pub(crate) async fn check(
    State(st): State<AppState>,
    AgentJson(_, b): AgentJsonOneRefusal<ReportTools, ToolCheckRequest>,
) -> Result<Body<ToolCheckResponse>, ApiError> {
    let declared = st
        .registry()
        .agents
        .get(&b.agent)
        .is_some_and(|a| a.mcp_servers.iter().any(|m| m.alias == b.server));
    if !declared {
        return Err(ApiError::forbidden(format!(
            "MCP server `{}` is not declared by agent `{}`",
            b.server, b.agent
        )));
    }
    check_list(&b.tools)?;
    check_handshake(&b)?;
    let hub = from_own_hub(b.hub_token.as_deref());
    let (list, handshake) = st
        .store_task(move |s| {
            let scope = if hub {
                PinScope::Gateway
            } else {
                PinScope::Agent(&b.agent)
            };
            // A report of the server's handshake is of its words alone: its tools are another
            // report's (an empty tool list would make the server seen, and its tools new).
            if let Some(words) = &b.handshake {
                let entry =
                    s.check_server_entry_read_first(scope, &b.server, words, &b.agent, now_ms())?;
                return Ok((Vec::new(), Some(entry)));
            }
            let list = s.check_tools_read_first(scope, &b.server, &b.tools, &b.agent, now_ms())?;
            Ok((list, None))
        })
        .await?
        .map_err(|e| match e {
            e @ PinCheckError::TooManyPending { .. } => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                assent_api::error::TOO_MANY_PENDING_REVIEWS,
                e.to_string(),
            ),
            e @ PinCheckError::NoReporter => ApiError::bad_request(e.to_string()),
            PinCheckError::Store(e) => ApiError::unavailable(e),
        })?;
    if list
        .iter()
        .chain(handshake.as_ref())
        .any(|t| t.state != PinState::Pinned)
    {
        st.changed();
    }
    Ok(Body(ToolCheckResponse {
        tools: list,
        handshake,
    }))
}

/// `400` unless a report's `handshake` (the server's own words) is an object whose
/// `instructions` and `serverInfo`, when present, are text and an object, and the report
/// carries no tools beside it.
fn check_handshake(b: &ToolCheckRequest) -> Result<(), ApiError> {
    let Some(words) = &b.handshake else {
        return Ok(());
    };
    if !b.tools.is_empty() {
        return Err(ApiError::bad_request(
            "a report of the server's handshake carries no tools (report them on their own)",
        ));
    }
    let shaped = words.as_object().is_some_and(|w| {
        w.get("instructions").is_none_or(Value::is_string)
            && w.get("serverInfo").is_none_or(Value::is_object)
    });
    if !shaped {
        return Err(ApiError::bad_request(
            "handshake: an object with `instructions` (text) and `serverInfo` (an object), each optional",
        ));
    }
    Ok(())
}

/// `400` unless `tools` is a tool list the gateway pins: at most [`MAX_TOOLS`] definitions,
/// each with a string `name` held to the rules of every other name (no escape sequence
/// reaches an operator's terminal; found by review), none named twice (found by review: a
/// list naming a tool twice, a new description beside the pinned definition, had the new one
/// shown to the client). Shared by `POST /v1/tools/check` and the dashboard's dry run.
pub(crate) fn check_list(tools: &[serde_json::Value]) -> Result<(), ApiError> {
    if tools.len() > MAX_TOOLS || tools.iter().any(|t| !t["name"].is_string()) {
        return Err(ApiError::bad_request(format!(
            "tools: at most {MAX_TOOLS} tool definitions, each with a string `name`"
        )));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, t) in tools.iter().enumerate() {
        let name = t["name"].as_str().unwrap_or("");
        crate::calls::check_name(&format!("tools[{i}].name"), name)?;
        // The name the server's own words are pinned under: no tool may stand for them.
        if name == assent_api::tools::SERVER_ENTRY {
            return Err(ApiError::bad_request(format!(
                "tools[{i}].name: `{name}` is the name a server's own words are pinned under, not a tool's"
            )));
        }
        if !seen.insert(name) {
            return Err(ApiError::bad_request(format!(
                "tools[{i}].name: `{name}` is named twice in the list (a tool list names each tool once)"
            )));
        }
    }
    Ok(())
}

/// The `limit` of `GET /v1/tools/reviews` when none is given.
pub const REVIEWS_DEFAULT_LIMIT: u32 = 100;

/// `GET /v1/tools/reviews[?status=S&limit=N&before=CURSOR]` (operators): newest first, one
/// page at a time: `limit` reviews (1 to 1,000, default [`REVIEWS_DEFAULT_LIMIT`]) and about
/// [`crate::approvals::LIST_PAGE_BYTES`] of definitions (each review's new and pinned one),
/// so a page may hold fewer; while more follow, the answer has `Link:
/// </v1/tools/reviews?status=S&limit=N&before=CURSOR>; rel="next"`. Read beside the writer.
/// `400` naming the parameter for an unknown one, an unknown status, `limit` out of range or
/// a `before` not as given.
#[utoipa::path(get, path = "/v1/tools/reviews", operation_id = "list_tool_reviews", tag = "around",
    params(("status" = Option<String>, Query, pattern = "^(pending|accepted|rejected|all)$", description = "`pending` (default), `accepted`, `rejected` or `all`"),
           ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "At most this many (default 100); a page also ends after about 1 MiB of definitions"),
           ("before" = Option<String>, Query, description = "The opaque cursor of the next page, from the previous answer's `Link` header (`rel=\"next\"`)")),
    responses((status = 200, description = "OK", body = assent_api::tools::ToolReviewList,
        headers(("Link" = String, description = "`</v1/tools/reviews?status=S&limit=N&before=CURSOR>; rel=\"next\"` while more may follow; absent on the last page")))),
    security(("operator_key" = [])))]
pub(crate) async fn list(
    State(st): State<AppState>,
    _op: Operator<ListToolReviews>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    crate::extract::only_keys(&q, &["status", "limit", "before"])?;
    let status = match q.get("status").map(String::as_str) {
        None | Some("pending") => Some("pending"),
        Some("all") => None,
        Some(s @ ("accepted" | "rejected")) => Some(s),
        Some(s) => {
            return Err(ApiError::bad_request(format!(
                "status `{s}` is not one of pending, accepted, rejected, all"
            )));
        }
    };
    let (limit, before) = page_query(&q, REVIEWS_DEFAULT_LIMIT)?;
    let wanted = status.map(str::to_string);
    let (list, next) = st
        .store_call_apart(move |s| {
            s.tool_review_page(wanted.as_deref(), limit, before, LIST_PAGE_BYTES)
        })
        .await?;
    let reviews = list.into_iter().map(review).collect();
    let mut resp = Body(ToolReviewList { reviews }).into_response();
    if let Some(next) = next {
        let target = format!(
            "/v1/tools/reviews?status={}&limit={limit}",
            status.unwrap_or("all")
        );
        resp.headers_mut()
            .insert(header::LINK, page_link(&target, next)?);
    }
    Ok(resp)
}

/// Whether `p` may read review `r`: an operator any, an agent its own relay's and the
/// gateway hub's (`agent: null`, shown to every agent), an executor none. Anyone else gets the
/// `404` of an unknown id, so a review id learnt elsewhere tells nothing of another agent's
/// upstream tools.
fn may_read(p: &crate::config::Principal, r: &ToolReview) -> bool {
    match &r.agent {
        Some(agent) => p.sees(agent),
        None => p.agent_id().is_some() || p.roles().is_some(),
    }
}

/// `GET /v1/tools/reviews/{id}[?wait=S]` (an operator; an agent its own and the hub's): one
/// review, long-polled.
#[utoipa::path(get, path = "/v1/tools/reviews/{id}", operation_id = "read_tool_review", tag = "around",
    params(("id" = String, Path, description = "The item's id"), ("wait" = Option<u64>, Query, maximum = 60, description = "Long-poll: seconds to wait for a change (0 to 60)")),
    responses((status = 200, description = "OK", body = assent_api::schema::ToolReview)),
    security(("agent_key" = []), ("operator_key" = [])))]
pub(crate) async fn read(State(st): State<AppState>, r: Polled) -> Result<Json<Value>, ApiError> {
    crate::extract::only_keys(&r.query, &["wait"])?;
    let (st, id, p, wait) = (&st, &r.id, &r.principal, r.wait);
    let look = || async move {
        let id2 = id.clone();
        let r = st
            .store_call(move |s| s.tool_review(&id2))
            .await?
            .filter(|r| may_read(p, r))
            .ok_or_else(|| ApiError::not_found(format!("no tool review `{id}`")))?;
        let pending = r.status == ReviewStatus::Pending;
        let body = to_value(&review(r));
        Ok(if pending {
            Look::Pending(body, Duration::MAX)
        } else {
            Look::Done(body)
        })
    };
    let body = st
        .waiters
        .long_poll(&review_key(id), &p.name, wait, look)
        .await?;
    Ok(Json(body))
}

async fn decide(
    st: AppState,
    op: Operator<ReviewTools>,
    id: String,
    accept: bool,
) -> Result<Body<ToolReview>, ApiError> {
    let id2 = id.clone();
    let r = st
        .store_task(move |s| s.decide_tool_review(&id2, accept, op.name(), now_ms()))
        .await?
        .map_err(|e| match e {
            assent_store::StoreError::Invalid(m) => {
                ApiError::new(StatusCode::CONFLICT, "ALREADY_DECIDED", m)
            }
            e => ApiError::unavailable(e),
        })?
        .ok_or_else(|| ApiError::not_found(format!("no tool review `{id}`")))?;
    st.waiters.wake(&review_key(&id));
    st.changed();
    Ok(Body(review(r)))
}

/// `POST /v1/tools/reviews/{id}/accept` (operators).
#[utoipa::path(post, path = "/v1/tools/reviews/{id}/accept", tag = "around",
    params(("id" = String, Path, description = "The item's id")),
    responses((status = 200, description = "OK", body = assent_api::schema::ToolReview)),
    security(("operator_key" = [])))]
pub(crate) async fn accept(
    State(st): State<AppState>,
    op: Operator<ReviewTools>,
    Path(id): Path<String>,
) -> Result<Body<ToolReview>, ApiError> {
    decide(st, op, id, true).await
}

/// `POST /v1/tools/reviews/{id}/reject` (operators).
#[utoipa::path(post, path = "/v1/tools/reviews/{id}/reject", tag = "around",
    params(("id" = String, Path, description = "The item's id")),
    responses((status = 200, description = "OK", body = assent_api::schema::ToolReview)),
    security(("operator_key" = [])))]
pub(crate) async fn reject(
    State(st): State<AppState>,
    op: Operator<ReviewTools>,
    Path(id): Path<String>,
) -> Result<Body<ToolReview>, ApiError> {
    decide(st, op, id, false).await
}

/// `GET /v1/tools/pins` (operators).
#[utoipa::path(get, path = "/v1/tools/pins", tag = "around",
    responses((status = 200, description = "OK", body = assent_api::tools::ToolPinList)),
    security(("operator_key" = [])))]
pub(crate) async fn pins(
    State(st): State<AppState>,
    _op: Operator<ListToolPins>,
) -> Result<Body<ToolPinList>, ApiError> {
    let list = st.store_call(|s| s.tool_pins()).await?;
    Ok(Body(ToolPinList { pins: list }))
}

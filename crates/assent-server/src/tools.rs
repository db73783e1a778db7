//! MCP tool-list pinning over HTTP (issue 4; see `assent_store::pins`):
//!
//! - `POST /v1/tools/check` (agent; the MCP proxy): `{"agent", "server", "tools": [TOOL...]}`
//!   with the upstream's `tools/list` entries → `{"tools": [{"name", "state": "pinned" |
//!   "first_use" | "held", "review_id"?, "review_status"?, "pinned"?}]}`.
//! - `GET /v1/tools/reviews[?status=pending|accepted|rejected|all]` (operator): reviews with the
//!   new and the pinned definition and an RFC 6902 `diff` between them.
//! - `GET /v1/tools/reviews/{id}?wait=S` (any principal): one review; `wait` long-polls while it
//!   is pending.
//! - `POST /v1/tools/reviews/{id}/accept`, `…/reject` (operator): `409 ALREADY_DECIDED` after
//!   the first decision.
//! - `GET /v1/tools/pins` (operator).
//!
//! Routes are mounted by [`crate::router`](mod@crate::router).

use crate::error::ApiError;
use crate::extract::{Agent, ApiJson, Caller, ListToolPins, ListToolReviews, Operator};
use crate::extract::{ReportTools, ReviewTools, wait_seconds};
use crate::state::{AppState, now_ms};
use crate::waiters::{Look, review_key};
use assent_store::pins::ToolReview;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;

/// A review as JSON, with the RFC 6902 diff from the pinned to the new definition.
fn review_json(r: &ToolReview) -> Value {
    let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
    if let Some(p) = &r.pinned {
        v["diff"] = serde_json::to_value(json_patch::diff(p, &r.definition)).unwrap_or(Value::Null);
    }
    v
}

/// The body of `POST /v1/tools/check`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CheckBody {
    agent: String,
    server: String,
    tools: Vec<Value>,
}

/// `POST /v1/tools/check` (the agent itself): pins or holds its upstream's tool list.
pub(crate) async fn check(
    State(st): State<AppState>,
    agent: Agent<ReportTools>,
    ApiJson(b): ApiJson<CheckBody>,
) -> Result<Json<Value>, ApiError> {
    agent.is(&b.agent)?;
    let declared = st
        .registry
        .agents
        .get(&b.agent)
        .is_some_and(|a| a.mcp_servers.iter().any(|m| m.alias == b.server));
    if !declared {
        return Err(ApiError::forbidden(format!(
            "MCP server `{}` is not declared by agent `{}`",
            b.server, b.agent
        )));
    }
    if b.tools.len() > 10_000 || b.tools.iter().any(|t| !t["name"].is_string()) {
        return Err(ApiError::bad_request(
            "tools: at most 10000 tool definitions, each with a string `name`",
        ));
    }
    let list = st
        .store_call(move |s| s.check_tools(&b.server, &b.tools, &b.agent, now_ms()))
        .await?;
    if list.iter().any(|t| t.state != "pinned") {
        st.changed();
    }
    Ok(Json(json!({ "tools": list })))
}

/// `GET /v1/tools/reviews[?status=…]` (operators).
pub(crate) async fn list(
    State(st): State<AppState>,
    _op: Operator<ListToolReviews>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let status = match q.get("status").map(String::as_str) {
        None | Some("pending") => Some("pending".to_string()),
        Some("all") => None,
        Some(s @ ("accepted" | "rejected")) => Some(s.to_string()),
        Some(s) => {
            return Err(ApiError::bad_request(format!(
                "status `{s}` is not one of pending, accepted, rejected, all"
            )));
        }
    };
    let list = st
        .store_call(move |s| s.tool_reviews(status.as_deref()))
        .await?;
    Ok(Json(
        json!({"reviews": list.iter().map(review_json).collect::<Vec<_>>()}),
    ))
}

/// `GET /v1/tools/reviews/{id}[?wait=S]` (any principal): one review, long-polled.
pub(crate) async fn read(
    State(st): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let wait = wait_seconds(&q)?;
    let (st, id) = (&st, &id);
    let look = || async move {
        let id2 = id.clone();
        let r = st
            .store_call(move |s| s.tool_review(&id2))
            .await?
            .ok_or_else(|| ApiError::not_found(format!("no tool review `{id}`")))?;
        Ok(match r.status.as_str() {
            "pending" => Look::Pending(review_json(&r), Duration::MAX),
            _ => Look::Done(review_json(&r)),
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
) -> Result<Json<Value>, ApiError> {
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
    Ok(Json(review_json(&r)))
}

/// `POST /v1/tools/reviews/{id}/accept` (operators).
pub(crate) async fn accept(
    State(st): State<AppState>,
    op: Operator<ReviewTools>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    decide(st, op, id, true).await
}

/// `POST /v1/tools/reviews/{id}/reject` (operators).
pub(crate) async fn reject(
    State(st): State<AppState>,
    op: Operator<ReviewTools>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    decide(st, op, id, false).await
}

/// `GET /v1/tools/pins` (operators).
pub(crate) async fn pins(
    State(st): State<AppState>,
    _op: Operator<ListToolPins>,
) -> Result<Json<Value>, ApiError> {
    let list = st.store_call(|s| s.tool_pins()).await?;
    Ok(Json(json!({ "pins": list })))
}

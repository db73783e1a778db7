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

use crate::api::{ApiJson, blocking, wait_seconds};
use crate::auth::authenticate;
use crate::error::ApiError;
use crate::{AppState, now_ms};
use assent_store::pins::ToolReview;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;

/// The routes of this module.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/tools/check", post(check))
        .route("/v1/tools/reviews", get(list))
        .route("/v1/tools/reviews/{id}", get(read))
        .route("/v1/tools/reviews/{id}/accept", post(accept))
        .route("/v1/tools/reviews/{id}/reject", post(reject))
        .route("/v1/tools/pins", get(pins))
}

/// A review as JSON, with the RFC 6902 diff from the pinned to the new definition.
fn review_json(r: &ToolReview) -> Value {
    let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
    if let Some(p) = &r.pinned {
        v["diff"] = serde_json::to_value(json_patch::diff(p, &r.definition)).unwrap_or(Value::Null);
    }
    v
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckBody {
    agent: String,
    server: String,
    tools: Vec<Value>,
}

async fn check(
    State(st): State<AppState>,
    headers: HeaderMap,
    ApiJson(b): ApiJson<CheckBody>,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    if p.agent_id() != Some(b.agent.as_str()) {
        return Err(ApiError::forbidden(
            "only the agent itself may report its upstream's tools",
        ));
    }
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
    let s = st.store.clone();
    let list = blocking(move || s.check_tools(&b.server, &b.tools, &b.agent, now_ms()))
        .await?
        .map_err(ApiError::unavailable)?;
    if list.iter().any(|t| t.state != "pinned") {
        st.changed();
    }
    Ok(Json(json!({ "tools": list })))
}

async fn list(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    p.roles()
        .ok_or_else(|| ApiError::forbidden("only an operator may list tool reviews"))?;
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
    let s = st.store.clone();
    let list = blocking(move || s.tool_reviews(status.as_deref()))
        .await?
        .map_err(ApiError::unavailable)?;
    Ok(Json(
        json!({"reviews": list.iter().map(review_json).collect::<Vec<_>>()}),
    ))
}

async fn read(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    let wait = wait_seconds(&q)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(wait);
    let key = format!("review:{id}");
    let waiting = match wait {
        0 => None,
        _ => Some(st.waiters.register(&key, &p.name)?),
    };
    loop {
        let notified = waiting.as_ref().map(|w| w.notify().notified());
        tokio::pin!(notified);
        if let Some(n) = notified.as_mut().as_pin_mut() {
            n.enable();
        }
        let s = st.store.clone();
        let id2 = id.clone();
        let r = blocking(move || s.tool_review(&id2))
            .await?
            .map_err(ApiError::unavailable)?
            .ok_or_else(|| ApiError::not_found(format!("no tool review `{id}`")))?;
        let now = tokio::time::Instant::now();
        if r.status != "pending" || now >= deadline {
            return Ok(Json(review_json(&r)));
        }
        match notified.as_mut().as_pin_mut() {
            Some(n) => {
                let _ = tokio::time::timeout(deadline - now, n).await;
            }
            None => tokio::time::sleep(deadline - now).await,
        }
    }
}

async fn decide(
    st: AppState,
    headers: HeaderMap,
    id: String,
    accept: bool,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?.clone();
    p.roles()
        .ok_or_else(|| ApiError::forbidden("only an operator may review tools"))?;
    let s = st.store.clone();
    let id2 = id.clone();
    let r = blocking(move || s.decide_tool_review(&id2, accept, &p.name, now_ms()))
        .await?
        .map_err(|e| match e {
            assent_store::StoreError::Invalid(m) => {
                ApiError::new(StatusCode::CONFLICT, "ALREADY_DECIDED", m)
            }
            e => ApiError::unavailable(e),
        })?
        .ok_or_else(|| ApiError::not_found(format!("no tool review `{id}`")))?;
    st.waiters.wake(&format!("review:{id}"));
    st.changed();
    Ok(Json(review_json(&r)))
}

async fn accept(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    decide(st, headers, id, true).await
}

async fn reject(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    decide(st, headers, id, false).await
}

async fn pins(State(st): State<AppState>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    p.roles()
        .ok_or_else(|| ApiError::forbidden("only an operator may list tool pins"))?;
    let s = st.store.clone();
    let list = blocking(move || s.tool_pins())
        .await?
        .map_err(ApiError::unavailable)?;
    Ok(Json(json!({ "pins": list })))
}

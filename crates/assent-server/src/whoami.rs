//! Who a key is and what its agent declared: `GET /v1/whoami` and
//! `GET /v1/agents/{agent}/mcp-servers/{alias}/tools` (the tools an agent's manifest declares
//! for one MCP upstream). Read from the principals and the registry, never the store; routes
//! are mounted by [`crate::router`](mod@crate::router).

use crate::error::ApiError;
use crate::extract::Caller;
use crate::state::AppState;
use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

/// `GET /v1/whoami`: the principal the key belongs to: `{"name", "kind", "agent_id"?, "roles"?}`.
pub(crate) async fn whoami(Caller(p): Caller) -> Result<Json<Value>, ApiError> {
    Ok(Json(match (p.agent_id(), p.roles()) {
        (Some(a), _) => json!({"name": p.name, "kind": "agent", "agent_id": a}),
        (None, r) => json!({"name": p.name, "kind": "operator", "roles": r}),
    }))
}

/// `GET /v1/agents/{agent}/mcp-servers/{alias}/tools` (that agent or an operator):
/// `{"agent", "server", "tools"}`; `403` for another agent's key, `404` for an undeclared
/// agent or upstream.
pub(crate) async fn declared_tools(
    State(st): State<AppState>,
    Caller(p): Caller,
    Path((agent, alias)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    if p.agent_id().is_some_and(|a| a != agent) {
        return Err(ApiError::forbidden(format!(
            "this key cannot act for agent `{agent}`"
        )));
    }
    let tools = st
        .registry
        .declared_tools(&agent, &alias)
        .map_err(ApiError::not_found)?;
    Ok(Json(
        json!({"agent": agent, "server": alias, "tools": tools}),
    ))
}

//! Who a key is and what its agent declared: `GET /v1/whoami` and
//! `GET /v1/agents/{agent}/mcp-servers/{alias}/tools` (the tools an agent's manifest declares
//! for one MCP upstream). Read from the principals and the registry, never the store; routes
//! are mounted by [`crate::router`](mod@crate::router).

use crate::body::Body;
use crate::config::PrincipalKind;
use crate::error::ApiError;
use crate::extract::Caller;
use crate::state::AppState;
use assent_api::identity::WhoAmI;
use assent_api::tools::DeclaredTools;
use axum::extract::{Path, State};

/// `GET /v1/whoami`: the principal the key belongs to: `{"name", "kind", "agent_id"?, "roles"?}`.
pub(crate) async fn whoami(Caller(p): Caller) -> Result<Body<WhoAmI>, ApiError> {
    Ok(Body(match &p.kind {
        PrincipalKind::Agent { agent_id } => WhoAmI::Agent {
            name: p.name.clone(),
            agent_id: agent_id.clone(),
        },
        PrincipalKind::Operator { roles } => WhoAmI::Operator {
            name: p.name.clone(),
            roles: roles.clone(),
        },
    }))
}

/// `GET /v1/agents/{agent}/mcp-servers/{alias}/tools` (that agent or an operator):
/// `{"agent", "server", "tools"}`; `403` for another agent's key, `404` for an undeclared
/// agent or upstream.
pub(crate) async fn declared_tools(
    State(st): State<AppState>,
    Caller(p): Caller,
    Path((agent, alias)): Path<(String, String)>,
) -> Result<Body<DeclaredTools>, ApiError> {
    if p.agent_id().is_some_and(|a| a != agent) {
        return Err(ApiError::forbidden(format!(
            "this key cannot act for agent `{agent}`"
        )));
    }
    let tools = st
        .registry
        .declared_tools(&agent, &alias)
        .map_err(ApiError::not_found)?;
    Ok(Body(DeclaredTools {
        agent,
        server: alias,
        tools,
    }))
}

//! Who a key is and what its agent declared: `GET /v1/whoami` and
//! `GET /v1/agents/{agent}/mcp-servers/{alias}/tools` (the tools an agent's manifest declares
//! for one MCP upstream), read from the principals and the registry; and whether the gateway
//! can serve, `GET /readyz` (no key; the store's `readiness`). Routes are mounted by
//! [`crate::router`](mod@crate::router).

use crate::body::Body;
use crate::config::PrincipalKind;
use crate::error::ApiError;
use crate::extract::Caller;
use crate::state::AppState;
use assent_api::identity::{Health, Ready, WhoAmI};
use assent_api::tools::DeclaredTools;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// `GET /healthz` (no key): `{"status": "ok"}` while the process serves.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, description = "Alive", body = assent_api::identity::Health)),
    security(()))]
pub(crate) async fn healthz() -> Body<Health> {
    Body(Health {
        status: "ok".into(),
    })
}

/// `GET /v1/whoami`: the principal the key belongs to: `{"name", "kind", "agent_id"?, "roles"?}`.
#[utoipa::path(get, path = "/v1/whoami", tag = "around",
    responses((status = 200, description = "OK", body = assent_api::identity::WhoAmI)),
    security(("agent_key" = []), ("operator_key" = [])))]
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
        // Unreachable: `Caller` refuses an executor's key (`auth::authenticate`).
        PrincipalKind::Executor { .. } => {
            return Err(ApiError::forbidden(crate::auth::EXECUTOR_ONLY_REDEEMS));
        }
    }))
}

/// `GET /v1/agents/{agent}/mcp-servers/{alias}/tools` (that agent or an operator):
/// `{"agent", "server", "tools"}`; `403` for another agent's key, `404` for an undeclared
/// agent or upstream.
#[utoipa::path(get, path = "/v1/agents/{agent}/mcp-servers/{alias}/tools", tag = "around",
    params(("agent" = String, Path, description = "Agent id"), ("alias" = String, Path, description = "MCP server alias")),
    responses((status = 200, description = "OK", body = assent_api::tools::DeclaredTools)),
    security(("agent_key" = []), ("operator_key" = [])))]
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
        .registry()
        .declared_tools(&agent, &alias)
        .map_err(ApiError::not_found)?;
    Ok(Body(DeclaredTools {
        agent,
        server: alias,
        tools,
    }))
}

/// `/readyz`'s message for reason `not_listening`.
const NOT_LISTENING: &str = "this replica does not hear the other replicas' changes (its LISTEN connection to the database is down and reconnecting): long-polls, MCP holds and event streams waiting here would not wake on decisions taken elsewhere";

/// `GET /readyz` (no key): `200` [`Ready`] `ready` when the store's readiness check passes
/// (database file at its path, readable afresh, the one this gateway writes, this build's
/// schema version, write lock free within 500 ms) and, on PostgreSQL, this replica's
/// configuration is the newest ([`crate::generations`]; else reason `config_superseded`) and
/// it hears the other replicas' commits (LISTEN in place; else reason `not_listening`);
/// `503` `not_ready` with the `reason` otherwise. A load balancer sends traffic only to a
/// ready replica. The check runs at most once a second (the answer is shared), so an
/// unauthenticated flood cannot hold the store.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses((status = 200, description = "Ready", body = assent_api::identity::Ready), (status = 503, description = "Not ready", body = assent_api::identity::Ready)),
    security(()))]
pub(crate) async fn ready(State(st): State<AppState>) -> Result<Response, ApiError> {
    let r = {
        // One check a second, single-flight: concurrent callers wait for it and share it.
        let mut last = st.readiness.lock().await;
        match &*last {
            Some((at, r)) if at.elapsed() < std::time::Duration::from_secs(1) => r.clone(),
            _ => {
                let r = st.store_apart(|s| s.readiness()).await?;
                *last = Some((std::time::Instant::now(), r.clone()));
                r
            }
        }
    };
    // A replica whose configuration another replica superseded serves nothing
    // ([`crate::generations`]): the load balancer takes it out.
    let superseded = st.generation.superseded();
    // A replica that does not hear the others' commits (its LISTEN connection down) would
    // hold long-polls and streams past decisions taken elsewhere: taken out too.
    let deaf = st.listener.as_ref().is_some_and(|l| !l.listening());
    let (status, reason, message) = match r.problem {
        None if superseded.is_some() => (
            StatusCode::SERVICE_UNAVAILABLE,
            Some("config_superseded".to_string()),
            superseded,
        ),
        None if deaf => (
            StatusCode::SERVICE_UNAVAILABLE,
            Some("not_listening".to_string()),
            Some(NOT_LISTENING.to_string()),
        ),
        None => (StatusCode::OK, None, None),
        Some(p) => {
            let detail = p.detail.as_deref().unwrap_or("");
            tracing::warn!(reason = p.reason, message = %p.message, detail, "not ready");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Some(p.reason.to_string()),
                Some(p.message),
            )
        }
    };
    let body = Ready {
        status: if status == StatusCode::OK {
            "ready"
        } else {
            "not_ready"
        }
        .into(),
        schema_version: r.schema_version,
        expected_schema_version: assent_store::ops::SCHEMA_VERSION,
        reason,
        message,
    };
    Ok((status, Body(body)).into_response())
}

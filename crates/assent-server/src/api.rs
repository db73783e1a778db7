//! HTTP handlers of the v1 API (issue "gateway end to end" §8). Every error is an
//! [`ApiError`] with a JSON body; bad input is a 4xx, never a 5xx.

use crate::auth::authenticate;
use crate::config::Principal;
use crate::error::ApiError;
use crate::{AppState, now_ms};
use assent_core::approval::DecisionKind;
use assent_core::{ApprovalStatus, ToolCall, VerdictKind, evaluate_with};
use assent_store::{ApprovalRecord, DecideError, NewApproval, RedeemError};
use axum::body::Bytes;
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;

/// Longest `?wait=` long-poll, in seconds.
pub const MAX_WAIT_SECONDS: u64 = 60;

/// Builds the router with every v1 route and JSON 404/405 fallbacks.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/v1/tool-calls", post(propose))
        .route("/v1/approvals", get(list_approvals))
        .route("/v1/approvals/{id}", get(get_approval))
        .route("/v1/approvals/{id}/decision", post(decide))
        .route("/v1/tokens/redeem", post(redeem))
        .route(
            "/v1/agents/{agent}/mcp-servers/{alias}/tools",
            get(declared_tools),
        )
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "METHOD_NOT_ALLOWED",
                "method not allowed on this route",
            )
        })
        .with_state(state)
}

/// A JSON body extractor whose rejections are `400 BAD_REQUEST` with serde's message (which
/// names the field, line and column), instead of axum's plain-text rejections.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::bad_request(format!("cannot read body: {e}")))?;
        if bytes.is_empty() {
            return Err(ApiError::bad_request(
                "request body is empty; expected a JSON object",
            ));
        }
        serde_json::from_slice(&bytes)
            .map(ApiJson)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
    }
}

/// Runs a blocking store call on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(ApiError::unavailable)
}

fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

fn operator<'a>(p: &'a Principal, what: &str) -> Result<&'a [String], ApiError> {
    p.roles()
        .ok_or_else(|| ApiError::forbidden(format!("only an operator may {what}")))
}

/// A call from a request body with the canonical JSON of its arguments and of the whole call,
/// and its `call_hash` (the arguments are canonicalised once); a call that is not well formed
/// (empty tool, arguments not an object, integers beyond ±2^53) is a 400.
struct Canonical {
    call: ToolCall,
    arguments: String,
    canonical: String,
    hash: String,
}

fn canonical_call(
    tool: String,
    server: Option<String>,
    arguments: Value,
) -> Result<Canonical, ApiError> {
    let bad = |e: assent_core::CanonicalError| ApiError::bad_request(e.to_string());
    let call = ToolCall::new(tool, server, arguments).map_err(bad)?;
    let arguments = call.canonical_arguments().map_err(bad)?;
    let canonical = call.canonical_with_arguments(&arguments).map_err(bad)?;
    let hash = assent_core::canonical::sha256_hex(canonical.as_bytes());
    Ok(Canonical {
        call,
        arguments,
        canonical,
        hash,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProposeBody {
    agent: String,
    session_id: String,
    tool: String,
    #[serde(default)]
    server: Option<String>,
    arguments: Value,
}

async fn propose(
    State(st): State<AppState>,
    headers: HeaderMap,
    ApiJson(b): ApiJson<ProposeBody>,
) -> Result<Response, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    match p.agent_id() {
        Some(a) if a == b.agent => {}
        Some(a) => {
            return Err(ApiError::forbidden(format!(
                "this key acts for agent `{a}`, not `{}`",
                b.agent
            )));
        }
        None => {
            return Err(ApiError::forbidden(
                "only an agent key may propose tool calls",
            ));
        }
    }
    if b.session_id.is_empty() {
        return Err(ApiError::bad_request("session_id must not be empty"));
    }
    let Canonical {
        call,
        arguments,
        canonical,
        hash: call_hash,
    } = canonical_call(b.tool, b.server, b.arguments)?;
    let verdict = evaluate_with(&st.registry, &b.agent, &call, Some(&arguments));
    let now = now_ms();
    match verdict.kind {
        VerdictKind::Allow | VerdictKind::Deny => {
            // The verdict is stored (audited) before the agent hears "allow": fail closed.
            let s = st.store.clone();
            let (agent, session, hash) = (b.agent.clone(), b.session_id.clone(), call_hash.clone());
            let (call, verdict) = blocking(move || {
                s.record_verdict(&agent, &session, &call, &hash, &verdict, now)
                    .map(|()| (call, verdict))
            })
            .await?
            .map_err(ApiError::unavailable)?;
            tracing::info!(agent = %b.agent, tool = %call.tool, verdict = verdict.kind.as_str(), "tool call decided");
            if verdict.kind == VerdictKind::Allow {
                Ok(Json(json!({"decision": "allow", "call_hash": call_hash, "reasons": verdict.reasons})).into_response())
            } else {
                Ok((StatusCode::FORBIDDEN, Json(json!({
                    "decision": "deny", "code": "TOOL_DENIED", "reason": verdict.message,
                    "message": verdict.message, "call_hash": call_hash, "reasons": verdict.reasons,
                }))).into_response())
            }
        }
        VerdictKind::Confirm => {
            let timeout_ms = verdict
                .timeout_seconds
                .map(|s| s as i64 * 1000)
                .unwrap_or(st.approval_timeout_ms);
            let s = st.store.clone();
            let (agent, session, tool) = (b.agent.clone(), b.session_id.clone(), call.tool.clone());
            let rec = blocking(move || {
                s.create_approval(&NewApproval {
                    agent: &agent,
                    session_id: &session,
                    call: &call,
                    canonical_arguments: &arguments,
                    canonical: &canonical,
                    call_hash: &call_hash,
                    verdict: &verdict,
                    now,
                    expires_at: now + timeout_ms,
                })
            })
            .await?
            .map_err(ApiError::unavailable)?;
            st.changed();
            tracing::info!(approval_id = %rec.id, agent = %rec.agent, tool = %tool, risk_tier = %rec.risk_tier, "approval requested");
            Ok((StatusCode::ACCEPTED, Json(json!({
                "decision": "pending", "code": "TOOL_BLOCKED_PENDING_APPROVAL", "approval_id": rec.id,
                "expires_at": rfc3339(rec.expires_at), "message": rec.message, "call_hash": rec.call_hash,
                "risk_tier": rec.risk_tier, "reasons": rec.reasons,
            }))).into_response())
        }
    }
}

/// The approval record as JSON. `token` is the signed approval token, given only to the agent
/// that asked.
fn approval_json(a: &ApprovalRecord, token: Option<String>) -> Value {
    let mut v = json!({
        "id": a.id, "status": a.status, "agent": a.agent, "session_id": a.session_id,
        "call": {"tool": a.call.tool, "server": a.call.server, "arguments": a.call.arguments},
        "call_hash": a.call_hash, "canonical": a.canonical, "message": a.message,
        "risk_tier": a.risk_tier,
        "risk_level": assent_core::RiskTier::parse(&a.risk_tier).map(|t| t.risk_level()),
        "irreversible": a.irreversible, "reasons": a.reasons, "approvers": a.approvers,
        "default_decision": a.default_decision,
        "decisions": a.decisions.iter().map(|d| json!({
            "decision": d.decision, "reason": d.reason, "by": d.actor, "at": rfc3339(d.at),
            "default_applied": d.default_applied,
        })).collect::<Vec<_>>(),
        "requested_at": rfc3339(a.requested_at), "expires_at": rfc3339(a.expires_at),
        "decided_at": a.decided_at.map(rfc3339),
    });
    if let (Some(t), Some(info)) = (token, &a.token) {
        v["token"] = Value::String(t);
        v["token_expires_at"] = Value::String(rfc3339(info.expires_at));
    }
    v
}

async fn list_approvals(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    operator(p, "list approvals")?;
    for k in q.keys() {
        if k != "status" && k != "limit" {
            return Err(ApiError::bad_request(format!(
                "unknown query parameter `{k}` (expected status, limit)"
            )));
        }
    }
    let status = match q.get("status").map(String::as_str) {
        None | Some("all") => None,
        Some(s) => Some(ApprovalStatus::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!("unknown status `{s}` (expected pending, approved, rejected, expired, cancelled or all)"))
        })?),
    };
    let limit = match q.get("limit") {
        None => 500,
        Some(l) => l
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=5000).contains(n))
            .ok_or_else(|| ApiError::bad_request("limit must be an integer from 1 to 5000"))?,
    };
    let s = st.store.clone();
    let (expired, list) = blocking(move || -> Result<_, assent_store::StoreError> {
        let expired = s.expire_due(now_ms())?;
        Ok((!expired.is_empty(), s.list_approvals(status, limit)?))
    })
    .await?
    .map_err(ApiError::unavailable)?;
    if expired {
        st.changed();
    }
    Ok(Json(
        json!({"approvals": list.iter().map(|a| approval_json(a, None)).collect::<Vec<_>>()}),
    ))
}

async fn get_approval(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?.clone();
    let wait = match q.get("wait") {
        None => 0,
        Some(w) => w
            .parse::<u64>()
            .map_err(|_| ApiError::bad_request("wait must be a whole number of seconds"))?
            .min(MAX_WAIT_SECONDS),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(wait);
    let mut rx = st.changes.subscribe();
    let is_agent = p.agent_id().is_some();
    loop {
        // One trip to the blocking pool: settle expiries, read the record (and the token for
        // its agent).
        let s = st.store.clone();
        let id2 = id.clone();
        let (expired, rec, token) = blocking(move || -> Result<_, assent_store::StoreError> {
            let expired = !s.expire_due(now_ms())?.is_empty();
            let rec = s.get_approval(&id2)?;
            let token = match &rec {
                Some(r) if is_agent && r.token.is_some() => s.token_string(&id2)?,
                _ => None,
            };
            Ok((expired, rec, token))
        })
        .await?
        .map_err(ApiError::unavailable)?;
        if expired {
            st.changed();
        }
        // An agent sees only its own approvals; others get the same 404 as a missing id.
        let rec = rec
            .filter(|r| p.agent_id().is_none_or(|a| a == r.agent))
            .ok_or_else(|| ApiError::not_found(format!("no approval `{id}`")))?;
        let now = tokio::time::Instant::now();
        if rec.status != ApprovalStatus::Pending || now >= deadline {
            return Ok(Json(approval_json(&rec, token)));
        }
        // Wake on a change, at the approval's own expiry, or at the deadline.
        let until_expiry = Duration::from_millis((rec.expires_at - now_ms()).max(0) as u64 + 5);
        let sleep = (deadline - now).min(until_expiry);
        let _ = tokio::time::timeout(sleep, rx.changed()).await;
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionBody {
    decision: DecisionKind,
    #[serde(default)]
    reason: Option<String>,
}

async fn decide(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    ApiJson(b): ApiJson<DecisionBody>,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?.clone();
    let roles = operator(&p, "decide approvals")?.to_vec();
    let s = st.store.clone();
    let name = p.name.clone();
    // One trip to the blocking pool: settle expiries, then decide (the store checks the
    // approver role in the same transaction).
    let res = blocking(move || {
        let now = now_ms();
        s.expire_due(now)?;
        s.decide(&id, b.decision, b.reason.as_deref(), &name, &roles, now)
    })
    .await?;
    match res {
        Ok(rec) => {
            st.changed();
            tracing::info!(approval_id = %rec.id, operator = %p.name, status = rec.status.as_str(), "approval decided");
            Ok(Json(approval_json(&rec, None)))
        }
        Err(DecideError::NotFound) => Err(ApiError::not_found("no such approval")),
        Err(DecideError::NotApprover(approvers)) => Err(ApiError::forbidden(format!(
            "operator `{}` has none of the approver roles of this approval ({})",
            p.name,
            approvers.join(", ")
        ))),
        Err(DecideError::AlreadyDecided(e)) => {
            Err(
                ApiError::new(StatusCode::CONFLICT, "ALREADY_DECIDED", e.to_string())
                    .with(json!({"status": e.0})),
            )
        }
        Err(DecideError::Store(e)) => Err(ApiError::unavailable(e)),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RedeemBody {
    token: String,
    tool: String,
    #[serde(default)]
    server: Option<String>,
    arguments: Value,
}

async fn redeem(
    State(st): State<AppState>,
    headers: HeaderMap,
    ApiJson(b): ApiJson<RedeemBody>,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    let agent = p
        .agent_id()
        .ok_or_else(|| ApiError::forbidden("only an agent key may redeem tokens"))?
        .to_string();
    let hash = canonical_call(b.tool, b.server, b.arguments)?.hash;
    let s = st.store.clone();
    let h2 = hash.clone();
    let res = blocking(move || s.redeem(&b.token, &agent, &h2, now_ms())).await?;
    match res {
        Ok(c) => Ok(Json(
            json!({"call_hash": hash, "approval_id": c.aid, "token_id": c.tid}),
        )),
        Err(e) => Err(match e {
            RedeemError::Invalid => {
                ApiError::new(StatusCode::UNAUTHORIZED, "TOKEN_INVALID", e.to_string())
            }
            RedeemError::WrongAgent => ApiError::forbidden(e.to_string()),
            RedeemError::Used => ApiError::new(StatusCode::CONFLICT, "TOKEN_USED", e.to_string()),
            RedeemError::Expired => ApiError::new(StatusCode::GONE, "TOKEN_EXPIRED", e.to_string()),
            RedeemError::Mismatch { .. } => {
                ApiError::new(StatusCode::FORBIDDEN, "TOKEN_MISMATCH", e.to_string())
            }
            RedeemError::Store(e) => ApiError::unavailable(e),
        }),
    }
}

async fn declared_tools(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((agent, alias)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
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

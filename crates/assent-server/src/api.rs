//! HTTP handlers of the v1 API (issue "gateway end to end" §8). Every error is an
//! [`ApiError`] with a JSON body; bad input is a 4xx, never a 5xx.

use crate::auth::authenticate;
use crate::config::Principal;
use crate::error::ApiError;
pub(crate) use crate::extract::{ApiJson, OptionalJson};
use crate::formats::{self, approval_json, rfc3339};
use crate::{AppState, now_ms};
use assent_core::approval::{DecisionKind, GrantScope};
use assent_core::gatekeeper::default_timeout_seconds;
use assent_core::triggers::Observations;
use assent_core::{
    ApprovalStatus, ToolCall, Verdict, VerdictKind, evaluate_delegation, evaluate_in,
    evaluate_target,
};
use assent_store::{
    ApprovalRecord, ConfirmTarget, DecideError, DecisionInput, Proposal, Proposed, RedeemError,
};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;

/// Longest `?wait=` long-poll, in seconds.
pub const MAX_WAIT_SECONDS: u64 = 60;

/// Every route of the gateway with JSON 404/405 fallbacks, without the edge layers (see
/// [`crate::app`], which adds them around these and any extra routes).
pub fn routes(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/v1/whoami", get(whoami))
        .route("/v1/tool-calls", post(propose))
        .route("/v1/delegations", post(delegate))
        .route("/v1/tool-results", post(tool_result))
        .route("/v1/approvals", get(list_approvals))
        .route("/v1/approvals/{id}", get(get_approval))
        .route("/v1/approvals/decisions", post(decide_batch))
        .route("/v1/approvals/{id}/decision", post(decide))
        .route("/v1/approvals/{id}/cancel", post(cancel_approval))
        .route("/v1/approvals/{id}/user-decision", post(user_decision))
        .route("/v1/sessions/{id}/cancel", post(cancel_session))
        .route("/v1/grants", get(list_grants))
        .route("/v1/learning-samples", get(learning_samples))
        .route("/v1/grants/{id}", axum::routing::delete(revoke_grant))
        .route("/v1/tokens/redeem", post(redeem))
        .route(
            "/v1/agents/{agent}/mcp-servers/{alias}/tools",
            get(declared_tools),
        )
        .merge(crate::aaep::routes())
        .merge(crate::clarify::routes())
        .merge(crate::plans::routes())
        .merge(crate::tools::routes())
        .merge(crate::dashboard::routes())
        .merge(crate::webhooks::routes())
        .merge(crate::checkpoints::routes())
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

/// Runs a blocking store call on the blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(ApiError::unavailable)
}

fn operator<'a>(p: &'a Principal, what: &str) -> Result<&'a [String], ApiError> {
    p.roles()
        .ok_or_else(|| ApiError::forbidden(format!("only an operator may {what}")))
}

/// A call from a request body with the canonical JSON of its arguments and of the whole call,
/// and its `call_hash` (the arguments are canonicalised once); a call that is not well formed
/// (empty tool, arguments not an object, integers beyond ±2^53) is a 400.
pub(crate) struct Canonical {
    pub call: ToolCall,
    pub arguments: String,
    pub canonical: String,
    pub hash: String,
}

pub(crate) fn canonical_call(
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
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    device_id: Option<String>,
    #[serde(default)]
    trace_id: Option<String>,
    /// MPLP plan this call is a step of (UUID v4); blocked while the plan is not approved.
    #[serde(default)]
    plan_id: Option<String>,
    /// MPLP step id (UUID v4); blocked while a Confirm on it is pending.
    #[serde(default)]
    step_id: Option<String>,
}

/// One thing to gate: a tool call, or the synthetic call of an MPLP Confirm target.
pub(crate) struct Submission {
    pub agent: String,
    pub session_id: String,
    pub run_id: Option<String>,
    pub device_id: Option<String>,
    pub trace_id: Option<String>,
    pub call: ToolCall,
    pub arguments: String,
    pub canonical: String,
    pub call_hash: String,
    /// `(target_type, target_id, diff)` of an MPLP Confirm target.
    pub target: Option<(String, String, Option<Value>)>,
    pub plan_id: Option<String>,
    pub step_id: Option<String>,
    /// A delegation to a sub-agent (`call` from `delegation_call`).
    pub delegation: bool,
    /// A verdict decided already (a held tool result); the gatekeeper is not asked again.
    pub verdict: Option<Verdict>,
}

/// Resolves symlinks in an absolute, lexically normalised path: the real path of its longest
/// existing prefix joined with the rest (scope checks of seed 002).
pub fn resolve_real_path(p: &std::path::Path) -> std::path::PathBuf {
    let mut existing = p.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&existing) {
            let mut out = real;
            for c in rest.iter().rev() {
                out.push(c);
            }
            return out;
        }
        match (
            existing.file_name().map(|f| f.to_os_string()),
            existing.parent(),
        ) {
            (Some(f), Some(parent)) => {
                rest.push(f);
                existing = parent.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// Whether `s` is a lowercase UUID v4 (the MPLP identifier pattern).
pub fn is_uuid_v4(s: &str) -> bool {
    uuid::Uuid::parse_str(s).is_ok_and(|u| u.get_version_num() == 4 && u.to_string() == s)
}

/// The `wait` query parameter of a long poll: whole seconds, at most [`MAX_WAIT_SECONDS`];
/// 0 when absent; 400 when not a whole number.
pub(crate) fn wait_seconds(q: &HashMap<String, String>) -> Result<u64, ApiError> {
    match q.get("wait") {
        None => Ok(0),
        Some(w) => Ok(w
            .parse::<u64>()
            .map_err(|_| ApiError::bad_request("wait must be a whole number of seconds"))?
            .min(MAX_WAIT_SECONDS)),
    }
}

/// The principal when it is the key of agent `agent` itself; 403 otherwise.
pub(crate) fn agent_only<'a>(p: &'a Principal, agent: &str) -> Result<&'a str, ApiError> {
    match p.agent_id() {
        Some(a) if a == agent => Ok(a),
        Some(a) => Err(ApiError::forbidden(format!(
            "this key acts for agent `{a}`, not `{agent}`"
        ))),
        None => Err(ApiError::forbidden("only the agent itself may do this")),
    }
}

/// Longest identifier accepted (`session_id`, `tool`, `server`, `run_id`, `device_id`,
/// `agent`), in bytes.
pub const MAX_ID_BYTES: usize = 256;

fn check_id(what: &str, v: &Option<String>) -> Result<(), ApiError> {
    match v {
        Some(s) => check_name(what, s),
        None => Ok(()),
    }
}

/// `400` unless `v` is 1 to [`MAX_ID_BYTES`] bytes long.
pub(crate) fn check_name(what: &str, v: &str) -> Result<(), ApiError> {
    if v.is_empty() || v.len() > MAX_ID_BYTES {
        return Err(ApiError::bad_request(format!(
            "{what} must be 1 to {MAX_ID_BYTES} bytes (got {})",
            v.len()
        )));
    }
    Ok(())
}

/// Longest `reason` of a decision or cancellation accepted, in bytes.
pub const MAX_REASON_BYTES: usize = 4096;

/// `400` when `reason` is over [`MAX_REASON_BYTES`].
pub(crate) fn check_reason(reason: &Option<String>) -> Result<(), ApiError> {
    match reason {
        Some(r) if r.len() > MAX_REASON_BYTES => Err(ApiError::bad_request(format!(
            "reason must be at most {MAX_REASON_BYTES} bytes (got {})",
            r.len()
        ))),
        _ => Ok(()),
    }
}

/// The size limits of one submission (issue 10 §14): identifiers of at most [`MAX_ID_BYTES`]
/// and canonical arguments of at most `max_arguments_bytes` (`413 ARGUMENTS_TOO_LARGE`).
fn check_sizes(b: &Submission, max_arguments_bytes: usize) -> Result<(), ApiError> {
    check_name("agent", &b.agent)?;
    if b.session_id.len() > MAX_ID_BYTES {
        // Empty is allowed here: a plan submitted without a session has none.
        check_name("session_id", &b.session_id)?;
    }
    check_name("tool", &b.call.tool)?;
    check_id("server", &b.call.server)?;
    check_id("run_id", &b.run_id)?;
    check_id("device_id", &b.device_id)?;
    if b.arguments.len() > max_arguments_bytes {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "ARGUMENTS_TOO_LARGE",
            format!(
                "the call's canonical arguments are {} bytes; this gateway accepts at most {max_arguments_bytes} (max_arguments_bytes)",
                b.arguments.len()
            ),
        ));
    }
    Ok(())
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
    check_id("run_id", &b.run_id)?;
    check_id("device_id", &b.device_id)?;
    if let Some(t) = &b.trace_id
        && !is_uuid_v4(t)
    {
        return Err(ApiError::bad_request(
            "trace_id must be a lowercase UUID v4 (MPLP identifiers)",
        ));
    }
    for (what, v) in [("plan_id", &b.plan_id), ("step_id", &b.step_id)] {
        if v.as_deref().is_some_and(|v| !is_uuid_v4(v)) {
            return Err(ApiError::bad_request(format!(
                "{what} must be a lowercase UUID v4 (MPLP identifiers)"
            )));
        }
    }
    let Canonical {
        call,
        arguments,
        canonical,
        hash: call_hash,
    } = canonical_call(b.tool, b.server, b.arguments)?;
    gate(
        &st,
        Submission {
            agent: b.agent,
            session_id: b.session_id,
            run_id: b.run_id,
            device_id: b.device_id,
            trace_id: b.trace_id,
            call,
            arguments,
            canonical,
            call_hash,
            target: None,
            plan_id: b.plan_id,
            step_id: b.step_id,
            delegation: false,
            verdict: None,
        },
    )
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DelegationBody {
    agent: String,
    session_id: String,
    target: String,
    #[serde(default)]
    input: Value,
    #[serde(default)]
    skill_id: Option<String>,
    #[serde(default)]
    skill_args: Option<Value>,
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    device_id: Option<String>,
    #[serde(default)]
    trace_id: Option<String>,
}

/// `POST /v1/delegations` (agent): `{"agent", "session_id", "target": ALIAS, "input": {...},
/// "skill_id"?, "skill_args"?}` gates a delegation to a sub-agent (seed 004 "Approval on Agent
/// Delegation") and answers exactly as `POST /v1/tool-calls` does; an approval's token binds
/// the delegation's canonical call (`delegate.ALIAS` with input, skill id and skill args).
async fn delegate(
    State(st): State<AppState>,
    headers: HeaderMap,
    ApiJson(b): ApiJson<DelegationBody>,
) -> Result<Response, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    agent_only(p, &b.agent)?;
    if b.session_id.is_empty() || b.target.is_empty() {
        return Err(ApiError::bad_request(
            "session_id and target must not be empty",
        ));
    }
    check_id("run_id", &b.run_id)?;
    check_id("device_id", &b.device_id)?;
    if b.trace_id.as_deref().is_some_and(|t| !is_uuid_v4(t)) {
        return Err(ApiError::bad_request(
            "trace_id must be a lowercase UUID v4 (MPLP identifiers)",
        ));
    }
    if !(b.input.is_object() || b.input.is_null()) {
        return Err(ApiError::bad_request("input must be a JSON object"));
    }
    if b.skill_args.as_ref().is_some_and(|a| !a.is_object()) {
        return Err(ApiError::bad_request("skill_args must be a JSON object"));
    }
    if b.skill_args.is_some() && b.skill_id.is_none() {
        return Err(ApiError::bad_request("skill_args needs a skill_id"));
    }
    let input = if b.input.is_null() {
        json!({})
    } else {
        b.input
    };
    let bad = |e: assent_core::CanonicalError| ApiError::bad_request(e.to_string());
    let call = assent_core::delegation_call(&b.target, input, b.skill_id.as_deref(), b.skill_args)
        .map_err(bad)?;
    let arguments = call.canonical_arguments().map_err(bad)?;
    let canonical = call.canonical_with_arguments(&arguments).map_err(bad)?;
    let call_hash = assent_core::canonical::sha256_hex(canonical.as_bytes());
    gate(
        &st,
        Submission {
            agent: b.agent,
            session_id: b.session_id,
            run_id: b.run_id,
            device_id: b.device_id,
            trace_id: b.trace_id,
            call,
            arguments,
            canonical,
            call_hash,
            target: None,
            plan_id: None,
            step_id: None,
            delegation: true,
            verdict: None,
        },
    )
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolResultBody {
    agent: String,
    session_id: String,
    tool: String,
    #[serde(default)]
    server: Option<String>,
    arguments: Value,
    output_bytes: u64,
    result_sha256: String,
    #[serde(default)]
    preview: Option<String>,
    /// The approval the call ran under, when it was held.
    #[serde(default)]
    approval_id: Option<String>,
}

/// `POST /v1/tool-results` (agent; sent by the MCP proxy for every forwarded call): a
/// forwarded call's result is `output_bytes` long (the JSON of its `result`) with SHA-256
/// `result_sha256`; appended to the audit log as `call.result` (linked to `approval_id` when
/// the call was held). Within the `thresholds.output_bytes` of the
/// rules covering the call: `200 {"decision": "allow"}`, release it. Over it: the result is held
/// for an operator as an approval of the synthetic call `result.TOOL` with arguments
/// `{"call": {tool, server, arguments}, "output_bytes", "result_sha256", "preview"}`, under the
/// covering rules' approvers and timeout, trigger `output_bytes`, answered like a tool call
/// (`202` pending; the approval's token binds the result's hash). Seed 002 "Triggers".
async fn tool_result(
    State(st): State<AppState>,
    headers: HeaderMap,
    ApiJson(b): ApiJson<ToolResultBody>,
) -> Result<Response, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    if p.agent_id() != Some(b.agent.as_str()) {
        return Err(ApiError::forbidden(
            "only the agent itself may report its tool results",
        ));
    }
    if b.result_sha256.len() != 64 || !b.result_sha256.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(ApiError::bad_request("result_sha256 must be 64 hex digits"));
    }
    let original = canonical_call(b.tool.clone(), b.server.clone(), b.arguments)?;
    let record = json!({"server": b.server, "tool": b.tool, "call_hash": original.hash,
                        "result_sha256": b.result_sha256.to_ascii_lowercase(),
                        "output_bytes": b.output_bytes, "approval_id": b.approval_id});
    let s = st.store.clone();
    let (agent, approval) = (b.agent.clone(), b.approval_id.clone());
    blocking(move || s.record_result(&agent, approval.as_deref(), &record, now_ms()))
        .await?
        .map_err(ApiError::unavailable)?;
    let v = evaluate_in(
        &st.registry,
        &b.agent,
        &original.call,
        Some(&original.arguments),
        &Observations::none(now_ms()),
    );
    let limit = match v.output_bytes {
        Some(l) if b.output_bytes > l && v.kind != VerdictKind::Deny => l,
        _ => {
            return Ok(
                Json(json!({"decision": "allow", "output_bytes": v.output_bytes})).into_response(),
            );
        }
    };
    let mut held = v;
    held.kind = VerdictKind::Confirm;
    held.in_client_approval = false; // an operator releases a held result
    if !held.triggers.iter().any(|t| t == "output_bytes") {
        held.triggers.push("output_bytes".into());
    }
    let target = match &b.server {
        Some(s) => format!("{s}/{}", b.tool),
        None => b.tool.clone(),
    };
    let why = format!(
        "the result of {target} is {} bytes, over the output_bytes threshold of {limit}",
        b.output_bytes
    );
    held.reasons.push(assent_core::Reason {
        file: String::new(),
        rule: "thresholds.output_bytes".into(),
        text: why.clone(),
    });
    held.message = format!("Release the result to agent {}? ({why})", b.agent);
    let preview: Option<String> = b.preview.map(|p| p.chars().take(2048).collect());
    let args = json!({"call": {"tool": b.tool, "server": b.server, "arguments": original.call.arguments},
                      "output_bytes": b.output_bytes, "result_sha256": b.result_sha256.to_ascii_lowercase(),
                      "preview": preview});
    let c = canonical_call(format!("result.{}", b.tool), b.server, args)?;
    gate(
        &st,
        Submission {
            agent: b.agent,
            session_id: b.session_id,
            run_id: None,
            device_id: None,
            trace_id: None,
            call: c.call,
            arguments: c.arguments,
            canonical: c.canonical,
            call_hash: c.hash,
            target: None,
            plan_id: None,
            step_id: None,
            delegation: false,
            verdict: Some(held),
        },
    )
    .await
}

/// Gates one submission in one store transaction and answers as `POST /v1/tool-calls` does:
/// 200 allow (with a token when a grant covers it), 403 `TOOL_DENIED`, 202 pending, 429
/// `TOO_MANY_PENDING`.
pub(crate) async fn gate(st: &AppState, b: Submission) -> Result<Response, ApiError> {
    check_sizes(&b, st.settings.max_arguments_bytes)?;
    let Submission {
        call,
        arguments,
        canonical,
        call_hash,
        ..
    } = b;
    let s = st.store.clone();
    let reg = st.registry.clone();
    let settings = st.settings;
    let extension_ms = st.extension_ms.load(std::sync::atomic::Ordering::Relaxed);
    let agent = b.agent.clone();
    let (session, run, device) = (b.session_id.clone(), b.run_id.clone(), b.device_id.clone());
    let trace = b.trace_id.clone();
    let hash = call_hash.clone();
    let target = b.target.clone();
    let delegation = b.delegation;
    let preset = b.verdict.clone();
    let (plan_id, step_id) = (b.plan_id.clone(), b.step_id.clone());
    let (verdict, outcome) = blocking(move || {
        let now = now_ms();
        let timeout = |v: &Verdict| -> i64 {
            v.timeout_seconds
                .map(assent_core::approval::millis)
                .or(settings.approval_timeout_ms)
                .unwrap_or(assent_core::approval::millis(default_timeout_seconds(
                    v.risk_tier,
                )))
                .saturating_add(extension_ms)
        };
        let governed_by = |v: &Verdict| reg.policies_behind(&v.reasons);
        s.propose(
            &Proposal {
                agent: &agent,
                session_id: &session,
                run_id: run.as_deref(),
                device_id: device.as_deref(),
                trace_id: trace.as_deref(),
                call: &call,
                canonical_arguments: &arguments,
                canonical: &canonical,
                call_hash: &hash,
                now,
                timeout_ms: &timeout,
                max_pending: settings.max_pending_per_agent,
                target: target.as_ref().map(|(t, id, diff)| ConfirmTarget {
                    target_type: t,
                    target_id: id,
                    diff: diff.as_ref(),
                }),
                plan_id: plan_id.as_deref(),
                step_id: step_id.as_deref(),
                governed_by: Some(&governed_by),
                policy_set_sha256: Some(&reg.policy_set_sha256),
            },
            |prior| {
                if let Some(v) = preset {
                    return v;
                }
                if target.is_some() {
                    return evaluate_target(&reg, &agent, &call, Some(&arguments));
                }
                if delegation {
                    return evaluate_delegation(&reg, &agent, &call, Some(&arguments));
                }
                let obs = Observations {
                    now_ms: now,
                    prior_calls: prior,
                    resolve_path: &resolve_real_path,
                };
                evaluate_in(&reg, &agent, &call, Some(&arguments), &obs)
            },
        )
    })
    .await?
    .map_err(|e| match e {
        assent_store::StoreError::Invalid(m) => {
            ApiError::new(StatusCode::CONFLICT, "WRONG_STATE", m)
        }
        e => ApiError::unavailable(e),
    })?;
    let common = json!({"call_hash": call_hash, "reasons": verdict.reasons, "risk_tier": verdict.risk_tier,
                        "triggers": verdict.triggers});
    let merge = |mut v: Value| {
        if let (Value::Object(m), Value::Object(c)) = (&mut v, common.clone()) {
            for (k, x) in c {
                m.entry(k).or_insert(x);
            }
        }
        v
    };
    match outcome {
        Proposed::Allowed => {
            tracing::info!(agent = %b.agent, verdict = "allow", "tool call decided");
            Ok(Json(merge(
                json!({"decision": "allow", "output_bytes": verdict.output_bytes}),
            ))
            .into_response())
        }
        Proposed::Denied => {
            tracing::info!(agent = %b.agent, verdict = "deny", "tool call decided");
            Ok((
                StatusCode::FORBIDDEN,
                Json(merge(json!({
                    "decision": "deny", "code": "TOOL_DENIED", "reason": verdict.message,
                    "message": verdict.message,
                }))),
            )
                .into_response())
        }
        Proposed::Granted(rec) => {
            st.changed();
            let s = st.store.clone();
            let id = rec.id.clone();
            let token = blocking(move || s.token_string(&id))
                .await?
                .map_err(ApiError::unavailable)?;
            tracing::info!(approval_id = %rec.id, grant_id = ?rec.grant_id, "tool call allowed by a grant");
            Ok(Json(merge(json!({
                "decision": "allow", "approval_id": rec.id, "grant_id": rec.grant_id, "scope": rec.scope,
                "token": token, "approval_token": formats::token_json(&rec),
                "token_expires_at": rec.token.as_ref().map(|t| rfc3339(t.expires_at)),
                "output_bytes": rec.output_bytes,
            })))
            .into_response())
        }
        Proposed::Held {
            approval: rec,
            joined,
        } => {
            if !joined {
                st.changed();
            }
            tracing::info!(approval_id = %rec.id, agent = %rec.agent, risk_tier = %rec.risk_tier, joined, "approval requested");
            Ok((StatusCode::ACCEPTED, Json(merge(json!({
                "decision": "pending", "code": "TOOL_BLOCKED_PENDING_APPROVAL", "approval_id": rec.id,
                "joined": joined, "expires_at": rfc3339(rec.expires_at), "message": rec.message,
                "human_summary": rec.human_summary, "reasons": rec.reasons,
                "in_client_approval": rec.in_client_approval,
                "suggested_alternatives": rec.suggested_alternatives,
                "side_effects": rec.side_effects, "rollback": rec.rollback,
            })))).into_response())
        }
        Proposed::TooManyPending { limit } => Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "TOO_MANY_PENDING",
            format!(
                "agent `{}` already has {limit} pending approvals (max_pending_per_agent); wait for decisions or cancel some",
                b.agent
            ),
        )),
    }
}

async fn list_approvals(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    operator(p, "list approvals")?;
    for k in q.keys() {
        if !["status", "limit", "group"].contains(&k.as_str()) {
            return Err(ApiError::bad_request(format!(
                "unknown query parameter `{k}` (expected status, limit, group)"
            )));
        }
    }
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
        Ok((expired, s.list_approvals(status, limit)?))
    })
    .await?
    .map_err(ApiError::unavailable)?;
    st.settled(&expired);
    if group {
        // Similar approvals: same agent, server, tool and rules; oldest group first.
        let mut groups: Vec<(String, Vec<&ApprovalRecord>)> = Vec::new();
        for a in list.iter().rev() {
            match groups.iter_mut().find(|(k, _)| *k == a.group_key) {
                Some((_, v)) => v.push(a),
                None => groups.push((a.group_key.clone(), vec![a])),
            }
        }
        return Ok(Json(json!({"groups": groups.iter().map(|(_, v)| json!({
            "agent": v[0].agent, "server": v[0].call.server, "tool": v[0].call.tool,
            "reasons": v[0].reasons, "count": v.len(),
            "approvals": v.iter().map(|a| approval_json(a, None)).collect::<Vec<_>>(),
        })).collect::<Vec<_>>()})));
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
    for k in q.keys() {
        if k != "wait" && k != "format" {
            return Err(ApiError::bad_request(format!(
                "unknown query parameter `{k}` (expected wait, format)"
            )));
        }
    }
    let format = q.get("format").map(String::as_str).unwrap_or("assent");
    if !["assent", "approval-request", "mplp"].contains(&format) {
        return Err(ApiError::bad_request(format!(
            "unknown format `{format}` (expected assent, approval-request or mplp)"
        )));
    }
    let wait = wait_seconds(&q)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(wait);
    // Only a long-poll registers (and counts toward the principal's cap); it is woken by a
    // change of this approval alone.
    let waiting = match wait {
        0 => None,
        _ => Some(st.waiters.register(&approval_key(&id), &p.name)?),
    };
    let is_agent = p.agent_id().is_some();
    loop {
        let notified = waiting.as_ref().map(|w| w.notify().notified());
        tokio::pin!(notified);
        if let Some(n) = notified.as_mut().as_pin_mut() {
            n.enable();
        }
        // One trip to the blocking pool: read the record (and the token for its agent); an
        // approval past its expiry is settled first (the sweep does it within a second anyway).
        let s = st.store.clone();
        let id2 = id.clone();
        let want_events = format == "mplp";
        let (expired, rec, token, events) =
            blocking(move || -> Result<_, assent_store::StoreError> {
                let mut rec = s.get_approval(&id2)?;
                let overdue = rec.as_ref().is_some_and(|r| {
                    r.status == ApprovalStatus::Pending && r.expires_at <= now_ms()
                });
                let mut expired = Vec::new();
                if overdue {
                    expired = s.expire_due(now_ms())?;
                    rec = s.get_approval(&id2)?;
                }
                let token = match &rec {
                    Some(r) if is_agent && r.token.is_some() => s.token_string(&id2)?,
                    _ => None,
                };
                let events = if want_events {
                    (s.mplp_events(&id2)?, s.confirm_context(&id2)?)
                } else {
                    Default::default()
                };
                Ok((expired, rec, token, events))
            })
            .await?
            .map_err(ApiError::unavailable)?;
        st.settled(&expired);
        // An agent sees only its own approvals; others get the same 404 as a missing id.
        let rec = rec
            .filter(|r| p.agent_id().is_none_or(|a| a == r.agent))
            .ok_or_else(|| ApiError::not_found(format!("no approval `{id}`")))?;
        let now = tokio::time::Instant::now();
        if rec.status != ApprovalStatus::Pending || now >= deadline {
            return Ok(Json(match format {
                "approval-request" => formats::approval_request_json(&rec),
                "mplp" => formats::mplp_confirm_json(&rec, &events.0, &events.1),
                _ => approval_json(&rec, token),
            }));
        }
        // Wake on a change of this approval, at its own expiry, or at the deadline.
        let until_expiry = Duration::from_millis((rec.expires_at - now_ms()).max(0) as u64 + 5);
        let sleep = (deadline - now).min(until_expiry);
        match notified.as_mut().as_pin_mut() {
            Some(n) => {
                let _ = tokio::time::timeout(sleep, n).await;
            }
            None => tokio::time::sleep(sleep).await,
        }
    }
}

/// The waiter key of approval `id`.
pub(crate) fn approval_key(id: &str) -> String {
    format!("approval:{id}")
}

/// The decision body of seed 002 / issue 3:
/// `{"decision": "approve"|"deny", "reason"?, "scope"?: "once"|"session"|"15m"|"workspace",
///   "whole_tool"?: bool, "confirm_workspace"?: bool, "arguments"?: {...}}`.
/// One operator decision, as `POST /v1/approvals/{id}/decision` takes it (and the
/// dashboard's forms build it).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecisionBody {
    pub(crate) decision: DecisionKind,
    #[serde(default)]
    pub(crate) reason: Option<String>,
    #[serde(default)]
    pub(crate) scope: Option<String>,
    #[serde(default)]
    pub(crate) whole_tool: bool,
    #[serde(default)]
    pub(crate) confirm_workspace: bool,
    #[serde(default)]
    pub(crate) arguments: Option<Value>,
}

fn decide_error(e: DecideError, operator: &str) -> ApiError {
    match e {
        DecideError::NotFound => ApiError::not_found("no such approval"),
        DecideError::NotApprover(approvers) => ApiError::forbidden(format!(
            "operator `{operator}` has none of the approver roles of this approval ({})",
            approvers.join(", ")
        )),
        DecideError::AlreadyDecided(e) => {
            ApiError::new(StatusCode::CONFLICT, "ALREADY_DECIDED", e.to_string())
                .with(json!({"status": e.0}))
        }
        DecideError::WorkspaceNeedsConfirmation(_) => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "WORKSPACE_NEEDS_CONFIRMATION",
            e.to_string(),
        ),
        DecideError::Invalid(m) => ApiError::bad_request(m),
        DecideError::Damaged(columns) => {
            tracing::error!(operator, damaged = ?columns, "refused: the stored approval is damaged");
            ApiError::new(
                StatusCode::CONFLICT,
                "APPROVAL_DAMAGED",
                DecideError::Damaged(columns.clone()).to_string(),
            )
            .with(json!({"damaged": columns}))
        }
        DecideError::Store(e) => ApiError::unavailable(e),
    }
}

/// Turns a decision body into a store input; an edit is re-canonicalised, re-hashed and
/// checked again by the gatekeeper (it cannot become a call the policy denies, nor one whose
/// approver roles the operator lacks).
fn decision_input(
    st: &AppState,
    b: DecisionBody,
    rec: Option<&ApprovalRecord>,
    prior: &[assent_core::triggers::PriorCall],
    roles: &[String],
) -> Result<DecisionInput, ApiError> {
    check_reason(&b.reason)?;
    let scope = match &b.scope {
        None => GrantScope::Once,
        Some(s) => GrantScope::parse(s).map_err(ApiError::bad_request)?,
    };
    let edited = match (b.arguments, rec) {
        (None, _) => None,
        (Some(_), _) if b.decision == DecisionKind::Deny => {
            return Err(ApiError::bad_request("arguments apply to approvals only"));
        }
        (Some(_), None) => return Err(ApiError::bad_request("no such approval")),
        (Some(args), Some(rec)) => Some(crate::edits::regate(st, rec, args, prior, roles)?),
    };
    let (edited, edited_output_bytes) = match edited {
        Some((e, limit)) => (Some(e), limit),
        None => (None, None),
    };
    Ok(DecisionInput {
        kind: Some(b.decision),
        reason: b.reason,
        scope,
        whole_tool: b.whole_tool,
        confirm_workspace: b.confirm_workspace,
        edited,
        edited_output_bytes,
    })
}

async fn decide(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    ApiJson(b): ApiJson<DecisionBody>,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?.clone();
    let rec = decide_as(&st, &p, id, b).await?;
    Ok(Json(approval_json(&rec, None)))
}

/// Applies operator `p`'s decision `b` to approval `id` (the REST API and the dashboard):
/// settles expiries first, checks the approver role in the same transaction, and wakes every
/// waiter. Errors: 403 for a non-operator or a missing role, 404, 409 when already decided,
/// 400 for a bad scope or edit.
pub(crate) async fn decide_as(
    st: &AppState,
    p: &Principal,
    id: String,
    b: DecisionBody,
) -> Result<ApprovalRecord, ApiError> {
    let roles = operator(p, "decide approvals")?.to_vec();
    // An edit is re-gated with the session's earlier calls, the held call left out.
    let (rec, prior) = if b.arguments.is_some() {
        let s = st.store.clone();
        let id2 = id.clone();
        blocking(move || -> Result<_, assent_store::StoreError> {
            let rec = s.get_approval(&id2)?;
            let prior = match &rec {
                Some(r) => s.session_calls(&r.agent, &r.session_id, Some(&r.id))?,
                None => Vec::new(),
            };
            Ok((rec, prior))
        })
        .await?
        .map_err(ApiError::unavailable)?
    } else {
        (None, Vec::new())
    };
    let input = decision_input(st, b, rec.as_ref(), &prior, &roles)?;
    let s = st.store.clone();
    let name = p.name.clone();
    // One trip to the blocking pool: settle expiries, then decide (the store checks the
    // approver role in the same transaction).
    let res = blocking(move || {
        let now = now_ms();
        s.expire_due(now)?;
        s.decide(&id, &input, &name, &roles, now)
    })
    .await?;
    match res {
        Ok(rec) => {
            st.settled(std::slice::from_ref(&rec.id));
            tracing::info!(approval_id = %rec.id, operator = %p.name, status = rec.status.as_str(), scope = ?rec.scope, edited = rec.edited.is_some(), "approval decided");
            Ok(rec)
        }
        Err(e) => Err(decide_error(e, &p.name)),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    ids: Vec<String>,
    decision: DecisionKind,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    whole_tool: bool,
    #[serde(default)]
    confirm_workspace: bool,
}

/// `POST /v1/approvals/decisions`: the same decision on several approvals (seed 002
/// batching). Each gets its own decision, token and audit record; the answer lists each
/// outcome (`200` even when some failed).
async fn decide_batch(
    State(st): State<AppState>,
    headers: HeaderMap,
    ApiJson(b): ApiJson<BatchBody>,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?.clone();
    let roles = operator(&p, "decide approvals")?.to_vec();
    if b.ids.is_empty() || b.ids.len() > 500 {
        return Err(ApiError::bad_request("ids must list 1 to 500 approval ids"));
    }
    let ids = b.ids.clone();
    let input = decision_input(
        &st,
        DecisionBody {
            decision: b.decision,
            reason: b.reason,
            scope: b.scope,
            whole_tool: b.whole_tool,
            confirm_workspace: b.confirm_workspace,
            arguments: None,
        },
        None,
        &[],
        &roles,
    )?;
    let s = st.store.clone();
    let name = p.name.clone();
    let results = blocking(
        move || -> Result<Vec<Result<ApprovalRecord, DecideError>>, assent_store::StoreError> {
            let now = now_ms();
            s.expire_due(now)?;
            Ok(ids
                .iter()
                .map(|id| s.decide(id, &input, &name, &roles, now))
                .collect())
        },
    )
    .await?
    .map_err(ApiError::unavailable)?;
    let decided: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().ok().map(|a| a.id.clone()))
        .collect();
    st.settled(&decided);
    st.changed();
    let out: Vec<Value> = b
        .ids
        .iter()
        .zip(results)
        .map(|(id, r)| match r {
            Ok(rec) => json!({"id": id, "ok": true, "approval": approval_json(&rec, None)}),
            Err(e) => {
                let e = decide_error(e, &p.name);
                json!({"id": id, "ok": false, "code": e.code, "message": e.message})
            }
        })
        .collect();
    Ok(Json(json!({"results": out})))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CancelBody {
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserDecisionBody {
    decision: String,
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /v1/approvals/{id}/user-decision` (the agent that asked; sent by the MCP proxy after
/// asking its user in the client): `{"decision": "approve" | "deny", "reason"?}`. Only for an
/// approval with `in_client_approval` (a rule allows it, below R3, no approver roles); else
/// `403 IN_CLIENT_NOT_ALLOWED`. Recorded as decided by `user-of:AGENT`, not an operator; once
/// scope only.
async fn user_decision(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    ApiJson(b): ApiJson<UserDecisionBody>,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?.clone();
    let agent = p
        .agent_id()
        .ok_or_else(|| {
            ApiError::forbidden("only the agent that asked may relay its user's decision")
        })?
        .to_string();
    check_reason(&b.reason)?;
    let kind = match b.decision.as_str() {
        "approve" => DecisionKind::Approve,
        "deny" => DecisionKind::Deny,
        d => {
            return Err(ApiError::bad_request(format!(
                "decision `{d}` is not approve or deny"
            )));
        }
    };
    let s = st.store.clone();
    let id2 = id.clone();
    let rec = blocking(move || s.get_approval(&id2))
        .await?
        .map_err(ApiError::unavailable)?
        .filter(|a| a.agent == agent)
        .ok_or_else(|| ApiError::not_found("no such approval"))?;
    if !rec.in_client_approval {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "IN_CLIENT_NOT_ALLOWED",
            "this approval needs an operator: no rule allows in-client approval, or it is R3/R4, or it names approver roles",
        ));
    }
    let actor = format!("user-of:{agent}");
    let input = DecisionInput {
        kind: Some(kind),
        reason: b
            .reason
            .map(|r| format!("in the MCP client: {r}"))
            .or(Some("in the MCP client".into())),
        ..Default::default()
    };
    let s = st.store.clone();
    let rec = blocking(move || s.decide(&id, &input, &actor, &[], now_ms()))
        .await?
        .map_err(|e| decide_error(e, "the agent's user"))?;
    st.settled(std::slice::from_ref(&rec.id));
    Ok(Json(formats::approval_json(&rec, None)))
}

/// `POST /v1/approvals/{id}/cancel`: the requesting agent or an operator withdraws a pending
/// approval (`{"reason"?}`).
async fn cancel_approval(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    OptionalJson(b): OptionalJson<CancelBody>,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?.clone();
    check_reason(&b.reason)?;
    let name = p.name.clone();
    let s = st.store.clone();
    let res = blocking(
        move || -> Result<Result<ApprovalRecord, DecideError>, assent_store::StoreError> {
            let now = now_ms();
            s.expire_due(now)?;
            match s.get_approval(&id)? {
                Some(r) if p.agent_id().is_none_or(|a| a == r.agent) => {
                    Ok(s.cancel_as(&id, b.reason.as_deref(), &p.name, p.roles(), now))
                }
                _ => Ok(Err(DecideError::NotFound)),
            }
        },
    )
    .await?
    .map_err(ApiError::unavailable)?;
    match res {
        Ok(rec) => {
            st.settled(std::slice::from_ref(&rec.id));
            Ok(Json(approval_json(&rec, None)))
        }
        Err(e) => Err(decide_error(e, &name)),
    }
}

/// `POST /v1/sessions/{id}/cancel` (AAEP §6.8): cancels the session's pending approvals (an
/// agent: its own; an operator: every agent's that they could decide, the others are listed in
/// `refused` and stay pending) and its pending clarifications; `agent.session.cancelled` is
/// announced once per agent and session. `{"session_id", "cancelled": [ids],
/// "refused": [ids], "clarifications": [ids]}`.
async fn cancel_session(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(session): Path<String>,
    OptionalJson(b): OptionalJson<CancelBody>,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?.clone();
    check_reason(&b.reason)?;
    check_name("session_id", &session)?;
    let s = st.store.clone();
    let agent = p.agent_id().map(str::to_string);
    let s2 = session.clone();
    let out = blocking(move || {
        s.cancel_session(
            &s2,
            agent.as_deref(),
            b.reason.as_deref(),
            &p.name,
            p.roles(),
            now_ms(),
        )
    })
    .await?
    .map_err(ApiError::unavailable)?;
    let cancelled: Vec<String> = out.cancelled.iter().map(|a| a.id.clone()).collect();
    st.settled(&cancelled);
    for c in &out.clarifications {
        st.waiters.wake(&crate::clarify::clarification_key(c));
    }
    st.changed();
    Ok(Json(json!({
        "session_id": session,
        "cancelled": out.cancelled.iter().map(|a| a.id.clone()).collect::<Vec<_>>(),
        "refused": out.refused,
        "clarifications": out.clarifications,
    })))
}

/// `GET /v1/grants[?all=true]`: active grants (all, with revoked and expired ones).
/// `GET /v1/learning-samples` (operator): every settled approval as an MPLP learning sample
/// (seed 001 §5), one JSON object per line (`application/x-ndjson`).
async fn learning_samples(
    State(st): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    operator(p, "export learning samples")?;
    let s = st.store.clone();
    let list = blocking(move || s.learning_samples())
        .await?
        .map_err(ApiError::unavailable)?;
    let mut body = String::new();
    for v in list {
        body.push_str(&v.to_string());
        body.push('\n');
    }
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        body,
    )
        .into_response())
}

async fn list_grants(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    operator(p, "list grants")?;
    let all = match q.get("all").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::bad_request("all must be true or false")),
    };
    let s = st.store.clone();
    let list = blocking(move || s.list_grants(all, now_ms()))
        .await?
        .map_err(ApiError::unavailable)?;
    Ok(Json(json!({"grants": list.iter().map(|g| json!({
        "id": g.id, "agent": g.agent, "session_id": g.session_id, "tool": g.tool, "server": g.server,
        "call_hash": g.call_hash, "whole_tool": g.call_hash.is_none(), "scope": g.scope,
        "risk_tier": g.risk_tier, "discouraged": g.discouraged, "approval_id": g.approval_id,
        "created_by": g.created_by, "created_at": rfc3339(g.created_at),
        "expires_at": g.expires_at.map(rfc3339), "revoked_at": g.revoked_at.map(rfc3339),
        "revoked_by": g.revoked_by,
    })).collect::<Vec<_>>()})))
}

/// `DELETE /v1/grants/{id}`: revokes a grant (`204`; `404` when unknown or revoked already).
async fn revoke_grant(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    operator(p, "revoke grants")?;
    let s = st.store.clone();
    let name = p.name.clone();
    let ok = blocking(move || s.revoke_grant(&id, &name, now_ms()))
        .await?
        .map_err(ApiError::unavailable)?;
    if ok {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("no active grant with this id"))
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
    #[serde(default)]
    device_id: Option<String>,
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
    let res =
        blocking(move || s.redeem(&b.token, &agent, &h2, b.device_id.as_deref(), now_ms())).await?;
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
            RedeemError::DeviceMismatch => {
                ApiError::new(StatusCode::FORBIDDEN, "DEVICE_MISMATCH", e.to_string())
            }
            RedeemError::Mismatch { .. } => {
                ApiError::new(StatusCode::FORBIDDEN, "TOKEN_MISMATCH", e.to_string())
            }
            RedeemError::Store(e) => ApiError::unavailable(e),
        }),
    }
}

/// `GET /v1/whoami`: the principal the key belongs to: `{"name", "kind", "agent_id"?, "roles"?}`.
async fn whoami(State(st): State<AppState>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    Ok(Json(match (p.agent_id(), p.roles()) {
        (Some(a), _) => json!({"name": p.name, "kind": "agent", "agent_id": a}),
        (None, r) => json!({"name": p.name, "kind": "operator", "roles": r}),
    }))
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

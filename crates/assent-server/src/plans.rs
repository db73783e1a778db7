//! MPLP plans and Confirms on targets other than a tool call (MPLP Plan module, Confirm module
//! §2.3 and §4; seed 001):
//!
//! - `POST /v1/plans` (agent): `{"agent", "session_id", "plan": MPLP_PLAN, "trace_id"?}` → `201`
//!   with the plan, stored as `draft`. The plan must validate against `mplp-plan.schema.json`.
//! - `PUT /v1/plans/{id}` (agent): `{"agent", "plan"}` revises a `draft` (after a rejection).
//! - `POST /v1/plans/{id}/submit` (agent): `{"agent", "session_id"?}` → `proposed` and a Confirm
//!   with `target_type: plan`, answered as `POST /v1/tool-calls` is (`202` pending with the
//!   approval id, which is the Confirm id). A resubmission carries the RFC 6902 `diff` from the
//!   previous one.
//! - `GET /v1/plans/{id}` (the agent or an operator): the MPLP plan with its status and events;
//!   a rejection's reason is in its last `plan.rejected` event.
//! - `GET /v1/plans/{id}/pipeline-events`: the `pipeline_stage` events of its decisions.
//! - `POST /v1/plans/{id}/cancel` (the agent or an operator).
//! - `POST /v1/confirms` (agent): `{"agent", "session_id", "target_type": context | trace |
//!   extension | other, "target_id": UUID_V4, "reason"?, "target"?: {...}}` → a Confirm on that
//!   target, answered like a tool call.

use crate::api::{ApiJson, Submission, agent_only, blocking, canonical_call, gate, is_uuid_v4};
use crate::auth::authenticate;
use crate::config::Principal;
use crate::error::ApiError;
use crate::extract::OptionalJson;
use crate::{AppState, now_ms};
use assent_store::plans::{PlanError, PlanRecord};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use jsonschema::{Retrieve, Uri};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::OnceLock;

/// The routes of this module.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/plans", post(create))
        .route("/v1/plans/{id}", get(read).put(update))
        .route("/v1/plans/{id}/submit", post(submit))
        .route("/v1/plans/{id}/cancel", post(cancel))
        .route("/v1/plans/{id}/pipeline-events", get(pipeline_events))
        .route("/v1/confirms", post(confirm))
}

/// The vendored MPLP schemas a plan refers to, by `$id`.
struct Vendored;

impl Retrieve for Vendored {
    fn retrieve(
        &self,
        uri: &Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let text = match uri.as_str() {
            "https://schemas.mplp.dev/v1.0/common/metadata.schema.json" => {
                include_str!("../../../spec/mplp/schemas/v2/common/metadata.schema.json")
            }
            "https://schemas.mplp.dev/v1.0/common/identifiers.schema.json" => {
                include_str!("../../../spec/mplp/schemas/v2/common/identifiers.schema.json")
            }
            "https://schemas.mplp.dev/v1.0/common/trace-base.schema.json" => {
                include_str!("../../../spec/mplp/schemas/v2/common/trace-base.schema.json")
            }
            "https://schemas.mplp.dev/v1.0/common/events.schema.json" => {
                include_str!("../../../spec/mplp/schemas/v2/common/events.schema.json")
            }
            other => return Err(format!("no vendored copy of {other}").into()),
        };
        Ok(serde_json::from_str(text)?)
    }
}

fn plan_schema() -> &'static jsonschema::Validator {
    static V: OnceLock<jsonschema::Validator> = OnceLock::new();
    V.get_or_init(|| {
        let s: Value = serde_json::from_str(include_str!(
            "../../../spec/mplp/schemas/v2/mplp-plan.schema.json"
        ))
        .expect("vendored schema is JSON");
        jsonschema::options()
            .should_validate_formats(true)
            .with_retriever(Vendored)
            .build(&s)
            .expect("vendored plan schema compiles")
    })
}

/// Validates an MPLP plan an agent sent (its `status`, when given, must be `draft`); the 400
/// names every violation with its JSON pointer.
fn check_plan(plan: &mut Value) -> Result<(), ApiError> {
    let Some(o) = plan.as_object_mut() else {
        return Err(ApiError::bad_request(
            "plan must be a JSON object (an MPLP plan)",
        ));
    };
    match o.get("status") {
        None => {
            o.insert("status".into(), json!("draft"));
        }
        Some(s) if s == "draft" => {}
        Some(s) => {
            return Err(ApiError::bad_request(format!(
                "plan.status is {s}: a plan is written as a draft and moves on only through its Confirm"
            )));
        }
    }
    let errors: Vec<String> = plan_schema()
        .iter_errors(plan)
        .take(10)
        .map(|e| format!("plan{}: {e}", e.instance_path()))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "not a valid MPLP plan (mplp-plan.schema.json): {}",
            errors.join("; ")
        )))
    }
}

fn plan_error(e: PlanError) -> ApiError {
    match e {
        PlanError::NotFound(_) => ApiError::not_found(e.to_string()),
        PlanError::Exists(_) => ApiError::new(StatusCode::CONFLICT, "PLAN_EXISTS", e.to_string()),
        PlanError::WrongState(..) => {
            ApiError::new(StatusCode::CONFLICT, "WRONG_STATE", e.to_string())
        }
        PlanError::Store(e) => ApiError::unavailable(e),
    }
}

/// The plan, when `p` may see it: its agent, or any operator.
async fn load(st: &AppState, p: &Principal, id: &str) -> Result<PlanRecord, ApiError> {
    let s = st.store.clone();
    let id2 = id.to_string();
    blocking(move || s.plan(&id2))
        .await?
        .map_err(ApiError::unavailable)?
        .filter(|pl| p.agent_id().is_none_or(|a| a == pl.agent))
        .ok_or_else(|| ApiError::not_found(format!("no plan `{id}`")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    agent: String,
    #[serde(default)]
    session_id: Option<String>,
    plan: Value,
    #[serde(default)]
    trace_id: Option<String>,
}

async fn create(
    State(st): State<AppState>,
    headers: HeaderMap,
    ApiJson(mut b): ApiJson<CreateBody>,
) -> Result<Response, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    agent_only(p, &b.agent)?;
    if b.trace_id.as_deref().is_some_and(|t| !is_uuid_v4(t)) {
        return Err(ApiError::bad_request(
            "trace_id must be a lowercase UUID v4 (MPLP identifiers)",
        ));
    }
    check_plan(&mut b.plan)?;
    let s = st.store.clone();
    let pl = blocking(move || {
        s.create_plan(
            &b.agent,
            b.session_id.as_deref().unwrap_or(""),
            &b.plan,
            b.trace_id.as_deref(),
            now_ms(),
        )
    })
    .await?
    .map_err(plan_error)?;
    let location = format!("/v1/plans/{}", pl.plan_id);
    Ok((
        StatusCode::CREATED,
        [(axum::http::header::LOCATION, location)],
        Json(pl.to_mplp()),
    )
        .into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateBody {
    agent: String,
    plan: Value,
}

async fn update(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    ApiJson(mut b): ApiJson<UpdateBody>,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    agent_only(p, &b.agent)?;
    check_plan(&mut b.plan)?;
    if b.plan["plan_id"] != id.as_str() {
        return Err(ApiError::bad_request(format!(
            "plan.plan_id must be the plan in the path ({id})"
        )));
    }
    let s = st.store.clone();
    let pl = blocking(move || s.update_plan(&b.agent, &b.plan, now_ms()))
        .await?
        .map_err(plan_error)?;
    Ok(Json(pl.to_mplp()))
}

async fn read(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    Ok(Json(load(&st, p, &id).await?.to_mplp()))
}

async fn pipeline_events(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    let pl = load(&st, p, &id).await?;
    let s = st.store.clone();
    let events = blocking(move || s.pipeline_events(&pl.plan_id))
        .await?
        .map_err(ApiError::unavailable)?;
    Ok(Json(json!({"events": events})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitBody {
    agent: String,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    run_id: Option<String>,
}

/// The part of a plan a human approves: what it is for and its steps. Its canonical hash is
/// what the Confirm binds; the diff of a resubmission is taken on it.
fn reviewed(pl: &PlanRecord) -> Value {
    let b = &pl.body;
    json!({"plan_id": pl.plan_id, "context_id": b["context_id"], "title": b["title"],
           "objective": b["objective"], "steps": b["steps"]})
}

async fn submit(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    ApiJson(b): ApiJson<SubmitBody>,
) -> Result<Response, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    agent_only(p, &b.agent)?;
    let pl = load(&st, p, &id).await?;
    if pl.status != "draft" {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "WRONG_STATE",
            format!("plan is {}; only a draft can be submitted", pl.status),
        ));
    }
    let args = reviewed(&pl);
    let diff = pl
        .submitted
        .as_ref()
        .map(|prev| serde_json::to_value(json_patch::diff(prev, &args)).unwrap_or(Value::Null));
    let c = canonical_call("mplp.plan".into(), None, args)?;
    gate(
        &st,
        Submission {
            agent: b.agent,
            session_id: b.session_id.unwrap_or_else(|| pl.session_id.clone()),
            run_id: b.run_id,
            device_id: None,
            trace_id: Some(pl.trace_id.clone()),
            call: c.call,
            arguments: c.arguments,
            canonical: c.canonical,
            call_hash: c.hash,
            target: Some(("plan".into(), pl.plan_id.clone(), diff)),
            plan_id: None,
            step_id: None,
            delegation: false,
            verdict: None,
        },
    )
    .await
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CancelBody {
    #[serde(default)]
    reason: Option<String>,
}

async fn cancel(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    OptionalJson(CancelBody { reason }): OptionalJson<CancelBody>,
) -> Result<Json<Value>, ApiError> {
    let p = authenticate(&st.principals, &headers)?.clone();
    let pl = load(&st, &p, &id).await?;
    let s = st.store.clone();
    let agent = p.agent_id().map(str::to_string);
    let pl = blocking(move || {
        s.cancel_plan(
            &pl.plan_id,
            agent.as_deref(),
            reason.as_deref(),
            &p.name,
            now_ms(),
        )
    })
    .await?
    .map_err(plan_error)?;
    st.settled(pl.confirm_id.as_slice());
    st.changed();
    Ok(Json(pl.to_mplp()))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfirmBody {
    agent: String,
    session_id: String,
    target_type: String,
    target_id: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    target: Option<Value>,
    #[serde(default)]
    trace_id: Option<String>,
    #[serde(default)]
    run_id: Option<String>,
}

async fn confirm(
    State(st): State<AppState>,
    headers: HeaderMap,
    ApiJson(b): ApiJson<ConfirmBody>,
) -> Result<Response, ApiError> {
    let p = authenticate(&st.principals, &headers)?;
    agent_only(p, &b.agent)?;
    match b.target_type.as_str() {
        "context" | "trace" | "extension" | "other" => {}
        "plan" => {
            return Err(ApiError::bad_request(
                "a plan is confirmed through POST /v1/plans/{id}/submit",
            ));
        }
        t => {
            return Err(ApiError::bad_request(format!(
                "target_type `{t}` is not one of context, trace, extension, other"
            )));
        }
    }
    if !is_uuid_v4(&b.target_id) {
        return Err(ApiError::bad_request(
            "target_id must be a lowercase UUID v4 (MPLP identifiers)",
        ));
    }
    if b.trace_id.as_deref().is_some_and(|t| !is_uuid_v4(t)) {
        return Err(ApiError::bad_request(
            "trace_id must be a lowercase UUID v4 (MPLP identifiers)",
        ));
    }
    if b.session_id.is_empty() {
        return Err(ApiError::bad_request("session_id must not be empty"));
    }
    if b.target.as_ref().is_some_and(|t| !t.is_object()) {
        return Err(ApiError::bad_request("target must be a JSON object"));
    }
    let args = json!({"target_id": b.target_id, "reason": b.reason,
                      "target": b.target.unwrap_or_else(|| json!({}))});
    let c = canonical_call(format!("mplp.{}", b.target_type), None, args)?;
    gate(
        &st,
        Submission {
            agent: b.agent,
            session_id: b.session_id,
            run_id: b.run_id,
            device_id: None,
            trace_id: b.trace_id,
            call: c.call,
            arguments: c.arguments,
            canonical: c.canonical,
            call_hash: c.hash,
            target: Some((b.target_type, b.target_id, None)),
            plan_id: None,
            step_id: None,
            delegation: false,
            verdict: None,
        },
    )
    .await
}

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
//!
//! A plan belongs to the agent that registered it: another agent revising, submitting or
//! cancelling it gets `409 PLAN_OWNER_MISMATCH` (reading it, `404`), its own delegates
//! included. It gates the tool calls that name it (`plan_id`) of its agent and of the local
//! agents its agent file declares (`action_space.local_agents[]`,
//! [`assent_core::policy::Delegations`]), and cancelling it cancels their held calls and stops
//! their tokens: those it gated when they were held (its agent is recorded with them), even
//! after a reload removed the delegation, and those of the delegates declared now
//! ([`assent_core::policy::plan_reaches_held`]); a call of any other agent naming it is gated
//! as if it named no plan (`assent_store::plans`). A call naming no plan is not gated by any: naming one only ever
//! adds a block.
//!
//! A plan whose stored row does not hold its seal (changed in the database behind the
//! gateway's back; `assent_store::plans::DAMAGED`) answers reading, revising, submitting and
//! cancelling with `409 PLAN_DAMAGED` (cancelling still cancels the calls held under it), and
//! every call naming it is denied.

use crate::agent_json::AgentJson;
use crate::body::Body;
use crate::calls::{Canonical, check_name, check_trace_id, is_uuid_v4};
use crate::config::Principal;
use crate::decide::decide_error;
use crate::error::ApiError;
use crate::extract::{AgentItself, Caller, Cancelling};
use crate::gate::{Submission, gate};
use crate::state::{AppState, now_ms};
use assent_api::plans::{ConfirmRequest, CreatePlanRequest, PipelineEvents};
use assent_api::plans::{SubmitPlanRequest, UpdatePlanRequest};
use assent_store::plans::{self, PlanError, PlanRecord};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use jsonschema::{Retrieve, Uri};
use serde_json::{Value, json};
use std::sync::OnceLock;

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
/// names every violation with its JSON pointer, or the `step_id` two steps share
/// ([`assent_core::transitions::plan_repeated_step`]).
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
        match assent_core::transitions::plan_repeated_step(plan) {
            Some(id) => Err(ApiError::bad_request(format!(
                "plan.steps: step_id {id:?} is named by more than one step; each step needs an id of its own"
            ))),
            None => Ok(()),
        }
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
        PlanError::NotOwner(_) => not_owner(e.to_string()),
        PlanError::WrongState(ref status, _) if status == plans::DAMAGED => {
            let code = assent_api::error::PLAN_DAMAGED;
            ApiError::new(StatusCode::CONFLICT, code, e.to_string())
        }
        PlanError::WrongState(..) => {
            ApiError::new(StatusCode::CONFLICT, "WRONG_STATE", e.to_string())
        }
        PlanError::TooManyOpen(_) => ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            assent_api::error::TOO_MANY_OPEN_PLANS,
            format!("{e} (max_pending_per_agent)"),
        ),
        PlanError::Decide(e) => decide_error(e, ""),
        PlanError::Store(e) => ApiError::unavailable(e),
    }
}

/// `409 PLAN_OWNER_MISMATCH`: an agent acting on a plan another agent registered.
fn not_owner(message: String) -> ApiError {
    let code = assent_api::error::PLAN_OWNER_MISMATCH;
    ApiError::new(StatusCode::CONFLICT, code, message)
}

/// `409 PLAN_DAMAGED` when plan `pl` reads as damaged (its row does not hold its seal,
/// `assent_store::plans::DAMAGED`): it is shown as nothing, not as an MPLP plan.
fn intact(pl: PlanRecord) -> Result<PlanRecord, ApiError> {
    if pl.status != plans::DAMAGED {
        return Ok(pl);
    }
    let message = format!("plan {}: {}", pl.plan_id, plans::DAMAGED_WHY);
    let code = assent_api::error::PLAN_DAMAGED;
    Err(ApiError::new(StatusCode::CONFLICT, code, message))
}

/// The plan, when `p` may see it: its agent, or any operator; `404` otherwise, like a missing
/// id; `409 PLAN_DAMAGED` for a damaged one ([`intact`]).
async fn load(st: &AppState, p: &Principal, id: &str) -> Result<PlanRecord, ApiError> {
    let id2 = id.to_string();
    let pl = st
        .store_call(move |s| s.plan(&id2))
        .await?
        .filter(|pl| p.sees(&pl.agent))
        .ok_or_else(|| ApiError::not_found(format!("no plan `{id}`")))?;
    intact(pl)
}

/// The plan `p` acts on (submit, cancel): as [`load`], except that an agent naming a plan
/// registered by another agent gets `409 PLAN_OWNER_MISMATCH` (the id is taken, as creating it
/// would say with `409 PLAN_EXISTS`; a plan belongs to the agent that registered it).
async fn load_to_change(st: &AppState, p: &Principal, id: &str) -> Result<PlanRecord, ApiError> {
    let id2 = id.to_string();
    match st.store_call(move |s| s.plan(&id2)).await? {
        Some(pl) if p.sees(&pl.agent) => Ok(pl),
        Some(_) if p.agent_id().is_some() => {
            Err(not_owner(PlanError::NotOwner(id.to_string()).to_string()))
        }
        _ => Err(ApiError::not_found(format!("no plan `{id}`"))),
    }
}

/// `POST /v1/plans` (the agent itself): stores a draft MPLP plan (`201` with `Location`);
/// `429 TOO_MANY_OPEN_PLANS` when the agent has `max_pending_per_agent` drafts and plans
/// under review already.
#[utoipa::path(post, path = "/v1/plans", tag = "propose",
    request_body = assent_api::plans::CreatePlanRequest,
    responses((status = 201, description = "The stored draft (MPLP plan); `Location` names it", body = Object)),
    security(("agent_key" = [])))]
pub(crate) async fn create(
    State(st): State<AppState>,
    AgentJson(_, mut b): AgentJson<AgentItself, CreatePlanRequest>,
) -> Result<Response, ApiError> {
    check_trace_id(b.trace_id.as_deref())?;
    if let Some(session) = &b.session_id {
        check_name("session_id", session)?;
    }
    check_plan(&mut b.plan)?;
    let max_open = st.settings.max_pending_per_agent;
    let pl = st
        .store_task(move |s| {
            s.create_plan(
                &b.agent,
                b.session_id.as_deref().unwrap_or(""),
                &b.plan,
                b.trace_id.as_deref(),
                max_open,
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

/// `PUT /v1/plans/{id}` (the agent itself): replaces a draft.
#[utoipa::path(put, path = "/v1/plans/{id}", tag = "propose",
    params(("id" = String, Path, description = "The item's id")),
    request_body = assent_api::plans::UpdatePlanRequest,
    responses((status = 200, description = "The plan (MPLP)", body = Object)),
    security(("agent_key" = [])))]
pub(crate) async fn update(
    State(st): State<AppState>,
    Path(id): Path<String>,
    AgentJson(_, mut b): AgentJson<AgentItself, UpdatePlanRequest>,
) -> Result<Json<Value>, ApiError> {
    check_plan(&mut b.plan)?;
    if b.plan["plan_id"] != id.as_str() {
        return Err(ApiError::bad_request(format!(
            "plan.plan_id must be the plan in the path ({id})"
        )));
    }
    let pl = st
        .store_task(move |s| s.update_plan(&b.agent, &b.plan, now_ms()))
        .await?
        .map_err(plan_error)?;
    Ok(Json(pl.to_mplp()))
}

/// `GET /v1/plans/{id}` (its agent or an operator): the plan as MPLP.
#[utoipa::path(get, path = "/v1/plans/{id}", operation_id = "read_plan", tag = "propose",
    params(("id" = String, Path, description = "The item's id")),
    responses((status = 200, description = "The plan (MPLP)", body = Object), (status = 409, description = "The plan's stored row does not hold its seal (`PLAN_DAMAGED`)", body = assent_api::error::ApiErrorBody)),
    security(("agent_key" = []), ("operator_key" = [])))]
pub(crate) async fn read(
    State(st): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(load(&st, &p, &id).await?.to_mplp()))
}

/// `GET /v1/plans/{id}/pipeline-events` (its agent or an operator).
#[utoipa::path(get, path = "/v1/plans/{id}/pipeline-events", tag = "propose",
    params(("id" = String, Path, description = "The item's id")),
    responses((status = 200, description = "OK", body = assent_api::plans::PipelineEvents), (status = 409, description = "The plan's stored row does not hold its seal (`PLAN_DAMAGED`)", body = assent_api::error::ApiErrorBody)),
    security(("agent_key" = []), ("operator_key" = [])))]
pub(crate) async fn pipeline_events(
    State(st): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
) -> Result<Body<PipelineEvents>, ApiError> {
    let pl = load(&st, &p, &id).await?;
    let events = st
        .store_call(move |s| s.pipeline_events(&pl.plan_id))
        .await?;
    Ok(Body(PipelineEvents { events }))
}

/// `POST /v1/plans/{id}/submit` (the agent itself): gates the plan as one MPLP Confirm.
#[utoipa::path(post, path = "/v1/plans/{id}/submit", tag = "propose",
    params(("id" = String, Path, description = "The item's id")),
    request_body = assent_api::plans::SubmitPlanRequest,
    responses((status = 200, description = "Allowed", body = assent_api::gate::GateAnswer), (status = 202, description = "Held for a human (`TOOL_BLOCKED_PENDING_APPROVAL`)", body = assent_api::gate::GateAnswer), (status = 403, description = "Denied by the policy (`TOOL_DENIED`), or the key may not", body = assent_api::gate::GateAnswer)),
    security(("agent_key" = [])))]
pub(crate) async fn submit(
    State(st): State<AppState>,
    Path(id): Path<String>,
    AgentJson(agent, b): AgentJson<AgentItself, SubmitPlanRequest>,
) -> Result<Response, ApiError> {
    let pl = intact(load_to_change(&st, &agent.principal, &id).await?)?;
    if pl.status != "draft" {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "WRONG_STATE",
            format!("plan is {}; only a draft can be submitted", pl.status),
        ));
    }
    let args = pl.reviewed();
    let diff = pl
        .submitted
        .as_ref()
        .map(|prev| crate::diff::json_diff(prev, &args));
    let call = Canonical::call("mplp.plan".into(), None, args)?;
    let session = b.session_id.unwrap_or_else(|| pl.session_id.clone());
    let mut sub = Submission::new(b.agent, session, call);
    (sub.run_id, sub.trace_id) = (b.run_id, Some(pl.trace_id.clone()));
    sub.target = Some(("plan".into(), pl.plan_id.clone(), diff));
    sub.key_binding = Some(agent.principal.key_sha256);
    gate(&st, sub).await
}

/// `POST /v1/plans/{id}/cancel` (its agent or an operator). An operator cancels a proposed
/// plan only if they could decide its Confirm (cancelling is saying no): otherwise `403`,
/// audited `decision.refused`, and the plan stays `proposed`.
#[utoipa::path(post, path = "/v1/plans/{id}/cancel", tag = "propose",
    params(("id" = String, Path, description = "The item's id")),
    request_body(content = assent_api::approvals::CancelRequest, description = "Optional"),
    responses((status = 200, description = "The plan (MPLP)", body = Object), (status = 409, description = "The plan's stored row does not hold its seal (`PLAN_DAMAGED`): the calls held under it were cancelled", body = assent_api::error::ApiErrorBody)),
    security(("agent_key" = []), ("operator_key" = [])))]
pub(crate) async fn cancel(
    State(st): State<AppState>,
    c: Cancelling,
) -> Result<Json<Value>, ApiError> {
    let (p, id, reason) = (c.principal, c.id, c.reason);
    let pl = load_to_change(&st, &p, &id).await?;
    let name = p.name.clone();
    // The plan gates the calls of the local agents its agent declares: they stop with it (and
    // those it gated when they were held, recorded with them, whatever the delegations now).
    let delegates = st.registry().delegations().delegates_of(&pl.agent).to_vec();
    let (pl, held) = st
        .store_task(move |s| {
            let (who, why) = (p.canceller(), reason.as_deref());
            s.cancel_plan(&pl.plan_id, &who, &delegates, why, now_ms())
        })
        .await?
        .map_err(|e| match e {
            PlanError::Decide(e) => decide_error(e, &name),
            e => plan_error(e),
        })?;
    st.settled(pl.confirm_id.as_slice());
    // The calls held under it were cancelled with it: their long-polls return now.
    for a in &held {
        st.decided(a);
    }
    st.changed();
    // A damaged plan's held calls were cancelled; the plan itself is shown as nothing.
    Ok(Json(intact(pl)?.to_mplp()))
}

/// `POST /v1/confirms` (the agent itself): gates an MPLP Confirm on a context, trace,
/// extension or other target.
#[utoipa::path(post, path = "/v1/confirms", tag = "propose",
    request_body = assent_api::plans::ConfirmRequest,
    responses((status = 200, description = "Allowed", body = assent_api::gate::GateAnswer), (status = 202, description = "Held for a human (`TOOL_BLOCKED_PENDING_APPROVAL`)", body = assent_api::gate::GateAnswer), (status = 403, description = "Denied by the policy (`TOOL_DENIED`), or the key may not", body = assent_api::gate::GateAnswer)),
    security(("agent_key" = [])))]
pub(crate) async fn confirm(
    State(st): State<AppState>,
    AgentJson(key, b): AgentJson<AgentItself, ConfirmRequest>,
) -> Result<Response, ApiError> {
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
    check_trace_id(b.trace_id.as_deref())?;
    check_name("session_id", &b.session_id)?;
    if b.target.as_ref().is_some_and(|t| !t.is_object()) {
        return Err(ApiError::bad_request("target must be a JSON object"));
    }
    let args = json!({"target_id": b.target_id, "reason": b.reason,
                      "target": b.target.unwrap_or_else(|| json!({}))});
    let call = Canonical::call(format!("mplp.{}", b.target_type), None, args)?;
    let mut sub = Submission::new(b.agent, b.session_id, call);
    (sub.run_id, sub.trace_id) = (b.run_id, b.trace_id);
    sub.target = Some((b.target_type, b.target_id, None));
    sub.key_binding = Some(key.principal.key_sha256);
    gate(&st, sub).await
}

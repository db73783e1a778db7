//! MPLP plans and Confirms on targets other than a tool call (seed 001): the request bodies
//! of `POST /v1/plans`, `PUT /v1/plans/{id}`, `POST /v1/plans/{id}/submit` and
//! `POST /v1/confirms`, and the pipeline-events list. The plan itself (every plan route's
//! answer) is an MPLP document and stays a `serde_json::Value`; a submission and a Confirm
//! are answered as a tool call is ([`crate::gate::GateAnswer`]); a plan's cancel body is
//! [`crate::approvals::CancelRequest`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /v1/plans` (an agent key): a plan (it must validate against
/// `mplp-plan.schema.json`; its `status`, if given, must be `draft`). Answered `201` with the
/// stored MPLP plan and a `Location`; `409 PLAN_EXISTS`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePlanRequest {
    /// The agent; must be the key's own agent.
    pub agent: String,
    /// The session it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The MPLP plan.
    pub plan: Value,
    /// MPLP trace id, a lowercase UUID v4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// `PUT /v1/plans/{id}` (an agent key): revises a `draft` plan (after a rejection); the plan's
/// `plan_id` must be the one in the path. `409 PLAN_OWNER_MISMATCH` for a plan another agent
/// registered (a plan belongs to the agent that registered it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdatePlanRequest {
    /// The agent; must be the key's own agent.
    pub agent: String,
    /// The revised MPLP plan.
    pub plan: Value,
}

/// `POST /v1/plans/{id}/submit` (an agent key): a `draft` plan goes to `proposed` and a
/// Confirm with `target_type: plan` is held (`409 WRONG_STATE` for a plan that is not a draft,
/// `409 PLAN_OWNER_MISMATCH` for a plan another agent registered).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"agent": "pay_bot", "session_id": "s-1"}))]
pub struct SubmitPlanRequest {
    /// The agent; must be the key's own agent.
    pub agent: String,
    /// The session of the Confirm; the plan's own by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Seed 002 `runId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// `POST /v1/confirms` (an agent key): a Confirm on a target other than a tool call or a
/// plan, gated as the synthetic call `mplp.TARGET_TYPE`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"agent": "pay_bot", "session_id": "s-1", "target_type": "context", "target_id": "6f1c1f44-6f53-4b0e-9d43-35e8d5b7f0a1", "reason": "share the context"}))]
pub struct ConfirmRequest {
    /// The agent; must be the key's own agent.
    pub agent: String,
    /// Its session id (not empty).
    pub session_id: String,
    /// `context`, `trace`, `extension` or `other` (a plan goes through
    /// `POST /v1/plans/{id}/submit`).
    pub target_type: String,
    /// The target, a lowercase UUID v4.
    pub target_id: String,
    /// Why the agent asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The target itself, a JSON object (`{}` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Value>,
    /// MPLP trace id, a lowercase UUID v4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Seed 002 `runId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// `GET /v1/plans/{id}/pipeline-events` (the plan's agent or an operator).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PipelineEvents {
    /// The MPLP `pipeline_stage` events of the plan's decisions.
    pub events: Vec<Value>,
}

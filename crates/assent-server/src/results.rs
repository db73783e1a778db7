//! Tool results (issue 13 §4, issue 16 §3): `POST /v1/tool-results`, the report of a call's
//! result — its size and SHA-256, or what became of a cleared call that has none — recorded
//! against the call (and its approval), marking the session with what the call brought in,
//! released, denied by the rules in force, or held for an operator as `result.TOOL` when it is
//! over its `thresholds.output_bytes` (a submission gated by [`crate::gate::gate`]).

use crate::agent_json::{AgentJson, AgentJsonOneRefusal, from_own_hub};
use crate::body::{self, Body};
use crate::calls::{Canonical, check_id, check_name};
use crate::error::ApiError;
use crate::extract::ReportResults;
use crate::gate::{Submission, answer, check_sizes, gate};
use crate::state::{AppState, now_ms};
use assent_api::gate::{Allowed, Call, CallOutcome, GateAnswer, HeldResult, ToolResultRequest};
use assent_core::CanonicalCall;
use assent_core::gatekeeper::settle_default;
use assent_core::result_link::Reporter;
use assent_core::triggers::Observations;
use assent_core::{Verdict, VerdictKind, evaluate_in};
use assent_store::Proposed;
use assent_store::results::{ReportedResult, ResultError};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A store refusal of a reported result as the API answers it: `409 RESULT_RECORDED` for an
/// outcome of a call that has a result already or a report past the call's bound
/// ([`assent_store::results::MAX_RESULTS_PER_APPROVAL`]), `409 RESULT_NOT_CLEARED` (with the
/// approval's `status`) for an approval that did not clear the reported call, `404` for an
/// `approval_id` that is not the agent's; any other failure `503 STORE_UNAVAILABLE`.
fn result_refused(e: ResultError) -> ApiError {
    let said = e.to_string();
    match e {
        ResultError::Recorded | ResultError::TooMany => ApiError::new(
            StatusCode::CONFLICT,
            assent_api::error::RESULT_RECORDED,
            said,
        ),
        ResultError::NotCleared { status, .. } => {
            let code = assent_api::error::RESULT_NOT_CLEARED;
            ApiError::new(StatusCode::CONFLICT, code, said).with_status(status)
        }
        ResultError::NoApproval => ApiError::not_found(said),
        ResultError::Store(e) => ApiError::unavailable(e),
    }
}

/// `POST /v1/tool-results` (agent; sent by the MCP proxy for every forwarded call): a
/// forwarded call's result is `output_bytes` long (the JSON of its `result`) with SHA-256
/// `result_sha256`; appended to the audit log as `call.result` (linked to `approval_id` when
/// the call was held). Within the `thresholds.output_bytes` of the
/// rules covering the call: `200 {"decision": "allow"}`, release it. Over it: the result is held
/// for an operator as an approval of the synthetic call `result.TOOL` with arguments
/// `{"call": {tool, server, arguments}, "output_bytes", "result_sha256", "preview"}`, under the
/// covering rules' approvers and timeout, trigger `output_bytes`, answered like a tool call
/// (`202` pending; the approval's token binds the result's hash). The result of a call the
/// current policy denies (a reload since it ran), of any size: `403 TOOL_DENIED`, not
/// released. Seed 002 "Triggers".
/// A report with `outcome` (`not_run`, `no_answer`) is of a cleared call with no result: it
/// is recorded as `call.result` with that outcome and no result, marks the session with
/// nothing its output would have brought (with nothing at all when it did not run), and is
/// answered `allow`. A report naming an `approval_id` is recorded only when that approval
/// cleared the reported call: approved (a token minted), its token redeemed, for exactly this
/// call (the approved one, or the operator's edit); else `409 RESULT_NOT_CLEARED` with the
/// approval's `status` (found by review: a result linked to a pending or denied approval
/// recorded a call that never ran). The record names its reporter (`reported_by`): `hub` when
/// the body carries this process's hub token (the MCP hub of `assent serve`, which forwarded
/// the call), else `agent`. An outcome reported for an `approval_id` whose call has a result
/// recorded is `409 RESULT_RECORDED` (an agent cannot say a call that ran did not), unless the
/// hub reports it and the result is the agent's (found by review: the agent's made-up result
/// had the hub's `no_answer` refused); an `approval_id` that is not one of the agent's
/// approvals is `404`; none of them is recorded. A result is recorded also after an outcome
/// (the hub that ran the call reports after the agent could), up to 8 reports a call from each
/// reporter: past that, `409 RESULT_RECORDED` (found by review: an agent could append reports
/// to its redeemed approval without end, and fill the hub's room).
#[utoipa::path(post, path = "/v1/tool-results", tag = "propose",
    request_body = assent_api::gate::ToolResultRequest,
    responses((status = 200, description = "Allowed", body = assent_api::gate::GateAnswer), (status = 202, description = "Held for a human (`TOOL_BLOCKED_PENDING_APPROVAL`)", body = assent_api::gate::GateAnswer), (status = 403, description = "Denied by the policy (`TOOL_DENIED`), or the key may not", body = assent_api::gate::GateAnswer), (status = 404, description = "`approval_id` is not one of the agent's approvals", body = assent_api::error::ApiErrorBody), (status = 409, description = "An outcome for a call whose result is recorded, or a report for a call with 8 already from its reporter (`RESULT_RECORDED`), or an `approval_id` that did not clear the reported call: not approved, its token not redeemed, or redeemed for another call (`RESULT_NOT_CLEARED`)", body = assent_api::error::ApiErrorBody)),
    security(("agent_key" = [])))]
pub(crate) async fn tool_result(
    State(st): State<AppState>,
    AgentJson(_, b): AgentJsonOneRefusal<ReportResults, ToolResultRequest>,
) -> Result<Response, ApiError> {
    if b.result_sha256.len() != 64 || !b.result_sha256.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(ApiError::bad_request("result_sha256 must be 64 hex digits"));
    }
    // Bounded before any of it is stored: the session is marked with what the call brought.
    check_name("session_id", &b.session_id)?;
    check_name("tool", &b.tool)?;
    check_id("server", &b.server)?;
    check_id("approval_id", &b.approval_id)?;
    let original = Canonical::call(b.tool.clone(), b.server.clone(), b.arguments.clone())?;
    let reporter = match from_own_hub(b.hub_token.as_deref()) {
        true => Reporter::Hub,
        false => Reporter::Agent,
    };
    let mut record = match b.outcome {
        None => json!({"server": b.server, "tool": b.tool, "call_hash": original.call_hash(),
                       "result_sha256": b.result_sha256.to_ascii_lowercase(),
                       "output_bytes": b.output_bytes, "approval_id": b.approval_id}),
        // A cleared call with no result: what became of it, and no result.
        Some(o) => json!({"server": b.server, "tool": b.tool, "call_hash": original.call_hash(),
                          "outcome": o.as_str(), "approval_id": b.approval_id}),
    };
    record["reported_by"] = json!(reporter.as_str());
    // What answers the report is settled before it is recorded, by the rules in force in the
    // store task (found by review: read before the task, a reload queued ahead of it that
    // denied the tool still let its result be recorded and released). It is worked out here,
    // off the store's thread (a held result's call is canonicalised: up to the body limit),
    // and again in the task only when the rules changed meanwhile. A held result that cannot
    // be submitted is refused with nothing recorded (found by review: it was recorded first,
    // then refused, so it was never released and the hub's later `no_answer` was refused too).
    let before = st.live();
    let settled = next_step(&st, &b, &original, &before)?;
    let (state, b) = (st.clone(), std::sync::Arc::new(b));
    let (asked, original) = (b.clone(), std::sync::Arc::new(original));
    let call = original.clone();
    let (next, recorded) = st
        .store_task(move |s| -> Result<_, ApiError> {
            let (b, live) = (&asked, state.live());
            let next = match std::sync::Arc::ptr_eq(&before, &live) {
                true => settled,
                false => next_step(&state, b, &call, &live)?,
            };
            let r = ReportedResult {
                agent: &b.agent,
                session_id: &b.session_id,
                tool: &b.tool,
                server: b.server.as_deref(),
                approval_id: b.approval_id.as_deref(),
                call_hash: call.call_hash(),
                data: &record,
                reporter,
                effects: effects_of(&live.registry, b),
            };
            Ok((next, s.record_result(&r, now_ms())))
        })
        .await??;
    recorded.map_err(result_refused)?;
    match next {
        Next::Denied(v) => {
            answer(
                &st,
                (&b.agent, None),
                original.call_hash(),
                *v,
                Proposed::Denied,
            )
            .await
        }
        Next::Held(sub) => gate(&st, *sub).await,
        Next::Allowed(output_bytes) => Ok(Body(GateAnswer::Allow(Allowed {
            output_bytes,
            verdict: None,
            grant: None,
        }))
        .into_response()),
    }
}

/// What the call reported by `b` brought into its session under the rules `reg`: its tool's
/// effects, none when it did not run, no output when no answer reached the agent.
fn effects_of(
    reg: &assent_core::policy::Registry,
    b: &ToolResultRequest,
) -> assent_core::session_risk::Effects {
    let mut effects = reg.effects_of(&b.agent, &b.tool, b.server.as_deref());
    match b.outcome {
        None => {}
        // Nothing ran: nothing entered the session.
        Some(CallOutcome::NotRun) => effects = Default::default(),
        // It may have run (what it does counts), but no output reached the agent.
        Some(CallOutcome::NoAnswer) => {
            effects.untrusted_output = false;
            effects.private_data = false;
        }
    }
    effects
}

/// What answers a reported result, settled before it is recorded ([`next_step`]).
enum Next {
    /// The current policy denies the call: its result is not released.
    Denied(Box<Verdict>),
    /// Over its `thresholds.output_bytes`: held for an operator as `result.TOOL`.
    Held(Box<Submission>),
    /// Released, with the `output_bytes` threshold that applied.
    Allowed(Option<u64>),
}

/// What answers the result `b` reports of the call `original` under the rules `live`: denied
/// when the policy now denies the call (found by review: the result of a call the policy
/// denies since a reload was released unasked, however large: a deny verdict has no
/// `output_bytes`), held when a result is over its `output_bytes` threshold (the submission
/// of `result.TOOL`, size-checked here: its preview, up to 2,048 characters, is left out when
/// the arguments would pass `max_arguments_bytes` with it), else allowed. Errors: `400` for a
/// `result.TOOL` name past [`crate::calls::MAX_ID_BYTES`], `413 ARGUMENTS_TOO_LARGE` when
/// even without its preview the held call is too large.
fn next_step(
    st: &AppState,
    b: &ToolResultRequest,
    original: &CanonicalCall,
    live: &std::sync::Arc<crate::state::Live>,
) -> Result<Next, ApiError> {
    let observed = Observations::none(now_ms());
    let (call, args) = (original.call(), Some(original.arguments()));
    let v = evaluate_in(&live.registry, &b.agent, call, args, &observed);
    match v.terms.output_bytes {
        _ if b.outcome.is_none() && v.kind == VerdictKind::Deny => {
            let mut denied = v;
            denied.terms.message = format!(
                "the current policy denies this call, so its result is not released ({})",
                denied.terms.message
            );
            Ok(Next::Denied(Box::new(denied)))
        }
        Some(limit) if b.outcome.is_none() && b.output_bytes > limit => {
            let held = held_result(v, b, limit);
            let submission = |preview: Option<String>| -> Result<Submission, ApiError> {
                let args = body::to_value(&HeldResult {
                    call: Call {
                        tool: b.tool.clone(),
                        server: b.server.clone(),
                        arguments: original.call().arguments.clone(),
                    },
                    output_bytes: b.output_bytes,
                    result_sha256: b.result_sha256.to_ascii_lowercase(),
                    preview,
                });
                let call = Canonical::call(format!("result.{}", b.tool), b.server.clone(), args)?;
                let mut sub = Submission::new(b.agent.clone(), b.session_id.clone(), call);
                sub.verdict = Some(held.clone());
                sub.rules = Some(live.clone());
                check_sizes(&sub, st.settings.max_arguments_bytes)?;
                Ok(sub)
            };
            let preview = b.preview.as_ref().map(|p| p.chars().take(2048).collect());
            let sub = match submission(preview) {
                Err(_) if b.preview.is_some() => submission(None)?,
                done => done?,
            };
            Ok(Next::Held(Box::new(sub)))
        }
        _ => Ok(Next::Allowed(v.terms.output_bytes)),
    }
}

/// The verdict of a result over its `thresholds.output_bytes` (`limit`): Confirm by an
/// operator (never in the client), trigger `output_bytes`, a reason and message naming sizes,
/// and the default on timeout the trigger makes `reject` ([`settle_default`]; found by review:
/// it showed the call's `approve` while the sweep rejected it).
fn held_result(v: Verdict, b: &ToolResultRequest, limit: u64) -> Verdict {
    let mut held = v;
    held.kind = VerdictKind::Confirm;
    held.terms.in_client_approval = false; // an operator releases a held result
    if !held.terms.triggers.iter().any(|t| t == "output_bytes") {
        held.terms.triggers.push("output_bytes".into());
    }
    let target = match &b.server {
        Some(s) => format!("{s}/{}", b.tool),
        None => b.tool.clone(),
    };
    let why = format!(
        "the result of {target} is {} bytes, over the output_bytes threshold of {limit}",
        b.output_bytes
    );
    held.terms.reasons.push(assent_core::Reason {
        file: String::new(),
        rule: "thresholds.output_bytes".into(),
        text: why.clone(),
    });
    let configured = held.terms.default_decision;
    settle_default(&mut held.terms, configured, true);
    held.terms.message = format!("Release the result to agent {}? ({why})", b.agent);
    held
}

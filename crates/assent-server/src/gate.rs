//! Proposals: the one path from a submission to an answer (issue "gateway end to end" §8,
//! seed 002, seed 004). `POST /v1/tool-calls` and `POST /v1/delegations` (and a held result
//! of `POST /v1/tool-results`, [`crate::results`]) turn their bodies into a `Submission`;
//! `gate` (also used by MPLP plans and Confirms in [`crate::plans`]) asks the gatekeeper inside the store's
//! proposal transaction and answers `200` allow, `403 TOOL_DENIED`, `202` pending or
//! `429 TOO_MANY_PENDING`. Decisions, redemptions and expiry live elsewhere
//! ([`crate::approvals`], [`crate::tokens`]); routes are mounted by [`crate::router`](mod@crate::router).

use crate::agent_json::AgentJson;
use crate::body;
use crate::calls::{Canonical, check_id, check_name, check_trace_id};
use crate::calls::{is_uuid_v4, resolve_real_path};
use crate::error::ApiError;
use crate::extract::{AgentItself, ProposeCalls};
use crate::formats::{self, rfc3339};
use crate::state::{AppState, now_ms};
use crate::telemetry;
use crate::wire;
use assent_api::error::APPROVAL_DAMAGED;
use assent_api::gate::{Allowed, DelegationRequest, Denied, GateAnswer, Granted, Pending};
use assent_api::gate::{ToolCallRequest, VerdictEcho};
use assent_core::CanonicalCall;
use assent_core::gatekeeper::default_timeout_seconds;
use assent_core::triggers::Observations;
use assent_core::{Verdict, evaluate_delegation, evaluate_in, evaluate_target};
use assent_store::{ConfirmTarget, Proposal, Proposed};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};
use tracing::Instrument;

/// One thing to gate: a tool call, a delegation, a held tool result, or the synthetic call of
/// an MPLP Confirm target.
pub(crate) struct Submission {
    /// The agent that asks.
    pub agent: String,
    /// Its session (empty for a plan submitted without one).
    pub session_id: String,
    /// Optional run, device and MPLP trace ids.
    pub run_id: Option<String>,
    /// The device the token will be bound to.
    pub device_id: Option<String>,
    /// MPLP trace id (UUID v4).
    pub trace_id: Option<String>,
    /// W3C `traceparent` of the span that proposes it (issue 15 §1); set by [`gate`].
    pub traceparent: Option<String>,
    /// The person the call acts for (`on_behalf_of`, issue 14 §2).
    pub on_behalf_of: Option<String>,
    /// The call, canonicalised, with its `call_hash`.
    pub call: CanonicalCall,
    /// `(target_type, target_id, diff)` of an MPLP Confirm target.
    pub target: Option<(String, String, Option<Value>)>,
    /// MPLP plan this call is a step of.
    pub plan_id: Option<String>,
    /// MPLP step id.
    pub step_id: Option<String>,
    /// A delegation to a sub-agent (`call` from `delegation_call`).
    pub delegation: bool,
    /// A verdict decided already (a held tool result); the gatekeeper is not asked again.
    pub verdict: Option<Verdict>,
    /// The rules `verdict` was decided under, so that the approval names that policy set
    /// (found by review: read again, a reload between the two named another); `None`: those
    /// in force when the proposal is stored.
    pub rules: Option<std::sync::Arc<crate::state::Live>>,
    /// The digest of the agent key that proposes it, checked against the principals in force
    /// when the proposal is stored (a reload may have removed or rotated the key since the
    /// request authenticated); `None`: not checked (a submission the gateway makes itself).
    pub key_binding: Option<[u8; 32]>,
}

impl Submission {
    /// A plain submission of `call` by `agent` in `session_id`; set the other fields after.
    pub(crate) fn new(agent: String, session_id: String, call: CanonicalCall) -> Self {
        Self {
            agent,
            session_id,
            run_id: None,
            device_id: None,
            trace_id: None,
            traceparent: None,
            on_behalf_of: None,
            call,
            target: None,
            plan_id: None,
            step_id: None,
            delegation: false,
            verdict: None,
            rules: None,
            key_binding: None,
        }
    }

    /// The store's [`Proposal`] of this submission at `now` (Unix ms): its own fields
    /// borrowed, the call's canonical texts and `call_hash` from its [`CanonicalCall`], with
    /// the gateway's `timeout_ms` and `max_pending`; no governance policies recorded (set
    /// `governed_by` and `policy_set_sha256` on it). The submission owns what the proposal
    /// borrows because it crosses to the store's blocking pool.
    fn proposal<'a>(
        &'a self,
        now: i64,
        timeout_ms: &'a dyn Fn(&Verdict) -> i64,
        max_pending: u64,
    ) -> Proposal<'a> {
        Proposal {
            on_behalf_of: self.on_behalf_of.as_deref(),
            run_id: self.run_id.as_deref(),
            device_id: self.device_id.as_deref(),
            trace_id: self.trace_id.as_deref(),
            traceparent: self.traceparent.as_deref(),
            target: self.target.as_ref().map(|(t, id, diff)| ConfirmTarget {
                target_type: t,
                target_id: id,
                diff: diff.as_ref(),
            }),
            plan_id: self.plan_id.as_deref(),
            step_id: self.step_id.as_deref(),
            ..Proposal::for_call(
                &self.agent,
                &self.session_id,
                &self.call,
                now,
                timeout_ms,
                max_pending,
            )
        }
    }
}

/// `POST /v1/tool-calls` (the agent itself): gates one tool call; see [`gate`].
#[utoipa::path(post, path = "/v1/tool-calls", tag = "propose",
    request_body = assent_api::gate::ToolCallRequest,
    responses((status = 200, description = "Allowed", body = assent_api::gate::GateAnswer), (status = 202, description = "Held for a human (`TOOL_BLOCKED_PENDING_APPROVAL`)", body = assent_api::gate::GateAnswer), (status = 403, description = "Denied by the policy (`TOOL_DENIED`), or the key may not", body = assent_api::gate::GateAnswer)),
    security(("agent_key" = [])))]
pub(crate) async fn propose(
    State(st): State<AppState>,
    AgentJson(key, b): AgentJson<ProposeCalls, ToolCallRequest>,
) -> Result<Response, ApiError> {
    if b.session_id.is_empty() {
        return Err(ApiError::bad_request("session_id must not be empty"));
    }
    check_id("run_id", &b.run_id)?;
    check_id("device_id", &b.device_id)?;
    check_id("on_behalf_of", &b.on_behalf_of)?;
    check_trace_id(b.trace_id.as_deref())?;
    for (what, v) in [("plan_id", &b.plan_id), ("step_id", &b.step_id)] {
        if v.as_deref().is_some_and(|v| !is_uuid_v4(v)) {
            return Err(ApiError::bad_request(format!(
                "{what} must be a lowercase UUID v4 (MPLP identifiers)"
            )));
        }
    }
    check_proposed(&b)?;
    let call = Canonical::call(b.tool, b.server, b.arguments)?;
    let mut sub = Submission::new(b.agent, b.session_id, call);
    (sub.run_id, sub.device_id, sub.trace_id) = (b.run_id, b.device_id, b.trace_id);
    (sub.plan_id, sub.step_id) = (b.plan_id, b.step_id);
    sub.on_behalf_of = b.on_behalf_of;
    sub.key_binding = Some(key.principal.key_sha256);
    gate(&st, sub).await
}

/// `400` for a proposal of a tool whose name starts with a derived call's prefix (`result.`,
/// `delegate.`, `mplp.`: [`assent_core::redeem::DERIVED_PREFIXES`]), which only the gateway
/// makes. Found by review: gated as a plain tool (a delegation's skill rules skipped), its
/// token bound the same `call_hash` as a held result's release, a delegation or a plan's.
fn check_proposed(b: &ToolCallRequest) -> Result<(), ApiError> {
    if assent_core::redeem::is_derived(&b.tool) {
        return Err(ApiError::bad_request(format!(
            "tool: names starting with {} are the gateway's own (held results, delegations, plans); propose a delegation with POST /v1/delegations",
            assent_core::redeem::DERIVED_PREFIXES.join(", ")
        )));
    }
    Ok(())
}

/// `POST /v1/delegations` (agent): `{"agent", "session_id", "target": ALIAS, "input": {...},
/// "skill_id"?, "skill_args"?}` gates a delegation to a sub-agent (seed 004 "Approval on Agent
/// Delegation") and answers exactly as `POST /v1/tool-calls` does; an approval's token binds
/// the delegation's canonical call (`delegate.ALIAS` with input, skill id and skill args).
#[utoipa::path(post, path = "/v1/delegations", tag = "propose",
    request_body = assent_api::gate::DelegationRequest,
    responses((status = 200, description = "Allowed", body = assent_api::gate::GateAnswer), (status = 202, description = "Held for a human (`TOOL_BLOCKED_PENDING_APPROVAL`)", body = assent_api::gate::GateAnswer), (status = 403, description = "Denied by the policy (`TOOL_DENIED`), or the key may not", body = assent_api::gate::GateAnswer)),
    security(("agent_key" = [])))]
pub(crate) async fn delegate(
    State(st): State<AppState>,
    AgentJson(key, b): AgentJson<AgentItself, DelegationRequest>,
) -> Result<Response, ApiError> {
    if b.session_id.is_empty() || b.target.is_empty() {
        return Err(ApiError::bad_request(
            "session_id and target must not be empty",
        ));
    }
    check_id("run_id", &b.run_id)?;
    check_id("device_id", &b.device_id)?;
    check_trace_id(b.trace_id.as_deref())?;
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
    let call = Canonical::of(assent_core::delegation_call(
        &b.target,
        input,
        b.skill_id.as_deref(),
        b.skill_args,
    ))?;
    let mut sub = Submission::new(b.agent, b.session_id, call);
    (sub.run_id, sub.device_id, sub.trace_id) = (b.run_id, b.device_id, b.trace_id);
    sub.delegation = true;
    sub.key_binding = Some(key.principal.key_sha256);
    gate(&st, sub).await
}

/// The size limits of one submission (issue 10 §14): identifiers of at most [`crate::calls::MAX_ID_BYTES`], no control characters,
/// and canonical arguments of at most `max_arguments_bytes` (`413 ARGUMENTS_TOO_LARGE`).
pub(crate) fn check_sizes(b: &Submission, max_arguments_bytes: usize) -> Result<(), ApiError> {
    check_name("agent", &b.agent)?;
    if !b.session_id.is_empty() {
        // Empty is allowed here: a plan submitted without a session has none.
        check_name("session_id", &b.session_id)?;
    }
    check_name("tool", &b.call.call().tool)?;
    check_id("server", &b.call.call().server)?;
    check_id("run_id", &b.run_id)?;
    check_id("device_id", &b.device_id)?;
    if b.call.arguments().len() > max_arguments_bytes {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "ARGUMENTS_TOO_LARGE",
            format!(
                "the call's canonical arguments are {} bytes; this gateway accepts at most {max_arguments_bytes} (max_arguments_bytes)",
                b.call.arguments().len()
            ),
        ));
    }
    Ok(())
}

/// Gates one submission in one store transaction and answers as `POST /v1/tool-calls` does:
/// 200 allow (with a token when a grant covers it), 403 `TOOL_DENIED`, 202 pending, 429
/// `TOO_MANY_PENDING`, `409 SESSION_CANCELLED` (the agent's session was cancelled); `409
/// WRONG_STATE` when the store refuses it (a plan not approved, a
/// step under a pending Confirm).
pub(crate) async fn gate(st: &AppState, mut b: Submission) -> Result<Response, ApiError> {
    check_sizes(&b, st.settings.max_arguments_bytes)?;
    let (agent, key) = (b.agent.clone(), b.key_binding);
    let call_hash = b.call.call_hash().to_string();
    let step = match b.verdict {
        Some(_) => telemetry::Step::Result,
        None => telemetry::Step::Propose,
    };
    let span = telemetry::step_span(step);
    telemetry::record(&span, "assent.agent", &agent);
    telemetry::record(&span, "assent.tool", &b.call.call().tool);
    telemetry::record(&span, "assent.call_hash", &call_hash);
    b.traceparent = telemetry::traceparent(&span);
    if b.trace_id.is_none() {
        b.trace_id = b.traceparent.as_deref().and_then(telemetry::mplp_trace_id);
    }
    let started = std::time::Instant::now();
    let (verdict, outcome) = propose_in_store(st, b).instrument(span.clone()).await?;
    let (kind, how) = (verdict.kind.as_str(), outcome_label(&outcome));
    if step == telemetry::Step::Propose {
        // Held tool results are not proposals: traced, not counted among the verdicts.
        st.metrics.verdict(kind, how, started.elapsed());
    }
    telemetry::record(&span, "assent.verdict", kind);
    telemetry::record(&span, "assent.outcome", how);
    telemetry::record(&span, "assent.risk_tier", verdict.terms.risk_tier.as_str());
    if let Proposed::Granted(a) | Proposed::Held { approval: a, .. } = &outcome {
        telemetry::record(&span, "assent.approval_id", &a.id);
    }
    answer(st, (&agent, key), &call_hash, verdict, outcome)
        .instrument(span)
        .await
}

/// What became of a gated call, for metrics and traces: `allowed`, `denied`, `granted`
/// (allowed by a grant), `held`, `joined` (an identical call's pending approval) or
/// `too_many_pending` (refused: the agent's pending cap) or `session_cancelled` (refused: the
/// session is over).
fn outcome_label(o: &Proposed) -> &'static str {
    match o {
        Proposed::Allowed => "allowed",
        Proposed::Denied => "denied",
        Proposed::Granted(_) => "granted",
        Proposed::Held { joined: true, .. } => "joined",
        Proposed::Held { .. } => "held",
        Proposed::TooManyPending { .. } => "too_many_pending",
        Proposed::SessionCancelled { .. } => "session_cancelled",
    }
}

/// Runs the store's proposal transaction for `b`, with the gatekeeper asked inside it (with
/// the session's prior calls its thresholds' windows reach), unless `b` carries its verdict
/// already. The rules are those in force when the transaction runs (`b`'s own snapshot when it
/// carries one): a reload puts its rules in force inside its own store task, so a call written
/// after `config.reloaded` is judged by them (found by review: the rules read before the call
/// waited for the writer let a call a reload had just denied be recorded as allowed after it).
async fn propose_in_store(st: &AppState, b: Submission) -> Result<(Verdict, Proposed), ApiError> {
    let settings = st.settings;
    // Never more than the maximum in force now (a subscription honoured under a higher one,
    // before a restart lowered it, asks for no more than that).
    let most = i64::try_from(settings.aaep_max_timeout_extension_s)
        .unwrap_or(i64::MAX)
        .saturating_mul(1000);
    let extension_ms = st.extension.ms().clamp(0, most);
    // A grant never covers a call its creator could not approve (separation of duties).
    let people = st.clone();
    let res = st
        .store_task(move |s| {
            // The key, checked against the principals in force now, inside the writer a
            // reload swaps them in (found by review: a grant answered a token to a key the
            // reload had removed while the proposal waited for the writer).
            if let Some(k) = &b.key_binding
                && !crate::decide::key_stands(&people.live(), &b.agent, k)
            {
                return None;
            }
            let live = b.rules.clone().unwrap_or_else(|| people.live());
            let (reg, needs) = (&live.registry, &live.window_needs);
            let now = now_ms();
            let timeout = |v: &Verdict| -> i64 {
                v.timeout_seconds
                    .map(assent_core::approval::millis)
                    .or(settings.approval_timeout_ms)
                    .unwrap_or(assent_core::approval::millis(default_timeout_seconds(
                        v.terms.risk_tier,
                    )))
                    .saturating_add(extension_ms)
            };
            let governed_by = |v: &Verdict| reg.policies_behind(&v.terms.reasons);
            let mut proposal = b.proposal(now, &timeout, settings.max_pending_per_agent);
            proposal.extension_ms = extension_ms;
            proposal.governed_by = Some(&governed_by);
            let duties_of = |name: &str| people.duties_of(name);
            proposal.duties_of = Some(&duties_of);
            proposal.policy_set_sha256 = Some(&reg.policy_set_sha256);
            // The plans of the agents whose files declare this one a local delegate gate it.
            proposal.plans_of = reg.delegations().orchestrators_of(&b.agent);
            let c = &b.call;
            if b.verdict.is_none() && b.target.is_none() {
                let (tool, server) = (&c.call().tool, c.call().server.as_deref());
                proposal.effects = reg.effects_of(&b.agent, tool, server);
            }
            // The agent's other sessions are read only for a call a per-agent rule covers.
            let (tool, server) = (&c.call().tool, c.call().server.as_deref());
            let needs = needs.for_call(reg, &b.agent, tool, server);
            Some(
                s.propose_observed(&proposal, Some(&needs), |prior, session, agent| {
                    if let Some(v) = b.verdict.clone() {
                        return v;
                    }
                    let args = Some(c.arguments());
                    if b.target.is_some() {
                        return evaluate_target(reg, &b.agent, c.call(), args);
                    }
                    let obs = Observations {
                        now_ms: now,
                        prior_calls: prior,
                        agent_calls: agent,
                        session,
                        resolve_path: &resolve_real_path,
                    };
                    if b.delegation {
                        return evaluate_delegation(reg, &b.agent, c.call(), args, &obs);
                    }
                    evaluate_in(reg, &b.agent, c.call(), args, &obs)
                }),
            )
        })
        .await?;
    let Some(res) = res else {
        return Err(ApiError::unauthenticated());
    };
    res.map_err(|e| match e {
        assent_store::StoreError::Invalid(m) => {
            ApiError::new(StatusCode::CONFLICT, "WRONG_STATE", m)
        }
        e => ApiError::unavailable(e),
    })
}

/// The answer to a gated submission ([`GateAnswer`]): its outcome with the verdict's
/// `call_hash`, `reasons` (a held call's are the approval's), `risk_tier` and `triggers`. A
/// grant's token is read for the key of binding `key` (when given) only if it still stands
/// (`401` otherwise).
pub(crate) async fn answer(
    st: &AppState,
    (agent, key): (&str, Option<[u8; 32]>),
    call_hash: &str,
    verdict: Verdict,
    outcome: Proposed,
) -> Result<Response, ApiError> {
    let echo = |reasons: &[assent_core::Reason]| VerdictEcho {
        call_hash: call_hash.to_string(),
        reasons: reasons.to_vec(),
        risk_tier: verdict.terms.risk_tier,
        triggers: verdict.terms.triggers.clone(),
    };
    let answer = match outcome {
        Proposed::Allowed => {
            tracing::info!(agent = %agent, verdict = "allow", "tool call decided");
            GateAnswer::Allow(Allowed {
                output_bytes: verdict.terms.output_bytes,
                verdict: Some(echo(&verdict.terms.reasons)),
                grant: None,
            })
        }
        Proposed::Denied => {
            tracing::info!(agent = %agent, verdict = "deny", "tool call decided");
            GateAnswer::Deny(Denied {
                code: "TOOL_DENIED".into(),
                reason: verdict.terms.message.clone(),
                message: verdict.terms.message.clone(),
                verdict: echo(&verdict.terms.reasons),
            })
        }
        Proposed::Granted(rec) => {
            st.changed();
            let id = rec.id.clone();
            // A grant's `allow` always carries its token, so that what forwards the call has
            // redeemed it first; one whose token row does not hold its seal (edited since it
            // was minted) allows nothing.
            // Only while the key stands (found by review: a reload landing between the proposal
            // and this read had the token answered to the key it removed).
            let (people, who) = (st.clone(), agent.to_string());
            let read = st.store_call(move |s| match key {
                Some(k) if !crate::decide::key_stands(&people.live(), &who, &k) => Ok(None),
                _ => s.token_string(&id).map(Some),
            });
            let Some(token) = read.await?.ok_or_else(ApiError::unauthenticated)? else {
                let why = format!(
                    "approval {}'s token does not hold its seal; the call is not allowed",
                    rec.id
                );
                return Err(ApiError::new(StatusCode::CONFLICT, APPROVAL_DAMAGED, why));
            };
            tracing::info!(approval_id = %rec.id, grant_id = ?rec.grant_id, "tool call allowed by a grant");
            GateAnswer::Allow(Allowed {
                output_bytes: rec.terms.output_bytes,
                verdict: Some(echo(&verdict.terms.reasons)),
                grant: Some(Granted {
                    approval_token: formats::approval_token(&rec),
                    token_expires_at: rec.token.as_ref().map(|t| rfc3339(t.expires_at)),
                    scope: wire::api(&rec.scope),
                    approval_id: rec.id,
                    grant_id: rec.grant_id,
                    token,
                }),
            })
        }
        Proposed::Held {
            approval: rec,
            joined,
        } => {
            if !joined {
                st.changed();
            }
            tracing::info!(approval_id = %rec.id, agent = %rec.agent, risk_tier = %rec.terms.risk_tier, joined, "approval requested");
            GateAnswer::Pending(Pending {
                code: "TOOL_BLOCKED_PENDING_APPROVAL".into(),
                joined,
                expires_at: rfc3339(rec.expires_at),
                verdict: echo(&rec.terms.reasons),
                approval_id: rec.id,
                message: rec.terms.message,
                human_summary: rec.human_summary,
                in_client_approval: rec.terms.in_client_approval,
                suggested_alternatives: rec.terms.suggested_alternatives,
                side_effects: rec.terms.side_effects,
                rollback: rec.terms.rollback,
            })
        }
        Proposed::TooManyPending { limit } => {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "TOO_MANY_PENDING",
                format!(
                    "agent `{agent}` already has {limit} pending approvals (max_pending_per_agent); wait for decisions or cancel some"
                ),
            ));
        }
        Proposed::SessionCancelled { at, by } => {
            return Err(ApiError::session_cancelled(
                agent,
                (at, &by),
                "runs no call",
            ));
        }
    };
    let status = StatusCode::from_u16(answer.http_status()).unwrap_or(StatusCode::OK);
    Ok(body::with_status(status, answer))
}

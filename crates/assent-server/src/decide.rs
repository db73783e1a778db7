//! Deciding and cancelling approvals: an operator's decision (`POST
//! /v1/approvals/{id}/decision`, and the dashboard's forms through `decide_as`), the same
//! decision on many (`POST /v1/approvals/decisions`), the in-client user's decision relayed by
//! its agent, and cancellations of one approval or a whole session (AAEP §6.8). Expiries are
//! settled first and every waiter is woken after. An edit is re-gated by [`crate::edits`].
//! Reads are [`crate::approvals`]; routes are mounted by [`crate::router`](mod@crate::router).

use crate::body::Body;
use crate::calls::{check_name, check_reason};
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::extract::{Agent, Cancelling, DecideApprovals, Operator, RelayUserDecision};
use crate::formats::approval as approval_body;
use crate::standing::{IN_CLIENT_USER, SLACK_VOTE, sso_vote_key, vote_stands};
use crate::state::{AppState, now_ms};
use crate::store_call::Expired;
use crate::waiters::clarification_key;
use assent_api::approvals::{Approval, BatchDecisionRequest, BatchDecisionResponse, BatchResult};
use assent_api::approvals::{DecisionRequest, SessionCancelled, UserDecisionRequest};
use assent_api::error as code;
use assent_core::approval::{self, Canceller, DecisionKind, GrantScope};
use assent_store::{ApprovalRecord, DecideError, DecisionInput, Via};
use axum::extract::{Path, State};
use axum::http::StatusCode;

/// The API error of a refused decision or cancellation by `operator`: `404`, `403` (missing
/// approver role), `409 ALREADY_DECIDED` (with `status`), `409 ALREADY_VOTED` (a quorum's
/// voter voting again), `422 WORKSPACE_NEEDS_CONFIRMATION`,
/// `400`, `409 APPROVAL_DAMAGED` (with `damaged` columns), `409 PLAN_STOPPED` (approving a
/// call held under a plan that has stopped; the message names the plan), `409 SESSION_CHANGED`
/// (the session took in more after the decision was re-gated against it: read and decide
/// again), `409 TOOL_UNDER_REVIEW` (approving a call whose MCP tool's changed definition awaits
/// an operator's review) or `503`.
pub(crate) fn decide_error(e: DecideError, operator: &str) -> ApiError {
    match e {
        DecideError::NotFound => ApiError::not_found("no such approval"),
        DecideError::NotApprover(approvers) => ApiError::forbidden(format!(
            "operator `{operator}` has none of the approver roles of this approval ({})",
            approvers.join(", ")
        )),
        DecideError::AlreadyDecided(e) => {
            ApiError::new(StatusCode::CONFLICT, "ALREADY_DECIDED", e.to_string()).with_status(e.0)
        }
        DecideError::SelfApproval(why) => {
            ApiError::new(StatusCode::FORBIDDEN, code::SELF_APPROVAL, why)
        }
        DecideError::PasskeyRequired(why) => {
            ApiError::new(StatusCode::FORBIDDEN, code::PASSKEY_REQUIRED, why)
        }
        DecideError::AlreadyVoted(_) => {
            ApiError::new(StatusCode::CONFLICT, code::ALREADY_VOTED, e.to_string())
        }
        DecideError::WorkspaceNeedsConfirmation { .. } => ApiError::new(
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
            .with_damaged(columns)
        }
        DecideError::PlanStopped { .. } => {
            ApiError::new(StatusCode::CONFLICT, code::PLAN_STOPPED, e.to_string())
        }
        DecideError::ToolUnderReview { .. } => {
            ApiError::new(StatusCode::CONFLICT, code::TOOL_UNDER_REVIEW, e.to_string())
        }
        DecideError::SessionChanged => {
            ApiError::new(StatusCode::CONFLICT, code::SESSION_CHANGED, e.to_string())
        }
        DecideError::RulesTightened(_) => {
            ApiError::new(StatusCode::CONFLICT, code::RULES_TIGHTENED, e.to_string())
        }
        DecideError::Store(e) => ApiError::unavailable(e),
    }
}

/// Turns decision `b` on approval `id` into a store input; an edit (`arguments`) is re-gated
/// by [`crate::edits::edit`] (it cannot become a call the policy denies, nor one whose
/// approver roles the operator lacks). `400` for a long reason, a bad scope, or arguments
/// with a denial or on a missing approval.
async fn decision_input(
    st: &AppState,
    id: Option<&str>,
    b: DecisionRequest,
    who: &Decider<'_>,
) -> Result<DecisionInput, ApiError> {
    let (name, roles) = (who.name, who.roles);
    check_reason(&b.reason)?;
    let scope = match &b.scope {
        None => GrantScope::Once,
        Some(s) => GrantScope::parse(s).map_err(ApiError::bad_request)?,
    };
    let (edited, edited_output_bytes, session_seen) = match (b.arguments, id) {
        (None, _) => (None, None, None),
        (Some(_), _) if b.decision == assent_api::DecisionKind::Deny => {
            return Err(ApiError::bad_request("arguments apply to approvals only"));
        }
        (Some(_), None) => return Err(ApiError::bad_request("no such approval")),
        (Some(args), Some(id)) => {
            let id = id.to_string();
            let rec = st
                .store_call(move |s| s.get_approval(&id))
                .await?
                .ok_or_else(|| ApiError::bad_request("no such approval"))?;
            let (e, limit, seen) = crate::edits::edit(st, &rec, args, roles).await?;
            (Some(e), limit, Some(seen))
        }
    };
    let (session_seen, calls_seen, checked_under) = match session_seen {
        Some(s) => (Some(s.risk), s.calls, Some(s.rules)),
        None => (None, None, None),
    };
    let passkey = match (b.passkey, id) {
        (None, _) => None,
        (Some(_), _) if b.decision == assent_api::DecisionKind::Deny => {
            return Err(ApiError::bad_request("a passkey signs approvals only"));
        }
        (Some(_), None) => {
            return Err(ApiError::bad_request(
                "a passkey signs one approval: decide it on its own",
            ));
        }
        // Found by review: a passkey assertion sent with an edit or a grant on an approval
        // that needs none was stored as "passkey-signed", though it signs the call as
        // proposed, once, not the edit or the grant that ran.
        (Some(_), Some(_)) if edited.is_some() || scope != GrantScope::Once || b.whole_tool => {
            return Err(ApiError::bad_request(
                "a passkey signs the call as proposed, once: approve it without an edit, a scope or whole_tool",
            ));
        }
        (Some(a), Some(id)) => Some(crate::passkeys::finish_vote(st, name, id, a).await?),
    };
    let duties = st.duties_of(name);
    let (decider_owns, decider_aka) = duties.clone();
    Ok(DecisionInput {
        passkey,
        kind: Some(b.decision),
        reason: b.reason,
        scope,
        whole_tool: b.whole_tool,
        confirm_workspace: b.confirm_workspace,
        edited,
        edited_output_bytes,
        decider_owns,
        decider_aka,
        decider_key: who.key.clone(),
        via: Some(who.via.clone()),
        in_client: None,
        reply_token: None,
        still_stands: Some(still_stands(st, who, duties)),
        session_grant_max_ms: Some(st.settings.session_grant_max_ms),
        session_seen,
        calls_seen,
        checked_under,
    })
}

/// What the store asks of `who` under the decision's write lock ([`assent_store::StillStands`]):
/// whether the principals in force then still have them as the request authenticated them
/// ([`vote_stands`]; a Slack account still mapped to them), with the agents they own and the
/// names they go by (`duties`, [`AppState::duties_of`] at authentication, which separation of
/// duties was checked against) unchanged. A reload puts its principals in force in the store
/// task that writes `config.reloaded` (and voids the tokens the keys it takes back approved),
/// so a decision written before that record has its token voided with it, and one written
/// after is checked against the new principals and refused. Found
/// by review: a reload giving the decider `owns: [the agent]` (or a single sign-on link the
/// call acts for) between authentication and the write let the decision stand, checked
/// against the duties read before.
pub(crate) fn still_stands(
    st: &AppState,
    who: &Decider<'_>,
    duties: (Vec<String>, Vec<String>),
) -> assent_store::StillStands {
    let (st, name, roles) = (st.clone(), who.name.to_string(), who.roles.to_vec());
    let key = who.key.clone();
    assent_store::StillStands(std::sync::Arc::new(move || {
        if st.duties_of(&name) != duties {
            return false;
        }
        let live = st.live();
        let oidc = st.oidc.as_ref().map(|o| &o.config);
        match key.as_deref().and_then(|k| k.strip_prefix(SLACK_VOTE)) {
            Some(user) => {
                let p = live.principals.iter().find(|p| p.name == name);
                let now = p.and_then(|p| p.roles()).unwrap_or_default();
                live.slack_users.get(user) == Some(&name) && roles.iter().all(|r| now.contains(r))
            }
            None => vote_stands(&live.principals, oidc, (&name, &roles, key.as_deref())),
        }
    }))
}

/// `POST /v1/approvals/{id}/decision` (operators): see [`decide_as`]; answers the decided
/// approval.
#[utoipa::path(post, path = "/v1/approvals/{id}/decision", tag = "decide",
    params(("id" = String, Path, description = "The item's id")),
    request_body = assent_api::approvals::DecisionRequest,
    responses((status = 200, description = "The decided approval", body = assent_api::approvals::Approval)),
    security(("operator_key" = [])))]
pub(crate) async fn decide(
    State(st): State<AppState>,
    op: Operator<DecideApprovals>,
    Path(id): Path<String>,
    ApiJson(b): ApiJson<DecisionRequest>,
) -> Result<Body<Approval>, ApiError> {
    let who = Decider::new(&op.principal, op.roles(), Via::channel("api"));
    let rec = decide_as(&st, &who, id, b).await?;
    Ok(Body(approval_body(&rec, None)))
}

/// One trip to the blocking pool: settles the expiries due (announcing them), then applies
/// `input` to approval `id` as `actor` holding `roles` (the store refuses a decision after the
/// deadline even before the sweep). The outer `Err` is `503` (the store could not be
/// reached); the inner one the store's refusal.
pub(crate) async fn settled_decide(
    st: &AppState,
    id: String,
    input: DecisionInput,
    actor: String,
    roles: Vec<String>,
) -> Result<Result<ApprovalRecord, DecideError>, ApiError> {
    let expired = Expired::default();
    let found = expired.clone();
    let res = st
        .store_task(move |s| {
            let now = now_ms();
            found.sweep(s, now)?;
            s.decide(&id, &input, &actor, &roles, now)
        })
        .await?;
    st.expired(expired.take());
    Ok(res)
}

/// The operator deciding: their principal's name, roles, and how they reached the gateway
/// (recorded in the decision's audit records).
pub(crate) struct Decider<'a> {
    /// The principal's name (a linked SSO session's principal, [`crate::dashboard`]).
    pub(crate) name: &'a str,
    /// The roles they act with.
    pub(crate) roles: &'a [String],
    /// The channel, and the SSO name of a dashboard session.
    pub(crate) via: Via,
    /// What a quorum vote keeps to say what stood behind it, for start-up to check again
    /// ([`vote_stands`]): the binding of the key the request authenticated with
    /// ([`crate::config::Principal::vote_key_binding`]), [`SLACK_VOTE`] and the Slack user id,
    /// or [`crate::standing::SSO_VOTE`] and the identity, groups and provider of a single sign-on.
    pub(crate) key: Option<String>,
}

impl<'a> Decider<'a> {
    /// Operator principal `p` holding `roles`, deciding through `via`: the key binding is of
    /// `p` as the request authenticated it (found by review: looked up by name when the vote
    /// was cast, a reload between the two bound a vote made with the old key to the new one),
    /// unless `via` is a single sign-on session (no key was presented; Slack: [`Self::by_slack`]).
    pub(crate) fn new(p: &'a crate::config::Principal, roles: &'a [String], via: Via) -> Self {
        let key = via.sso.is_none().then(|| p.vote_key_binding());
        Self {
            name: &p.name,
            roles,
            via,
            key,
        }
    }

    /// Operator principal `p` holding `roles`, signed in by single sign-on as `id` (the name
    /// claim's value, `via`) through the provider whose binding is `provider` with the
    /// provider's `groups` that mapped to some role: a decision keeps all three ([`crate::standing::SSO_VOTE`]).
    pub(crate) fn by_sso(
        p: &'a crate::config::Principal,
        roles: &'a [String],
        via: Via,
        (id, groups, provider): (&str, &[String], &str),
    ) -> Self {
        Self {
            name: &p.name,
            roles,
            via,
            key: Some(sso_vote_key(id, groups, provider)),
        }
    }

    /// Operator `name` holding `roles`, deciding through `via` with no key from the Slack
    /// account `user` (the user id Slack signed the click with): a quorum vote keeps it
    /// ([`SLACK_VOTE`]).
    pub(crate) fn by_slack(name: &'a str, roles: &'a [String], via: Via, user: &str) -> Self {
        Self {
            name,
            roles,
            via,
            key: Some(format!("{SLACK_VOTE}{user}")),
        }
    }
}

/// Applies `who`'s decision `b` to approval `id` (the REST API, the dashboard and Slack):
/// settles expiries first, checks the approver role in the same transaction, and wakes every
/// waiter. Errors: 403 for a missing role, 404, 409 when already decided, 400 for a bad scope
/// or edit.
pub(crate) async fn decide_as(
    st: &AppState,
    who: &Decider<'_>,
    id: String,
    b: DecisionRequest,
) -> Result<ApprovalRecord, ApiError> {
    let (name, roles) = (who.name, who.roles);
    let input = decision_input(st, Some(&id), b, who).await?;
    // The store checks the approver role in the decision's transaction.
    match settled_decide(st, id, input, name.to_string(), roles.to_vec()).await? {
        Ok(rec) => {
            st.decided(&rec);
            tracing::info!(approval_id = %rec.id, operator = %name, status = rec.status.as_str(), scope = ?rec.scope, edited = rec.edited.is_some(), "approval decided");
            Ok(rec)
        }
        Err(e) => Err(decide_error(e, name)),
    }
}

/// `POST /v1/approvals/decisions`: the same decision on several approvals (seed 002
/// batching). Each gets its own decision, token and audit record; the answer lists each
/// outcome (`200` even when some failed).
#[utoipa::path(post, path = "/v1/approvals/decisions", tag = "decide",
    request_body = assent_api::approvals::BatchDecisionRequest,
    responses((status = 200, description = "Each approval's outcome", body = assent_api::approvals::BatchDecisionResponse)),
    security(("operator_key" = [])))]
pub(crate) async fn decide_batch(
    State(st): State<AppState>,
    op: Operator<DecideApprovals>,
    ApiJson(b): ApiJson<BatchDecisionRequest>,
) -> Result<Body<BatchDecisionResponse>, ApiError> {
    if b.ids.is_empty() || b.ids.len() > 500 {
        return Err(ApiError::bad_request("ids must list 1 to 500 approval ids"));
    }
    let who = Decider::new(&op.principal, op.roles(), Via::channel("api"));
    let input = decision_input(&st, None, b.decision, &who).await?;
    let (ids, name, roles) = (b.ids.clone(), op.name().to_string(), op.roles().to_vec());
    let expired = Expired::default();
    let found = expired.clone();
    let results = st
        .store_call(move |s| {
            let now = now_ms();
            found.sweep(s, now)?;
            Ok(ids
                .iter()
                .map(|id| s.decide(id, &input, &name, &roles, now))
                .collect::<Vec<_>>())
        })
        .await?;
    st.expired(expired.take());
    for a in results.iter().filter_map(|r| r.as_ref().ok()) {
        st.decided(a);
    }
    st.changed();
    let results = b
        .ids
        .iter()
        .zip(results)
        .map(|(id, r)| {
            let mut out = BatchResult {
                id: id.clone(),
                ok: r.is_ok(),
                approval: None,
                code: None,
                message: None,
            };
            match r {
                Ok(rec) => out.approval = Some(Box::new(approval_body(&rec, None))),
                Err(e) => {
                    let e = decide_error(e, op.name());
                    (out.code, out.message) = (Some(e.code.to_string()), Some(e.message));
                }
            }
            out
        })
        .collect();
    Ok(Body(BatchDecisionResponse { results }))
}

/// `POST /v1/approvals/{id}/user-decision` (the agent that asked; sent by the MCP proxy after
/// asking its user in the client): `{"decision": "approve" | "deny", "reason"?}`. Only for an
/// approval with `in_client_approval` (a rule allows it, below R3, no approver roles) whose
/// call the rules, asked again now, still let the user approve in the client
/// ([`crate::edits::in_client_still_allowed`]: the session may have taken in untrusted output
/// since); else `403 IN_CLIENT_NOT_ALLOWED`. The session's state that check read is checked
/// again under the decision's write lock: moved since, `409 SESSION_CHANGED`, nothing approved
/// (read the approval again and decide again). Expiries are settled first; after the deadline
/// `409 ALREADY_DECIDED` (status `expired`). Recorded as decided by `user-of:AGENT`, not an
/// operator; once scope only.
#[utoipa::path(post, path = "/v1/approvals/{id}/user-decision", tag = "decide",
    params(("id" = String, Path, description = "The item's id")),
    request_body = assent_api::approvals::UserDecisionRequest,
    responses((status = 200, description = "The decided approval", body = assent_api::approvals::Approval)),
    security(("agent_key" = [])))]
pub(crate) async fn user_decision(
    State(st): State<AppState>,
    caller: Agent<RelayUserDecision>,
    Path(id): Path<String>,
    ApiJson(b): ApiJson<UserDecisionRequest>,
) -> Result<Body<Approval>, ApiError> {
    let agent = caller.agent_id;
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
    let id2 = id.clone();
    let rec = st
        .store_call(move |s| s.get_approval(&id2))
        .await?
        .filter(|a| a.agent == agent)
        .ok_or_else(|| ApiError::not_found("no such approval"))?;
    if !rec.terms.in_client_approval {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            code::IN_CLIENT_NOT_ALLOWED,
            "this approval needs an operator: no rule allows in-client approval, or it is R3/R4, or it names approver roles",
        ));
    }
    // Read before the rules are asked again, for the check under the write lock.
    let stands = in_client_stands(&st, &caller.principal, &agent);
    // A settled approval is not asked again (found by review: each re-gate read the agent's
    // recent calls and decisions, so a loop on one decided approval kept the writer busy);
    // the store refuses it (`ALREADY_DECIDED`, audited) whatever the session says.
    let pending = rec.status == assent_core::ApprovalStatus::Pending;
    let session_seen = match kind {
        DecisionKind::Approve if !pending => None,
        DecisionKind::Approve => match crate::edits::in_client_still_allowed(&st, &rec).await? {
            Some(seen) => Some(seen),
            None => {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    code::IN_CLIENT_NOT_ALLOWED,
                    "the rules no longer allow approving this call in the client (what the session took in since raised its risk, or the rules changed): it needs an operator",
                ));
            }
        },
        DecisionKind::Deny => None,
    };
    let actor = format!("{IN_CLIENT_USER}{agent}");
    let mut input = DecisionInput {
        kind: Some(kind),
        reason: b
            .reason
            .map(|r| format!("in the MCP client: {r}"))
            .or(Some("in the MCP client".into())),
        in_client: Some(agent.clone()),
        decider_key: Some(caller.principal.vote_key_binding()),
        still_stands: Some(stands),
        ..Default::default()
    };
    if let Some(seen) = session_seen {
        seen.into_input(&mut input);
    }
    let rec = settled_decide(&st, id, input, actor, Vec::new())
        .await?
        .map_err(|e| decide_error(e, "the agent's user"))?;
    st.decided(&rec);
    Ok(Body(approval_body(&rec, None)))
}

/// What the store asks of the agent's user's decision under its write lock
/// ([`assent_store::StillStands`]): whether the agent principal `p` (acting for `agent`) still
/// has the key the request authenticated with. Found by review: the in-client door alone had
/// no such check, so a decision made with an agent key a reload removed committed after the
/// reload's withdrawal and kept its token. (An approval's rules, asked again, are held to the
/// policy set they were asked under by [`assent_store::DecisionInput::checked_under`].)
fn in_client_stands(
    st: &AppState,
    p: &crate::config::Principal,
    agent: &str,
) -> assent_store::StillStands {
    let (st, name, binding) = (st.clone(), p.name.clone(), p.vote_key_binding());
    let agent = agent.to_string();
    assent_store::StillStands(std::sync::Arc::new(move || {
        stands_for(&st, (&name, &agent, &binding))
    }))
}

/// Whether agent principal `p` (authenticated earlier in this request) still stands in the
/// configuration in force now ([`binding_stands`]); `false` for a principal that is no
/// agent's. What a long-poll checks at each look (`approvals::get_approval`), since a reload
/// may remove or rotate the key meanwhile.
pub(crate) fn agent_key_stands(st: &AppState, p: &crate::config::Principal) -> bool {
    p.agent_id()
        .is_some_and(|agent| key_stands(&st.live(), agent, &p.key_sha256))
}

/// Whether a principal in `live` acts for agent `agent` with the key of digest `key_sha256`,
/// whatever its name (a reload that only renames it keeps its requests standing). The digests
/// are compared, not hashed again: it runs in the store's writer for every proposal.
pub(crate) fn key_stands(live: &crate::state::Live, agent: &str, key_sha256: &[u8; 32]) -> bool {
    live.principals.iter().any(|p| {
        p.key_sha256 == *key_sha256
            && matches!(&p.kind, crate::config::PrincipalKind::Agent { agent_id } if agent_id == agent)
    })
}

/// The principal in `live` holding `p`'s key (by its digest) in the same part — the same
/// agent's, or an executor (with its scope as `live` has it) — whatever its name; `None` when a
/// reload removed the key or gave it to another part. What a redemption is judged as, inside
/// the store's writer.
pub(crate) fn standing<'a>(
    live: &'a crate::state::Live,
    p: &crate::config::Principal,
) -> Option<&'a crate::config::Principal> {
    use crate::config::PrincipalKind::{Agent, Executor};
    live.principals.iter().find(|q| {
        q.key_sha256 == p.key_sha256
            && match (&q.kind, &p.kind) {
                (Agent { agent_id: a }, Agent { agent_id: b }) => a == b,
                (Executor { .. }, Executor { .. }) => true,
                _ => false,
            }
    })
}

/// Whether a live principal named `name` acts for agent `agent` with key binding `binding`.
fn stands_for(st: &AppState, (name, agent, binding): (&str, &str, &str)) -> bool {
    let same_agent = |p: &crate::config::Principal| matches!(&p.kind, crate::config::PrincipalKind::Agent { agent_id } if agent_id == agent);
    st.live()
        .principals
        .iter()
        .any(|p| p.name == name && same_agent(p) && p.vote_key_binding() == binding)
}

/// `POST /v1/approvals/{id}/cancel`: the requesting agent or an operator withdraws a pending
/// approval (`{"reason"?}`). An operator may not cancel one whose quorum says `deny: quorum`
/// (`403 DENY_NEEDS_QUORUM`, audited `decision.refused`: they vote deny instead).
#[utoipa::path(post, path = "/v1/approvals/{id}/cancel", tag = "decide",
    params(("id" = String, Path, description = "The item's id")),
    request_body(content = assent_api::approvals::CancelRequest, description = "Optional"),
    responses((status = 200, description = "The cancelled approval", body = assent_api::approvals::Approval)),
    security(("agent_key" = []), ("operator_key" = [])))]
pub(crate) async fn cancel_approval(
    State(st): State<AppState>,
    c: Cancelling,
) -> Result<Body<Approval>, ApiError> {
    let (p, id, reason) = (c.principal, c.id, c.reason);
    let (name, is_agent) = (p.name.clone(), p.agent_id().is_some());
    let expired = Expired::default();
    let found = expired.clone();
    let res = st
        .store_call(move |s| {
            let now = now_ms();
            found.sweep(s, now)?;
            match s.get_approval(&id)? {
                Some(r) if p.sees(&r.agent) => {
                    let who = p.canceller();
                    let lone = lone_no(&r, &who);
                    Ok((s.cancel_as(&id, &who, reason.as_deref(), now), lone))
                }
                _ => Ok((Err(DecideError::NotFound), None)),
            }
        })
        .await?;
    st.expired(expired.take());
    match res {
        (Ok(rec), _) => {
            st.decided(&rec);
            let rec = match is_agent {
                true => crate::formats::agent_view(rec),
                false => rec,
            };
            Ok(Body(approval_body(&rec, None)))
        }
        (Err(DecideError::NotApprover(_)), Some(why)) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            code::DENY_NEEDS_QUORUM,
            why,
        )),
        (Err(e), _) => Err(decide_error(e, &name)),
    }
}

/// Why operator `who` may not cancel approval `r` although they may decide it: its quorum
/// says `deny: quorum` ([`approval::operator_may_cancel`]); the store refuses that cancel as
/// `NotApprover`, answered `403 DENY_NEEDS_QUORUM` with this text. `None` for the agent's own
/// cancel and for an operator the store refuses for lacking a role.
fn lone_no(r: &ApprovalRecord, who: &Canceller<'_>) -> Option<&'static str> {
    let roles = who.roles()?;
    if !approval::may_decide(&r.terms.approvers, roles) {
        return None;
    }
    approval::operator_may_cancel(r.terms.quorum.as_ref()).err()
}

/// `POST /v1/sessions/{id}/cancel` (AAEP §6.8): cancels the session's pending approvals (an
/// agent: its own; an operator: every agent's that they could decide, the others are listed in
/// `refused` and stay pending) and its pending clarifications; `agent.session.cancelled` is
/// announced once per agent and session. The session's `session` grants are revoked and the
/// tokens of its calls not yet redeemed voided (for an agent: its own). `{"session_id",
/// "cancelled": [ids], "refused": [ids], "clarifications": [ids], "grants_revoked": [ids],
/// "tokens_voided": n}`.
#[utoipa::path(post, path = "/v1/sessions/{id}/cancel", tag = "decide",
    params(("id" = String, Path, description = "The session id")),
    request_body(content = assent_api::approvals::CancelRequest, description = "Optional"),
    responses((status = 200, description = "OK", body = assent_api::approvals::SessionCancelled)),
    security(("agent_key" = []), ("operator_key" = [])))]
pub(crate) async fn cancel_session(
    State(st): State<AppState>,
    c: Cancelling,
) -> Result<Body<SessionCancelled>, ApiError> {
    let (p, session, reason) = (c.principal, c.id, c.reason);
    check_name("session_id", &session)?;
    let s2 = session.clone();
    let out = st
        .store_call(move |s| s.cancel_session(&s2, &p.canceller(), reason.as_deref(), now_ms()))
        .await?;
    for a in &out.cancelled {
        st.decided(a);
    }
    let cancelled: Vec<String> = out.cancelled.iter().map(|a| a.id.clone()).collect();
    for c in &out.clarifications {
        st.waiters.wake(&clarification_key(c));
    }
    st.changed();
    Ok(Body(SessionCancelled {
        session_id: session,
        cancelled,
        refused: out.refused,
        clarifications: out.clarifications,
        grants_revoked: out.grants_revoked,
        tokens_voided: out.tokens_voided as u64,
    }))
}

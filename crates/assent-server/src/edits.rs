//! An edited call, re-gated like a proposal before it can be approved (seed 002 "Approve with
//! modifications", AAEP §6.3.2 `modified_action`; issue 10 §3): the REST API, the dashboard and
//! AAEP replies' `modified_action` all come through `edit`; the agent's user's in-client
//! approval is re-gated in its session the same way (`in_client_still_allowed`). Each returns
//! the session's risk state it read, which the store checks again under the decision's write
//! lock. It neither decides nor stores.

use crate::calls::{Canonical, resolve_real_path};
use crate::error::ApiError;
use crate::state::{AppState, now_ms};
use assent_core::edit::{EditRefusal, Original, check_edit};
use assent_core::triggers::{Observations, PriorCall, SessionRisk};
use assent_core::{VerdictKind, evaluate_in};
use assent_store::{ApprovalRecord, CallsSeen, DecisionInput, EditedCall};
use axum::http::StatusCode;
use serde_json::Value;

/// An operator's edit of approval `rec` (holding `roles`): reads the session's earlier calls
/// that the policy's windows reach (the held call left out) and [`regate`]s `arguments` with them.
/// Returns the edit, its `thresholds.output_bytes`, and the session's risk state it was
/// re-gated with, for the store to check again under the decision's write lock
/// ([`assent_store::DecisionInput::session_seen`]). Errors as [`regate`]'s, `400` for an
/// approval that is not of a tool call ([`assent_core::edit::editable`]: a delegation, a held
/// result, an MPLP target), and `503 STORE_UNAVAILABLE` when the calls cannot be read.
pub(crate) async fn edit(
    st: &AppState,
    rec: &ApprovalRecord,
    arguments: Value,
    roles: &[String],
) -> Result<(EditedCall, Option<u64>, Seen), ApiError> {
    if !assent_core::edit::editable(&rec.target_type, &rec.call.tool) {
        return Err(ApiError::bad_request(format!(
            "approval {} holds `{}`, not a tool call: only a tool call's arguments can be edited; approve or deny it as it is",
            rec.id, rec.call.tool
        )));
    }
    // One snapshot of the rules for the windows read and the verdict (found by review: two
    // reads, and a reload between them judged the edit by rules whose windows were not read).
    let live = st.live();
    let seen = session_now(st, &live, rec).await?;
    let (edited, limit) = regate(&live.registry, rec, arguments, &seen, roles)?;
    let checked = Seen {
        risk: seen.risk,
        calls: seen.calls,
        rules: live.registry.policy_set_sha256.clone(),
    };
    Ok((edited, limit, checked))
}

/// Whether the rules, asked again now, still let the agent's user approve held tool call
/// `rec` in the client: its call re-evaluated with the session's earlier calls (itself left
/// out) and what the session has taken in since (issue 16 §3) is allowed, or held with
/// `in_client_approval`. A call that now needs an operator (the session took in untrusted
/// output, the rules changed) or is denied is not (`None`). A held target or result is never
/// in-client (the store refuses it), so only a plain tool call (`target_type` `other`) is
/// asked about. `Some`: the session's risk state as read, for the store to check again under
/// the decision's write lock ([`assent_store::DecisionInput::session_seen`]). `503` when the
/// session cannot be read.
pub(crate) async fn in_client_still_allowed(
    st: &AppState,
    rec: &ApprovalRecord,
) -> Result<Option<Seen>, ApiError> {
    let live = st.live();
    let seen = session_now(st, &live, rec).await?;
    if rec.target_type != "other" {
        return Ok(Some(Seen {
            risk: seen.risk,
            calls: seen.calls,
            rules: live.registry.policy_set_sha256.clone(),
        }));
    }
    let arguments = rec.canonical_arguments();
    let v = evaluate_in(
        &live.registry,
        &rec.agent,
        &rec.call,
        Some(&arguments),
        &seen.observations(),
    );
    let allowed = match v.kind {
        VerdictKind::Allow => true,
        VerdictKind::Confirm => v.terms.in_client_approval,
        VerdictKind::Deny => false,
    };
    Ok(allowed.then_some(Seen {
        risk: seen.risk,
        calls: seen.calls,
        rules: live.registry.policy_set_sha256.clone(),
    }))
}

/// What the gatekeeper observes of a held call's session now ([`session_now`]).
pub(crate) struct SessionNow {
    /// The session's earlier calls the windows reach (the held call left out).
    pub prior: Vec<PriorCall>,
    /// The agent's calls in all its sessions inside the agent-wide windows (the held call left
    /// out; empty when no rule counts per agent).
    pub agent: Vec<PriorCall>,
    /// What the session has taken in, for the held call.
    pub risk: SessionRisk,
    /// How many calls the agent had made lately, as read; `None` when no rule has a rate or
    /// cost threshold (nothing a later call could tip over).
    pub calls: Option<CallsSeen>,
    /// When they were read, Unix ms.
    pub now: i64,
}

/// What a re-gated decision was checked against, for the store to check again under the
/// decision's write lock: the session's risk state ([`DecisionInput::session_seen`]) and the
/// agent's recent calls ([`DecisionInput::calls_seen`]).
pub(crate) struct Seen {
    /// The session's risk state as read.
    pub risk: SessionRisk,
    /// The agent's recent calls as counted ([`SessionNow::calls`]).
    pub calls: Option<CallsSeen>,
    /// The policy set it was re-gated under ([`DecisionInput::checked_under`]).
    pub rules: String,
}

impl Seen {
    /// Puts both into `input`, the decision they were checked for.
    pub(crate) fn into_input(self, input: &mut DecisionInput) {
        input.session_seen = Some(self.risk);
        input.calls_seen = self.calls;
        input.checked_under = Some(self.rules);
    }
}

impl SessionNow {
    /// These as the gatekeeper's [`Observations`] (symbolic links resolved on this host).
    pub(crate) fn observations(&self) -> Observations<'_> {
        Observations {
            now_ms: self.now,
            prior_calls: &self.prior,
            agent_calls: &self.agent,
            session: &self.risk,
            resolve_path: &resolve_real_path,
        }
    }
}

/// What the gatekeeper observes of `rec`'s session now, read in one snapshot
/// ([`assent_store::Store::edit_observations`]): the earlier
/// calls the windows of `live` (the rules the caller judges by) reach (`rec` itself left out), the
/// agent's calls its agent-wide windows reach (`rec` left out), the session's risk state for
/// `rec`'s call, and the time they were read at (Unix ms). `503 STORE_UNAVAILABLE` when they
/// cannot be read.
pub(crate) async fn session_now(
    st: &AppState,
    live: &crate::state::Live,
    rec: &ApprovalRecord,
) -> Result<SessionNow, ApiError> {
    let (agent, session, id) = (rec.agent.clone(), rec.session_id.clone(), rec.id.clone());
    let (needs, now) = (live.window_needs.clone(), now_ms());
    let counted = *needs != assent_core::triggers::window::WindowNeeds::default();
    let call = rec.call.clone();
    let reg = live.registry.clone();
    st.store_call(move |s| {
        let (tool, server) = (&call.tool, call.server.as_deref());
        let wide = needs.for_call(&reg, &agent, tool, server);
        let seen =
            s.edit_observations((&agent, &session), Some(&id), &call, (&needs, &wide), now)?;
        Ok::<_, assent_store::StoreError>(SessionNow {
            prior: seen.prior,
            agent: seen.agent,
            risk: seen.risk,
            calls: counted.then_some(seen.calls),
            now,
        })
    })
    .await
}

/// Re-canonicalises and re-hashes `arguments` as an edit of approval `rec`, evaluates the
/// edited call with what `seen` observed: the session's and the agent's earlier calls (the held
/// call left out) and what the session has taken in (issue 16 §3: an edit is re-gated in its
/// session), and checks
/// it against the held call ([`check_edit`]) for an operator holding `roles`. Returns the edit
/// and its `thresholds.output_bytes`. Errors: `400` for arguments that are not a call,
/// `422 EDIT_DENIED` / `EDIT_OUT_OF_SCOPE` / `EDIT_OVER_THRESHOLD` / `EDIT_RAISES_RISK` /
/// `EDIT_NEEDS_MORE_APPROVAL` (a quorum, passkey or separation of duties the held call's
/// approval did not need), `403` for a missing approver role; each names the reasons.
fn regate(
    reg: &assent_core::policy::Registry,
    rec: &ApprovalRecord,
    arguments: Value,
    seen: &SessionNow,
    roles: &[String],
) -> Result<(EditedCall, Option<u64>), ApiError> {
    let c = Canonical::call(rec.call.tool.clone(), rec.call.server.clone(), arguments)?;
    let v = evaluate_in(
        reg,
        &rec.agent,
        c.call(),
        Some(c.arguments()),
        &seen.observations(),
    );
    let escalates = rec.terms.escalation.as_ref().map(|e| e.roles());
    let original = Original::of(&rec.terms, escalates.as_deref().unwrap_or_default());
    let raised = if rec.terms.triggers.iter().any(|t| t == "cost") {
        assent_core::edit::raised_costs(reg, &rec.agent, &rec.call, c.call())
    } else {
        Vec::new()
    };
    let checked = check_edit(&original, &v, roles).and_then(|()| {
        if raised.is_empty() {
            Ok(())
        } else {
            // Over a cost threshold already: the edit may lower the amount, not raise it.
            Err(EditRefusal::OverThreshold(
                raised
                    .iter()
                    .map(|a| format!("cost ({a} raised)"))
                    .collect(),
            ))
        }
    });
    checked.map_err(|e| {
        let status = match e {
            EditRefusal::NeedsRole(_) => StatusCode::FORBIDDEN,
            _ => StatusCode::UNPROCESSABLE_ENTITY,
        };
        ApiError::new(status, e.code(), e.to_string())
            .with_verdict(&v.terms.reasons, &v.terms.triggers)
    })?;
    let (call, canonical_arguments, canonical, call_hash) = c.into_parts();
    Ok((
        EditedCall {
            arguments: call.arguments,
            canonical_arguments,
            canonical,
            call_hash,
        },
        v.terms.output_bytes,
    ))
}

//! What an operator's (or an agent's user's) decision comes with (seed 002 decisions, issue 14,
//! issue 16 §3): approve or deny, the reason, the scope of a grant, an edit, the passkey proof,
//! the channel, and what the caller found the approval by or re-gated it against. `decide.rs`
//! applies it.

use crate::error::DecideError;
use crate::record::{ApprovalRecord, EditedCall};
use assent_core::ToolCall;
use assent_core::approval::{DecisionKind, GrantScope, Settlement};
use assent_core::decision::{self, ScopeRefusal};
use assent_core::grant::{self, GrantTerms};

/// An operator decision with the seed 002 options.
#[derive(Debug, Clone, Default)]
pub struct DecisionInput {
    /// Approve or deny (`None` is not allowed; use [`DecisionInput::approve`] / `deny`).
    pub kind: Option<DecisionKind>,
    /// Reason; reaches the agent on a deny.
    pub reason: Option<String>,
    /// Scope of an approval (once when omitted).
    pub scope: GrantScope,
    /// Widen a grant from the exact arguments to every call of the tool.
    pub whole_tool: bool,
    /// Explicit confirmation for `workspace` on an R3/R4 tool.
    pub confirm_workspace: bool,
    /// Approve with these arguments instead.
    pub edited: Option<EditedCall>,
    /// The `thresholds.output_bytes` of the edited call, if a rule names one: the approval's
    /// result limit becomes the smaller of the two.
    pub edited_output_bytes: Option<u64>,
    /// The agent ids the deciding principal owns (`principals[].owns`): with separation of
    /// duties they may not approve those agents' calls (issue 14 §2).
    pub decider_owns: Vec<String>,
    /// The other names the deciding person goes by (their single sign-on name with and
    /// without the `oidc:` prefix): a call made `on_behalf_of` any of them is theirs too.
    pub decider_aka: Vec<String>,
    /// What stood behind the decision, as the server says it (opaque here): the binding of the
    /// operator key it was made with (64 hex, the server's SHA-256 over the key's digest under
    /// a tag of its own), or the channel's (`slack:` and the clicking Slack user id; `sso:` and
    /// the identity and groups of a single sign-on). Kept with a quorum vote, with a grant
    /// (migration 0048) and with a single decision (migration 0052): start-up checks it again
    /// and withdraws the vote, revokes the grant, or voids the unredeemed token the decision
    /// approved, when it no longer stands ([`crate::Store::withdraw_votes`],
    /// [`crate::Store::revoke_grants_unless`], [`crate::Store::void_unbacked_tokens`]). `None`
    /// for a vote, grant or decision made before the server said how, and for an agent's
    /// user's decision in the client.
    pub decider_key: Option<String>,
    /// The passkey assertion signing an approval (issue 14 §4), checked by the gateway's live
    /// ceremony; the store checks it belongs to the decider and binds this approval, its
    /// `call_hash` and `approve`, and stores it with the vote or decision.
    pub passkey: Option<assent_core::passkey::PasskeyProof>,
    /// How the decision reached the gateway (the channel, the SSO name of a dashboard
    /// session), recorded as `data.via` in its audit records; `None` records none.
    pub via: Option<crate::Via>,
    /// The decision is the user's of this agent, in the MCP client (issue 16 §3): taken only
    /// on a plain tool call of that agent held with in-client approval, as its sealed row says
    /// (checked on the row the decision settles, not on the caller's earlier read).
    pub in_client: Option<String>,
    /// The decision is an operator's AAEP `confirmation.reply` naming the approval by this
    /// reply token (AAEP §6.2.1): taken only on the approval whose row, as it is settled,
    /// carries it (the caller found the approval by the token in an earlier read; else
    /// `Damaged`, `reply_token`).
    pub reply_token: Option<String>,
    /// Whether the deciding operator, as the request authenticated them (name, key or channel
    /// binding, roles), still stands under the configuration in force: asked by the store
    /// inside the decision's write transaction, after its write lock is taken; `false` refuses
    /// it (`NotApprover`, audited `decision.refused`). Found by review: a decision that
    /// authenticated with a key a reload then removed or rotated committed after the reload
    /// had withdrawn that key's consent, and its token stayed redeemable. `None`: not asked
    /// (the agent's user in the client, the store's own callers).
    pub still_stands: Option<StillStands>,
    /// The policy set (`Registry::policy_set_sha256`) an approving decision was re-gated under
    /// by its caller: an operator's edit, the agent's user's decision in the client. Inside the
    /// decision's write transaction the store refuses it when the rules in force then are
    /// another (`RulesTightened`; found by review: a reload landing between the re-gate and
    /// the write had it approved under the old rules). `None`: not re-gated.
    pub checked_under: Option<String>,
    /// How long a `session` grant this decision creates stands, in milliseconds
    /// (`session_grant_max_seconds` of the configuration): it lapses that long after it is
    /// created ([`assent_core::grant::terms`]). `None`: the default,
    /// [`assent_core::grant::DEFAULT_SESSION_GRANT_MAX_MS`] (24 h) — never unbounded.
    pub session_grant_max_ms: Option<i64>,
    /// What the approval's session had taken in (issue 16 §3) when the caller re-gated this
    /// approving decision against it: the agent's user's decision in the client, an operator's
    /// edit. Inside the decision's write transaction the store reads the session's state again
    /// for the held call, and refuses the decision when it moved since
    /// ([`assent_core::session_risk::moved`]: a mark or a counting tool change appeared):
    /// `SessionChanged`, audited `decision.refused`, nothing else written. Found by review: a
    /// `POST /v1/tool-results` of untrusted output landing between the check and the write
    /// let a user approve in the client a call that then needed an operator. `None`: not
    /// checked (a decision not re-gated against its session).
    pub session_seen: Option<assent_core::session_risk::SessionRisk>,
    /// How many calls the session (the agent, when a rule counts per agent) had made and how
    /// many of its approvals had been decided lately, when the caller re-gated this approving
    /// decision against its rate and cost windows (an operator's edit, the agent's user's
    /// in-client approval; [`crate::CallsSeen`]). Inside the decision's write transaction the
    /// store counts again and refuses the decision when the count grew: `SessionChanged`,
    /// audited `decision.refused`. Found by review: an edit checked against a cost total read
    /// before the agent's next call committed, or beside another edit, let the session spend
    /// past its threshold with no one asked. `None`: not checked (no rule has a threshold).
    pub calls_seen: Option<crate::CallsSeen>,
}

/// The question [`DecisionInput::still_stands`] asks, answered by the server from the
/// configuration in force at the moment it is asked.
#[derive(Clone)]
pub struct StillStands(pub std::sync::Arc<dyn Fn() -> bool + Send + Sync>);

impl std::fmt::Debug for StillStands {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StillStands")
    }
}

/// Why the rules in force (`rules`, [`crate::Store::set_rules`]) refuse approving `rec` by
/// decision `d` at `now` for an operator holding `roles` (`None`: its timeout, or the agent's
/// user; `at_timeout` for its timeout's approving default): a decision re-gated under another
/// policy set than the one in force ([`DecisionInput::checked_under`]); a call held under
/// another one that they now ask more of ([`assent_core::rules_now::tightened`], and at its
/// timeout [`assent_core::rules_now::default_withdrawn`]; the call evaluated without the
/// session's history, each kind as it was gated: [`asked_more`]). `None` when nothing
/// refuses it, and when no rules were set.
pub(crate) fn rules_refusal(
    rules: Option<&assent_core::policy::Registry>,
    rec: &ApprovalRecord,
    (d, roles, at_timeout): (Option<&DecisionInput>, Option<&[String]>, bool),
    now: i64,
) -> Option<String> {
    let reg = rules?;
    let in_force = reg.policy_set_sha256.as_str();
    if let Some(under) = d.and_then(|d| d.checked_under.as_deref()) {
        return (under != in_force).then(|| {
            "the rules in force changed while this decision was checked against them: nothing was decided; decide again".to_string()
        });
    }
    let why = asked_more(reg, rec, (roles, at_timeout), now)?;
    Some(format!(
        "the rules in force now, changed since this call was held, {why}: it cannot be approved as held; deny it, and the agent may propose it again"
    ))
}

/// What the rules `reg` ask more of approval `rec`'s call, as it would run (the operator's
/// edit, else as proposed), than it was held under ([`assent_core::rules_now::tightened`] for
/// an operator holding `roles`), when `rec` was held under another policy set than `reg`'s;
/// `None` for the same set. Each kind is asked as it was gated: an MPLP Confirm target (a
/// plan, a context) with [`assent_core::evaluate_target`], a delegation (`delegate.…`) with
/// [`assent_core::evaluate_delegation`], a held result (`result.…`) by the call whose result
/// it is, with [`assent_core::evaluate_in`], as every tool call. Found by review: they were
/// left out, so a reload that denied a tool still released its calls' held results, and one
/// that denied `mplp.plan` or a delegation still let those held before it be approved.
fn asked_more(
    reg: &assent_core::policy::Registry,
    rec: &ApprovalRecord,
    who: (Option<&[String]>, bool),
    now: i64,
) -> Option<String> {
    if rec.policy_set_sha256.as_deref() == Some(reg.policy_set_sha256.as_str()) {
        return None;
    }
    let seen = assent_core::triggers::Observations::none(now);
    let (agent, args) = (&rec.agent, rec.canonical_arguments());
    // A Confirm on a target, whatever its type (`other` included: its tool is `mplp.other`).
    let v = if rec.target_type != "other" || rec.call.tool.starts_with("mplp.") {
        assent_core::evaluate_target(reg, agent, &rec.call, Some(&args))
    } else if rec.call.tool.starts_with("delegate.") {
        assent_core::evaluate_delegation(reg, agent, &rec.call, Some(&args), &seen)
    } else if rec.call.tool.starts_with("result.") {
        // The call whose result is held, as the release asks of it (`HeldResult.call`); a
        // result whose call cannot be read is refused as the rules denying it.
        let call = serde_json::from_value::<ToolCall>(rec.call.arguments["call"].clone());
        let Ok(call) = call else {
            return Some("deny it (its call cannot be read)".into());
        };
        let Ok(args) = assent_core::canonical::canonical_value(&call.arguments) else {
            return Some("deny it (its call's arguments cannot be read)".into());
        };
        assent_core::evaluate_in(reg, agent, &call, Some(&args), &seen)
    } else {
        return tool_call_asked_more(reg, rec, who, &seen);
    };
    judged(&rec.terms, &v, who)
}

/// [`assent_core::rules_now::tightened`] of a call held under `held` whose verdict now is
/// `v`, for `who` (an operator's roles, and whether it is the timeout's approving default,
/// which [`assent_core::rules_now::default_withdrawn`] judges too).
fn judged(
    held: &assent_core::verdict::ApprovalTerms,
    v: &assent_core::gatekeeper::Verdict,
    (roles, at_timeout): (Option<&[String]>, bool),
) -> Option<String> {
    let withdrawn = || at_timeout.then(|| assent_core::rules_now::default_withdrawn(v));
    assent_core::rules_now::tightened(held, v, roles).or_else(|| withdrawn().flatten())
}

/// [`asked_more`] of a plain tool call, as it would run: the operator's edit, else as proposed.
fn tool_call_asked_more(
    reg: &assent_core::policy::Registry,
    rec: &ApprovalRecord,
    who: (Option<&[String]>, bool),
    seen: &assent_core::triggers::Observations<'_>,
) -> Option<String> {
    let (call, arguments) = match &rec.edited {
        Some(e) => {
            let mut call = rec.call.clone();
            call.arguments = e.arguments.clone();
            (call, e.canonical_arguments.clone())
        }
        None => (rec.call.clone(), rec.canonical_arguments()),
    };
    let v = assent_core::evaluate_in(reg, &rec.agent, &call, Some(&arguments), seen);
    judged(&rec.terms, &v, who)
}

/// `Ok` unless the rules in force (`rules`, [`crate::Store::set_rules`]) ask more of approval
/// `aid`'s call, as it would run, than it was held and approved under
/// ([`RedeemError::RulesTightened`]): a token minted before a reload or a restart that denied
/// the tool, raised its tier or made it need a passkey, a quorum or separation of duties does
/// not run the call (found by review: such tokens redeemed until they expired). Who approved
/// is not asked again: rules naming other approvers leave a token approved before them (by
/// an operator the rules then named, or after them, by one they name) standing. `held_under`
/// is the policy-set hash the approval's seal held over when the redemption checked it
/// ([`crate::approval_seal::Holding::policy_set`], under the row's lock; found by review: read
/// again from `confirm_context`, a writer on PostgreSQL could flip it between the reads); the
/// approval's row is read only when it is not the set in force, and its call must be the one
/// its sealed canonical text says (`Unsealed` else; found by review: a tool renamed `mplp.x`
/// or arguments rewritten in the database were judged instead). Called by the redemption last,
/// once the token is known to be the presenter's, unused and unexpired, its settlement sealed
/// and its plan running (`tokens.rs`).
pub(crate) fn redeem_refusal(
    tx: crate::db::Conn<'_>,
    rules: Option<&assent_core::policy::Registry>,
    (held_under, aid): (Option<&str>, &str),
    now: i64,
) -> Result<(), crate::RedeemError> {
    let Some(reg) = rules else { return Ok(()) };
    let store = |e: crate::db::DbError| crate::RedeemError::Store(e.into());
    if held_under == Some(reg.policy_set_sha256.as_str()) {
        return Ok(());
    }
    let mut rec = crate::record::read_approval(tx, aid)
        .map_err(store)?
        .ok_or(crate::RedeemError::Invalid)?;
    if !rec.call_intact() {
        return Err(crate::RedeemError::Unsealed);
    }
    rec.policy_set_sha256 = held_under.map(str::to_string);
    // A token its timeout's approving default minted is judged as that default (found by
    // review: minted just before a reload turned the default to reject, it still ran).
    let by_default = rec
        .decisions
        .last()
        .is_some_and(|d| d.decision == Settlement::Expire);
    match asked_more(reg, &rec, (None, by_default), now) {
        Some(why) => Err(crate::RedeemError::RulesTightened(format!(
            "the rules in force now, changed since this call was approved, {why}: its token no longer runs it; the agent may propose it again"
        ))),
        None => Ok(()),
    }
}

impl StillStands {
    /// Whether the decider still stands (see [`DecisionInput::still_stands`]).
    pub fn holds(&self) -> bool {
        (self.0)()
    }
}

impl DecisionInput {
    /// Approve once.
    pub fn approve() -> Self {
        Self {
            kind: Some(DecisionKind::Approve),
            ..Default::default()
        }
    }
    /// Deny with an optional reason.
    pub fn deny(reason: Option<&str>) -> Self {
        Self {
            kind: Some(DecisionKind::Deny),
            reason: reason.map(str::to_string),
            ..Default::default()
        }
    }
}

/// The terms of the grant that decision `d` (`None`: a timeout or a cancel) with `scope` makes
/// at `now` (Unix ms), [`grant::terms`]: widened to the whole tool when `d` says so, a
/// `session` grant lapsing after `d`'s [`DecisionInput::session_grant_max_ms`] or else the
/// default ([`grant::DEFAULT_SESSION_GRANT_MAX_MS`]). `None`: scope `once`, no grant.
pub(crate) fn grant_terms(
    d: Option<&DecisionInput>,
    scope: GrantScope,
    now: i64,
) -> Option<GrantTerms> {
    let whole_tool = d.is_some_and(|d| d.whole_tool);
    grant::terms(scope, whole_tool, now, session_max_ms(d))
}

/// How long a `session` grant of decision `d` may live, in ms: its
/// [`DecisionInput::session_grant_max_ms`] or else [`grant::DEFAULT_SESSION_GRANT_MAX_MS`].
/// Also the longest timed grant an R3/R4 approval takes without `confirm_workspace`
/// ([`assent_core::decision::workspace_discouraged`]).
pub(crate) fn session_max_ms(d: Option<&DecisionInput>) -> i64 {
    d.and_then(|d| d.session_grant_max_ms)
        .unwrap_or(grant::DEFAULT_SESSION_GRANT_MAX_MS)
}

/// Whether decision `d`'s `scope` on `rec` is discouraged, or why the store refuses it
/// ([`decision::check_scope`], under the session maximum of [`session_max_ms`]): `Invalid` for
/// a Confirm target or an irreversible action taking a grant, `WorkspaceNeedsConfirmation` for
/// a lasting scope on R3/R4 without `confirm_workspace`.
pub(crate) fn scope_on_held(
    rec: &ApprovalRecord,
    d: Option<&DecisionInput>,
    scope: GrantScope,
) -> Result<bool, DecideError> {
    let held = decision::Held {
        target_type: &rec.target_type,
        irreversible: rec.terms.irreversible,
        risk_tier: rec.terms.risk_tier,
    };
    let edited = d.is_some_and(|d| d.edited.is_some());
    let confirm = d.is_some_and(|d| d.confirm_workspace);
    decision::check_scope(&held, scope, edited, confirm, session_max_ms(d)).map_err(|e| match e {
        ScopeRefusal::WorkspaceNeedsConfirmation { tier, scope } => {
            DecideError::WorkspaceNeedsConfirmation {
                tier: tier.to_string(),
                scope,
            }
        }
        e => DecideError::Invalid(e.to_string()),
    })
}

/// Refuses an operator's edit `e` that is not the held call's tool and server with the edit's
/// arguments, as the row being settled says (found by review: the server builds the edit from
/// its own earlier read of the approval, and the token was minted for the edit's hash; a tool
/// swapped in the database for that read bound the token to a call no one was shown). `Invalid`.
pub(crate) fn edit_of_held(rec: &ApprovalRecord, e: &EditedCall) -> Result<(), DecideError> {
    let call = assent_core::ToolCall::new(
        &*rec.call.tool,
        rec.call.server.clone(),
        e.arguments.clone(),
    );
    match call.and_then(|c| c.canonical_and_hash()) {
        Ok((canonical, hash)) if canonical == e.canonical && hash == e.call_hash => Ok(()),
        _ => Err(DecideError::Invalid(format!(
            "the edited call is not approval {}'s `{}` with the edited arguments",
            rec.id, rec.call.tool
        ))),
    }
}

/// Why the re-gated decision `input` on held call `rec` no longer stands, read again in this
/// transaction: the session took in more since the caller read it
/// ([`crate::DecisionInput::session_seen`], [`crate::session_risk::moved_since`]), or made
/// more calls or had more approvals decided since they were counted
/// ([`crate::DecisionInput::calls_seen`]). `None`: neither (or not checked).
pub(crate) fn seen_moved(
    tx: crate::db::Conn<'_>,
    rec: &crate::approval_record::ApprovalRecord,
    input: Option<&crate::DecisionInput>,
) -> crate::db::Result<Option<&'static str>> {
    let Some(d) = input else { return Ok(None) };
    if let Some(seen) = &d.session_seen
        && crate::session_risk::moved_since(tx, rec, seen)?
    {
        return Ok(Some(
            "the session took in more since the decision was checked against it",
        ));
    }
    if let Some(seen) = &d.calls_seen
        && crate::usage::calls_since(tx, &rec.agent, seen.session.as_deref(), seen.since)?
            != seen.count
    {
        return Ok(Some(
            "the agent made more calls, or had more approvals decided, since the decision was checked against its windows",
        ));
    }
    Ok(None)
}

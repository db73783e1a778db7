//! The decide step of an approval's life: the approval as the gateway shows it
//! (`GET /v1/approvals/{id}[?wait=S]`, lists, grouped lists, seed 002 ApprovalRequest), and
//! what changes it — an operator's decision (one or a batch), a cancellation (of one approval
//! or a whole session), the agent's user's in-client decision. The MPLP Confirm form
//! (`?format=mplp`) stays a `serde_json::Value`.

use crate::gate::{Call, HeldResult};
use crate::kit::{
    ApprovalStatus, ApprovalTerms, DecisionKind, DefaultDecision, Reason, RiskLevel, RiskTier,
    present,
};
use crate::tokens::ApprovalToken;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// assent's approval record (`GET /v1/approvals/{id}`, and the answer to every decision and
/// cancellation). Times are RFC 3339 strings. Fields after `redact` appear only when they
/// apply (see each).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Approval {
    /// Approval id, UUID v4 (also the MPLP Confirm id).
    pub id: String,
    /// Current status.
    pub status: ApprovalStatus,
    /// The agent that proposed the call.
    pub agent: String,
    /// Its session id (empty for a plan submitted without one).
    pub session_id: String,
    /// Seed 002 `runId`, if the agent sent one.
    pub run_id: Option<String>,
    /// The person the call acts for (`on_behalf_of`), if the agent named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_behalf_of: Option<String>,
    /// The client device id the token is bound to, if the agent sent one.
    pub device_id: Option<String>,
    /// The call as proposed.
    pub call: Call,
    /// SHA-256 (lowercase hex) of `canonical` (not of the `canonical` shown to its agent of a
    /// held tool result not yet released, whose `preview` is masked: `HeldResult::preview`).
    pub call_hash: String,
    /// RFC 8785 canonical JSON of the call.
    pub canonical: String,
    /// What the verdict asked of this approval, serialised flat: `message`, `reasons`,
    /// `risk_tier`, `irreversible`, `default_decision`, `approvers` (empty: any operator),
    /// `triggers`, `suggested_alternatives`, `escalation`, `output_bytes`,
    /// `in_client_approval`, `side_effects`, `rollback`, `dry_run_tool`, `redact`.
    #[serde(flatten)]
    pub terms: ApprovalTerms,
    /// Seed 002 `humanSummary`.
    pub human_summary: String,
    /// AAEP risk level of the tier.
    pub risk_level: RiskLevel,
    /// When the wait was extended to the escalation roles, RFC 3339.
    pub escalated_at: Option<String>,
    /// The decision that settled it (at most one), oldest first.
    pub decisions: Vec<DecisionEntry>,
    /// When `quorum` is present: the votes cast so far, in voting order, and how they count
    /// (issue 14 §1). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub votes: Option<Votes>,
    /// When `escalation` is present: when each step happens (or happened) and when the
    /// default decision applies, fixed when the approval was raised (issue 14 §3). Absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// When it was requested, RFC 3339.
    pub requested_at: String,
    /// When it expires (or expired), RFC 3339.
    pub expires_at: String,
    /// When it was decided, expired or cancelled, RFC 3339.
    pub decided_at: Option<String>,
    /// The decided scope once approved: `once`, `session`, a duration such as `15m`, or
    /// `workspace`.
    pub scope: Option<String>,
    /// The grant it created (scope wider than `once`) or was allowed by.
    pub grant_id: Option<String>,
    /// Whether an operator approved it with edited arguments (then `arguments`,
    /// `approved_call_hash` and `diff` are present).
    pub arguments_changed: bool,
    /// MPLP Confirm `target_type` (`other` for a tool call, `plan`, `context`…).
    pub target_type: String,
    /// MPLP Confirm `target_id` (UUID v4).
    pub target_id: String,
    /// RFC 6902 patch: from the proposed to the edited arguments (when edited), or from a
    /// plan's previous submission. Absent otherwise.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub diff: Option<Value>,
    /// The stored columns that could not be read (issue 10 §8), `tokens.seal` (a token row
    /// whose seal does not hold: also one sealed under a replaced audit key, which `assent
    /// audit verify` tells apart), while pending `votes.seal` (a vote's) and, in an operator's
    /// view of a pending approval (`GET /v1/approvals/{id}`, the listing), what no seal
    /// vouches for (`seal`: its terms; `call`: its call is not the one hashed). A
    /// pending one so named is not as the gateway wrote it and cannot be approved (with
    /// `call` or an unreadable column, not denied or cancelled either); absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub damaged: Vec<String>,
    /// The operator's edited arguments (what the token binds); only when `arguments_changed`.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub arguments: Option<Value>,
    /// The edited call's hash; only when `arguments_changed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_call_hash: Option<String>,
    /// SHA-256 (lowercase hex) of the policy set in force when the call was held: the RFC 8785
    /// canonical JSON of the sorted texts of the governance files then loaded (issue 14 §8;
    /// a reload that changes any governance file changes it). Absent when none was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_set_sha256: Option<String>,
    /// [`crate::error::TOOL_DENIED`] when the call will not run because of this approval's
    /// outcome (rejected, cancelled, expired without a token); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Why it will not run, with `code`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The minted token as a seed 002 Token document, once there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_token: Option<ApprovalToken>,
    /// The signed token string; only for the agent that asked, once minted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// When `token` expires, RFC 3339; with `token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_expires_at: Option<String>,
}

impl Approval {
    /// `server/tool`, or `tool` for a local tool.
    pub fn target(&self) -> String {
        match &self.call.server {
            Some(s) => format!("{s}/{}", self.call.tool),
            None => self.call.tool.clone(),
        }
    }
    /// For a held tool result (`result.TOOL`): its arguments, typed; `None` for any other call
    /// or arguments of another shape.
    pub fn held_result(&self) -> Option<HeldResult> {
        if !self.call.tool.starts_with("result.") {
            return None;
        }
        serde_json::from_value(self.call.arguments.clone()).ok()
    }
    /// The arguments the agent may run with: the operator's edit, else the proposed ones.
    pub fn effective_arguments(&self) -> &Value {
        match (&self.arguments, self.arguments_changed) {
            (Some(a), true) => a,
            _ => &self.call.arguments,
        }
    }
}

/// `on_timeout` of the covering rules, `{"escalate_to": [role…], "after_seconds": N}`:
/// `assent-core`'s own type, whose serde form is the wire's (unknown keys are accepted).
pub use assent_core::triggers::Escalation;

/// What a recorded decision did: `assent-core`'s `Settlement` (`"approve"`, `"deny"`,
/// `"expire"` or `"cancel"`).
pub use assent_core::approval::Settlement;

/// The votes on an approval that needs a quorum (`votes` of an approval).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Votes {
    /// Every vote, in voting order.
    pub cast: Vec<Vote>,
    /// The approving votes against the quorum: whether it is met and who counted in which
    /// group (a person counts once).
    pub approvals: Tally,
    /// Places the quorum has in all (`"1 of 2"` is `approvals`' counted over this).
    pub required: u32,
}

/// An approval's escalation schedule (`schedule` of an approval, issue 14 §3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Schedule {
    /// The steps in time order.
    pub steps: Vec<ScheduledStep>,
    /// When the default decision applies (RFC 3339): the deadline AAEP announced.
    pub deadline: String,
}

impl Schedule {
    /// One line for people: `lead at T (joined); cfo at T; default decision at D`.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .steps
            .iter()
            .map(|s| {
                let joined = if s.taken { " (joined)" } else { "" };
                format!("{} at {}{joined}", s.approvers.join(", "), s.at)
            })
            .collect();
        parts.push(format!("default decision at {}", self.deadline));
        parts.join("; ")
    }
}

/// One escalation step (`schedule.steps[]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScheduledStep {
    /// When it happens (RFC 3339).
    pub at: String,
    /// The roles that join the approvers.
    pub approvers: Vec<String>,
    /// Whether it was taken.
    pub taken: bool,
}

/// One vote (`votes.cast[]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Vote {
    /// The principal who voted.
    pub by: String,
    /// `approve` or `deny`.
    pub decision: DecisionKind,
    /// Their roles when they voted.
    pub roles: Vec<String>,
    /// Their reason, if any.
    pub reason: Option<String>,
    /// When, RFC 3339.
    pub at: String,
    /// Whether a passkey signed it (issue 14 §4; the assertion is in the receipt).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub passkey_signed: bool,
}

/// An approval's signed receipt (`GET /v1/approvals/{id}/receipt`, issue 14 §5;
/// `docs/schemas/approval-receipt.schema.json`): `assent-core`'s own type, with its offline
/// check (`Receipt::check`).
pub use assent_core::receipt::Receipt;

/// Whether votes meet a quorum and who counted where: `assent-core`'s own type
/// (`{"met": bool, "groups": [{"roles", "count", "counted": [principal…]}]}`).
pub use assent_core::quorum::Tally;

/// One recorded decision (`decisions[]` of an approval).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DecisionEntry {
    /// What it did.
    pub decision: Settlement,
    /// The operator's reason, or the expiry note.
    pub reason: Option<String>,
    /// Principal name, `user-of:AGENT` for the agent's user, or `system:expiry`.
    pub by: String,
    /// When, RFC 3339.
    pub at: String,
    /// For an expiry: the default decision that applied.
    pub default_applied: Option<DefaultDecision>,
    /// Whether a passkey signed it (issue 14 §4; the assertion is in the receipt).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub passkey_signed: bool,
}

/// `GET /v1/approvals[?status=S&limit=N&before=CURSOR]` (operator): newest first; `status` is
/// `pending`, `approved`, `rejected`, `expired`, `cancelled` or `all` (default); `limit` 1–1000
/// (default 500). A page also ends after about 1 MiB of call text; while more follow, the
/// answer's `Link` header (`rel="next"`) names the next page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApprovalList {
    /// The approvals.
    pub approvals: Vec<Approval>,
}

/// `GET /v1/approvals?group=similar` (operator): similar approvals (same agent, server, tool
/// and rules) grouped, oldest group first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApprovalGroups {
    /// The groups.
    pub groups: Vec<ApprovalGroup>,
}

/// One group of similar approvals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApprovalGroup {
    /// Their agent.
    pub agent: String,
    /// Their MCP server alias, `null` for a local tool.
    pub server: Option<String>,
    /// Their tool.
    pub tool: String,
    /// The first approval's reasons.
    pub reasons: Vec<Reason>,
    /// How many approvals are in the group.
    pub count: usize,
    /// The approvals, oldest first.
    pub approvals: Vec<Approval>,
}

/// Seed 002 ApprovalRequest (`GET /v1/approvals/{id}?format=approval-request`;
/// `docs/schemas/approval-request.schema.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequestDoc {
    /// Approval id.
    pub approval_id: String,
    /// Session id.
    pub session_id: String,
    /// Run id, `null` when none.
    pub run_id: Option<String>,
    /// RFC 8785 canonical JSON of the call.
    pub tool_call_canonical: String,
    /// Its SHA-256, lowercase hex.
    pub tool_call_hash: String,
    /// Human summary.
    pub human_summary: String,
    /// Risk tier.
    pub risk_tier: RiskTier,
    /// RFC 3339.
    pub requested_at: String,
    /// RFC 3339.
    pub expires_at: String,
    /// Status.
    pub status: ApprovalStatus,
    /// RFC 6902 patch of an edit or a resubmitted plan; absent otherwise.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub diff: Option<Value>,
    /// Suggested alternatives; absent when there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggested_alternatives: Option<Vec<String>>,
}

/// `POST /v1/approvals/{id}/decision` (operator holding an approver role): one decision.
/// Errors: `403`, `404`, `409 ALREADY_DECIDED` (with `status`), `409 APPROVAL_DAMAGED`,
/// `422 WORKSPACE_NEEDS_CONFIRMATION`, `400`/`422 EDIT_*` for a refused edit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"decision": "approve", "reason": "checked the invoice", "scope": "once"}))]
pub struct DecisionRequest {
    /// Approve or deny.
    pub decision: DecisionKind,
    /// Why (at most 4096 bytes); the agent is told a denial's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `once` (default), `session`, `workspace`, or a duration `Ns`/`Nm`/`Nh`/`Nd` up to 366
    /// days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Widen the grant to every call of the tool, not only this `call_hash`.
    #[serde(default)]
    pub whole_tool: bool,
    /// Confirms a discouraged scope on an R3/R4 tool: `workspace`, or a duration longer than a
    /// `session` grant may last (`session_grant_max_seconds`, default 24 h).
    #[serde(default)]
    pub confirm_workspace: bool,
    /// Edited arguments (approve only): re-canonicalised, re-hashed and gated again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// The passkey assertion signing an approval (issue 14 §4): required when the approval
    /// says `require_passkey`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passkey: Option<PasskeyAssertion>,
}

/// A passkey assertion for a vote (`passkey` of a decision): the ceremony the gateway started
/// (`POST /v1/approvals/{id}/passkey`) and the browser's `PublicKeyCredential` from
/// `navigator.credentials.get()` as JSON (ids and buffers base64url).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PasskeyAssertion {
    /// The ceremony id.
    pub ceremony: String,
    /// The credential (`{"id", "rawId", "type", "response": {"authenticatorData",
    /// "clientDataJSON", "signature", "userHandle"}, "extensions"}`).
    pub credential: Value,
}

/// A passkey ceremony the gateway started (`POST /v1/approvals/{id}/passkey`, and the
/// dashboard's registration): its id, to send back, and the options for the browser's
/// `navigator.credentials.get()` / `create()` (`{"publicKey": …}`, buffers base64url).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PasskeyChallenge {
    /// The ceremony id (single use, valid for 5 minutes).
    pub ceremony: String,
    /// The WebAuthn options.
    pub options: Value,
}

impl DecisionRequest {
    /// `{"decision": kind}` with nothing else.
    pub fn new(decision: DecisionKind) -> Self {
        Self {
            decision,
            reason: None,
            scope: None,
            whole_tool: false,
            confirm_workspace: false,
            arguments: None,
            passkey: None,
        }
    }
}

/// `POST /v1/approvals/decisions` (operator): the same decision on 1 to 500 approvals, each
/// decided on its own. On the wire one flat object: `ids` beside the fields of a
/// [`DecisionRequest`], which may not carry `arguments` (a batch edits nothing; decide one
/// approval to edit it). Reading refuses unknown keys and `arguments`, naming them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchDecisionRequest {
    /// The approvals, 1 to 500 ids.
    pub ids: Vec<String>,
    /// The decision each gets (`arguments` always `None`).
    #[serde(flatten)]
    pub decision: DecisionRequest,
}

impl<'de> Deserialize<'de> for BatchDecisionRequest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut body = serde_json::Map::<String, Value>::deserialize(d)?;
        let ids = body
            .remove("ids")
            .ok_or_else(|| D::Error::missing_field("ids"))?;
        let ids = Vec::<String>::deserialize(ids).map_err(D::Error::custom)?;
        if body.contains_key("arguments") {
            return Err(D::Error::custom(
                "`arguments`: a batch cannot edit arguments (decide one approval to edit it)",
            ));
        }
        let decision =
            DecisionRequest::deserialize(Value::Object(body)).map_err(D::Error::custom)?;
        Ok(Self { ids, decision })
    }
}

/// The answer to a batch (HTTP 200 even when some failed): one result per id, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BatchDecisionResponse {
    /// One per requested id.
    pub results: Vec<BatchResult>,
}

/// The outcome for one id of a batch: `ok` with the decided `approval`, or not `ok` with the
/// error's `code` and `message`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BatchResult {
    /// The approval id.
    pub id: String,
    /// Whether it was decided.
    pub ok: bool,
    /// The decided approval, when `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Box<Approval>>,
    /// The error code, when not `ok` (e.g. `ALREADY_DECIDED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The error message, when not `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The body of `POST /v1/approvals/{id}/cancel` (the requesting agent or an operator),
/// `POST /v1/sessions/{id}/cancel` and `POST /v1/plans/{id}/cancel`; the body may be left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Why (at most 4096 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `POST /v1/approvals/{id}/user-decision` (the agent that asked; the MCP proxy relays its
/// user's answer). Only for an approval with `in_client_approval`
/// (`403 IN_CLIENT_NOT_ALLOWED` otherwise); recorded as decided by `user-of:AGENT`, scope once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"decision": "deny", "reason": "not now"}))]
pub struct UserDecisionRequest {
    /// `"approve"` or `"deny"` (a string: anything else is a `400` naming it).
    #[schema(value_type = crate::DecisionKind)]
    pub decision: String,
    /// The user's reason; recorded as `in the MCP client: REASON`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl UserDecisionRequest {
    /// `approve` when `approve`, else `deny`, with the user's reason.
    pub fn new(approve: bool, reason: Option<String>) -> Self {
        let decision = if approve { "approve" } else { "deny" };
        Self {
            decision: decision.into(),
            reason,
        }
    }
}

/// The answer to `POST /v1/sessions/{id}/cancel` (AAEP §6.8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SessionCancelled {
    /// The session.
    pub session_id: String,
    /// The approvals cancelled.
    pub cancelled: Vec<String>,
    /// Pending approvals left pending: the operator holds none of their approver roles.
    pub refused: Vec<String>,
    /// The clarifications cancelled.
    pub clarifications: Vec<String>,
    /// The `session` grants made in the session, revoked with it (absent from a gateway
    /// older than this field: read as none).
    #[serde(default)]
    pub grants_revoked: Vec<String>,
    /// How many tokens of the session's calls, neither redeemed nor expired, were voided
    /// (redeeming one is then `409 TOKEN_USED`).
    #[serde(default)]
    pub tokens_voided: u64,
}

impl utoipa::PartialSchema for BatchDecisionRequest {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        <BatchDecisionWire as utoipa::PartialSchema>::schema()
    }
}

impl utoipa::ToSchema for BatchDecisionRequest {
    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        <BatchDecisionWire as utoipa::ToSchema>::schemas(schemas)
    }
}

/// `POST /v1/approvals/decisions` ([`BatchDecisionRequest`]): `ids` and the
/// fields of a [`DecisionRequest`] but `arguments`, flat in one object (a
/// hand-written `Deserialize` there, which refuses unknown keys and `arguments`).
#[derive(Serialize, utoipa::ToSchema)]
#[allow(dead_code)]
#[serde(deny_unknown_fields)]
struct BatchDecisionWire {
    /// 1 to 500 approval ids.
    ids: Vec<String>,
    /// Approve or deny.
    decision: crate::DecisionKind,
    /// Why (at most 4096 bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// `once` (default), `session`, `workspace`, or a duration.
    #[serde(skip_serializing_if = "Option::is_none")]
    scope: Option<String>,
    /// Widen each grant to every call of the tool.
    #[serde(default)]
    whole_tool: bool,
    /// Confirms a discouraged scope on an R3/R4 tool: `workspace`, or a duration longer than a
    /// `session` grant may last (`session_grant_max_seconds`, default 24 h).
    #[serde(default)]
    confirm_workspace: bool,
    /// A passkey assertion (one ceremony signs one approval).
    #[serde(skip_serializing_if = "Option::is_none")]
    passkey: Option<PasskeyAssertion>,
}

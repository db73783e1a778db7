//! The first step of an approval's life: what an agent submits to be gated — a tool call
//! (`POST /v1/tool-calls`), a delegation to a sub-agent (`POST /v1/delegations`), a forwarded
//! call's result (`POST /v1/tool-results`) — and the gate's answer: allowed (`200`), denied
//! (`403 TOOL_DENIED`) or held for a human (`202 TOOL_BLOCKED_PENDING_APPROVAL`). Plan
//! submissions and Confirms get the same answer (see [`crate::plans`]). The approval a held
//! call becomes is in [`crate::approvals`]; redeeming its token in [`crate::tokens`].

use crate::kit::{Reason, RiskTier};
use crate::tokens::ApprovalToken;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /v1/tool-calls` (an agent key): one tool call to gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"agent": "pay_bot", "session_id": "s-1", "tool": "send_payment", "server": "bank", "arguments": {"amount": 120, "to": "acme"}}))]
pub struct ToolCallRequest {
    /// The agent id; must be the key's own agent (`403` otherwise).
    pub agent: String,
    /// The agent's session id, 1 to 256 bytes.
    #[schema(min_length = 1)]
    pub session_id: String,
    /// Tool name, 1 to 256 bytes.
    pub tool: String,
    /// MCP server alias (the agent file's `mcp_servers[].alias`); absent for a local tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The call's arguments: a JSON object (integers within ±2^53); its canonical form is at
    /// most `max_arguments_bytes` (`413 ARGUMENTS_TOO_LARGE`).
    pub arguments: Value,
    /// Seed 002 `runId`, 1 to 256 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Client device id the token will be bound to, 1 to 256 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_id: Option<String>,
    /// MPLP trace id, a lowercase UUID v4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// MPLP plan this call is a step of (lowercase UUID v4); blocked while the plan is not
    /// approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_id: Option<String>,
    /// MPLP step id (lowercase UUID v4); blocked while a Confirm on it is pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
    /// The person the call acts for (a principal name, 1 to 256 bytes): under separation of
    /// duties they may not approve it (issue 14 §2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_behalf_of: Option<String>,
}

impl ToolCallRequest {
    /// A call of `tool` (on MCP server `server`, `None` for a local tool) with `arguments`, for
    /// `agent` in `session_id`, with no run, device, trace, plan or step id.
    pub fn new(
        agent: impl Into<String>,
        session_id: impl Into<String>,
        tool: impl Into<String>,
        server: Option<String>,
        arguments: Value,
    ) -> Self {
        Self {
            agent: agent.into(),
            session_id: session_id.into(),
            tool: tool.into(),
            server,
            arguments,
            run_id: None,
            device_id: None,
            trace_id: None,
            plan_id: None,
            step_id: None,
            on_behalf_of: None,
        }
    }
}

/// `POST /v1/delegations` (an agent key): a delegation to a sub-agent (seed 004), gated as
/// the synthetic call `delegate.TARGET` with arguments `{input, skill_id, skill_args}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"agent": "pay_bot", "session_id": "s-1", "target": "researcher", "input": {"question": "rates?"}}))]
pub struct DelegationRequest {
    /// The delegating agent; must be the key's own agent.
    pub agent: String,
    /// Its session id (not empty).
    #[schema(min_length = 1)]
    pub session_id: String,
    /// The sub-agent's alias in the agent file (not empty).
    #[schema(min_length = 1)]
    pub target: String,
    /// The input handed to the sub-agent: a JSON object; `null` (or absent) is `{}`.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub input: Value,
    /// The sub-agent's skill to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skill_id: Option<String>,
    /// The skill's arguments, a JSON object; needs `skill_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skill_args: Option<Value>,
    /// Seed 002 `runId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Client device id the token will be bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_id: Option<String>,
    /// MPLP trace id, a lowercase UUID v4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// `POST /v1/tool-results` (an agent key; the MCP proxy for every forwarded call): the size and
/// hash of a forwarded call's result. Within the covering rules' `thresholds.output_bytes`
/// the answer is [`GateAnswer::Allow`] (with only `output_bytes`); over it the result is held
/// as an approval of the synthetic call `result.TOOL` ([`GateAnswer::Pending`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"agent": "pay_bot", "session_id": "s-1", "tool": "balance", "server": "bank", "arguments": {}, "output_bytes": 2, "result_sha256": "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"}))]
pub struct ToolResultRequest {
    /// The agent; must be the key's own agent.
    pub agent: String,
    /// Its session id.
    pub session_id: String,
    /// The tool that ran.
    pub tool: String,
    /// Its MCP server alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The arguments it ran with.
    pub arguments: Value,
    /// Length of the result's JSON text, in bytes.
    pub output_bytes: u64,
    /// SHA-256 of the result's JSON text, 64 hex digits.
    #[schema(pattern = "^[0-9a-fA-F]{64}$")]
    pub result_sha256: String,
    /// The start of the result for the operator (the server keeps 2048 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
    /// The approval the call ran under, when it was held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// Absent when the call ran and this is its result. Otherwise what became of a call the
    /// gateway cleared (its token redeemed, when it was held) that has no result:
    /// `not_run` (never sent to the MCP server) or `no_answer` (sent, but no answer came back:
    /// it may have run). Such a report is recorded as `call.result` with this `outcome` and no
    /// result (send `output_bytes` 0 and the SHA-256 of the empty text), marks the session
    /// with nothing its output would have brought, and is answered `allow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<CallOutcome>,
    /// The MCP hub's proof that it runs in the gateway's own process
    /// ([`crate::tools::hub_token`]): the report is recorded as the hub's (`reported_by`
    /// `hub`), whose `no_answer` an agent's earlier result does not refuse. Any other value, or
    /// none, is recorded as the agent's word (`reported_by` `agent`). Not in the OpenAPI
    /// document: no client but that hub sends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub hub_token: Option<String>,
}

/// What became of a cleared call that has no result ([`ToolResultRequest::outcome`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// Never sent to the MCP server (its client cancelled it after it was cleared): it did
    /// not run.
    NotRun,
    /// Sent, but no answer came back (the connection to the MCP server failed, or it did not
    /// answer in time): it may or may not have run, and nothing of it reached the agent.
    NoAnswer,
}

impl CallOutcome {
    /// `"not_run"` or `"no_answer"`, as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotRun => "not_run",
            Self::NoAnswer => "no_answer",
        }
    }
}

/// A tool call as the gateway shows it (`call` of an approval): `server` is `null` for a
/// local tool.
/// Not `assent-core`'s `ToolCall`: that one leaves `server` out when there is none (the
/// canonical form `call_hash` is taken over), where the gateway writes `"server": null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Call {
    /// Tool name (`delegate.ALIAS`, `result.TOOL`, `mplp.plan`, `mplp.TARGET_TYPE` for the
    /// synthetic calls).
    pub tool: String,
    /// MCP server alias, `null` for a local tool.
    pub server: Option<String>,
    /// The arguments as proposed.
    pub arguments: Value,
}

/// The arguments of the synthetic call `result.TOOL` that holds a tool result over its
/// `output_bytes` threshold (`call.arguments` of that approval; its token binds them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HeldResult {
    /// The call whose result is held.
    pub call: Call,
    /// Length of the result's JSON text, in bytes.
    pub output_bytes: u64,
    /// SHA-256 of the result's JSON text, 64 lowercase hex.
    pub result_sha256: String,
    /// The first 2048 characters of the result, `null` when the agent sent none, and, to the
    /// agent's key, until an operator approved the release (its `canonical` and
    /// `human_summary` are then made from the masked arguments).
    pub preview: Option<String>,
}

/// The gate's answer to a submission, tagged by `decision`: `"allow"` (HTTP 200), `"deny"`
/// (HTTP 403) or `"pending"` (HTTP 202). Errors (`429 TOO_MANY_PENDING`, `400`, `403
/// FORBIDDEN`…) are [`crate::error::ApiErrorBody`]s instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "decision", rename_all = "lowercase")]
pub enum GateAnswer {
    /// Run the call (forward it), after redeeming the token when one is given.
    Allow(Allowed),
    /// Do not run the call.
    Deny(Denied),
    /// Held for a human: wait for approval `approval_id`.
    Pending(Pending),
}

impl GateAnswer {
    /// The approval behind this answer: the held one, or the one a grant allowed.
    pub fn approval_id(&self) -> Option<&str> {
        match self {
            Self::Allow(a) => a.grant.as_ref().map(|g| g.approval_id.as_str()),
            Self::Deny(_) => None,
            Self::Pending(p) => Some(&p.approval_id),
        }
    }
    /// The HTTP status the server answers it with: 200, 403 or 202.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::Allow(_) => 200,
            Self::Deny(_) => 403,
            Self::Pending(_) => 202,
        }
    }
}

/// What every gate answer of a gated call repeats of the verdict (not a tool result's
/// `allow`, which has only `output_bytes`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VerdictEcho {
    /// SHA-256 (lowercase hex) of the call's RFC 8785 canonical JSON.
    pub call_hash: String,
    /// Why: every rule consulted (for a held call, the approval's reasons).
    pub reasons: Vec<Reason>,
    /// The verdict's risk tier.
    pub risk_tier: RiskTier,
    /// Threshold and scope triggers that fired (`rate`, `cost`, `paths`, `domains`,
    /// `output_bytes`).
    pub triggers: Vec<String>,
}

/// `"decision": "allow"`: the call may run. Its OpenAPI schema is
/// `AllowedWire`'s (two optional flattened parts, which utoipa cannot derive).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Allowed {
    /// `thresholds.output_bytes` of the covering rules: a larger result is held
    /// (`POST /v1/tool-results`); `null` when no rule sets one.
    pub output_bytes: Option<u64>,
    /// The verdict; absent only in the answer to a tool result.
    #[serde(flatten)]
    pub verdict: Option<VerdictEcho>,
    /// Present when a grant covers the call: its approval and single-use token, which must be
    /// redeemed before the call runs. All or nothing: an `allow` that carries any of a
    /// grant's fields (`token`, `approval_token`…) but no `approval_id`, or a grant part that
    /// does not parse, is a parse error, never a plain allow (fail closed: a gateway answer
    /// must not let a call through without redeeming its token).
    #[serde(flatten, deserialize_with = "grant_all_or_nothing")]
    pub grant: Option<Granted>,
}

/// The fields of [`Granted`] besides `approval_id`: any of them (not `null`) in an `allow`
/// makes it a granted one.
impl utoipa::PartialSchema for Allowed {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        <AllowedWire as utoipa::PartialSchema>::schema()
    }
}

impl utoipa::ToSchema for Allowed {
    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        <AllowedWire as utoipa::ToSchema>::schemas(schemas)
    }
}

const GRANT_FIELDS: [&str; 5] = [
    "grant_id",
    "scope",
    "token",
    "approval_token",
    "token_expires_at",
];

/// Reads the grant part of an `allow` (the keys left after the verdict's): `None` when it has
/// none of [`Granted`]'s fields, the grant when it has an `approval_id`, an error otherwise
/// (serde's flattened `Option` would read a broken grant as `None`, a plain allow).
fn grant_all_or_nothing<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Granted>, D::Error> {
    use serde::de::Error;
    let rest = serde_json::Map::<String, Value>::deserialize(d)?;
    let given = |k: &str| rest.get(k).is_some_and(|v| !v.is_null());
    if rest.contains_key("approval_id") {
        return Granted::deserialize(Value::Object(rest))
            .map(Some)
            .map_err(D::Error::custom);
    }
    match GRANT_FIELDS.iter().find(|k| given(k)) {
        Some(k) => Err(D::Error::custom(format!(
            "an allow with a grant's `{k}` but no `approval_id`"
        ))),
        None => Ok(None),
    }
}

/// The part of an `allow` that a grant produced (seed 002 "Approve with scope").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Granted {
    /// The approval recorded for this call (approved by the grant).
    pub approval_id: String,
    /// The grant that covered it.
    pub grant_id: Option<String>,
    /// The grant's scope: `session`, a duration such as `15m`, or `workspace`.
    pub scope: Option<String>,
    /// The signed single-use token to redeem (`POST /v1/tokens/redeem`). Always present: a
    /// grant's `allow` without one does not parse, so a client built on this crate never
    /// forwards a granted call it has not redeemed (found by review: the MCP proxy forwarded
    /// such an answer as a plain `allow`).
    pub token: String,
    /// The token as a seed 002 Token document.
    pub approval_token: Option<ApprovalToken>,
    /// When the token expires, RFC 3339.
    pub token_expires_at: Option<String>,
}

/// `"decision": "deny"` (HTTP 403): the policy denies the call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Denied {
    /// Always [`crate::error::TOOL_DENIED`].
    pub code: String,
    /// Why, for the agent (the verdict's message).
    pub reason: String,
    /// The same text as `reason`.
    pub message: String,
    /// The verdict.
    #[serde(flatten)]
    pub verdict: VerdictEcho,
}

/// `"decision": "pending"` (HTTP 202): the call is held as approval `approval_id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Pending {
    /// Always [`crate::error::TOOL_BLOCKED_PENDING_APPROVAL`].
    pub code: String,
    /// The approval to wait for (`GET /v1/approvals/{id}?wait=S`).
    pub approval_id: String,
    /// True when an identical call of the same session was pending already and this one
    /// joined it (AAEP §6.1).
    pub joined: bool,
    /// When the approval expires, RFC 3339.
    pub expires_at: String,
    /// The rendered approval message.
    pub message: String,
    /// Seed 002 `humanSummary`.
    pub human_summary: String,
    /// Whether the agent's own user may decide it in the MCP client
    /// (`POST /v1/approvals/{id}/user-decision`).
    pub in_client_approval: bool,
    /// Seed 002 `suggestedAlternatives` of the covering rules.
    pub suggested_alternatives: Vec<String>,
    /// Predicted side effects (rendered from the covering rules).
    pub side_effects: Vec<String>,
    /// Rollback and safety notes (rendered from the covering rules).
    pub rollback: Vec<String>,
    /// The verdict; its `reasons` are the approval's.
    #[serde(flatten)]
    pub verdict: VerdictEcho,
}

/// `"decision": "allow"` ([`crate::gate::Allowed`]) as the wire has it: `output_bytes`, the
/// verdict's fields (absent in the answer to a tool result) and a grant's (present only when a
/// grant covers the call, `approval_id` first among them), all in one flat object.
#[derive(Serialize, utoipa::ToSchema)]
#[allow(dead_code)]
struct AllowedWire {
    /// `thresholds.output_bytes` of the covering rules (`null` when none sets one).
    output_bytes: Option<u64>,
    /// The call's hash (with the verdict).
    #[schema(required = false)]
    call_hash: String,
    /// The verdict's reasons.
    #[schema(required = false)]
    reasons: Vec<crate::Reason>,
    /// The verdict's tier.
    #[schema(required = false)]
    risk_tier: crate::RiskTier,
    /// Triggers that fired.
    #[schema(required = false)]
    triggers: Vec<String>,
    /// The approval whose grant covers the call.
    #[serde(skip_serializing_if = "Option::is_none")]
    approval_id: Option<String>,
    /// The grant.
    grant_id: Option<String>,
    /// The grant's scope.
    scope: Option<String>,
    /// The single-use token to redeem before the call runs.
    token: Option<String>,
    /// The token as a seed 002 Token document.
    approval_token: Option<ApprovalToken>,
    /// RFC 3339.
    token_expires_at: Option<String>,
}

//! The error body of every non-2xx `/v1` answer, `{"code", "message"}` with the few extra
//! fields some codes carry, and the stable codes as constants. A gate answer's `403` denial
//! (`TOOL_DENIED`) is not an error body: it is [`crate::gate::GateAnswer::Deny`].

use crate::kit::{ApprovalStatus, Reason};
use crate::reload::ConfigProblem;
use serde::{Deserialize, Serialize};

/// The JSON body of an API error: a stable machine-readable `code` (one of the constants of
/// this module) and a human `message`; 5xx errors hide their detail. Some codes add fields:
/// `ALREADY_DECIDED` the approval's `status`, `APPROVAL_DAMAGED` the `damaged` columns, the
/// `EDIT_*` refusals (and the `FORBIDDEN` of an edit needing another role) the edited call's
/// `reasons` and `triggers`, `CONFIG_INVALID` the refused file's `errors`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApiErrorBody {
    /// Stable code, e.g. [`ALREADY_DECIDED`].
    pub code: String,
    /// Human-readable message.
    pub message: String,
    /// `ALREADY_DECIDED`: the status the approval already has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ApprovalStatus>,
    /// `APPROVAL_DAMAGED`: the stored columns that could not be read (e.g. `["approvers"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damaged: Option<Vec<String>>,
    /// An edit refused by the gatekeeper: the reasons of the edited call's verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Vec<Reason>>,
    /// An edit refused by the gatekeeper: the triggers the edited call fired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triggers: Option<Vec<String>>,
    /// `CONFIG_INVALID` (a refused reload): each problem of the file, as start-up reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<ConfigProblem>>,
}

impl ApiErrorBody {
    /// A body with `code` and `message` and no extra field.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            status: None,
            damaged: None,
            reasons: None,
            triggers: None,
            errors: None,
        }
    }
}

/// 422: a reload's configuration file was refused (`errors` names each problem).
pub const CONFIG_INVALID: &str = "CONFIG_INVALID";
/// 400: the request is malformed (bad field, bad query parameter, bad JSON shape).
pub const BAD_REQUEST: &str = "BAD_REQUEST";
/// 400: the JSON body is not JSON.
pub const INVALID_JSON: &str = "INVALID_JSON";
/// 400: a JSON object repeats a key (the message names the JSON pointer).
pub const DUPLICATE_KEY: &str = "DUPLICATE_KEY";
/// 400: a JSON number a double cannot carry exactly.
pub const INEXACT_NUMBER: &str = "INEXACT_NUMBER";
/// 400: JSON nested too deep.
pub const TOO_DEEP: &str = "TOO_DEEP";
/// 401: missing or unknown API key.
pub const UNAUTHENTICATED: &str = "UNAUTHENTICATED";
/// 401: the approval token is not one this gateway signed.
pub const TOKEN_INVALID: &str = "TOKEN_INVALID";
/// 403: the principal may not do this.
pub const FORBIDDEN: &str = "FORBIDDEN";
/// 403: the policy denies the call (in a gate answer's `code`, not an error body).
pub const TOOL_DENIED: &str = "TOOL_DENIED";
/// 202: the call is held for a human (in a gate answer's `code`, not an error body).
pub const TOOL_BLOCKED_PENDING_APPROVAL: &str = "TOOL_BLOCKED_PENDING_APPROVAL";
/// 403: the token was issued to another client device.
pub const DEVICE_MISMATCH: &str = "DEVICE_MISMATCH";
/// 403: the token binds another call (its `call_hash` differs).
pub const TOKEN_MISMATCH: &str = "TOKEN_MISMATCH";
/// 403: the approval needs an operator; the agent's user may not decide it.
pub const IN_CLIENT_NOT_ALLOWED: &str = "IN_CLIENT_NOT_ALLOWED";
/// 403: an operator may not cancel alone an approval whose quorum decides denials
/// (`deny: quorum`): they vote deny instead.
pub const DENY_NEEDS_QUORUM: &str = "DENY_NEEDS_QUORUM";
/// 400: the passkey assertion does not verify (wrong ceremony, approval, origin or signature).
pub const PASSKEY_INVALID: &str = "PASSKEY_INVALID";
/// 403: the decider is the agent's owner, the proposer, or otherwise barred by separation of
/// duties from deciding this approval.
pub const SELF_APPROVAL: &str = "SELF_APPROVAL";
/// 403: the approval's terms require a passkey assertion with the decision.
pub const PASSKEY_REQUIRED: &str = "PASSKEY_REQUIRED";
/// 403: a passkey is registered only with a one-time enrolment code from an administrator.
pub const ENROLMENT_REQUIRED: &str = "ENROLMENT_REQUIRED";
/// 403: the token names an executor and the redeemer is not it.
pub const NOT_EXECUTOR: &str = "NOT_EXECUTOR";
/// 404: no such route, approval, plan, review, grant…
pub const NOT_FOUND: &str = "NOT_FOUND";
/// 405: method not allowed on this route.
pub const METHOD_NOT_ALLOWED: &str = "METHOD_NOT_ALLOWED";
/// 408: the request body was not sent within `body_read_timeout_seconds`.
pub const REQUEST_TIMEOUT: &str = "REQUEST_TIMEOUT";
/// 409: the approval (or tool review) was decided already; carries `status` for approvals.
pub const ALREADY_DECIDED: &str = "ALREADY_DECIDED";
/// 409: the clarification is no longer pending.
pub const ALREADY_ANSWERED: &str = "ALREADY_ANSWERED";
/// 409: the stored approval cannot be read; carries `damaged`.
pub const APPROVAL_DAMAGED: &str = "APPROVAL_DAMAGED";
/// 409: a plan with this id exists already.
pub const PLAN_EXISTS: &str = "PLAN_EXISTS";
/// 409: the plan's stored row does not hold its seal (changed in the database behind the
/// gateway's back): it runs no calls and takes no change; its held calls are cancelled by
/// cancelling it.
pub const PLAN_DAMAGED: &str = "PLAN_DAMAGED";
/// 409: the plan was registered by another agent; an agent may revise, submit or cancel
/// only its own plans.
pub const PLAN_OWNER_MISMATCH: &str = "PLAN_OWNER_MISMATCH";
/// 409: the plan or Confirm target is not in a state that allows this.
pub const WRONG_STATE: &str = "WRONG_STATE";
/// 409: the token was redeemed already.
pub const TOKEN_USED: &str = "TOKEN_USED";
/// 409: an outcome (`not_run`, `no_answer`) reported for a call whose result is recorded
/// (`POST /v1/tool-results`).
pub const RESULT_RECORDED: &str = "RESULT_RECORDED";
/// 409: a result or outcome reported under an approval that did not clear the reported call:
/// not approved, its token never redeemed, or redeemed for another call
/// (`POST /v1/tool-results`).
pub const RESULT_NOT_CLEARED: &str = "RESULT_NOT_CLEARED";
/// 409: the token's call was held under an MPLP plan that has stopped since.
pub const PLAN_STOPPED: &str = "PLAN_STOPPED";
/// 409: the call's MCP tool's definition changed since it was held and awaits an operator's
/// review: approving it (or redeeming its token) waits until the review is accepted; denying
/// it is still taken.
pub const TOOL_UNDER_REVIEW: &str = "TOOL_UNDER_REVIEW";
/// 409: the approval's session took in more (untrusted output, private data, egress, a
/// changed tool definition) after the decision was checked against it (an in-client
/// approval, an operator's edit): nothing was decided; read the approval and decide again.
pub const SESSION_CHANGED: &str = "SESSION_CHANGED";
/// 409: the token's approval has a settlement that does not hold its seal (changed in the
/// database behind the gateway's back): it redeems nothing.
pub const SETTLEMENT_UNSEALED: &str = "SETTLEMENT_UNSEALED";
/// 410: the token expired.
pub const TOKEN_EXPIRED: &str = "TOKEN_EXPIRED";
/// 413: the request body is over the gateway's limit.
pub const PAYLOAD_TOO_LARGE: &str = "PAYLOAD_TOO_LARGE";
/// 413: the call's canonical arguments are over `max_arguments_bytes`.
pub const ARGUMENTS_TOO_LARGE: &str = "ARGUMENTS_TOO_LARGE";
/// 414: the request URI is too long.
pub const URI_TOO_LONG: &str = "URI_TOO_LONG";
/// 415: a status the edge gave a body without one of ours.
pub const UNSUPPORTED_MEDIA_TYPE: &str = "UNSUPPORTED_MEDIA_TYPE";
/// 422: a status the edge gave a body without one of ours.
pub const UNPROCESSABLE: &str = "UNPROCESSABLE";
/// 409: the rules in force, changed since the call was held, ask more of it than it was held
/// under (a deny, a higher tier, a passkey, a quorum, separation of duties, other approvers);
/// the approval may still be denied. Also of a redemption: the token of a call approved before
/// the change does not run it (the token stays unused).
pub const RULES_TIGHTENED: &str = "RULES_TIGHTENED";
/// 422: scope `workspace`, or a duration longer than `session_grant_max_seconds`, on an R3/R4
/// tool needs `confirm_workspace: true`.
pub const WORKSPACE_NEEDS_CONFIRMATION: &str = "WORKSPACE_NEEDS_CONFIRMATION";
/// 422: a clarification response of a kind the question does not accept.
pub const WRONG_KIND: &str = "WRONG_KIND";
/// 422: the edited call is denied by the policy.
pub const EDIT_DENIED: &str = "EDIT_DENIED";
/// 422: the edited call fails a scope check (paths, domains).
pub const EDIT_OUT_OF_SCOPE: &str = "EDIT_OUT_OF_SCOPE";
/// 422: the edited call crosses a rate or cost threshold the held call did not.
pub const EDIT_OVER_THRESHOLD: &str = "EDIT_OVER_THRESHOLD";
/// 422: the edited call has a higher risk tier or becomes irreversible.
pub const EDIT_RAISES_RISK: &str = "EDIT_RAISES_RISK";
/// 422: the edited call needs more approval (a quorum, a passkey, separation of duties) than
/// the held call's approval did.
pub const EDIT_NEEDS_MORE_APPROVAL: &str = "EDIT_NEEDS_MORE_APPROVAL";
/// 422: a candidate policy of `POST /v1/policies/replay` does not load (FILE:LINE: reason).
pub const POLICY_INVALID: &str = "POLICY_INVALID";
/// 409: a configuration reload is running already; retry when it has finished.
pub const RELOAD_IN_PROGRESS: &str = "RELOAD_IN_PROGRESS";
/// 409: the gateway was not started from a config file, so `POST /v1/reload` has nothing to
/// read again.
pub const RELOAD_UNAVAILABLE: &str = "RELOAD_UNAVAILABLE";
/// 409: passkeys are not configured on this gateway (`passkeys` in the config).
pub const PASSKEYS_OFF: &str = "PASSKEYS_OFF";
/// 409: the principal has no registered passkey to assert with.
pub const NO_PASSKEY: &str = "NO_PASSKEY";
/// 409: the credential is registered already.
pub const PASSKEY_TAKEN: &str = "PASSKEY_TAKEN";
/// 409: the agent's session was cancelled (AAEP §4.1.4, §6.8): none of its calls in it run any
/// more; start a new session.
pub const SESSION_CANCELLED: &str = "SESSION_CANCELLED";
/// 409: this operator's vote on the quorum approval is counted already.
pub const ALREADY_VOTED: &str = "ALREADY_VOTED";
/// 409: the gateway was not started from a config file, so it has no policy files to replay
/// a candidate against.
pub const REPLAY_UNAVAILABLE: &str = "REPLAY_UNAVAILABLE";
/// 429: the agent has `max_pending_per_agent` draft and approved plans open.
pub const TOO_MANY_OPEN_PLANS: &str = "TOO_MANY_OPEN_PLANS";
/// 429: the reporter has its cap of tool-definition reviews pending for one server.
pub const TOO_MANY_PENDING_REVIEWS: &str = "TOO_MANY_PENDING_REVIEWS";
/// 429: the principal's request bodies still arriving hold its whole budget (32 MiB); finish
/// or close some and retry.
pub const TOO_MANY_BODIES: &str = "TOO_MANY_BODIES";
/// 429: the agent has `max_pending_per_agent` approvals and questions waiting.
pub const TOO_MANY_PENDING: &str = "TOO_MANY_PENDING";
/// 429: the principal holds `max_waiters_per_principal` long-polls already.
pub const TOO_MANY_WAITERS: &str = "TOO_MANY_WAITERS";
/// 429: the principal has `MAX_CEREMONIES` (16) passkey ceremonies open already; see
/// `Retry-After` (the oldest ends within 5 minutes).
pub const TOO_MANY_CEREMONIES: &str = "TOO_MANY_CEREMONIES";
/// 429: request rate limit; see `Retry-After`.
pub const RATE_LIMITED: &str = "RATE_LIMITED";
/// 429: failed authentications from this client are throttled.
pub const AUTH_THROTTLED: &str = "AUTH_THROTTLED";
/// 429: a status the edge gave a body without one of ours.
pub const TOO_MANY_REQUESTS: &str = "TOO_MANY_REQUESTS";
/// 500: an internal error (detail logged, not sent).
pub const INTERNAL: &str = "INTERNAL";
/// 503: the approval store is unavailable; nothing was allowed (fail closed).
pub const STORE_UNAVAILABLE: &str = "STORE_UNAVAILABLE";
/// 503: the gateway serves its maximum number of connections.
pub const TOO_MANY_CONNECTIONS: &str = "TOO_MANY_CONNECTIONS";
/// 503: on PostgreSQL, another replica loaded a newer configuration (principals, agents,
/// policies) than this one serves; reload it with the newest (`assent_server::generations`).
pub const CONFIG_SUPERSEDED: &str = "CONFIG_SUPERSEDED";

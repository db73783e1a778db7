//! Clarifications (AAEP §4.4.2, §6.5): an agent's question to an operator
//! (`POST /v1/clarifications`), its long-poll (`GET /v1/clarifications/{id}?wait=S`), the
//! operators' list and their answer (`POST /v1/clarifications/{id}/answer`). The AAEP
//! `clarification.reply` envelope is not here (it is AAEP, a `serde_json::Value`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /v1/clarifications` (an agent key): a question. Answered `202` with the pending
/// [`Clarification`]; `429 TOO_MANY_PENDING` past `max_pending_per_agent`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"agent": "pay_bot", "session_id": "s-1", "question": "Which account?", "accepted_response_kinds": ["freetext"]}))]
pub struct AskRequest {
    /// The asking agent; must be the key's own agent.
    pub agent: String,
    /// Its session id (not empty).
    #[schema(min_length = 1)]
    pub session_id: String,
    /// The question, 1 to 16384 bytes.
    pub question: String,
    /// 1 to 4 of `freetext`, `yes_no`, `multiple_choice`, `numeric`.
    pub accepted_response_kinds: Vec<String>,
    /// With `multiple_choice` only: 2 to 32 `{"value", "label"}` objects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<Value>,
    /// Context shown with the question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// How long it waits for an answer, 1 to 86400 seconds (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
}

/// One clarification and its status: `assent-core`'s own types, the row the store reads back
/// is the body (times Unix milliseconds in Rust, RFC 3339 text on the wire; the AAEP reply
/// token is never written).
pub use assent_core::clarification::{Clarification, ClarificationStatus};

/// `GET /v1/clarifications[?status=S]` (operator); `S` a status or `all` (the default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ClarificationList {
    /// The clarifications, newest first (at most 500).
    pub clarifications: Vec<Clarification>,
    /// Whether older ones were left off (more than 500 matched); absent from a gateway from
    /// before this field, read as `false`.
    #[serde(default)]
    pub truncated: bool,
}

/// `POST /v1/clarifications/{id}/answer` (operator): `422 WRONG_KIND` for an answer of a
/// kind the question does not accept, `409 ALREADY_ANSWERED` when no longer pending.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerRequest {
    /// The answer: a non-empty string (`freetext`, or a choice's `value`), a boolean
    /// (`yes_no`) or a number (`numeric`).
    pub response: Value,
}

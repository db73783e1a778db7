//! Clarifications (AAEP §4.4.2, §6.5): an agent's question to an operator
//! (`POST /v1/clarifications`), its long-poll (`GET /v1/clarifications/{id}?wait=S`), the
//! operators' list and their answer (`POST /v1/clarifications/{id}/answer`). The AAEP
//! `clarification.reply` envelope is not here (it is AAEP, a `serde_json::Value`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /v1/clarifications` (an agent key): a question. Answered `202` with the pending
/// [`Clarification`]; `429 TOO_MANY_PENDING` past `max_pending_per_agent`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AskRequest {
    /// The asking agent; must be the key's own agent.
    pub agent: String,
    /// Its session id (not empty).
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

/// One clarification, as every clarification route answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Clarification {
    /// Clarification id, UUID v4.
    pub id: String,
    /// The asking agent.
    pub agent: String,
    /// Its session.
    pub session_id: String,
    /// The question.
    pub question: String,
    /// The kinds of answer it accepts.
    pub accepted_response_kinds: Vec<String>,
    /// For `multiple_choice`: `{"value", "label"}` objects.
    pub choices: Vec<Value>,
    /// Context shown with the question.
    pub context: Option<String>,
    /// Where it stands.
    pub status: ClarificationStatus,
    /// The accepted answer: a string, a boolean or a number by kind.
    pub response: Option<Value>,
    /// Who answered.
    pub answered_by: Option<String>,
    /// When, RFC 3339.
    pub answered_at: Option<String>,
    /// When it was asked, RFC 3339.
    pub requested_at: String,
    /// When it expires unanswered, RFC 3339.
    pub expires_at: String,
}

impl Clarification {
    /// The `value`s of its `choices` that are strings.
    pub fn choice_values(&self) -> Vec<&str> {
        self.choices
            .iter()
            .filter_map(|c| c.get("value").and_then(Value::as_str))
            .collect()
    }
}

/// Status of a clarification: `"pending"`, `"answered"`, `"expired"` or `"cancelled"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClarificationStatus {
    /// Waiting for an answer.
    Pending,
    /// Answered; `response` holds the answer.
    Answered,
    /// Not answered in time.
    Expired,
    /// Its session was cancelled.
    Cancelled,
}

impl ClarificationStatus {
    /// The lowercase wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Answered => "answered",
            Self::Expired => "expired",
            Self::Cancelled => "cancelled",
        }
    }
}

/// `GET /v1/clarifications[?status=S]` (operator); `S` a status or `all` (the default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClarificationList {
    /// The clarifications.
    pub clarifications: Vec<Clarification>,
}

/// `POST /v1/clarifications/{id}/answer` (operator): `422 WRONG_KIND` for an answer of a
/// kind the question does not accept, `409 ALREADY_ANSWERED` when no longer pending.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerRequest {
    /// The answer: a non-empty string (`freetext`, or a choice's `value`), a boolean
    /// (`yes_no`) or a number (`numeric`).
    pub response: Value,
}

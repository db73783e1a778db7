//! The clarification commands: `clarifications` lists the questions agents wait on (with
//! their accepted answer kinds and choices), `answer` reads the operator's typed value as the
//! kind the question accepts and sends it. Asking is the agent's side (`/v1/clarifications`).

use crate::args::Remote;
use crate::client::Client;
use crate::render::time_left;
use anyhow::{Result, bail};
use serde_json::{Value, json};

/// `assent answer ID VALUE`: fetches the question, coerces `value` to an accepted kind (see
/// [`coerce_answer`]) and posts it; prints `ID answered with VALUE`. Fails before sending
/// when no kind fits.
pub(crate) async fn answer(r: &Remote, id: &str, value: &str) -> Result<i32> {
    let c = Client::new(r)?;
    let q = c.get(&format!("/v1/clarifications/{id}")).await?;
    let response = coerce_answer(&q, value)?;
    let v = c
        .post(
            &format!("/v1/clarifications/{id}/answer"),
            json!({ "response": response }),
        )
        .await?;
    println!(
        "{id} {} with {}",
        v["status"].as_str().unwrap_or(""),
        v["response"]
    );
    Ok(0)
}

/// Reads an operator's typed answer as the kind the question accepts, in the order
/// multiple_choice, yes_no, numeric, freetext; fails naming the kinds when none fits.
fn coerce_answer(q: &Value, value: &str) -> Result<Value> {
    let kinds = accepted_kinds(q);
    let accepts = |k: &str| kinds.contains(&k);
    if accepts("multiple_choice")
        && q["choices"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["value"] == value)
    {
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
        && let Ok(n) = serde_json::from_str::<serde_json::Number>(value.trim())
    {
        return Ok(Value::Number(n));
    }
    if accepts("freetext") && !value.is_empty() {
        return Ok(Value::String(value.to_string()));
    }
    let choices: Vec<&str> = q["choices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["value"].as_str())
        .collect();
    let mut accepted = kinds.join(", ");
    if !choices.is_empty() {
        accepted.push_str(&format!(" (choices: {})", choices.join(", ")));
    }
    bail!("`{value}` is not an accepted answer: the question accepts {accepted}")
}

/// `assent clarifications`: pending questions (`--all`: every one, with its answer) as text
/// blocks (`--json`: the API's list as is).
pub(crate) async fn clarifications(r: &Remote, all: bool, as_json: bool) -> Result<i32> {
    let c = Client::new(r)?;
    let status = if all { "all" } else { "pending" };
    let v = c
        .get(&format!("/v1/clarifications?status={status}"))
        .await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    let list = v["clarifications"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        println!(
            "{}",
            if all {
                "no clarifications"
            } else {
                "no pending clarifications"
            }
        );
    }
    for q in &list {
        let status = q["status"].as_str().unwrap_or("");
        let when = if status == "pending" {
            time_left(q["expires_at"].as_str().unwrap_or(""))
        } else {
            status.to_string()
        };
        println!("{}  [{when}]", q["id"].as_str().unwrap_or(""));
        println!(
            "  agent:    {} (session {})",
            q["agent"].as_str().unwrap_or(""),
            q["session_id"].as_str().unwrap_or("")
        );
        println!("  question: {}", q["question"].as_str().unwrap_or(""));
        if let Some(ctx) = q["context"].as_str() {
            println!("  context:  {ctx}");
        }
        let kinds = accepted_kinds(q);
        println!("  accepts:  {}", kinds.join(", "));
        for ch in q["choices"].as_array().into_iter().flatten() {
            println!(
                "    {} - {}",
                ch["value"].as_str().unwrap_or(""),
                ch["label"].as_str().unwrap_or("")
            );
        }
        if !q["response"].is_null() {
            println!(
                "  answer:   {} by {}",
                q["response"],
                q["answered_by"].as_str().unwrap_or("")
            );
        }
        println!();
    }
    Ok(0)
}

/// A question's `accepted_response_kinds` (`multiple_choice`, `yes_no`, `numeric`,
/// `freetext`), in its order.
fn accepted_kinds(q: &Value) -> Vec<&str> {
    q["accepted_response_kinds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

//! The approval commands an operator runs against the gateway: `pending` and `show` (the
//! card, or the API's JSON), `approve` (scope, whole-tool grant, edited arguments), `deny`
//! and `cancel` (one approval or a whole session). Each is one or two `/v1/approvals` calls
//! and a printed line; the card itself is `render::card`.

use crate::args::Remote;
use crate::client::Client;
use crate::render::{canonical, card};
use anyhow::{Result, anyhow, bail};
use serde_json::{Value, json};

/// `assent pending`: every pending approval as a card (`--json`: the API's list as is).
pub(crate) async fn pending(r: &Remote, as_json: bool) -> Result<i32> {
    let c = Client::new(r)?;
    let v = c.get("/v1/approvals?status=pending").await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    let list = v["approvals"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        println!("no pending approvals");
    }
    for a in &list {
        println!("{}", card(a));
    }
    Ok(0)
}

/// `assent show ID`: one approval's card (`--json`: the API's object).
pub(crate) async fn show(r: &Remote, id: &str, as_json: bool) -> Result<i32> {
    let c = Client::new(r)?;
    let v = c.get(&format!("/v1/approvals/{id}")).await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", card(&v));
    }
    Ok(0)
}

/// The line a decision prints: `ID STATUS`, the scope and grant id of a scoped approval, and
/// the edited arguments when the approver changed them.
fn decided_line(v: &Value, id: &str) -> String {
    let mut line = format!(
        "{} {}",
        v["id"].as_str().unwrap_or(id),
        v["status"].as_str().unwrap_or("")
    );
    if let Some(s) = v["scope"].as_str().filter(|s| *s != "once") {
        line.push_str(&format!(
            " (scope {s}, grant {})",
            v["grant_id"].as_str().unwrap_or("")
        ));
    }
    if v["arguments_changed"] == true {
        line.push_str(&format!(" with arguments {}", canonical(&v["arguments"])));
    }
    line
}

/// Decides `ids` with `body` (plus `reason`). One id: `POST /v1/approvals/{id}/decision`; several: `POST /v1/approvals/decisions`, each
/// decided on its own. Exit 1 when any failed.
async fn decide(
    r: &Remote,
    ids: &[String],
    mut body: Value,
    reason: Option<String>,
) -> Result<i32> {
    let c = Client::new(r)?;
    if let Some(reason) = reason {
        body["reason"] = Value::String(reason);
    }
    if let [id] = ids {
        let v = c
            .post(&format!("/v1/approvals/{id}/decision"), body)
            .await?;
        println!("{}", decided_line(&v, id));
        return Ok(0);
    }
    body["ids"] = json!(ids);
    let v = c.post("/v1/approvals/decisions", body).await?;
    let mut failed = 0;
    for r in v["results"].as_array().into_iter().flatten() {
        let id = r["id"].as_str().unwrap_or("");
        if r["ok"] == true {
            println!("{}", decided_line(&r["approval"], id));
        } else {
            failed += 1;
            eprintln!(
                "assent: {id}: {}: {}",
                r["code"].as_str().unwrap_or(""),
                r["message"].as_str().unwrap_or("")
            );
        }
    }
    Ok(if failed > 0 { 1 } else { 0 })
}

/// `assent approve IDS`: approves each with `scope` (`once`, `session`, `workspace` or a
/// duration), `whole_tool` and `yes_workspace`; `args` (strict JSON, one id only) approves an
/// edited call. Exit 1 when any approval failed.
pub(crate) async fn approve(
    r: &Remote,
    ids: &[String],
    reason: Option<String>,
    scope: String,
    whole_tool: bool,
    yes_workspace: bool,
    args: Option<String>,
) -> Result<i32> {
    let mut body = json!({"decision": "approve", "scope": scope, "whole_tool": whole_tool,
                          "confirm_workspace": yes_workspace});
    if let Some(a) = args {
        if ids.len() != 1 {
            bail!("--args edits one call: give exactly one approval id");
        }
        body["arguments"] = assent_core::json::parse_value(a.as_bytes())
            .map_err(|e| anyhow!("--args is not strict JSON: {e}"))?;
    }
    decide(r, ids, body, reason).await
}

/// `assent deny IDS`: denies each; the reason reaches the agent. Exit 1 when any failed.
pub(crate) async fn deny(r: &Remote, ids: &[String], reason: Option<String>) -> Result<i32> {
    decide(r, ids, json!({"decision": "deny"}), reason).await
}

/// `assent cancel ID` (`--session`: every pending approval of session `id`), printing the
/// new status or how many were cancelled.
pub(crate) async fn cancel(
    r: &Remote,
    id: &str,
    session: bool,
    reason: Option<String>,
) -> Result<i32> {
    let c = Client::new(r)?;
    let body = json!({"reason": reason});
    if session {
        let v = c.post(&format!("/v1/sessions/{id}/cancel"), body).await?;
        let n = v["cancelled"].as_array().map_or(0, Vec::len);
        println!("session {id}: {n} pending approval(s) cancelled");
    } else {
        let v = c.post(&format!("/v1/approvals/{id}/cancel"), body).await?;
        println!("{} {}", id, v["status"].as_str().unwrap_or(""));
    }
    Ok(0)
}

//! The grant commands: `grants` lists scoped approvals (active, or `--all` with revoked and
//! expired ones) one line each, `revoke` ends one. Grants are minted by `approve --scope`
//! (`commands/approvals.rs`); coverage is decided by the gateway, not here.

use crate::args::Remote;
use crate::client::Client;
use crate::render::target;
use anyhow::Result;

/// `assent grants`: each grant's id, agent, target, what it covers, scope and end, and who
/// made it (`--json`: the API's list as is).
pub(crate) async fn grants(r: &Remote, all: bool, as_json: bool) -> Result<i32> {
    let c = Client::new(r)?;
    let v = c.get(&format!("/v1/grants?all={all}")).await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    let list = v["grants"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        println!("no grants");
    }
    for g in &list {
        let target = target(g);
        let what = if g["whole_tool"] == true {
            "every call".to_string()
        } else {
            format!("call_hash {}", g["call_hash"].as_str().unwrap_or(""))
        };
        let state = if let Some(t) = g["revoked_at"].as_str() {
            format!("revoked {t}")
        } else if let Some(t) = g["expires_at"].as_str() {
            format!("until {t}")
        } else {
            "until revoked".into()
        };
        println!(
            "{}  {} {target} ({what}) scope {} {state}{}  by {}",
            g["id"].as_str().unwrap_or(""),
            g["agent"].as_str().unwrap_or(""),
            g["scope"].as_str().unwrap_or(""),
            if g["discouraged"] == true {
                "  [discouraged: workspace on R3/R4]"
            } else {
                ""
            },
            g["created_by"].as_str().unwrap_or("")
        );
    }
    Ok(0)
}

/// `assent revoke ID`: revokes a grant; later matching calls are held again.
pub(crate) async fn revoke(r: &Remote, id: &str) -> Result<i32> {
    let c = Client::new(r)?;
    c.delete(&format!("/v1/grants/{id}")).await?;
    println!("{id} revoked");
    Ok(0)
}

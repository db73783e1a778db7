//! `assent tools …`: MCP tool-list pinning from the operator's side. `pending` lists tools
//! whose definition changed (or that are new) since their server was pinned, each with the
//! diff from its pinned definition; `accept`/`reject` review them one by one; `pins` lists
//! every pinned tool. Pinning itself happens in the MCP relay and the gateway.

use crate::args::{Remote, ToolsCmd};
use crate::client::Client;
use crate::render::{canonical, one_line};
use anyhow::{Result, bail};
use serde_json::{Value, json};

/// Runs one `assent tools` subcommand; `accept`/`reject` exit 1 when any review failed.
pub(crate) async fn tools(r: &Remote, cmd: ToolsCmd) -> Result<i32> {
    let c = Client::new(r)?;
    match cmd {
        ToolsCmd::Pending { json } => pending(&c, json).await,
        ToolsCmd::Accept { ids } | ToolsCmd::Reject { ids } if ids.is_empty() => {
            bail!("give at least one review id (assent tools pending)")
        }
        ToolsCmd::Accept { ids } => review_each(&c, &ids, "accept").await,
        ToolsCmd::Reject { ids } => review_each(&c, &ids, "reject").await,
        ToolsCmd::Pins { json } => pins(&c, json).await,
    }
}

/// `assent tools pending`: each review's id, server/tool, new or changed, when and by whom it
/// was seen, and the definition (new) or the diff against the pin (`-`/`+` lines).
async fn pending(c: &Client, json: bool) -> Result<i32> {
    let v = c.get("/v1/tools/reviews?status=pending").await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    let list = v["reviews"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        println!("no tool changes waiting for review");
    }
    for t in &list {
        let what = if t["pinned"].is_null() {
            "new tool"
        } else {
            "changed"
        };
        println!(
            "{}  {}/{} ({what}, seen {} by {})",
            t["id"].as_str().unwrap_or(""),
            t["server"].as_str().unwrap_or(""),
            t["tool"].as_str().unwrap_or(""),
            t["seen_at"].as_str().unwrap_or(""),
            t["seen_by"].as_str().unwrap_or("")
        );
        if t["pinned"].is_null() {
            println!("  definition: {}", canonical(&t["definition"]));
        }
        print_diff(t);
        println!();
    }
    Ok(0)
}

/// One review's JSON-Patch diff as `- path: old` / `+ path: new` lines, the old value looked
/// up in the pinned definition.
fn print_diff(t: &Value) {
    for op in t["diff"].as_array().into_iter().flatten() {
        let path = op["path"].as_str().unwrap_or("");
        let old = assent_core::condition::lookup(
            &t["pinned"],
            path.trim_start_matches('/').replace('/', ".").as_str(),
        );
        match op["op"].as_str().unwrap_or("") {
            "remove" => {
                println!("  - {path}: {}", old.map(canonical).unwrap_or_default())
            }
            "add" => println!("  + {path}: {}", canonical(&op["value"])),
            _ => {
                println!("  - {path}: {}", old.map(canonical).unwrap_or_default());
                println!("  + {path}: {}", canonical(&op["value"]));
            }
        }
    }
}

/// `assent tools pins`: each pinned tool with the first 12 characters of its fingerprint.
async fn pins(c: &Client, json: bool) -> Result<i32> {
    let v = c.get("/v1/tools/pins").await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    for p in v["pins"].as_array().into_iter().flatten() {
        println!(
            "{}/{}  {}  pinned {} by {}",
            p["server"].as_str().unwrap_or(""),
            p["tool"].as_str().unwrap_or(""),
            &p["fingerprint"].as_str().unwrap_or("")
                [..12.min(p["fingerprint"].as_str().unwrap_or("").len())],
            p["pinned_at"].as_str().unwrap_or(""),
            p["pinned_by"].as_str().unwrap_or("")
        );
    }
    Ok(0)
}

/// Posts `verb` (`accept` or `reject`) for each review id, printing `ID server/tool STATUS` or
/// the error; exit 1 when any failed.
async fn review_each(c: &Client, ids: &[String], verb: &str) -> Result<i32> {
    let mut failed = 0;
    for id in ids {
        match c
            .post(&format!("/v1/tools/reviews/{id}/{verb}"), json!({}))
            .await
        {
            Ok(v) => println!(
                "{id} {}/{} {}",
                v["server"].as_str().unwrap_or(""),
                v["tool"].as_str().unwrap_or(""),
                v["status"].as_str().unwrap_or("")
            ),
            Err(e) => {
                failed += 1;
                eprintln!("assent: {id}: {}", one_line(&e));
            }
        }
    }
    Ok(if failed > 0 { 1 } else { 0 })
}

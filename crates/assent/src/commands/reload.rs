//! `assent reload` (issue 14 §8): asks the running gateway (`POST /v1/reload`, an operator's
//! key) to re-read its configuration file's principals, agents and policies, and prints what
//! changed, or why the file was refused (`FILE:LINE: reason`, one line each).

use crate::args::Remote;
use crate::remote::{connect, print_json};
use crate::render::inert;
use anyhow::{Result, bail};
use assent_api::{ClientError, Method};
use serde_json::Value;

/// Runs `assent reload`: exit status 0 when the gateway applied the file, 1 when it refused
/// it (its errors printed to stderr; the gateway keeps its previous set). With `json`, the
/// API's answer is printed as is.
pub(crate) async fn run(remote: &Remote, json: bool) -> Result<i32> {
    let r = connect(remote)?
        .raw(Method::POST, "/v1/reload", None)
        .await?;
    if json {
        print_json(&r.body)?;
    }
    match r.status {
        200 => {
            if !json {
                summary(&r.body).iter().for_each(|l| println!("{l}"));
            }
            Ok(0)
        }
        422 => {
            eprintln!(
                "assent: the gateway refused the configuration; it keeps its previous principals, agents and policies"
            );
            for e in r.body["errors"].as_array().into_iter().flatten() {
                eprintln!("  {}", inert(&problem_line(e)));
            }
            Ok(1)
        }
        status => bail!(ClientError::Status {
            status,
            error: serde_json::from_value(r.body).ok(),
        }),
    }
}

/// One refused-file error as start-up prints it: `FILE:LINE: reason` (or less when unknown).
fn problem_line(e: &Value) -> String {
    let reason = e["reason"].as_str().unwrap_or("");
    match (e["file"].as_str(), e["line"].as_u64()) {
        (Some(f), Some(l)) => format!("{f}:{l}: {reason}"),
        (Some(f), None) => format!("{f}: {reason}"),
        _ => reason.to_string(),
    }
}

/// The lines of an applied reload: counts, the policy set's hash, whose keys changed, the
/// settings that need a restart, the warnings; each made [`inert`] (file names and warnings
/// may quote what the file says).
fn summary(b: &Value) -> Vec<String> {
    let list = |k: &str| -> String {
        let v: Vec<&str> = b[k]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if v.is_empty() {
            "none".into()
        } else {
            v.join(", ")
        }
    };
    let text = |k: &str| b[k].as_str().unwrap_or("?").to_string();
    let mut out = vec![
        format!(
            "reloaded {}: {} agents, {} policies, {} principals",
            text("file"),
            b["agents"],
            b["policies"],
            b["principals"]
        ),
        format!(
            "  policy set: sha256:{} (was sha256:{})",
            text("policy_set_sha256"),
            text("previous_policy_set_sha256")
        ),
        format!("  added: {}", list("added")),
        format!("  removed (keys revoked): {}", list("removed")),
        format!("  changed: {}", list("changed")),
    ];
    if b["needs_restart"].as_array().is_some_and(|a| !a.is_empty()) {
        out.push(format!(
            "  needs a restart (unchanged until then): {}",
            list("needs_restart")
        ));
    }
    for w in b["warnings"].as_array().into_iter().flatten() {
        out.push(format!("  warning: {}", w.as_str().unwrap_or("")));
    }
    out.iter().map(|l| inert(l)).collect()
}

//! `assent reload` (issue 14 §8): asks the running gateway (`POST /v1/reload`, an operator's
//! key) to re-read its configuration file's principals, agents and policies, and prints what
//! changed, or why the file was refused (`FILE:LINE: reason`, one line each).

use crate::args::Remote;
use crate::remote::{connect, print_json};
use crate::render::inert;
use anyhow::Result;
use assent_api::ClientError;
use assent_api::reload::Reloaded;

/// Runs `assent reload`: exit status 0 when the gateway applied the file, 1 when it refused
/// it (its errors printed to stderr; the gateway keeps its previous set). With `json`, the
/// API's answer is printed as JSON (the refusal's error body too).
pub(crate) async fn run(remote: &Remote, json: bool) -> Result<i32> {
    match connect(remote)?.reload().await {
        Ok(r) => {
            match json {
                true => print_json(&r)?,
                false => summary(&r).iter().for_each(|l| println!("{l}")),
            }
            Ok(0)
        }
        Err(ClientError::Status {
            status: 422,
            error: Some(body),
        }) => {
            if json {
                print_json(&body)?;
            }
            eprintln!(
                "assent: the gateway refused the configuration; it keeps its previous principals, agents and policies"
            );
            for e in body.errors.iter().flatten() {
                eprintln!("  {}", inert(&e.line_text()));
            }
            Ok(1)
        }
        Err(e) => {
            if let (true, ClientError::Status { error: Some(b), .. }) = (json, &e) {
                print_json(b)?;
            }
            Err(e.into())
        }
    }
}

/// The lines of an applied reload: counts, the policy set's hash, whose keys changed, the
/// settings that need a restart, the warnings; each made [`inert`] (file names and warnings
/// may quote what the file says).
fn summary(b: &Reloaded) -> Vec<String> {
    let list = |v: &[String]| -> String {
        match v.is_empty() {
            true => "none".into(),
            false => v.join(", "),
        }
    };
    let mut out = vec![
        format!(
            "reloaded {}: {} agents, {} policies, {} principals",
            b.file, b.agents, b.policies, b.principals
        ),
        format!(
            "  policy set: sha256:{} (was sha256:{})",
            b.policy_set_sha256, b.previous_policy_set_sha256
        ),
        format!("  added: {}", list(&b.added)),
        format!("  removed (keys revoked): {}", list(&b.removed)),
        format!("  changed: {}", list(&b.changed)),
    ];
    if !b.needs_restart.is_empty() {
        out.push(format!(
            "  needs a restart (unchanged until then): {}",
            list(&b.needs_restart)
        ));
    }
    for w in &b.warnings {
        out.push(format!("  warning: {w}"));
    }
    out.iter().map(|l| inert(l)).collect()
}

//! The protocol tests' environment: agent `bot` with one tool per seed 002 feature (grants,
//! risk tiers, cost and rate thresholds, path and domain scopes, deny conditions, escalation)
//! under the governance `acme.proto.rules-v1`, served over a fresh data directory with a
//! temporary root for the path scope. No tests here.

use crate::kit::{Gw, policy, start_reg};
use assent_server::Settings;
use std::path::Path;

const AGENTS: &str = r#"
metadata: {id: bot, name: Bot}
action_space:
  local_tools:
    - {alias: send, approval: true}
    - alias: deploy
    - alias: transfer
    - alias: search
    - alias: read_path
    - alias: fetch
    - {alias: wipe, approval: true}
    - {alias: esc, approval: true}
    - {alias: low, approval: true}
"#;

fn gov(root: &Path) -> String {
    let rules = format!(
        r#"
- tool: deploy
  risk_tier: R3
  suggested_alternatives: ["deploy to staging first"]
- tool: transfer
  thresholds: {{cost: {{argument: amount, max_per_session: 100}}}}
- tool: search
  thresholds: {{rate: {{max: 2, per_seconds: 60}}}}
- tool: read_path
  scope: {{paths: {{arguments: [path], roots: ["{root}"]}}}}
- tool: fetch
  scope: {{domains: {{arguments: [url], allow: ["*.example.com", "example.com"]}}}}
- tool: wipe
  deny: {{condition: {{args_match: {{target: "/"}}}}, message_template: "never wipe {{{{tool_args.target}}}}"}}
- tool: esc
  approvers: [finance]
  timeout_seconds: 1
  on_timeout: {{escalate_to: [ops], after_seconds: 30}}
- tool: low
  risk_tier: R1
"#,
        root = root.display()
    );
    policy("acme.proto.rules-v1", &rules)
}

/// A gateway under the protocol policy, the directory `read_path` may touch, and the data
/// directory (kept alive as long as the gateway).
pub struct Env {
    /// The gateway.
    pub gw: Gw,
    /// The one root of `read_path`'s path scope (canonicalised in the policy).
    pub root: tempfile::TempDir,
    _dir: tempfile::TempDir,
}

/// [`Env`] with the default [`Settings`] changed by `tune` (e.g. a lower pending cap).
pub async fn env_with(tune: impl FnOnce(&mut Settings)) -> Env {
    let mut settings = Settings::default();
    tune(&mut settings);
    let dir = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let real = std::fs::canonicalize(root.path()).unwrap();
    let gw = start_reg(dir.path(), 300_000, settings, AGENTS, &gov(&real)).await;
    Env {
        gw,
        root,
        _dir: dir,
    }
}

/// [`Env`] with default settings.
pub async fn env() -> Env {
    env_with(|_| {}).await
}

//! Shared fixtures of the core integration tests, at the bottom of the test crate: the
//! treasury agent file and its governance file, the registry they load into, and helpers that
//! build a call, evaluate it for `treasury_bot`, join a verdict's reasons, and load files that
//! must fail. No test lives here.

use assent_core::policy::Registry;
use assent_core::{ToolCall, Verdict, VerdictKind, evaluate};
use serde_json::Value;

pub const AGENT: &str = r#"
schema_version: "1.0.0"
metadata:
  id: treasury_bot
  name: Treasury Bot
  version: 1.0.0
  description: moves money
  labels: {team: treasury}
interface: {input: {}}
constraints:
  governance_policies:
    - policy_ref: acme.finance.payments-v1
action_space:
  local_tools:
    - alias: lookup
    - alias: transfer
      approval:
        message_template: "Send ${{tool_args.amount}} to {{tool_args.to}} for {{agent_id}}?"
        condition:
          - args_match: {amount: {gt: 1000}}
          - args_match: {to: {pattern: "^ext-"}}
    - alias: wipe
      approval: {}
    - alias: note
      approval: false
  mcp_servers:
    - alias: bank
      approval: true
      allowed_tools:
        - name: health
          approval: false
        - balance
        - name: pay
          approval:
            message_template: "pay {{tool_args.x}}"
    - alias: fs
"#;

pub const GOV: &str = r#"
policies:
  - id: acme.finance.payments-v1
    rules:
      - tool: note
        approval: true
        approvers: [finance-admin]
      - tool: "wire_*"
        risk_tier: R4
        irreversible: true
      - tool: write_file
        server: fs
        approval: {condition: {args_match: {path: {pattern: "^/etc/"}}}}
        timeout_seconds: 30
  - id: acme.all.readonly-v1
    selector: {labels: {team: treasury}}
    rules:
      - tool: lookup
        risk_tier: R3
"#;

pub fn reg() -> Registry {
    Registry::load(
        &[("agents/treasury.agf.yaml".into(), AGENT.into())],
        &[("governance/finance.yaml".into(), GOV.into())],
    )
    .unwrap()
}

pub fn call(tool: &str, server: Option<&str>, args: Value) -> ToolCall {
    ToolCall::new(tool, server.map(String::from), args).unwrap()
}

pub fn kind(r: &Registry, tool: &str, server: Option<&str>, args: Value) -> VerdictKind {
    evaluate(r, "treasury_bot", &call(tool, server, args)).kind
}

/// [`evaluate`] of a call of `tool` (on `server`) for `treasury_bot`.
pub fn verdict(r: &Registry, tool: &str, server: Option<&str>, args: Value) -> Verdict {
    evaluate(r, "treasury_bot", &call(tool, server, args))
}

pub fn texts(v: &Verdict) -> String {
    v.terms
        .reasons
        .iter()
        .map(|r| r.text.as_str())
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Asserts that one of `v`'s reasons contains `want`, showing them all when none does.
pub fn assert_reason(v: &Verdict, want: &str) {
    assert!(texts(v).contains(want), "{}", texts(v));
}

/// Asserts that `v` denies the call with a message containing `want`, showing the message
/// when it does not.
#[track_caller]
pub fn assert_denied(v: &Verdict, want: &str) {
    assert_eq!(v.kind, VerdictKind::Deny);
    assert!(v.terms.message.contains(want), "{}", v.terms.message);
}

/// A governance file of one policy, `id`, selecting `treasury_bot`, with `rules` (YAML list
/// items indented for their place under `rules:`, as in [`GOV`]).
pub fn bot_policy(id: &str, rules: &str) -> String {
    format!(
        "policies:\n  - id: {id}\n    selector: {{agents: [treasury_bot]}}\n    rules:\n{rules}"
    )
}

/// The registry of the agent file `agent` (as `a.agf.yaml`) under [`GOV`] (as `g.yaml`) and
/// the governance file `gov` named `file`.
pub fn reg_plus(agent: &str, file: &str, gov: &str) -> Registry {
    Registry::load(
        &[("a.agf.yaml".into(), agent.into())],
        &[("g.yaml".into(), GOV.into()), (file.into(), gov.into())],
    )
    .unwrap()
}

pub fn load_err(agent: &str, gov: &str) -> String {
    Registry::load(
        &[("a.agf.yaml".into(), agent.into())],
        &[("g.yaml".into(), gov.into())],
    )
    .unwrap_err()
    .to_string()
}

pub fn rule_err(keys: &str) -> String {
    let gov = format!("policies:\n  - id: a.b-v1\n    rules:\n      - tool: x\n{keys}");
    match Registry::load(&[], &[("g.yaml".into(), gov)]) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}

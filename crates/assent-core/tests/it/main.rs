//! Policy loading and gatekeeper verdicts through the public API of assent-core.

use assent_core::policy::Registry;
use assent_core::{VerdictKind, evaluate};
use serde_json::json;

mod props;
mod strict;

use kit::{AGENT, GOV, assert_denied, bot_policy, call, kind, reg, reg_plus, verdict};

#[test]
fn three_forms_of_approval_and_conditions() {
    let r = reg();
    assert_eq!(
        kind(&r, "transfer", None, json!({"amount": 5, "to": "bob"})),
        VerdictKind::Allow
    );
    assert_eq!(
        kind(&r, "transfer", None, json!({"amount": 5000, "to": "bob"})),
        VerdictKind::Confirm
    );
    assert_eq!(
        kind(&r, "transfer", None, json!({"amount": 5, "to": "ext-1"})),
        VerdictKind::Confirm
    );
    // `{}` means true.
    assert_eq!(kind(&r, "wipe", None, json!({})), VerdictKind::Confirm);
    // missing argument: cannot evaluate → confirm, and the reason names the key.
    let v = verdict(&r, "transfer", None, json!({"amount": 5}));
    assert_eq!(v.kind, VerdictKind::Confirm);
    assert!(
        v.terms
            .reasons
            .iter()
            .any(|x| x.text.contains("argument `to` is missing")),
        "{:?}",
        v.terms.reasons
    );
    let v = verdict(&r, "transfer", None, json!({"amount": 5000, "to": "bob"}));
    assert_eq!(v.terms.message, "Send $5000 to bob for treasury_bot?");
}

#[test]
fn server_blanket_and_per_tool_override() {
    let r = reg();
    assert_eq!(
        kind(&r, "health", Some("bank"), json!({})),
        VerdictKind::Allow
    );
    assert_eq!(
        kind(&r, "balance", Some("bank"), json!({})),
        VerdictKind::Confirm
    );
    let v = verdict(&r, "pay", Some("bank"), json!({"x": 1}));
    assert_eq!(
        (v.kind, v.terms.message.as_str()),
        (VerdictKind::Confirm, "pay 1")
    );
    // allowed_tools present: only listed tools are declared.
    let v = verdict(&r, "drain", Some("bank"), json!({}));
    assert_denied(&v, "`drain` is not in allowed_tools of MCP server `bank`");
    // allowed_tools omitted: every tool declared, inherits (no) approval.
    assert_eq!(
        kind(&r, "read_file", Some("fs"), json!({"path": "/tmp/a"})),
        VerdictKind::Allow
    );
    assert_eq!(r.declared_tools("treasury_bot", "fs").unwrap(), None);
    assert_eq!(
        r.declared_tools("treasury_bot", "bank").unwrap(),
        Some(vec!["health".to_string(), "balance".into(), "pay".into()])
    );
}

#[test]
fn undeclared_tools_servers_and_agents_are_denied_by_name() {
    let r = reg();
    let v = verdict(&r, "rm_rf", None, json!({}));
    assert_denied(&v, "tool `rm_rf` is not declared");
    let v = verdict(&r, "x", Some("mail"), json!({}));
    assert!(
        v.terms
            .message
            .contains("MCP server alias `mail` is not declared"),
        "{}",
        v.terms.message
    );
    let v = evaluate(&r, "ghost", &call("x", None, json!({})));
    assert_denied(&v, "agent `ghost`");
}

#[test]
fn governance_is_union_and_tighten_only() {
    let r = reg();
    // agent says approval: false, governance requires it: governance wins.
    let v = verdict(&r, "note", None, json!({}));
    assert_eq!(v.kind, VerdictKind::Confirm);
    assert_eq!(v.terms.approvers, vec!["finance-admin".to_string()]);
    assert!(
        v.terms
            .reasons
            .iter()
            .any(|x| x.file == "governance/finance.yaml"
                && x.rule.starts_with("acme.finance.payments-v1 rules[0]"))
    );
    // selector by label: lookup is R3 → confirm even though no file asks for approval.
    let v = verdict(&r, "lookup", None, json!({}));
    assert_eq!(
        (v.kind, v.terms.risk_tier.as_str()),
        (VerdictKind::Confirm, "R3")
    );
    // server-scoped rule with condition.
    assert_eq!(
        kind(&r, "write_file", Some("fs"), json!({"path": "/tmp/x"})),
        VerdictKind::Allow
    );
    let v = verdict(&r, "write_file", Some("fs"), json!({"path": "/etc/x"}));
    assert_eq!(
        (v.kind, v.timeout_seconds),
        (VerdictKind::Confirm, Some(30))
    );
    // default tier is R2 (medium).
    assert_eq!(
        verdict(&r, "wipe", None, json!({}))
            .terms
            .risk_tier
            .risk_level(),
        "medium"
    );
}

#[test]
fn irreversible_forces_reject_default() {
    let r = reg();
    let v = verdict(&r, "wire_out", None, json!({}));
    // wire_out is not declared by the agent: denied before governance matters.
    assert_eq!(v.kind, VerdictKind::Deny);
    let agent = AGENT.replace(
        "    - alias: lookup\n",
        "    - alias: lookup\n    - alias: wire_out\n",
    );
    let r = Registry::load(&[("a".into(), agent)], &[("g".into(), GOV.into())]).unwrap();
    let v = verdict(&r, "wire_out", None, json!({}));
    assert_eq!(
        (
            v.kind,
            v.terms.irreversible,
            v.terms.default_decision.as_str()
        ),
        (VerdictKind::Confirm, true, "reject")
    );
}

/// Seed 001 ("no irreversible action without explicit human consent"), AAEP §6.4.1: a rule
/// that marks a tool irreversible but names no approval and a low tier used to let the call
/// run with no human at all.
#[test]
fn irreversible_action_never_runs_without_a_human() {
    let agent = AGENT.replace(
        "    - alias: lookup\n",
        "    - alias: lookup\n    - alias: shred\n    - alias: purge\n      approval: false\n",
    );
    let rules = "      - tool: shred
        risk_tier: R0
        irreversible: true
      - tool: purge
        irreversible: true
      - tool: purge
        default_decision: approve
";
    let r = reg_plus(&agent, "ops.yaml", &bot_policy("acme.ops.shred-v1", rules));
    for tool in ["shred", "purge"] {
        let v = verdict(&r, tool, None, json!({}));
        assert_eq!(
            (
                v.kind,
                v.terms.irreversible,
                v.terms.default_decision.as_str()
            ),
            (VerdictKind::Confirm, true, "reject"),
            "{tool}: {:?}",
            v.terms.reasons
        );
        let why = v
            .terms
            .reasons
            .iter()
            .find(|x| x.file == "ops.yaml" && x.text.contains("irreversible"))
            .unwrap_or_else(|| panic!("{tool}: {:?}", v.terms.reasons));
        assert!(why.rule.starts_with("acme.ops.shred-v1 rules["), "{why:?}");
        assert!(
            why.text.contains("explicit human consent") && why.text.contains("reject"),
            "{why:?}"
        );
    }
    // R0 irreversible: the tier does not lower the requirement.
    let v = verdict(&r, "shred", None, json!({}));
    assert_eq!(v.terms.risk_tier.as_str(), "R0");
}

// Groups of tests in files of their own, and the shared fixtures (`kit`) at the bottom.
mod agent_format;
mod duties;
mod kit;
mod loading;
mod policy_attacks;
mod protocol;
mod quorum;
mod reasons;
mod rule_index;
mod session_risk;

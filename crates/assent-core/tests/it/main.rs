//! Policy loading and gatekeeper verdicts through the public API of assent-core.

use assent_core::policy::Registry;
use assent_core::{ToolCall, VerdictKind, evaluate};
use serde_json::{Value, json};

mod props;
mod strict;

const AGENT: &str = r#"
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

const GOV: &str = r#"
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

fn reg() -> Registry {
    Registry::load(
        &[("agents/treasury.agf.yaml".into(), AGENT.into())],
        &[("governance/finance.yaml".into(), GOV.into())],
    )
    .unwrap()
}

fn call(tool: &str, server: Option<&str>, args: Value) -> ToolCall {
    ToolCall::new(tool, server.map(String::from), args).unwrap()
}

fn kind(r: &Registry, tool: &str, server: Option<&str>, args: Value) -> VerdictKind {
    evaluate(r, "treasury_bot", &call(tool, server, args)).kind
}

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
    let v = evaluate(
        &r,
        "treasury_bot",
        &call("transfer", None, json!({"amount": 5})),
    );
    assert_eq!(v.kind, VerdictKind::Confirm);
    assert!(
        v.reasons
            .iter()
            .any(|x| x.text.contains("argument `to` is missing")),
        "{:?}",
        v.reasons
    );
    let v = evaluate(
        &r,
        "treasury_bot",
        &call("transfer", None, json!({"amount": 5000, "to": "bob"})),
    );
    assert_eq!(v.message, "Send $5000 to bob for treasury_bot?");
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
    let v = evaluate(
        &r,
        "treasury_bot",
        &call("pay", Some("bank"), json!({"x": 1})),
    );
    assert_eq!(
        (v.kind, v.message.as_str()),
        (VerdictKind::Confirm, "pay 1")
    );
    // allowed_tools present: only listed tools are declared.
    let v = evaluate(&r, "treasury_bot", &call("drain", Some("bank"), json!({})));
    assert_eq!(v.kind, VerdictKind::Deny);
    assert!(
        v.message
            .contains("`drain` is not in allowed_tools of MCP server `bank`"),
        "{}",
        v.message
    );
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
    let v = evaluate(&r, "treasury_bot", &call("rm_rf", None, json!({})));
    assert_eq!(v.kind, VerdictKind::Deny);
    assert!(
        v.message.contains("tool `rm_rf` is not declared"),
        "{}",
        v.message
    );
    let v = evaluate(&r, "treasury_bot", &call("x", Some("mail"), json!({})));
    assert!(
        v.message
            .contains("MCP server alias `mail` is not declared"),
        "{}",
        v.message
    );
    let v = evaluate(&r, "ghost", &call("x", None, json!({})));
    assert_eq!(v.kind, VerdictKind::Deny);
    assert!(v.message.contains("agent `ghost`"));
}

#[test]
fn governance_is_union_and_tighten_only() {
    let r = reg();
    // agent says approval: false, governance requires it: governance wins.
    let v = evaluate(&r, "treasury_bot", &call("note", None, json!({})));
    assert_eq!(v.kind, VerdictKind::Confirm);
    assert_eq!(v.approvers, vec!["finance-admin".to_string()]);
    assert!(v.reasons.iter().any(|x| x.file == "governance/finance.yaml"
        && x.rule.starts_with("acme.finance.payments-v1 rules[0]")));
    // selector by label: lookup is R3 → confirm even though no file asks for approval.
    let v = evaluate(&r, "treasury_bot", &call("lookup", None, json!({})));
    assert_eq!((v.kind, v.risk_tier.as_str()), (VerdictKind::Confirm, "R3"));
    // server-scoped rule with condition.
    assert_eq!(
        kind(&r, "write_file", Some("fs"), json!({"path": "/tmp/x"})),
        VerdictKind::Allow
    );
    let v = evaluate(
        &r,
        "treasury_bot",
        &call("write_file", Some("fs"), json!({"path": "/etc/x"})),
    );
    assert_eq!(
        (v.kind, v.timeout_seconds),
        (VerdictKind::Confirm, Some(30))
    );
    // default tier is R2 (medium).
    assert_eq!(
        evaluate(&r, "treasury_bot", &call("wipe", None, json!({})))
            .risk_tier
            .risk_level(),
        "medium"
    );
}

#[test]
fn unresolved_required_policy_refuses_the_agent() {
    let agent = AGENT.replace("acme.finance.payments-v1", "acme.finance.missing-v9");
    let r = Registry::load(
        &[("a.agf.yaml".into(), agent)],
        &[("g.yaml".into(), GOV.into())],
    )
    .unwrap();
    let v = evaluate(&r, "treasury_bot", &call("lookup", None, json!({})));
    assert_eq!(v.kind, VerdictKind::Deny);
    assert!(
        v.message.contains("acme.finance.missing-v9"),
        "{}",
        v.message
    );
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("acme.finance.missing-v9"))
    );
    // Optional reference: not refused.
    let agent = AGENT.replace(
        "- policy_ref: acme.finance.payments-v1",
        "- {policy_ref: acme.finance.missing-v9, required: false}",
    );
    let r = Registry::load(&[("a.agf.yaml".into(), agent)], &[]).unwrap();
    assert_eq!(
        kind(&r, "health", Some("bank"), json!({})),
        VerdictKind::Allow
    );
}

fn load_err(agent: &str, gov: &str) -> String {
    Registry::load(
        &[("a.agf.yaml".into(), agent.into())],
        &[("g.yaml".into(), gov.into())],
    )
    .unwrap_err()
    .to_string()
}

#[test]
fn bad_files_name_file_line_and_reason() {
    let dup = AGENT.replace("    - alias: note\n", "    - alias: wipe\n");
    let e = load_err(&dup, GOV);
    assert!(
        e.contains("a.agf.yaml:") && e.contains("duplicate local tool alias `wipe`"),
        "{e}"
    );
    let e = load_err(
        AGENT,
        "policies:\n  - id: a.b-v1\n    rules:\n      - tool: x\n        irreversible: true\n        default_decision: approve\n",
    );
    assert!(
        e.starts_with("g.yaml:4: policy `a.b-v1` rules[0]: an irreversible action"),
        "{e}"
    );
    let e = load_err(
        AGENT,
        "policies:\n  - id: a.b-v1\n    rules:\n      - tool: x\n        aproval: true\n",
    );
    assert!(e.starts_with("g.yaml:") && e.contains("aproval"), "{e}");
    let e = load_err(
        AGENT,
        "policies:\n  - id: a.b-v1\n    rules:\n      - tool: x\n        risk_tier: R9\n",
    );
    assert!(e.contains("unknown risk_tier `R9`"), "{e}");
    let e = load_err("metadata: [1", GOV);
    assert!(e.starts_with("a.agf.yaml:"), "{e}");
    let w = Registry::load(&[], &[("g.yaml".into(), "policies:\n  - id: a.b-v1\n    rules:\n      - tool: x\n        risk_tier: R3\n        default_decision: approve\n".into())]).unwrap();
    assert!(w.warnings[0].contains("discouraged"), "{:?}", w.warnings);
    let bad_re = AGENT.replace("pattern: \"^ext-\"", "pattern: \"ext-(\"");
    let r = Registry::load(
        &[("a.agf.yaml".into(), bad_re)],
        &[("g.yaml".into(), GOV.into())],
    )
    .unwrap();
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("local tool `transfer`")
                && w.contains("pattern for `to` does not compile")),
        "{:?}",
        r.warnings
    );
    // ... and such a condition always requires approval.
    assert_eq!(
        evaluate(
            &r,
            "treasury_bot",
            &call("transfer", None, json!({"amount": 5, "to": "bob"}))
        )
        .kind,
        VerdictKind::Confirm
    );
}

#[test]
fn irreversible_forces_reject_default() {
    let r = reg();
    let v = evaluate(&r, "treasury_bot", &call("wire_out", None, json!({})));
    // wire_out is not declared by the agent: denied before governance matters.
    assert_eq!(v.kind, VerdictKind::Deny);
    let agent = AGENT.replace(
        "    - alias: lookup\n",
        "    - alias: lookup\n    - alias: wire_out\n",
    );
    let r = Registry::load(&[("a".into(), agent)], &[("g".into(), GOV.into())]).unwrap();
    let v = evaluate(&r, "treasury_bot", &call("wire_out", None, json!({})));
    assert_eq!(
        (v.kind, v.irreversible, v.default_decision.as_str()),
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
    let gov = "policies:
  - id: acme.ops.shred-v1
    selector: {agents: [treasury_bot]}
    rules:
      - tool: shred
        risk_tier: R0
        irreversible: true
      - tool: purge
        irreversible: true
      - tool: purge
        default_decision: approve
";
    let r = Registry::load(
        &[("a.agf.yaml".into(), agent)],
        &[("GOV".into(), GOV.into()), ("ops.yaml".into(), gov.into())],
    )
    .unwrap();
    for tool in ["shred", "purge"] {
        let v = evaluate(&r, "treasury_bot", &call(tool, None, json!({})));
        assert_eq!(
            (v.kind, v.irreversible, v.default_decision.as_str()),
            (VerdictKind::Confirm, true, "reject"),
            "{tool}: {:?}",
            v.reasons
        );
        let why = v
            .reasons
            .iter()
            .find(|x| x.file == "ops.yaml" && x.text.contains("irreversible"))
            .unwrap_or_else(|| panic!("{tool}: {:?}", v.reasons));
        assert!(why.rule.starts_with("acme.ops.shred-v1 rules["), "{why:?}");
        assert!(
            why.text.contains("explicit human consent") && why.text.contains("reject"),
            "{why:?}"
        );
    }
    // R0 irreversible: the tier does not lower the requirement.
    let v = evaluate(&r, "treasury_bot", &call("shred", None, json!({})));
    assert_eq!(v.risk_tier.as_str(), "R0");
}

fn texts(v: &assent_core::Verdict) -> String {
    v.reasons
        .iter()
        .map(|r| r.text.as_str())
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Issue 10 B: "approval condition matched" told the operator nothing; every reason now names
/// the clause that matched (with the actual value) or could not be evaluated.
#[test]
fn reasons_name_the_clause_that_matched_or_could_not_be_evaluated() {
    let r = reg();
    let v = evaluate(
        &r,
        "treasury_bot",
        &call("transfer", None, json!({"amount": 5000, "to": "bob"})),
    );
    assert!(
        texts(&v).contains("approval condition matched: amount > 1000 (amount = 5000)"),
        "{}",
        texts(&v)
    );
    let v = evaluate(
        &r,
        "treasury_bot",
        &call("transfer", None, json!({"amount": 5000, "to": "ext-9"})),
    );
    assert!(
        texts(&v).contains(
            r#"matched: amount > 1000 (amount = 5000); or to matches pattern "^ext-" (to = "ext-9")"#
        ),
        "{}",
        texts(&v)
    );
    let v = evaluate(
        &r,
        "treasury_bot",
        &call("write_file", Some("fs"), json!({"path": "/etc/x"})),
    );
    let gov = v
        .reasons
        .iter()
        .find(|x| x.file == "governance/finance.yaml")
        .unwrap();
    assert!(
        gov.text.contains(
            r#"approval condition matched: path matches pattern "^/etc/" (path = "/etc/x")"#
        ),
        "{gov:?}"
    );
    let v = evaluate(
        &r,
        "treasury_bot",
        &call("transfer", None, json!({"amount": 5})),
    );
    assert!(
        texts(&v).contains(
            r#"approval condition cannot be evaluated (to matches pattern "^ext-": argument `to` is missing)"#
        ),
        "{}",
        texts(&v)
    );
    // A deny condition: the reason names the clause; the agent sees the rule's message.
    let deny = "policies:
  - id: acme.fs.etc-v1
    selector: {agents: [treasury_bot]}
    rules:
      - tool: read_file
        server: fs
        deny:
          condition: {args_match: {path: {pattern: \"^/etc/shadow\"}}}
          message_template: \"no secrets\"
      - tool: write_file
        deny: {condition: {args_match: {mode: {in: [\"0777\"]}}}}
";
    let r = Registry::load(
        &[("a.agf.yaml".into(), AGENT.into())],
        &[
            ("g.yaml".into(), GOV.into()),
            ("d.yaml".into(), deny.into()),
        ],
    )
    .unwrap();
    let v = evaluate(
        &r,
        "treasury_bot",
        &call("read_file", Some("fs"), json!({"path": "/etc/shadow"})),
    );
    assert_eq!(
        (v.kind, v.message.as_str()),
        (VerdictKind::Deny, "no secrets")
    );
    assert!(
        texts(&v).contains(
            r#"(deny condition matched: path matches pattern "^/etc/shadow" (path = "/etc/shadow")): no secrets"#
        ),
        "{}",
        texts(&v)
    );
    let v = evaluate(
        &r,
        "treasury_bot",
        &call("write_file", Some("fs"), json!({"mode": "0777"})),
    );
    assert_eq!(v.kind, VerdictKind::Deny);
    assert!(
        v.message
            .contains(r#"deny condition matched: mode in ["0777"] (mode = "0777")"#),
        "{}",
        v.message
    );
    let v = evaluate(
        &r,
        "treasury_bot",
        &call("write_file", Some("fs"), json!({"mode": 511})),
    );
    assert_eq!(v.kind, VerdictKind::Confirm);
    assert!(
        texts(&v).contains(
            r#"deny condition cannot be evaluated (mode in ["0777"]: argument `mode` is a number but `in` lists values of another type)"#
        ),
        "{}",
        texts(&v)
    );
}

fn rule_err(keys: &str) -> String {
    let gov = format!("policies:\n  - id: a.b-v1\n    rules:\n      - tool: x\n{keys}");
    match Registry::load(&[], &[("g.yaml".into(), gov)]) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}

/// Issue 10 §10: `timeout_seconds: 18446744073709551615` wrapped to a negative duration
/// downstream, so the approval expired at once and its default applied. Every duration and
/// count in a policy is range-checked at load, with the file, the rule's line and the range.
#[test]
fn out_of_range_durations_and_counts_are_refused_at_load() {
    for (keys, want) in [
        (
            "        timeout_seconds: 18446744073709551615\n",
            "timeout_seconds 18446744073709551615 is out of range (1 to 604800 seconds)",
        ),
        (
            "        timeout_seconds: 604801\n",
            "timeout_seconds 604801 is out of range",
        ),
        (
            "        timeout_seconds: 0\n",
            "timeout_seconds 0 is out of range",
        ),
        (
            "        on_timeout: {escalate_to: [cfo], after_seconds: 18446744073709551615}\n",
            "on_timeout.after_seconds 18446744073709551615 is out of range (1 to 604800 seconds)",
        ),
        (
            "        on_timeout: {escalate_to: [cfo], after_seconds: 0}\n",
            "on_timeout.after_seconds 0 is out of range",
        ),
        (
            "        on_timeout: {escalate_to: [], after_seconds: 60}\n",
            "on_timeout.escalate_to must name at least one role",
        ),
        (
            "        thresholds: {rate: {max: 5, per_seconds: 9223372036854775807}}\n",
            "thresholds.rate.per_seconds 9223372036854775807 is out of range (1 to 604800 seconds)",
        ),
        (
            "        thresholds: {rate: {max: 0, per_seconds: 60}}\n",
            "thresholds.rate.max 0 is out of range (1 to 1000000 calls)",
        ),
        (
            "        thresholds: {rate: {max: 1000001, per_seconds: 60}}\n",
            "thresholds.rate.max 1000001 is out of range",
        ),
        (
            "        thresholds: {output_bytes: 0}\n",
            "thresholds.output_bytes 0 is out of range (1 to 1073741824 bytes)",
        ),
        (
            "        thresholds: {output_bytes: 1073741825}\n",
            "thresholds.output_bytes 1073741825 is out of range",
        ),
        (
            "        thresholds: {cost: {argument: amount, max_per_session: .inf}}\n",
            "thresholds.cost.max_per_session inf is out of range (a finite number ≥ 0)",
        ),
        (
            "        thresholds: {cost: {argument: amount, max_per_session: -1}}\n",
            "thresholds.cost.max_per_session -1 is out of range",
        ),
    ] {
        let e = rule_err(keys);
        assert!(
            e.starts_with("g.yaml:4: policy `a.b-v1` rules[0]: ") && e.contains(want),
            "{keys}: {e}"
        );
    }
    // Negative or fractional values are YAML type errors, with the file and line.
    for keys in [
        "        timeout_seconds: -5\n",
        "        timeout_seconds: 1.5\n",
    ] {
        let e = rule_err(keys);
        assert!(e.starts_with("g.yaml:5"), "{keys}: {e}");
    }
    // The bounds themselves are accepted.
    let edge = "        timeout_seconds: 604800\n        on_timeout: {escalate_to: [cfo], after_seconds: 604800}\n        thresholds: {rate: {max: 1000000, per_seconds: 604800}, output_bytes: 1073741824, cost: {argument: a, max_per_session: 0}}\n";
    assert_eq!(rule_err(edge), "");
    let low = "        timeout_seconds: 1\n        on_timeout: {escalate_to: [cfo], after_seconds: 1}\n        thresholds: {rate: {max: 1, per_seconds: 1}, output_bytes: 1}\n";
    assert_eq!(rule_err(low), "");
}

/// A rate window too long to represent in milliseconds used to wrap (`u64::MAX` seconds became
/// a window ending in the future, so no earlier call counted) or overflow; it now counts every
/// earlier call, which holds more calls, never fewer.
#[test]
fn a_rate_window_too_long_to_represent_counts_every_earlier_call() {
    use assent_core::triggers::{PriorCall, RateLimit, rate_exceeded};
    let now = 1_700_000_000_000;
    let prior = [PriorCall {
        tool: "t".into(),
        server: None,
        at_ms: now - 1000,
        arguments: json!({}),
    }];
    for per_seconds in [u64::MAX, 1 << 62, i64::MAX as u64] {
        let l = RateLimit {
            max: 1,
            per_seconds,
        };
        assert!(
            rate_exceeded(&l, prior.iter(), now).is_some(),
            "{per_seconds}"
        );
    }
    let l = RateLimit {
        max: 1,
        per_seconds: 60,
    };
    assert!(rate_exceeded(&l, prior.iter(), now).is_some());
    assert!(rate_exceeded(&l, prior.iter(), now + 60_000).is_none());
}

mod protocol {
    use assent_core::ToolCall;
    use assent_core::approval::GrantScope;
    use assent_core::summary::HumanSummary;
    use assent_core::triggers::{host_allowed, normalize_lexically};
    use serde_json::json;
    use std::path::Path;

    #[test]
    fn grant_scopes_parse_and_print_in_their_largest_unit() {
        for (s, want, wire) in [
            ("once", GrantScope::Once, "once"),
            ("session", GrantScope::Session, "session"),
            ("workspace", GrantScope::Workspace, "workspace"),
            ("15m", GrantScope::Duration(900), "15m"),
            ("90s", GrantScope::Duration(90), "90s"),
            ("120m", GrantScope::Duration(7200), "2h"),
            ("1d", GrantScope::Duration(86_400), "1d"),
        ] {
            let g = GrantScope::parse(s).unwrap();
            assert_eq!((g, g.to_wire().as_str()), (want, wire), "{s}");
        }
        for bad in [
            "",
            "m",
            "0s",
            "15",
            "1w",
            "-5m",
            "367d",
            "99999999999999999999d",
        ] {
            assert!(GrantScope::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hosts_match_exact_names_and_subdomain_wildcards_only() {
        let allow = vec!["*.example.com".to_string(), "api.test".to_string()];
        assert!(host_allowed("a.example.com", &allow));
        assert!(host_allowed("a.b.example.com", &allow));
        assert!(!host_allowed("example.com", &allow));
        assert!(!host_allowed("badexample.com", &allow));
        assert!(host_allowed("api.test", &allow));
        assert!(!host_allowed("x.api.test", &allow));
        assert!(host_allowed("anything", &["*".to_string()]));
    }

    #[test]
    fn lexical_normalisation_never_climbs_above_the_root() {
        assert_eq!(
            normalize_lexically(Path::new("/a/./b/../c")),
            Path::new("/a/c")
        );
        assert_eq!(
            normalize_lexically(Path::new("/../../etc")),
            Path::new("/etc")
        );
    }

    #[test]
    fn the_summary_is_checked_against_the_canonical_arguments() {
        let call = ToolCall::new("pay", None, json!({"amount": 1e3, "to": "bob"})).unwrap();
        let canonical = call.canonical_arguments().unwrap();
        let s = HumanSummary::generate(&call, &canonical);
        assert_eq!(s.text, "Call `pay` with amount = 1000, to = \"bob\"");
        s.verify(&canonical).unwrap();
        // A summary that shows a value the call does not have fails the check.
        let mut forged = s.clone();
        forged.shown[0].1 = "10".into();
        assert!(
            forged
                .verify(&canonical)
                .unwrap_err()
                .contains("amount = 10")
        );
        let other = ToolCall::new("pay", None, json!({"amount": 5, "to": "bob"})).unwrap();
        assert!(s.verify(&other.canonical_arguments().unwrap()).is_err());
    }
}

mod agent_format_fields {
    use assent_core::agf::unknown_fields;
    use assent_core::policy::Registry;
    use serde_json::json;

    const TYPO: &str = "schema_version: \"1.0.0\"\nmetadata: {id: typo_bot}\naction_space:\n  local_tools:\n    - alias: pay\n      aproval: true\n";

    #[test]
    fn fields_the_schema_does_not_define_are_found_where_they_are() {
        let doc = json!({
            "schema_version": "1.0.0",
            "metadata": {"id": "a", "labels": {"anything": "goes"}, "colour": "red"},
            "interface": {"input": {"type": "object"}},
            "action_space": {
                "local_tools": [{"alias": "pay", "aproval": true},
                                {"alias": "x", "approval": {"condition": {"args_match": {"amount": {"gt": 1}}}, "mesage_template": "?"}}],
                "mcp_servers": [{"alias": "fs", "allowed_tools": ["read", {"name": "write", "approvl": true}]}],
                "local_agents": [{"alias": "sub", "source": "s.agf.yaml", "aproval": true}],
                "remote_agents": [{"alias": "r", "allowed_skills": ["s", {"id": "t", "approval": true, "extra": 1}]}]
            },
            "execution_policy": {"id": "agf.react", "config": {"max_turns": 3}},
            "apiVersion": "agf/v1"
        });
        assert_eq!(
            unknown_fields(&doc),
            [
                "action_space.local_agents[0].aproval",
                "action_space.local_tools[0].aproval",
                "action_space.local_tools[1].approval.mesage_template",
                "action_space.mcp_servers[0].allowed_tools[1].approvl",
                "action_space.remote_agents[0].allowed_skills[1].extra",
                "apiVersion",
                "metadata.colour",
            ]
        );
    }

    #[test]
    fn unknown_fields_warn_with_file_and_line_and_fail_in_strict_mode() {
        let files = [("typo.agf.yaml".to_string(), TYPO.to_string())];
        let reg = Registry::load(&files, &[]).unwrap();
        assert!(
            reg.warnings.iter().any(|w| w.starts_with(
                "typo.agf.yaml:6: unknown field `action_space.local_tools[0].aproval`"
            )),
            "{:?}",
            reg.warnings
        );
        // Ignored, as the format requires: the tool has no approval.
        assert!(reg.agents["typo_bot"].local_tools[0].approval.is_none());
        let err = Registry::load_with(&files, &[], true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("typo.agf.yaml:6") && err.contains("aproval"),
            "{err}"
        );
    }
}

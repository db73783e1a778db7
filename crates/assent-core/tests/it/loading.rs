//! Loading policy files through the public API: unresolvable policy references, files with
//! errors (each named by file, line and reason), and the bounds of every duration and count
//! (issue 10 §10).

use crate::kit::{AGENT, GOV, assert_denied, kind, load_err, rule_err, verdict};
use assent_core::VerdictKind;
use assent_core::policy::Registry;
use serde_json::json;

#[test]
fn unresolved_required_policy_refuses_the_agent() {
    let agent = AGENT.replace("acme.finance.payments-v1", "acme.finance.missing-v9");
    let r = Registry::load(
        &[("a.agf.yaml".into(), agent)],
        &[("g.yaml".into(), GOV.into())],
    )
    .unwrap();
    let v = verdict(&r, "lookup", None, json!({}));
    assert_denied(&v, "acme.finance.missing-v9");
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
    // Found by review: a deny's condition written without `condition:` loaded as `deny: true`
    // and denied every call of the tool; a key `deny` or `approval` does not take is refused.
    for (what, body) in [
        ("deny", "{args_match: {amount: 500}}"),
        ("approval", "{conditon: {}}"),
    ] {
        let e = load_err(
            AGENT,
            &format!(
                "policies:\n  - id: a.b-v1\n    rules:\n      - tool: x\n        {what}: {body}\n"
            ),
        );
        let key = if what == "deny" {
            "args_match"
        } else {
            "conditon"
        };
        assert!(
            e.starts_with("g.yaml:4:") && e.contains(&format!("{what}: unknown key `{key}`")),
            "{e}"
        );
    }
    let e = load_err("metadata: [1", GOV);
    assert!(e.starts_with("a.agf.yaml:"), "{e}");
    // Attack (a mistake an attacker waits for): a selector glob that does not compile
    // selected no agent, so the whole policy, its denials included, silently stopped applying.
    for bad in ["payments-**", "pay[ments", ""] {
        let gov = format!(
            "policies:\n  - id: a.b-v1\n    selector: {{agents: [\"{bad}\"]}}\n    rules:\n      - tool: x\n        deny: true\n"
        );
        let e = load_err(AGENT, &gov);
        assert!(
            e.starts_with("g.yaml:2: policy `a.b-v1` selector.agents:") && e.contains(bad),
            "{bad}: {e}"
        );
    }
    let w = Registry::load(&[], &[("g.yaml".into(), "policies:\n  - id: a.b-v1\n    rules:\n      - tool: x\n        risk_tier: R3\n        default_decision: approve\n".into())]).unwrap();
    assert!(w.warnings[0].contains("discouraged"), "{:?}", w.warnings);
    // A pattern that does not compile stops the load with its file and line (it used to be a
    // warning; in a `deny` it became a hold a person could approve: see attacks.rs).
    let bad_re = AGENT.replace("pattern: \"^ext-\"", "pattern: \"ext-(\"");
    let e = load_err(&bad_re, GOV);
    assert!(
        e.starts_with(
            "a.agf.yaml:16: local tool `transfer`: condition: key `to`: `pattern` does not compile"
        ),
        "{e}"
    );
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

/// Issue 14 §3: an `escalation` chain takes `after` as seconds or a duration, counted from the
/// raise; its steps must name roles and come in time order, within the 7-day bound, at most
/// eight of them, and a rule has either `on_timeout` or `escalation`. Each mistake is refused at
/// load with the file, the rule's line and the step.
#[test]
fn escalation_chains_are_checked_at_load() {
    let ok = "        escalation:\n          - {after: 10m, approvers: [oncall-lead]}\n          - {after: 1800, approvers: [cfo]}\n";
    assert_eq!(rule_err(ok), "");
    let edge = "        escalation: [{after: 1s, approvers: [a]}, {after: 7d, approvers: [b]}]\n";
    assert_eq!(rule_err(edge), "");
    let nine = (1..=9)
        .map(|i| format!("{{after: {i}, approvers: [r]}}"))
        .collect::<Vec<_>>()
        .join(", ");
    for (keys, want) in [
        (
            "        escalation: [{after: 30m, approvers: [a]}, {after: 10m, approvers: [b]}]\n"
                .to_string(),
            "escalation[1].after (600 s) must come after the step before it (1800 s)",
        ),
        (
            "        escalation: [{after: 0, approvers: [a]}]\n".into(),
            "escalation[0].after 0 is out of range (1 to 604800 seconds)",
        ),
        (
            "        escalation: [{after: 8d, approvers: [a]}]\n".into(),
            "escalation[0].after 691200 is out of range",
        ),
        (
            "        escalation: [{after: 18446744073709551615, approvers: [a]}]\n".into(),
            "escalation[0].after 18446744073709551615 is out of range",
        ),
        (
            "        escalation: [{after: ten minutes, approvers: [a]}]\n".into(),
            "escalation[0].after: `ten minutes` is not a duration",
        ),
        (
            "        escalation: [{after: 1500ms, approvers: [a]}]\n".into(),
            "`1500ms` is not a whole number of seconds",
        ),
        (
            "        escalation: [{after: 60, approvers: []}]\n".into(),
            "escalation[0].approvers must name at least one role",
        ),
        (
            "        escalation: []\n".into(),
            "escalation has 0 steps (1 to 8)",
        ),
        (
            format!("        escalation: [{nine}]\n"),
            "escalation has 9 steps (1 to 8)",
        ),
        (
            "        escalation: [{after: 60, approvers: [a]}]\n        on_timeout: {escalate_to: [b], after_seconds: 60}\n".into(),
            "either on_timeout or escalation, not both",
        ),
    ] {
        let e = rule_err(&keys);
        assert!(
            e.starts_with("g.yaml:4: policy `a.b-v1` rules[0]: ") && e.contains(want),
            "{keys}: {e}"
        );
    }
    // An unknown key in a step is a YAML error with its line.
    let e = rule_err("        escalation: [{after: 60, approvers: [a], role: b}]\n");
    assert!(e.starts_with("g.yaml:5"), "{e}");
}

/// Issue 14 §8: the policy set's hash covers everything that decides a verdict — an edit of an
/// agent file's `approval` changes it as an edit of a governance policy does; file names and
/// load order do not.
#[test]
fn the_policy_set_hash_covers_agent_and_governance_files_not_their_names() {
    let hash = |agents: &[(&str, &str)], gov: &[(&str, &str)]| {
        let own = |f: &[(&str, &str)]| -> Vec<(String, String)> {
            f.iter()
                .map(|(n, t)| (n.to_string(), t.to_string()))
                .collect()
        };
        Registry::load(&own(agents), &own(gov))
            .unwrap()
            .policy_set_sha256
    };
    let base = hash(&[("a.agf.yaml", AGENT)], &[("g.yaml", GOV)]);
    assert_eq!(
        base,
        hash(&[("renamed.agf.yaml", AGENT)], &[("other.yaml", GOV)])
    );
    let looser = format!("{AGENT}\n# edited\n");
    assert_ne!(base, hash(&[("a.agf.yaml", &looser)], &[("g.yaml", GOV)]));
    assert_ne!(
        base,
        hash(
            &[("a.agf.yaml", AGENT)],
            &[("g.yaml", &format!("{GOV}\n# edited\n"))]
        )
    );
}

/// Attack (issue 14 §4): a rule that needs a passkey-signed approval but says
/// `default_decision: approve` would let the timeout approve the call with no passkey at all.
/// The default of such a call is `reject`.
#[test]
fn a_call_that_needs_a_passkey_is_never_approved_by_its_timeout() {
    let gov = "policies:\n  - id: acme.finance.payments-v1\n    rules:\n      - {tool: transfer, risk_tier: R2, require_passkey: true, default_decision: approve}\n";
    let under = |gov: String| {
        let r = Registry::load(
            &[("a.agf.yaml".into(), AGENT.into())],
            &[("g.yaml".into(), gov)],
        )
        .unwrap();
        verdict(
            &r,
            "transfer",
            None,
            json!({"amount": 5000, "to": "ext-acme"}),
        )
    };
    let v = under(gov.to_string());
    assert!(v.terms.require_passkey, "{v:?}");
    assert_eq!(v.terms.default_decision.as_str(), "reject");
    let v = under(gov.replace("require_passkey: true", "require_passkey: false"));
    assert_eq!(v.terms.default_decision.as_str(), "approve");
}

/// Attack (found by review): load errors and warnings quoted ids, field names and file names
/// as they were, so an agent or governance file could send an escape sequence (`\e[2J`) or a
/// line break — a forged `FILE:LINE:` problem of its own — to whoever reads them. Each is
/// rendered on one line with such characters as visible `\uXXXX` escapes.
#[test]
fn control_characters_from_a_file_are_escaped_in_load_errors_and_warnings() {
    let agent = "metadata:\n  id: \"a\\e[2J\\ng.yaml:1: fine\"\n".to_string();
    let e = Registry::load(&[("a\u{202e}.agf.yaml".into(), agent)], &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(r"a\u202e.agf.yaml:2: metadata.id `a\u001b[2J\u000ag.yaml:1: fine`")
            && !e.contains(['\u{1b}', '\n', '\u{202e}']),
        "{e:?}"
    );
    let agent = "metadata: {id: a}\n\"x\\e]0;t\\a\": 1\n".to_string();
    let r = Registry::load(&[("a.agf.yaml".into(), agent)], &[]).unwrap();
    assert!(
        r.warnings.iter().any(|w| w.contains(r"x\u001b]0;t\u0007"))
            && !r.warnings.iter().any(|w| w.contains(['\u{1b}', '\u{7}'])),
        "{:?}",
        r.warnings
    );
}

/// Agent-wide thresholds (`rate.per: agent`, `cost.max_per_agent` with `per_seconds`): each
/// combination that would not count what it reads as counting is refused at load with the
/// file, the rule's line and the key; the good forms load, and `per` defaults to `session`.
#[test]
fn agent_wide_thresholds_refuse_bad_combinations_at_load() {
    for keys in [
        "        thresholds: {rate: {max: 5, per_seconds: 60, per: agent}}\n",
        "        thresholds: {rate: {max: 5, per_seconds: 60, per: session}}\n",
        "        thresholds: {cost: {argument: amount, max_per_agent: 10000, per_seconds: 86400}}\n",
        "        thresholds: {cost: {argument: amount, max_per_session: 10, max_per_agent: 0, per_seconds: 604800}}\n",
    ] {
        assert_eq!(rule_err(keys), "", "{keys}");
    }
    for (keys, want) in [
        (
            "        thresholds: {cost: {argument: amount}}\n",
            "thresholds.cost needs max_per_session, max_per_agent (with per_seconds) or both",
        ),
        (
            "        thresholds: {cost: {argument: amount, max_per_agent: 100}}\n",
            "thresholds.cost.max_per_agent needs per_seconds",
        ),
        (
            "        thresholds: {cost: {argument: amount, max_per_session: 100, per_seconds: 60}}\n",
            "thresholds.cost.per_seconds is the window of max_per_agent and needs it",
        ),
        (
            "        thresholds: {cost: {argument: amount, max_per_agent: 100, per_seconds: 0}}\n",
            "thresholds.cost.per_seconds 0 is out of range (1 to 604800 seconds)",
        ),
        (
            "        thresholds: {cost: {argument: amount, max_per_agent: 100, per_seconds: 604801}}\n",
            "thresholds.cost.per_seconds 604801 is out of range",
        ),
        (
            "        thresholds: {cost: {argument: amount, max_per_agent: -1, per_seconds: 60}}\n",
            "thresholds.cost.max_per_agent -1 is out of range (a finite number ≥ 0)",
        ),
        (
            "        thresholds: {cost: {argument: amount, max_per_agent: .nan, per_seconds: 60}}\n",
            "thresholds.cost.max_per_agent NaN is out of range",
        ),
    ] {
        let e = rule_err(keys);
        assert!(
            e.starts_with("g.yaml:4: policy `a.b-v1` rules[0]: ") && e.contains(want),
            "{keys}: {e}"
        );
    }
    // An unknown `per` (a typo would otherwise count per session) is a YAML error with the
    // file and line, naming the accepted values.
    let e = rule_err("        thresholds: {rate: {max: 5, per_seconds: 60, per: agents}}\n");
    assert!(
        e.starts_with("g.yaml:5") && e.contains("session") && e.contains("agent"),
        "{e}"
    );
    let e = rule_err(
        "        thresholds: {cost: {argument: a, max_per_session: 1, max_per_agnet: 5}}\n",
    );
    assert!(
        e.starts_with("g.yaml:5") && e.contains("max_per_agnet"),
        "{e}"
    );
}

/// Attack (found by review): a rule's `tool` glob of 500,000 `*a` pairs beside a rule for a
/// tool of a million `a`s: the load's pair check matched one against the other, and the `glob`
/// crate goes a call deeper at each `*`, so the stack overflowed and a reload aborted the
/// gateway. A tool or agent glob is at most 256 bytes and 16 `*`, and an agent id at most 256
/// bytes; each stops the load at its file and line.
#[test]
fn a_glob_or_id_past_its_bound_stops_the_load_at_its_line() {
    let stars = "*a".repeat(17);
    let gov = |tool: &str, agents: &str| {
        format!(
            "policies:\n  - id: a.b-v1\n    selector: {{agents: [\"{agents}\"]}}\n    rules:\n      - tool: \"{tool}\"\n"
        )
    };
    let refused = |tool: &str, agents: &str| {
        Registry::load(&[], &[("g.yaml".into(), gov(tool, agents))])
            .expect_err("refused")
            .to_string()
    };
    let e = refused(&stars, "bot");
    assert!(
        e.contains("g.yaml:5") && e.contains("more than 16 `*`"),
        "{e}"
    );
    let e = refused(&"a".repeat(300), "bot");
    assert!(e.contains("is 300 bytes long: at most 256"), "{e}");
    let e = refused("pay", &stars);
    assert!(
        e.contains("selector.agents") && e.contains("more than 16 `*`"),
        "{e}"
    );
    // At the bounds, a glob loads.
    let sixteen = "*a".repeat(16);
    assert!(Registry::load(&[], &[("g.yaml".into(), gov(&sixteen, "b*"))]).is_ok());
    let id = "a".repeat(257);
    let e = load_err(&format!("metadata: {{id: {id}}}\n"), "policies: []\n");
    assert!(e.contains("at most 256 bytes"), "{e}");
}

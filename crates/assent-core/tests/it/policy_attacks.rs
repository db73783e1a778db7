//! Policy files an attacker (or a mistake an attacker waits for) writes so that a rule reads
//! one way to its author and another way to the gatekeeper; each was found by review and is
//! now a load error or the reading the author meant.

use crate::kit::{AGENT, GOV, bot_policy, kind, load_err, reg_plus, verdict};
use assent_core::VerdictKind;
use assent_core::condition::{MAX_GROUPS, MAX_LIST_ITEMS, MAX_PATTERNS};
use serde_json::json;

fn deny_when(matcher: &str) -> String {
    bot_policy(
        "a.deny-v1",
        &format!(
            "      - tool: lookup\n        deny: {{condition: {{args_match: {{mode: {matcher}}}}}}}\n"
        ),
    )
}

/// Attack: YAML 1.1 read `in: [off, disabled]` as `[false, "disabled"]`, so the string
/// argument `"off"` matched nothing and the deny let the call through.
#[test]
fn yaml_1_1_boolean_words_in_a_deny_list_still_deny_the_string_the_agent_sends() {
    let r = reg_plus(AGENT, "d.yaml", &deny_when("{in: [off, disabled]}"));
    for mode in ["off", "disabled"] {
        assert_eq!(
            kind(&r, "lookup", None, json!({"mode": mode})),
            VerdictKind::Deny,
            "{mode}"
        );
    }
    assert_ne!(
        kind(&r, "lookup", None, json!({"mode": "on"})),
        VerdictKind::Deny
    );
    // A bare literal too: `mode: no` is the string "no".
    let r = reg_plus(AGENT, "d.yaml", &deny_when("no"));
    assert_eq!(
        kind(&r, "lookup", None, json!({"mode": "no"})),
        VerdictKind::Deny
    );
}

/// A list of two types can only ever match one of them; it is refused with the types named.
#[test]
fn a_match_list_mixing_types_is_refused_at_load() {
    let e = load_err(AGENT, &deny_when("{not_in: [\"1\", 1]}"));
    assert!(
        e.starts_with("g.yaml:")
            && e.contains("`not_in` mixes items of two types (a string and a number)"),
        "{e}"
    );
}

/// A typed boolean spelled the YAML 1.1 way is a load error naming its line, not a silent
/// `true`.
#[test]
fn a_boolean_spelled_yes_is_refused_at_load_with_its_line() {
    let gov = "policies:\n  - id: a.b-v1\n    rules:\n      - tool: x\n        irreversible: yes\n";
    let e = load_err(AGENT, gov);
    assert!(e.starts_with("g.yaml:5: invalid boolean"), "{e}");
}

/// Attack: a `deny` whose pattern did not compile loaded without a warning and held every call
/// it covered for a person to approve, instead of denying it.
#[test]
fn a_deny_pattern_that_does_not_compile_stops_the_load() {
    let e = load_err(AGENT, &deny_when("{pattern: \"prod(\"}"));
    assert!(
        e.starts_with("g.yaml:5: policy `a.deny-v1` rules[0]: deny: condition: key `mode`: `pattern` does not compile"),
        "{e}"
    );
}

/// Attack: a condition is evaluated on every call it covers, inside the store's write
/// transaction; one with thousands of groups, patterns or list items slowed every agent.
#[test]
fn an_oversized_condition_is_refused_at_load() {
    let groups = vec!["{args_match: {mode: x}}"; MAX_GROUPS + 1].join(", ");
    let gov = bot_policy(
        "a.deny-v1",
        &format!("      - tool: lookup\n        deny: {{condition: [{groups}]}}\n"),
    );
    let e = load_err(AGENT, &gov);
    assert!(
        e.contains("condition too large: 65 groups (at most 64)"),
        "{e}"
    );

    let patterns = (0..=MAX_PATTERNS)
        .map(|i| format!("{{args_match: {{k{i}: {{pattern: a}}}}}}"))
        .collect::<Vec<_>>()
        .join(", ");
    let gov = bot_policy(
        "a.deny-v1",
        &format!("      - tool: lookup\n        deny: {{condition: [{patterns}]}}\n"),
    );
    let e = load_err(AGENT, &gov);
    assert!(
        e.contains("condition too large: 33 patterns (at most 32)"),
        "{e}"
    );

    let items = vec!["a"; MAX_LIST_ITEMS + 1].join(", ");
    let e = load_err(AGENT, &deny_when(&format!("{{in: [{items}]}}")));
    assert!(e.contains("`in` has 1025 items (at most 1024)"), "{e}");
    // At the bounds it loads.
    let items = vec!["a"; MAX_LIST_ITEMS].join(", ");
    reg_plus(AGENT, "d.yaml", &deny_when(&format!("{{in: [{items}]}}")));
    let _ = GOV;
}

/// Attack (a mistake an attacker waits for): `deny:` or `approval:` with nothing after it read
/// as no rule at all, so a half-written deny let every call through.
#[test]
fn an_empty_deny_or_approval_is_refused_at_load() {
    for key in ["deny", "approval"] {
        let gov = bot_policy("a.b-v1", &format!("      - tool: lookup\n        {key}:\n"));
        let e = load_err(AGENT, &gov);
        assert!(
            e.starts_with("g.yaml:5: policy `a.b-v1` rules[0]:")
                && e.contains(&format!("`{key}` must be true, false or an object")),
            "{key}: {e}"
        );
    }
    let agent = AGENT.replace(
        "    - alias: wipe\n      approval: {}\n",
        "    - alias: wipe\n      approval:\n",
    );
    let e = load_err(&agent, GOV);
    assert!(
        e.contains("a.agf.yaml:") && e.contains("`approval` must be true, false or an object"),
        "{e}"
    );
}

/// Found by review: each pattern was bounded (1 MiB compiled), their number only by the files'
/// size, so `POST /v1/policies/replay`, open to any operator key, compiled a 256 KiB candidate
/// of ten thousand short Unicode patterns (`\w{20}` compiles to about 1.1 MiB) to gigabytes,
/// and the gateway was killed for its memory. A load's patterns now share 128 MiB: 150 rules
/// with one such pattern each are refused naming the bound; the same rules with a plain
/// pattern each load.
#[test]
fn patterns_compiling_to_more_than_the_loads_budget_are_refused() {
    let rules = |pattern: &dyn Fn(usize) -> String| {
        (0..150)
            .map(|i| {
                let p = pattern(i);
                format!("      - tool: t{i}\n        deny: {{condition: {{args_match: {{k: {{pattern: '{p}'}}}}}}}}\n")
            })
            .collect::<String>()
    };
    let heavy = bot_policy("a.deny-v1", &rules(&|i| format!("\\w{{20}}{i}")));
    let e = load_err(AGENT, &heavy);
    assert!(
        e.contains("the patterns of the policy files compile to more than 128 MiB together"),
        "{e}"
    );
    let plain = bot_policy("a.deny-v1", &rules(&|i| format!("^/etc/{i}")));
    reg_plus(AGENT, "d.yaml", &plain);
}

/// Attack (found by review): each rendered text was bounded, not a verdict's texts together;
/// a candidate policy of 2,000 rules covering `wipe`, each with `side_effects` and `rollback`
/// of `{{tool_args}}`, rendered 4,000 copies of the arguments for one call (hundreds of MB
/// over padded ones, on the one replay turn). The notes share one budget of
/// `MAX_RENDERED_BYTES`; past it one note says how many were left out.
#[test]
fn thousands_of_rules_notes_share_one_rendering_budget() {
    use assent_core::template::MAX_RENDERED_BYTES;
    let rule = "      - tool: wipe\n        side_effects: \"{{tool_args}}\"\n        rollback: \"undo {{tool_args}}\"\n";
    let r = reg_plus(
        AGENT,
        "many.yaml",
        &bot_policy("a.many-notes-v1", &rule.repeat(2_000)),
    );
    let v = verdict(&r, "wipe", None, json!({"blob": "x".repeat(16 * 1024)}));
    let notes = v.terms.side_effects.iter().chain(&v.terms.rollback);
    let bytes: usize = notes.map(String::len).sum();
    assert!(bytes < MAX_RENDERED_BYTES + 4_096, "{bytes}");
    // At most 4 KiB a note: some sixteen of them, then the one saying the rest were left out.
    assert!(
        v.terms.side_effects.len() < 20,
        "{}",
        v.terms.side_effects.len()
    );
    let last = v.terms.side_effects.last().unwrap();
    assert!(last.contains("more not shown"), "{last}");
    assert!(
        v.terms.rollback[0].contains("2000 more not shown"),
        "{:?}",
        v.terms.rollback
    );
}

/// Attack (found by review): a team adds `labels: {env: sandbox}` to its own agent file, and
/// the sandbox's relaxed policy (selected by that label: approving default, 5 s timeout, no
/// passkey or duties, `dev` may decide) loosened what the policy selecting the agent by id
/// says of its R4 `wipe`: approved by its timeout after 5 s, or by a `dev`. A policy picked
/// by the agent's own namespace or labels only tightens; picked by id, it may loosen.
#[test]
fn an_agent_labelling_itself_into_a_relaxed_policy_loosens_nothing() {
    let gov = |sandbox_selector: &str| {
        format!(
            r#"policies:
  - id: a.strict-v1
    selector: {{agents: [treasury_bot]}}
    rules:
      - tool: wipe
        risk_tier: R4
        approvers: [finance]
  - id: a.sandbox-v1
    selector: {sandbox_selector}
    rules:
      - tool: "*"
        timeout_seconds: 5
        default_decision: approve
        require_passkey: false
        separation_of_duties: false
        approvers: [dev]
"#
        )
    };
    let labelled = AGENT.replace(
        "labels: {team: treasury}",
        "labels: {team: treasury, env: sandbox}",
    );
    assert_ne!(labelled, AGENT);
    let r = reg_plus(&labelled, "teams.yaml", &gov("{labels: {env: sandbox}}"));
    let v = verdict(&r, "wipe", None, json!({}));
    assert_eq!(v.kind, VerdictKind::Confirm);
    assert!(
        v.terms.require_passkey && v.terms.separation_of_duties,
        "{v:?}"
    );
    assert_eq!(
        v.terms.default_decision,
        assent_core::approval::DefaultDecision::Reject
    );
    assert_eq!(v.terms.approvers, ["finance"]);
    assert_ne!(v.timeout_seconds, Some(5));
    // Picked by id, the operators chose it: it loosens as before.
    let r = reg_plus(&labelled, "teams.yaml", &gov("{agents: [treasury_bot]}"));
    let v = verdict(&r, "wipe", None, json!({}));
    assert!(!v.terms.require_passkey, "{v:?}");
    assert_eq!(v.timeout_seconds, Some(5));
}

/// Attack (found by review): a setting written with no value is YAML null, which serde read as
/// the setting left out — and left out, each of these allows more: a rule's `server:` covers
/// the tool on every server, `thresholds: {rate: }` (or `cost`, `output_bytes`, a cost's
/// `max_per_agent`) holds nothing, `scope: {paths: }` confines nothing, a selector's
/// `namespace:` selects every agent (and may loosen their rules), an agent file's
/// `namespace:` escapes the policies selecting its namespace. Each is a load error with its
/// file and line.
#[test]
fn a_setting_written_with_no_value_is_a_load_error_not_the_setting_left_out() {
    use crate::kit::rule_err;
    for keys in [
        "        server:\n",
        "        thresholds: {rate: }\n",
        "        thresholds: {output_bytes: ~}\n",
        "        thresholds: {cost: {argument: amount, max_per_session: 100, max_per_agent: }}\n",
        "        thresholds: {cost: {argument: amount, max_per_session: null, max_per_agent: 5, per_seconds: 60}}\n",
        "        scope: {paths: }\n",
        "        scope: {domains: null}\n",
    ] {
        let e = rule_err(keys);
        assert!(
            e.contains("g.yaml:5") && e.contains("no value (null)"),
            "{keys}: {e}"
        );
    }
    assert_eq!(rule_err("        server: github\n"), "");
    let gov = "policies:\n  - id: a.b-v1\n    selector: {agents: ['*'], namespace: }\n    rules:\n      - tool: x\n";
    let e = assent_core::policy::Registry::load(&[], &[("g.yaml".into(), gov.into())])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("g.yaml:3") && e.contains("no value (null)"),
        "{e}"
    );
    let agent = "metadata: {id: bot, namespace: }\n";
    let e = assent_core::policy::Registry::load(&[("bot.agf.yaml".into(), agent.into())], &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("bot.agf.yaml:1") && e.contains("no value (null)"),
        "{e}"
    );
}

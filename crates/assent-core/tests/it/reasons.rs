//! The reasons a verdict gives name the clause that decided (issue 10 B): the approval or
//! deny condition that matched, with the actual values, or the one that could not be
//! evaluated.

use crate::kit::{AGENT, assert_denied, assert_reason, bot_policy, reg, reg_plus, verdict};
use assent_core::VerdictKind;
use serde_json::json;

/// Issue 10 B: "approval condition matched" told the operator nothing; every reason now names
/// the clause that matched (with the actual value) or could not be evaluated.
#[test]
fn reasons_name_the_clause_that_matched_or_could_not_be_evaluated() {
    let r = reg();
    let v = verdict(&r, "transfer", None, json!({"amount": 5000, "to": "bob"}));
    assert_reason(
        &v,
        "approval condition matched: amount > 1000 (amount = 5000)",
    );
    let v = verdict(&r, "transfer", None, json!({"amount": 5000, "to": "ext-9"}));
    assert_reason(
        &v,
        r#"matched: amount > 1000 (amount = 5000); or to matches pattern "^ext-" (to = "ext-9")"#,
    );
    let v = verdict(&r, "write_file", Some("fs"), json!({"path": "/etc/x"}));
    let gov = v
        .terms
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
    let v = verdict(&r, "transfer", None, json!({"amount": 5}));
    assert_reason(
        &v,
        r#"approval condition cannot be evaluated (to matches pattern "^ext-": argument `to` is missing)"#,
    );
    // A deny condition: the reason names the clause; the agent sees the rule's message.
    let deny = r#"      - tool: read_file
        server: fs
        deny:
          condition: {args_match: {path: {pattern: "^/etc/shadow"}}}
          message_template: "no secrets"
      - tool: write_file
        deny: {condition: {args_match: {mode: {in: ["0777"]}}}}
"#;
    let r = reg_plus(AGENT, "d.yaml", &bot_policy("acme.fs.etc-v1", deny));
    let v = verdict(&r, "read_file", Some("fs"), json!({"path": "/etc/shadow"}));
    assert_eq!(
        (v.kind, v.terms.message.as_str()),
        (VerdictKind::Deny, "no secrets")
    );
    assert_reason(
        &v,
        r#"(deny condition matched: path matches pattern "^/etc/shadow" (path = "/etc/shadow")): no secrets"#,
    );
    let v = verdict(&r, "write_file", Some("fs"), json!({"mode": "0777"}));
    assert_denied(
        &v,
        r#"deny condition matched: mode in ["0777"] (mode = "0777")"#,
    );
    let v = verdict(&r, "write_file", Some("fs"), json!({"mode": 511}));
    assert_eq!(v.kind, VerdictKind::Confirm);
    assert_reason(
        &v,
        r#"deny condition cannot be evaluated (mode in ["0777"]: argument `mode` is a number but `in` lists values of another type)"#,
    );
}

/// Found by review: a deny whose condition could not be evaluated against a call (here `mode`
/// is missing) was a hold with no trigger, so a session grant of the tool covered it, an
/// approving `default_decision` of another covering rule approved it at the timeout, and the
/// agent's own user could approve it in the client; and a deny with one alternative matching
/// (`path` under /etc/) and another unevaluable was only that hold. Now the matching
/// alternative denies, and an unevaluable deny names the trigger `deny_unevaluable`: no grant
/// covers it, its default is reject, it is asked of an operator.
#[test]
fn a_deny_that_cannot_be_evaluated_is_no_grant_s_and_no_default_s_to_approve() {
    let deny = r#"      - tool: write_file
        approval: true
        default_decision: approve
        in_client_approval: true
        deny:
          condition:
            - {args_match: {path: {pattern: "^/etc/"}}}
            - {args_match: {mode: {in: ["0777"]}}}
"#;
    let r = reg_plus(AGENT, "d.yaml", &bot_policy("acme.fs.deny-v1", deny));
    // One alternative matches, the other cannot be evaluated: denied.
    let v = verdict(
        &r,
        "write_file",
        Some("fs"),
        json!({"path": "/etc/cron.d/x"}),
    );
    assert_denied(&v, r#"path matches pattern "^/etc/""#);
    // Neither matches, one cannot be evaluated: held for an operator, never let through.
    let v = verdict(&r, "write_file", Some("fs"), json!({"path": "/srv/a"}));
    assert_eq!(v.kind, VerdictKind::Confirm);
    assert_eq!(v.terms.triggers, vec!["deny_unevaluable".to_string()]);
    assert!(!assent_core::grant::may_use_grant(&v.terms, false));
    assert_eq!(
        v.terms.default_decision,
        assent_core::approval::DefaultDecision::Reject
    );
    assert!(!v.terms.in_client_approval);
    // One predicate of a group false, another's argument missing: the group does not match
    // (false and unknown is false), so no deny_unevaluable for a call that cannot match.
    let and = r#"      - tool: note
        approval: true
        deny: {condition: {args_match: {env: prod, force: true}}}
"#;
    let r2 = reg_plus(AGENT, "d2.yaml", &bot_policy("acme.fs.and-v1", and));
    let v = verdict(&r2, "note", None, json!({"env": "dev"}));
    assert_eq!(v.kind, VerdictKind::Confirm);
    assert!(v.terms.triggers.is_empty(), "{:?}", v.terms.triggers);
    let v = verdict(&r2, "note", None, json!({"env": "prod"}));
    assert_eq!(v.terms.triggers, vec!["deny_unevaluable".to_string()]);
    // Evaluable and not matching: the rule's own terms, a grant may cover it.
    let v = verdict(
        &r,
        "write_file",
        Some("fs"),
        json!({"path": "/srv/a", "mode": "0644"}),
    );
    assert_eq!(v.kind, VerdictKind::Confirm);
    assert!(v.terms.triggers.is_empty(), "{:?}", v.terms.triggers);
    assert!(assent_core::grant::may_use_grant(&v.terms, false));
    assert_eq!(
        v.terms.default_decision,
        assent_core::approval::DefaultDecision::Approve
    );
    assert!(v.terms.in_client_approval);
}

//! Unit tests of mining only the arguments a tool really takes ([`super::known`]): a score the
//! agent made up that combines what people judged is never the pattern, a tool of which no
//! argument is known gets a note instead of a suggestion, and a tool whose honest calls vary in
//! many undeclared arguments still has its declared ones mined.

use super::tests::{files, held, registry};
use super::*;
use serde_json::json;

/// The pays of the attack: twelve of 10…120 to `acme` and three of 2,000 to `payroll`
/// approved, 500 and 900 to `acme` rejected. The agent sets `risk_score` 1 on the calls it
/// expects approved and 99 on the others, so the score covers all 15 approvals while `amount`
/// covers 12 and `to` 3.
fn scored() -> Vec<Recorded> {
    let mut calls: Vec<(i64, &str, ApprovalStatus)> = (1..=12)
        .map(|i| (i * 10, "acme", ApprovalStatus::Approved))
        .collect();
    calls.extend([(2000, "payroll", ApprovalStatus::Approved); 3]);
    calls.extend([
        (500, "acme", ApprovalStatus::Rejected),
        (900, "acme", ApprovalStatus::Rejected),
    ]);
    calls
        .into_iter()
        .enumerate()
        .map(|(i, (amount, to, st))| {
            let score = if st == ApprovalStatus::Approved {
                1
            } else {
                99
            };
            let args = json!({"amount": amount, "to": to, "risk_score": score});
            held(i as i64, "pay", args, st, "alice")
        })
        .collect()
}

/// `pay`'s input schema, declaring `amount` and `to` (not `risk_score`).
fn pay_schema() -> Schemas {
    let mut s = Schemas::default();
    let schema = json!({"type": "object", "properties": {"amount": {"type": "number"}, "to": {"type": "string"}}});
    s.declare(None, "pay", &schema);
    s
}

/// Attack: an agent adds a `risk_score` of its own making, low on the calls it expects people
/// to approve and high on the others. It covers every approval, more than any real argument,
/// so "ask unless 0 <= risk_score <= 1" was suggested, and once accepted the agent passes any
/// call by sending `risk_score: 1`. Only the arguments the tool declares (or the policy names)
/// are mined: with `pay`'s schema the pattern is on `amount`; with no schema and no rule naming
/// an argument there is no suggestion at all, and a note saying why.
#[test]
fn a_made_up_score_combining_the_judgements_is_never_mined() {
    let (f, h) = (files(), scored());
    let s = Settings::with_min(10);
    let found = suggest_with(&registry(&f), &f, &h, s, &pay_schema());
    let keys: Vec<&str> = found
        .suggestions
        .iter()
        .filter(|s| s.tool == "pay")
        .map(|s| s.pattern.key())
        .collect();
    assert_eq!(keys, ["amount"], "{:?}", found.suggestions);
    // What every covered approval sent alike is required too ([`mine::pins`]): the made-up
    // score as well, which only narrows the exception (the agent must keep sending it).
    assert_eq!(
        found.suggestions[0].description,
        "ask unless 10 <= amount <= 120 and risk_score == 1 and to == \"acme\""
    );
    assert!(found.unmined.is_empty(), "{:?}", found.unmined);
    // No schema, and no rule names an argument of `pay`: nothing keyed on an argument, and the
    // reason shown instead of silence.
    let bare = suggest_with(&registry(&f), &f, &h, s, &Schemas::default());
    assert!(
        bare.suggestions.iter().all(|s| s.tool != "pay"),
        "{:?}",
        bare.suggestions
    );
    assert_eq!(bare.unmined.len(), 1, "{:?}", bare.unmined);
    let note = &bare.unmined[0];
    assert_eq!((note.tool.as_str(), note.decisions), ("pay", 17));
    assert!(
        note.reason.contains("no argument of this tool is known"),
        "{note:?}"
    );
    assert!(suggest(&registry(&f), &f, &h, s).is_empty());
    // A schema only an agent's relay reported is not counted, and the note says so.
    let mut reported = Schemas::default();
    reported.unreviewed.insert((None, "pay".into()));
    let r = suggest_with(&registry(&f), &f, &h, s, &reported);
    assert!(r.suggestions.is_empty(), "{:?}", r.suggestions);
    assert!(r.unmined[0].reason.contains("relay"), "{:?}", r.unmined);
}

/// The same attack on denials: a made-up `risk_score` of 99 on the calls the agent expects
/// rejected is never "deny when risk_score >= 99" (which the agent then leaves low).
#[test]
fn a_made_up_score_gets_no_deny_suggested() {
    let f = files();
    let mut h: Vec<Recorded> = Vec::new();
    // Rejected: twelve of 1,010…1,120 and three of 5; approved: 10 and 20.
    let mut calls: Vec<(i64, ApprovalStatus)> = (1..=12)
        .map(|i| (1000 + i * 10, ApprovalStatus::Rejected))
        .collect();
    calls.extend([(5, ApprovalStatus::Rejected); 3]);
    calls.extend([
        (10, ApprovalStatus::Approved),
        (20, ApprovalStatus::Approved),
    ]);
    for (i, (amount, st)) in calls.into_iter().enumerate() {
        let score = if st == ApprovalStatus::Approved {
            1
        } else {
            99
        };
        let args = json!({"amount": amount, "to": "acme", "risk_score": score});
        h.push(held(i as i64, "pay", args, st, "alice"));
    }
    let found = suggest_with(&registry(&f), &f, &h, Settings::with_min(10), &pay_schema());
    let deny: Vec<&Suggestion> = found
        .suggestions
        .iter()
        .filter(|s| s.kind == Kind::Deny)
        .collect();
    assert_eq!(deny.len(), 1, "{:?}", found.suggestions);
    assert_eq!(deny[0].pattern.key(), "amount", "{deny:?}");
}

/// A rule naming an argument in a condition makes it minable without a schema (the operator
/// wrote it), and only it: the made-up score beside it is still never the pattern.
#[test]
fn an_argument_a_rule_names_is_mined_without_a_schema() {
    let mut f = files();
    f.governance.push((
        "pay.yaml".into(),
        "policies:\n  - id: acme.pay-v1\n    selector: {agents: [bot]}\n    rules:\n      - tool: pay\n        approval: {condition: {args_match: {amount: {gte: 0}}}}\n".into(),
    ));
    let found = suggest_with(
        &registry(&f),
        &f,
        &scored(),
        Settings::with_min(10),
        &Schemas::default(),
    );
    let keys: Vec<&str> = found.suggestions.iter().map(|s| s.pattern.key()).collect();
    assert_eq!(keys, ["amount"], "{:?}", found.suggestions);
    assert!(found.unmined.is_empty(), "{:?}", found.unmined);
}

/// Found by review: a tool whose honest calls vary in more than 32 arguments (trace ids,
/// options) got no suggestion at all, deny ones included. The cap counts the declared
/// arguments only, so `amount` is still mined; when the declared ones themselves are too
/// many, the note says so.
#[test]
fn a_tool_varying_in_many_undeclared_arguments_still_has_its_declared_ones_mined() {
    let f = files();
    let noisy = |i: i64, amount: i64, st| {
        let mut args = json!({"amount": amount, "to": "acme"});
        for k in 0..40 {
            args[format!("opt_{k:02}")] = json!(format!("v{}", i * 41 + k));
        }
        held(i, "pay", args, st, "alice")
    };
    let mut h: Vec<Recorded> = (1..=12)
        .map(|i| noisy(i, i * 10, ApprovalStatus::Approved))
        .collect();
    h.push(noisy(13, 500, ApprovalStatus::Rejected));
    h.push(noisy(14, 900, ApprovalStatus::Rejected));
    let s = Settings::with_min(10);
    let found = suggest_with(&registry(&f), &f, &h, s, &pay_schema());
    assert_eq!(found.suggestions.len(), 1, "{:?}", found.unmined);
    assert_eq!(found.suggestions[0].pattern.key(), "amount");
    // Every one of the 41 varying arguments declared: none is weighed, and the note says why.
    let mut all = pay_schema();
    let props: serde_json::Map<String, Value> = (0..40)
        .map(|k| (format!("opt_{k:02}"), json!({})))
        .collect();
    all.declare(None, "pay", &json!({"properties": props}));
    let crowded = suggest_with(&registry(&f), &f, &h, s, &all);
    assert!(crowded.suggestions.is_empty(), "{:?}", crowded.suggestions);
    assert!(
        crowded.unmined[0].reason.contains("more than 32"),
        "{:?}",
        crowded.unmined
    );
}

/// Found by review: a rule matching tools by pattern (`tool: "*"`) named `risk_score` in its
/// condition, which made the agent's made-up score minable on `pay` though `pay` has no such
/// argument; and a rule's name outside a trusted schema counted as an argument of the tool.
/// Only rules written for the tool itself count, and a trusted schema, when there is one,
/// says alone what the tool takes.
#[test]
fn a_pattern_rule_naming_an_argument_does_not_make_it_an_argument_of_every_tool() {
    let mut f = files();
    f.governance.push((
        "all.yaml".into(),
        "policies:\n  - id: acme.all-v1\n    selector: {agents: [bot]}\n    rules:\n      - tool: \"*\"\n        approval: {condition: {args_match: {risk_score: {gt: 50}}}}\n".into(),
    ));
    let s = Settings::with_min(10);
    let bare = suggest_with(&registry(&f), &f, &scored(), s, &Schemas::default());
    assert!(
        bare.suggestions
            .iter()
            .all(|x| x.pattern.key() != "risk_score"),
        "{:?}",
        bare.suggestions
    );
    assert_eq!(bare.unmined.len(), 1, "{:?}", bare.unmined);
    // The same name in a rule for `pay` itself, but `pay`'s trusted schema lacks it.
    let mut g = files();
    g.governance.push((
        "pay.yaml".into(),
        "policies:\n  - id: acme.pay-v1\n    selector: {agents: [bot]}\n    rules:\n      - tool: pay\n        approval: {condition: {args_match: {risk_score: {gt: 50}}}}\n".into(),
    ));
    let found = suggest_with(&registry(&g), &g, &scored(), s, &pay_schema());
    let keys: Vec<&str> = found.suggestions.iter().map(|x| x.pattern.key()).collect();
    assert_eq!(keys, ["amount"], "{:?}", found.suggestions);
}

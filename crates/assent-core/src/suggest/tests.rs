//! Unit tests of the suggestions: a planted always-approved prefix and bound, a deny pattern,
//! the sources a prompt comes from, calls held by tier giving none, and `not_pattern`.

use super::*;
use crate::canonical::ToolCall;
use crate::risk::RiskTier;
use serde_json::json;

const AGENT: &str = "metadata: {id: bot}\naction_space:\n  local_tools:\n    - alias: git_push\n    - alias: pay\n      approval: {message_template: \"pay {{tool_args.amount}}?\"}\n    - alias: wipe\n";
const GOV: &str = "policies:\n  - id: acme.dev-v1\n    selector: {agents: [bot]}\n    rules:\n      - tool: git_push\n        approval: true\n      - tool: wipe\n        approval: true\n        risk_tier: R3\n";

pub(super) fn files() -> PolicyFiles {
    PolicyFiles {
        agents: vec![("bot.agf.yaml".into(), AGENT.into())],
        governance: vec![("gov.yaml".into(), GOV.into())],
    }
}

pub(super) fn registry(f: &PolicyFiles) -> Registry {
    Registry::load(&f.agents, &f.governance).unwrap()
}

pub(super) fn held(
    seq: i64,
    tool: &str,
    args: Value,
    status: ApprovalStatus,
    by: &str,
) -> Recorded {
    Recorded {
        seq,
        at_ms: 1_000_000 + seq,
        agent: "bot".into(),
        session_id: format!("s{seq}"),
        call: ToolCall::new(tool, None, args).unwrap(),
        risk_tier: RiskTier::R2,
        reasons: vec![],
        was: Was::Held {
            status,
            decided_by: Some(by.into()),
            decided_at_ms: Some(2_000_000),
            edited: false,
        },
        redeemed_at_ms: None,
    }
}

/// [`super::suggest`] for a gateway holding an input schema for every tool of `history` that
/// declares every argument the history sends it (the made-up arguments of the attacks too, so
/// that the defences beyond [`known`] are what these tests exercise).
pub(super) fn suggest(
    reg: &Registry,
    f: &PolicyFiles,
    history: &[Recorded],
    s: Settings,
) -> Vec<Suggestion> {
    let mut all = Schemas::default();
    for r in history {
        let names = r.call.arguments.as_object().into_iter().flatten();
        let props: serde_json::Map<String, Value> =
            names.map(|(k, _)| (k.clone(), json!({}))).collect();
        all.declare(
            r.call.server.as_deref(),
            &r.call.tool,
            &json!({"properties": props}),
        );
    }
    suggest_with(reg, f, history, s, &all).suggestions
}

/// 25 pushes to `feature/…` approved (too many to list); pushes to `main` approved 3 times
/// and rejected twice.
fn pushes() -> Vec<Recorded> {
    pushes_named(|i| format!("feature/f{i}"))
}

/// Pushes of the 25 branches `name(0..25)`, approved by alice and bob in turn, and to `main`
/// approved three times and rejected twice.
pub(super) fn pushes_named(name: impl Fn(i64) -> String) -> Vec<Recorded> {
    let mut h: Vec<Recorded> = (0..25)
        .map(|i| {
            let by = ["alice", "bob"][(i % 2) as usize];
            let st = ApprovalStatus::Approved;
            held(i, "git_push", json!({"branch": name(i)}), st, by)
        })
        .collect();
    for i in 25..30 {
        let st = if i < 28 {
            ApprovalStatus::Approved
        } else {
            ApprovalStatus::Rejected
        };
        h.push(held(i, "git_push", json!({"branch": "main"}), st, "alice"));
    }
    h
}

#[test]
fn a_planted_prefix_becomes_a_narrower_condition_that_removes_exactly_its_prompts() {
    let (f, h) = (files(), pushes());
    let out = suggest(&registry(&f), &f, &h, Settings::with_min(10));
    let s = out
        .iter()
        .find(|s| s.kind == Kind::RemovePrompt)
        .expect("a suggestion");
    assert_eq!(s.tool, "git_push");
    assert_eq!(
        s.pattern,
        Constraint::Prefix {
            key: "branch".into(),
            prefix: "feature/".into()
        }
    );
    assert_eq!(s.evidence.decisions, 25);
    assert_eq!(s.evidence.deciders, ["alice", "bob"]);
    assert_eq!(s.replay.confirm_to_allow, 25);
    assert_eq!((s.replay.prompts_before, s.replay.prompts_after), (30, 5));
    assert_eq!(s.replay.loosened, 0);
    assert_eq!(s.edits.len(), 1);
    assert_eq!(s.edits[0].file, "gov.yaml");
    assert!(
        s.edits[0].yaml.contains("not_pattern"),
        "{}",
        s.edits[0].yaml
    );
    assert!(
        s.edits[0].location.contains("acme.dev-v1 rules[0]"),
        "{:?}",
        s.edits[0]
    );
}

/// Twelve calls of `pay` approved by alice (seq `i` from 0 with the arguments `approved(i)`),
/// then one with the arguments `rejected` she rejected (seq 20).
fn pays_then_rejected(approved: impl Fn(i64) -> Value, rejected: Value) -> Vec<Recorded> {
    let mut h: Vec<Recorded> = (0..12)
        .map(|i| held(i, "pay", approved(i), ApprovalStatus::Approved, "alice"))
        .collect();
    h.push(held(20, "pay", rejected, ApprovalStatus::Rejected, "alice"));
    h
}

/// The pattern `min <= amount <= max`.
fn amount_within(min: f64, max: f64) -> Constraint {
    Constraint::Within {
        key: "amount".into(),
        min,
        max,
    }
}

#[test]
fn an_amount_bound_narrows_the_agents_own_approval() {
    let f = files();
    let approved = |i: i64| json!({"amount": 10 + i * 10, "to": format!("r{i}")});
    let h = pays_then_rejected(approved, json!({"amount": 500, "to": "r1"}));
    let out = suggest(&registry(&f), &f, &h, Settings::with_min(10));
    let s = &out[0];
    assert_eq!(s.pattern, amount_within(10.0, 120.0));
    assert_eq!(s.edits[0].file, "bot.agf.yaml");
    assert!(s.edits[0].yaml.contains("gt: 120"), "{}", s.edits[0].yaml);
    assert!(s.edits[0].yaml.contains("lt: 10"), "{}", s.edits[0].yaml);
    assert!(
        s.edits[0].yaml.contains("message_template"),
        "the template is kept"
    );
    assert_eq!((s.replay.confirm_to_allow, s.replay.loosened), (12, 0));
}

#[test]
fn always_rejected_patterns_become_a_deny_policy() {
    let f = files();
    let mut h = pushes();
    for i in 30..55 {
        h.push(held(
            i,
            "git_push",
            json!({"branch": format!("release-{i}")}),
            ApprovalStatus::Rejected,
            "carol",
        ));
    }
    let out = suggest(&registry(&f), &f, &h, Settings::with_min(10));
    let d = out
        .iter()
        .find(|s| s.kind == Kind::Deny)
        .expect("a deny suggestion");
    assert_eq!(
        d.pattern,
        Constraint::Prefix {
            key: "branch".into(),
            prefix: "release-".into()
        }
    );
    assert_eq!(d.replay.to_deny, 25);
    assert_eq!(d.replay.loosened, 0);
    assert!(
        d.edits[0].yaml.contains("suggested.deny-git-push-v1"),
        "{}",
        d.edits[0].yaml
    );
    // The removal suggestion still comes first.
    assert_eq!(out[0].kind, Kind::RemovePrompt);
}

#[test]
fn calls_held_by_risk_tier_or_too_few_decisions_give_no_suggestion() {
    let f = files();
    let h: Vec<Recorded> = (0..15)
        .map(|i| {
            held(
                i,
                "wipe",
                json!({"disk": format!("tmp/d{i}")}),
                ApprovalStatus::Approved,
                "alice",
            )
        })
        .collect();
    assert!(suggest(&registry(&f), &f, &h, Settings::with_min(10)).is_empty());
    let err = edit::sources(&registry(&f), "bot", &h[0].call).unwrap_err();
    assert!(err.contains("R3"), "{err}");
    let few = pushes();
    assert!(suggest(&registry(&f), &f, &few, Settings::with_min(26)).is_empty());
}

#[test]
fn not_pattern_holds_when_the_regex_matches_nowhere_and_fails_closed_on_other_types() {
    let gov = "policies:\n  - id: p\n    selector: {agents: [bot]}\n    rules:\n      - tool: git_push\n        approval: {condition: {args_match: {branch: {not_pattern: \"^feature/\"}}}}\n";
    let reg = Registry::load(&[("a".into(), AGENT.into())], &[("g".into(), gov.into())]).unwrap();
    let v =
        |args: Value| crate::evaluate(&reg, "bot", &ToolCall::new("git_push", None, args).unwrap());
    use crate::VerdictKind::{Allow, Confirm};
    assert_eq!(v(json!({"branch": "feature/x"})).kind, Allow);
    let main = v(json!({"branch": "main"}));
    assert_eq!(main.kind, Confirm);
    assert!(
        main.terms
            .reasons
            .iter()
            .any(|r| r.text.contains("does not match pattern")),
        "{:?}",
        main.terms.reasons
    );
    assert_eq!(
        v(json!({"branch": 7})).kind,
        Confirm,
        "a number cannot be matched"
    );
    assert_eq!(
        v(json!({})).kind,
        Confirm,
        "a missing argument requires approval"
    );
}

#[test]
fn a_bound_joins_the_same_argument_in_an_existing_condition() {
    // `pay` asks over 100; approvals up to 220 and a rejection at 900: ask over 220 instead.
    let agent = "metadata: {id: bot}\naction_space:\n  local_tools:\n    - alias: pay\n      approval: {condition: {args_match: {amount: {gt: 100}}}}\n";
    let f = PolicyFiles {
        agents: vec![("bot.agf.yaml".into(), agent.into())],
        governance: vec![],
    };
    let h = pays_then_rejected(|i| json!({"amount": 110 + i * 10}), json!({"amount": 900}));
    let out = suggest(&registry(&f), &f, &h, Settings::with_min(10));
    let s = &out[0];
    assert_eq!(s.pattern, amount_within(110.0, 220.0));
    assert!(s.edits[0].yaml.contains("gt: 220"), "{}", s.edits[0].yaml);
    // Below the approvals it still asks, over 100 as before: `gt: 100` with `lt: 110`.
    assert!(s.edits[0].yaml.contains("lt: 110"), "{}", s.edits[0].yaml);
    assert_eq!((s.replay.confirm_to_allow, s.replay.loosened), (12, 0));
    assert_eq!((s.replay.prompts_before, s.replay.prompts_after), (13, 1));
}

#[test]
fn a_redacted_argument_is_never_written_into_a_suggested_rule() {
    // The card numbers people approved are secrets: no `in: [card numbers]` rule.
    let gov = "policies:\n  - id: acme.dev-v1\n    selector: {agents: [bot]}\n    rules:\n      - tool: git_push\n        approval: true\n        redact: [token]\n";
    let f = PolicyFiles {
        agents: vec![("bot.agf.yaml".into(), AGENT.into())],
        governance: vec![("gov.yaml".into(), gov.into())],
    };
    let h: Vec<Recorded> = (0..15)
        .map(|i| {
            let args = json!({"token": format!("tok-{}", i % 3), "branch": format!("b{i}")});
            held(i, "git_push", args, ApprovalStatus::Approved, "alice")
        })
        .collect();
    let out = suggest(&registry(&f), &f, &h, Settings::with_min(10));
    assert!(out.iter().all(|s| s.pattern.key() != "token"), "{out:?}");
    let text = serde_json::to_string(&out).unwrap();
    assert!(!text.contains("tok-"), "{text}");
}

#[test]
fn a_replay_budget_bounds_the_work_of_one_call() {
    let (f, h) = (files(), pushes());
    let none = Settings {
        min_decisions: 10,
        max_replays: Some(0),
    };
    assert!(suggest(&registry(&f), &f, &h, none).is_empty());
    let one = Settings {
        min_decisions: 10,
        max_replays: Some(1),
    };
    assert_eq!(suggest(&registry(&f), &f, &h, one).len(), 1);
}

#[test]
fn a_glob_rule_an_edited_approval_or_a_users_answer_is_no_evidence_for_a_wider_rule() {
    // A glob rule asks for every git_* tool: narrowing it would let git_delete_branch through.
    let gov = "policies:\n  - id: acme.dev-v1\n    selector: {agents: [bot]}\n    rules:\n      - tool: \"git_*\"\n        approval: true\n";
    let f = PolicyFiles {
        agents: vec![("bot.agf.yaml".into(), AGENT.into())],
        governance: vec![("gov.yaml".into(), gov.into())],
    };
    let h = pushes();
    assert!(suggest(&registry(&f), &f, &h, Settings::with_min(10)).is_empty());
    // Approvals an operator edited first, or that the agent's user gave in the client, are no
    // evidence that the call as proposed is fine.
    let f = files();
    let mut h = pushes();
    for r in h.iter_mut().take(25) {
        if let Was::Held {
            edited, decided_by, ..
        } = &mut r.was
        {
            if r.seq % 2 == 0 {
                *edited = true;
            } else {
                *decided_by = Some("user-of:bot".into());
            }
        }
    }
    let out = suggest(&registry(&f), &f, &h, Settings::with_min(10));
    assert!(out.iter().all(|s| s.kind == Kind::Deny), "{out:?}");
}

#[test]
fn an_address_or_a_path_that_climbs_is_never_generalised_by_a_prefix() {
    let yes: Vec<Value> = (0..30)
        .map(|i| json!({"to": format!("ops-{i}@corp.com")}))
        .collect();
    let yes: Vec<&Value> = yes.iter().collect();
    let found = mine::ranked(&yes, &[], 10, true, &|_| true);
    assert!(
        found
            .iter()
            .all(|(c, _)| !matches!(c, Constraint::Prefix { .. })),
        "{found:?}"
    );
    let paths: Vec<Value> = (0..30)
        .map(|i| json!({"p": format!("src/../f{i}")}))
        .collect();
    let paths: Vec<&Value> = paths.iter().collect();
    assert!(mine::ranked(&paths, &[], 10, true, &|_| true).is_empty());
}

/// The agent's edited file, loaded, asked about `pay` with `amount`: whether it is held.
fn pay_is_held(s: &Suggestion, amount: Value) -> bool {
    let agents = vec![("bot.agf.yaml".to_string(), s.edits[0].text.clone())];
    let reg = Registry::load(&agents, &[]).unwrap();
    let call = ToolCall::new("pay", None, json!({ "amount": amount })).unwrap();
    let v = crate::evaluate_in(
        &reg,
        "bot",
        &call,
        None,
        &crate::triggers::Observations::none(0),
    );
    v.kind != crate::VerdictKind::Allow
}

#[test]
fn a_suggested_amount_bound_never_lets_a_negative_amount_through() {
    // The attack: people approved payments of 10..120, a suggestion "ask unless amount <=
    // 120" would let `amount: -1000000` (a reversal, a refund to the agent) run unasked.
    let f = PolicyFiles {
        agents: vec![("bot.agf.yaml".into(), AGENT.into())],
        governance: vec![],
    };
    let h = pays_then_rejected(|i| json!({"amount": 10 + i * 10}), json!({"amount": 500}));
    let out = suggest(&registry(&f), &f, &h, Settings::with_min(10));
    let s = out.iter().find(|s| s.tool == "pay").expect("a suggestion");
    assert_eq!(s.pattern.describe(), "10 <= amount <= 120");
    assert!(!pay_is_held(s, json!(50)), "within the evidence: runs");
    assert!(!pay_is_held(s, json!(10)), "the floor is inclusive");
    // Nor 0, below every approval (found by review: `replicas: 0` after approvals of 3 to 5).
    for outside in [
        json!(-1_000_000),
        json!(-0.5),
        json!(0),
        json!(9),
        json!(121),
        json!(500),
    ] {
        assert!(pay_is_held(s, outside.clone()), "{outside} must still ask");
    }
}

#[test]
fn a_bound_over_negative_evidence_starts_at_the_smallest_value_seen() {
    // Adjustments of -50..60 were approved: the range starts at -50, not at minus infinity.
    let f = PolicyFiles {
        agents: vec![("bot.agf.yaml".into(), AGENT.into())],
        governance: vec![],
    };
    let h: Vec<Recorded> = (0..12)
        .map(|i| {
            let args = json!({"amount": -50 + i * 10});
            held(i, "pay", args, ApprovalStatus::Approved, "alice")
        })
        .collect();
    let out = suggest(&registry(&f), &f, &h, Settings::with_min(10));
    let s = out.iter().find(|s| s.tool == "pay").expect("a suggestion");
    assert_eq!(s.pattern.describe(), "-50 <= amount <= 60");
    assert!(!pay_is_held(s, json!(-50)));
    assert!(pay_is_held(s, json!(-51)));
}

/// Whether `git_push` of `branch` is held under the governance file the suggestion `s` edited.
fn push_is_held(s: &Suggestion, branch: &str) -> bool {
    let gov = vec![(s.edits[0].file.clone(), s.edits[0].text.clone())];
    let reg = Registry::load(&files().agents, &gov).unwrap();
    let call = ToolCall::new("git_push", None, json!({ "branch": branch })).unwrap();
    let none = crate::triggers::Observations::none(0);
    crate::evaluate_in(&reg, "bot", &call, None, &none).kind != crate::VerdictKind::Allow
}

/// Attack (found by review): the prefix was checked only against the strings seen, so "ask
/// unless branch starts with `feature/`" let `feature/../../x`, an address or a URL after the
/// prefix run unasked. What follows the prefix must be plain: letters, digits, `_`, `-`, `/`
/// and a `.` only before one of those.
#[test]
fn a_prefix_suggestion_still_holds_a_climbing_path_an_address_or_a_url_after_the_prefix() {
    let (f, h) = (files(), pushes());
    let out = suggest(&registry(&f), &f, &h, Settings::with_min(10));
    let s = out.iter().find(|s| s.kind == Kind::RemovePrompt).unwrap();
    for plain in ["feature/f1", "feature/new-ui_2", "feature/v1.2/x"] {
        assert!(!push_is_held(s, plain), "{plain} runs");
        assert!(s.pattern.holds(&json!({ "branch": plain })), "{plain}");
    }
    for hostile in [
        "feature/../../home/u/.ssh/authorized_keys",
        "feature/..",
        "feature/x@attacker.example",
        "feature/x://evil",
        "feature/a b",
        "feature/%2e%2e/x",
        "feature/a\\b",
        "feature/\u{202e}x",
        "feature/x\n",
    ] {
        assert!(push_is_held(s, hostile), "{hostile:?} must still ask");
        assert!(
            !s.pattern.holds(&json!({ "branch": hostile })),
            "{hostile:?}"
        );
    }
}

/// Attack (found by review): an argument only the calls the agent expected approved carried
/// (`confirmed: true`) separated the sides by its presence alone, and 32 made-up arguments
/// sorting before `amount` pushed it out of the weighing. Only arguments every call carries
/// are weighed.
#[test]
fn an_argument_the_agent_adds_to_some_calls_is_never_mined() {
    let yes: Vec<Value> = (0..12)
        .map(|i| {
            let mut a = json!({"amount": 10 + i * 10, "confirmed": true});
            for k in 0..32 {
                a[format!("!{k:02}")] = json!("x");
            }
            a
        })
        .collect();
    let no = [json!({"amount": 500}), json!({"amount": 900})];
    let no: Vec<&Value> = no.iter().collect();
    let found = mine::ranked(&yes.iter().collect::<Vec<_>>(), &no, 10, true, &|_| true);
    assert!(!found.is_empty());
    assert!(found.iter().all(|(c, _)| c.key() == "amount"), "{found:?}");
    assert_eq!(found[0].0.describe(), "10 <= amount <= 120");
    // The same made-up arguments on every call, refused ones too: one value each, they
    // separate nothing and do not fill the 32 arguments weighed before `amount`.
    let pad = |mut a: Value| {
        for k in 0..40 {
            a[format!("a{k:02}")] = json!("x");
        }
        a
    };
    let yes: Vec<Value> = yes.into_iter().map(pad).collect();
    let no: Vec<Value> = [json!({"amount": 500}), json!({"amount": 900})]
        .into_iter()
        .map(pad)
        .collect();
    let no: Vec<&Value> = no.iter().collect();
    let found = mine::ranked(&yes.iter().collect::<Vec<_>>(), &no, 10, true, &|_| true);
    assert_eq!(found[0].0.describe(), "10 <= amount <= 120", "{found:?}");
    let mut yes = yes;
    // A call that is no object leaves nothing to weigh.
    yes.push(json!("not an object"));
    assert!(mine::ranked(&yes.iter().collect::<Vec<_>>(), &no, 10, true, &|_| true).is_empty());
}

/// The policy files of agent `bot` ([`AGENT`]) and of agent `other` (its file `other_file`,
/// when given) under the governance file `gov`.
fn bot_and(other_file: Option<&str>, gov: String) -> PolicyFiles {
    let mut agents = vec![("bot.agf.yaml".into(), AGENT.into())];
    agents.extend(other_file.map(|o| ("other.agf.yaml".into(), o.into())));
    PolicyFiles {
        agents,
        governance: vec![("gov.yaml".into(), gov)],
    }
}

/// Attack (found by review): a governance rule for agents [bot, other] was narrowed on bot's
/// approvals alone, and other's pushes, which no one had approved, ran unasked; a policy for
/// `*` reached every agent to come. A rule is narrowed only when every agent it is for is
/// among those whose approvals are the evidence.
#[test]
fn a_rule_for_other_agents_than_the_evidences_is_not_narrowed() {
    let other = "metadata: {id: other}\naction_space:\n  local_tools:\n    - alias: git_push\n";
    for selector in ["[bot, other]", "[\"*\"]", "[\"b*\"]"] {
        let gov = GOV.replace("{agents: [bot]}", &format!("{{agents: {selector}}}"));
        let f = bot_and(Some(other), gov);
        let out = suggest(&registry(&f), &f, &pushes(), Settings::with_min(10));
        assert!(
            out.iter().all(|s| s.kind != Kind::RemovePrompt),
            "{selector}: {out:?}"
        );
    }
    // Found by review of this rule: an agent whose own file names the policy is one it is
    // for too (a reference to a policy whose selector does not pick the agent is a load
    // error, so only a policy with an empty selector is named so).
    let naming = format!(
        "{}constraints:\n  governance_policies:\n    - policy_ref: acme.dev-v1\n",
        other
    );
    let gov = GOV.replace("    selector: {agents: [bot]}\n", "");
    let f = bot_and(Some(&naming), gov);
    let out = suggest(&registry(&f), &f, &pushes(), Settings::with_min(10));
    assert!(out.iter().all(|s| s.kind != Kind::RemovePrompt), "{out:?}");
    // An agent the selector names whose file is not loaded (yet) counts too (found by
    // review: only loaded agents were).
    let gov = GOV.replace("{agents: [bot]}", "{agents: [bot, other]}");
    let f = bot_and(None, gov);
    let out = suggest(&registry(&f), &f, &pushes(), Settings::with_min(10));
    assert!(out.iter().all(|s| s.kind != Kind::RemovePrompt), "{out:?}");
    // With both agents' approvals as evidence, the rule for both is narrowed.
    let gov = GOV.replace("{agents: [bot]}", "{agents: [bot, other]}");
    let f = bot_and(Some(other), gov);
    let mut h = pushes();
    for r in h.iter_mut().filter(|r| r.seq % 2 == 1) {
        r.agent = "other".into();
    }
    let out = suggest(&registry(&f), &f, &h, Settings::with_min(10));
    assert!(out.iter().any(|s| s.kind == Kind::RemovePrompt), "{out:?}");
}

/// Found by review: an agent's value with a right-to-left override or a zero-width character
/// was mined into a suggestion, shown reordered or hidden on the dashboard and written raw
/// into its YAML. No pattern is mined from text that acts on the display.
#[test]
fn a_value_or_argument_with_hidden_characters_is_never_mined() {
    let rlo: Vec<Value> = (0..12)
        .map(|i| json!({"to": format!("acct-{i}\u{202e}lam"), "memo\u{200b}": i}))
        .collect();
    let found = mine::ranked(&rlo.iter().collect::<Vec<_>>(), &[], 10, true, &|_| true);
    assert!(found.is_empty(), "{found:?}");
    // The plain values next to them still are.
    let mixed: Vec<Value> = (0..12)
        .map(|i| json!({"to": if i < 11 { format!("r{}", i % 3) } else { "x\u{202e}".into() }}))
        .collect();
    let found = mine::ranked(&mixed.iter().collect::<Vec<_>>(), &[], 10, true, &|_| true);
    assert_eq!(
        found[0].0.describe(),
        "to in [\"r0\",\"r1\",\"r2\"]",
        "{found:?}"
    );
}

/// `bot` with a local `delete` that governance rule `approval` holds.
fn deletes_held_by(approval: &str) -> PolicyFiles {
    let agent = "metadata: {id: bot}\naction_space:\n  local_tools:\n    - alias: delete\n";
    let gov = format!(
        "policies:\n  - id: p\n    selector: {{agents: [bot]}}\n    rules:\n      - tool: delete\n        approval: {approval}\n"
    );
    PolicyFiles {
        agents: vec![("bot.agf.yaml".into(), agent.into())],
        governance: vec![("gov.yaml".into(), gov)],
    }
}

/// Twelve dry-run deletes of `tmp/f0…f11` approved, two of `etc/…` rejected.
fn dry_run_deletes() -> Vec<Recorded> {
    let del = |i: i64, p: String, st| {
        held(
            i,
            "delete",
            json!({"path": p, "dry_run": true}),
            st,
            "alice",
        )
    };
    let mut h: Vec<Recorded> = (0..12)
        .map(|i| del(i, format!("tmp/f{i}"), ApprovalStatus::Approved))
        .collect();
    h.extend((12..14).map(|i| del(i, format!("etc/x{i}"), ApprovalStatus::Rejected)));
    h
}

/// Whether `delete` with `args` is held under `f` with the governance file suggestion `s`
/// edited (under `f` itself when `s` is `None`).
fn delete_is_held(f: &PolicyFiles, s: Option<&Suggestion>, args: Value) -> bool {
    let gov = s.map_or(f.governance.clone(), |s| {
        vec![(s.edits[0].file.clone(), s.edits[0].text.clone())]
    });
    let reg = Registry::load(&f.agents, &gov).unwrap();
    let call = ToolCall::new("delete", None, args).unwrap();
    let none = crate::triggers::Observations::none(0);
    crate::evaluate_in(&reg, "bot", &call, None, &none).kind != crate::VerdictKind::Allow
}

/// Attack (found by review): the agent sent `dry_run: true` on every delete it proposed, so
/// people approved only dry runs; the argument never varied, was not weighed, and "ask unless
/// path starts with `tmp/`" then ran `{path: tmp/prod-data, dry_run: false}` unasked. Every
/// argument the covered approvals all sent alike is required by the exception too; a call
/// with it different, of another type or missing still asks.
#[test]
fn an_argument_that_never_varied_is_required_by_the_suggested_exception() {
    for approval in ["true", "{condition: {args_match: {dry_run: true}}}"] {
        let f = deletes_held_by(approval);
        let out = suggest(
            &registry(&f),
            &f,
            &dry_run_deletes(),
            Settings::with_min(10),
        );
        let s = out
            .iter()
            .find(|s| s.kind == Kind::RemovePrompt)
            .expect("a suggestion");
        let want = "ask unless path starts with \"tmp/\" and dry_run == true";
        assert_eq!(s.description, want, "{approval}");
        assert_eq!((s.replay.confirm_to_allow, s.replay.loosened), (12, 0));
        let ok = json!({"path": "tmp/prod-data", "dry_run": true});
        assert!(!delete_is_held(&f, Some(s), ok));
        // Each asked before (with `dry_run: true` asking, `false` never did) asks still.
        for still in [
            json!({"path": "tmp/prod-data", "dry_run": false}),
            json!({"path": "tmp/prod-data", "dry_run": "true"}),
            json!({"path": "tmp/prod-data"}),
            json!({"path": "etc/x", "dry_run": true}),
        ] {
            let before = delete_is_held(&f, None, still.clone());
            let after = delete_is_held(&f, Some(s), still.clone());
            assert_eq!(after, before, "{approval}: {still}");
            assert!(after || approval != "true", "{still} must ask");
        }
    }
    // A trusted schema declaring arguments no covered approval sent (`force`, `recursive`):
    // no condition can require them absent, so no prompt removal is suggested.
    let f = deletes_held_by("true");
    let mut schemas = Schemas::default();
    let props = json!({"properties": {"path": {}, "dry_run": {}, "force": {}, "recursive": {}}});
    schemas.declare(None, "delete", &props);
    let (reg, h, min) = (registry(&f), dry_run_deletes(), Settings::with_min(10));
    let out = suggest_with(&reg, &f, &h, min, &schemas).suggestions;
    assert!(out.iter().all(|s| s.kind != Kind::RemovePrompt), "{out:?}");
}

/// Found by review: a call the agent cancelled before anyone decided it was no evidence at
/// all, so the agent could withdraw the call people were about to reject (`tmp/secrets`) and
/// keep a pattern covering it. A cancelled call counts against a pattern like a rejection (not
/// for a deny policy: the agent chose to cancel it).
#[test]
fn a_cancelled_call_counts_against_a_suggested_exception() {
    let f = deletes_held_by("true");
    let mut h = dry_run_deletes();
    let cancel = |i: i64| {
        let args = json!({"path": format!("tmp/secrets{i}"), "dry_run": true});
        held(i, "delete", args, ApprovalStatus::Cancelled, "bot")
    };
    h.extend((20..32).map(cancel));
    let out = suggest(&registry(&f), &f, &h, Settings::with_min(10));
    assert!(out.is_empty(), "{out:?}");
}

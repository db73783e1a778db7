//! Unit tests of the suggestions against an agent steering them: a made-up argument that
//! mirrors, tags or crowds out the real one, or is named like it, gets no suggestion keyed on
//! it, for prompt removals and for denials.

use super::tests::{files, held, pushes_named, registry, suggest};
use super::*;
use serde_json::json;

/// Pays by `bot`: `yes` approved, then `no` rejected, each with the arguments `args(amount)`.
fn pays(yes: &[i64], no: &[i64], args: impl Fn(i64) -> Value) -> Vec<Recorded> {
    let approved = yes.iter().map(|a| (a, ApprovalStatus::Approved));
    let rejected = no.iter().map(|a| (a, ApprovalStatus::Rejected));
    approved
        .chain(rejected)
        .enumerate()
        .map(|(i, (a, st))| held(i as i64, "pay", args(*a), st, "alice"))
        .collect()
}

/// Attack (found by review): when constraints on two arguments separated the decisions
/// equally well, the one whose name sorted first was suggested. An agent that sent a made-up
/// `a_amount` mirroring `amount` had "no prompt when `a_amount` ≤ 120" suggested, and then
/// paid any amount with `a_amount: 1`. Which argument the people judged is unknown, so no
/// prompt removal is suggested then.
#[test]
fn a_made_up_argument_tying_with_a_real_one_gets_no_prompt_removed() {
    let f = files();
    let yes: Vec<i64> = (1..=12).map(|i| i * 10).collect();
    let removal = |h: &[Recorded]| {
        let out = suggest(&registry(&f), &f, h, Settings::with_min(10));
        out.into_iter()
            .find(|s| s.kind == Kind::RemovePrompt && s.tool == "pay")
    };
    let honest = pays(&yes, &[500, 900], |a| json!({"amount": a}));
    let s = removal(&honest).expect("a removal on amount alone");
    assert_eq!(s.pattern.key(), "amount");
    let mirrored = pays(&yes, &[500, 900], |a| json!({"amount": a, "a_amount": a}));
    assert!(removal(&mirrored).is_none(), "{:?}", removal(&mirrored));
    // A made-up number tagging the calls of the vendors people approve ties with the list of
    // those vendors: it does not win by being a range.
    let vendor = |a: i64| {
        if a < 500 {
            ["acme", "globex"][(a / 10 % 2) as usize]
        } else {
            "evil"
        }
    };
    let listed = pays(&yes, &[500, 900], |a| json!({"vendor": vendor(a)}));
    let s = removal(&listed).expect("a removal on vendor alone");
    assert_eq!(s.pattern.key(), "vendor");
    let code = |a: i64| if a < 500 { 1 } else { 999 };
    let tagged = pays(
        &yes,
        &[500, 900],
        |a| json!({"vendor": vendor(a), "a_code": code(a)}),
    );
    assert!(removal(&tagged).is_none(), "{:?}", removal(&tagged));
    // 31 made-up arguments varying at random, sorting before `amount`, and one mirroring it:
    // `amount` was never weighed, and the mirror won unopposed. Calls varying in more than 32
    // arguments give nothing.
    let crowded = pays(&yes, &[500, 900], |a| {
        let mut v = json!({"amount": a, "a_00": a});
        for k in 1..32 {
            v[format!("a_{k:02}")] = json!(format!("r{}", a * 31 + k));
        }
        v
    });
    assert!(removal(&crowded).is_none(), "{:?}", removal(&crowded));
    // A mirror named like `amount` (a Cyrillic `а`), with `amount` sent once as text so that
    // the mirror covers one approved call more: only plain ASCII names are weighed, so a
    // removal, if any, keys on the real `amount`.
    let lookalike = pays(&yes, &[500, 900], |a| match a {
        40 => json!({"amount": "40.00", "аmount": a}),
        _ => json!({"amount": a, "аmount": a}),
    });
    let s = removal(&lookalike);
    assert!(
        s.as_ref().is_none_or(|s| s.pattern.key() == "amount"),
        "{s:?}"
    );
    let alone = pays(&yes, &[500, 900], |a| json!({"аmount": a}));
    assert!(
        removal(&alone).is_none(),
        "a look-alike name is never weighed"
    );
    // The same with a plainly named mirror: it covers one more, and is still no suggestion.
    let sent_as_text = pays(&yes, &[500, 900], |a| match a {
        40 => json!({"amount": "40.00", "a_amount": a}),
        _ => json!({"amount": a, "a_amount": a}),
    });
    assert!(
        removal(&sent_as_text).is_none(),
        "{:?}",
        removal(&sent_as_text)
    );
}

/// Found by review: deny suggestions took the first constraint too, so a made-up `a_amount`
/// mirroring `amount` became "deny when a_amount >= 500", which the agent then leaves out.
#[test]
fn a_made_up_argument_tying_with_a_real_one_gets_no_deny_suggested() {
    let f = files();
    let deny = |h: &[Recorded]| {
        let out = suggest(&registry(&f), &f, h, Settings::with_min(10));
        out.into_iter()
            .find(|s| s.kind == Kind::Deny && s.tool == "pay")
    };
    let no: Vec<i64> = (1..=12).map(|i| 1000 + i * 10).collect();
    let honest = pays(&[10, 20], &no, |a| json!({"amount": a}));
    let s = deny(&honest).expect("a deny on amount alone");
    assert_eq!(s.pattern.key(), "amount");
    let mirrored = pays(&[10, 20], &no, |a| json!({"amount": a, "a_amount": a}));
    assert!(deny(&mirrored).is_none(), "{:?}", deny(&mirrored));
}

/// Found by review: a suggested prefix ended at a value's first separator, a `.` too, and
/// after a `-` its rest could hold a `.`: `api.h0.example`, `api.h1.example`… approved
/// suggested "ask unless branch starts with `api.`", and `ops-h0.corp`… "starts with `ops-`";
/// each then let a name under another owner (`api.attacker.example`, `ops-x.attacker.example`)
/// run unasked. No prefix ends in `.`, and after `-`, `_` or `:` the rest is one word.
#[test]
fn a_dotted_name_is_never_generalised_past_its_owner() {
    let f = files();
    let run = |h: &[Recorded]| suggest(&registry(&f), &f, h, Settings::with_min(10));
    let hostile = ["api.attacker.example", "ops-x.attacker.example", "ops-x/y"];
    let dotted = [
        pushes_named(|i| format!("api.h{i}.example")),
        pushes_named(|i| format!("ops-h{i}.corp")),
    ];
    for h in &dotted {
        for s in run(h) {
            for name in hostile {
                let args = json!({ "branch": name });
                assert!(!s.pattern.holds(&args), "{name} under {:?}", s.pattern);
            }
        }
    }
    // One word after `ops-` is still generalised, and the condition holds one word alone.
    let words = run(&pushes_named(|i| format!("ops-h{i}")));
    let s = words
        .iter()
        .find(|s| s.kind == Kind::RemovePrompt)
        .expect("a suggestion");
    let want = Constraint::Prefix {
        key: "branch".into(),
        prefix: "ops-".into(),
    };
    assert_eq!(s.pattern, want);
    assert!(s.pattern.holds(&json!({"branch": "ops-new_one-2"})));
    for name in hostile {
        assert!(!s.pattern.holds(&json!({ "branch": name })), "{name}");
    }
}

/// Found by review: a suggested deny's message template quoted the rejected values as they
/// were, so a rejected branch named `{{tool_args}}` became a placeholder the deny then filled
/// with each denied call's arguments (and, broken once, `{{{agent_id}}` still held one). The
/// message renders as itself.
#[test]
fn a_rejected_value_never_becomes_a_placeholder_of_a_suggested_deny() {
    let f = files();
    let mut h = pushes_named(|i| format!("feature/f{i}"));
    for i in 30..54 {
        let branch = ["{{tool_args}}", "{{{agent_id}}"][(i % 2) as usize];
        let st = ApprovalStatus::Rejected;
        h.push(held(
            i,
            "git_push",
            json!({ "branch": branch }),
            st,
            "carol",
        ));
    }
    let out = suggest(&registry(&f), &f, &h, Settings::with_min(10));
    let d = out
        .iter()
        .find(|s| s.kind == Kind::Deny)
        .expect("a deny suggestion");
    assert!(
        d.pattern.holds(&json!({"branch": "{{tool_args}}"})),
        "{:?}",
        d.pattern
    );
    let yaml = &d.edits[0].yaml;
    let message = yaml
        .lines()
        .find(|l| l.contains("message_template"))
        .expect("a message");
    assert!(!message.contains("{{"), "{message}");
    assert!(message.contains("{ {tool_args}}"), "{message}");
}

/// Attack (found by review): a governance rule without `server` asks for `git_push` on every
/// server. The agent had 25 pushes on `gh` approved, and none on `gl` (which declares every
/// tool); narrowing the rule on that evidence stopped asking for `gl`'s pushes too, where no
/// person had approved any, and the replay of the history could not show it. Such a rule is
/// no source to narrow while the tool can be called elsewhere; a rule limited to `gh` is.
#[test]
fn a_rule_for_the_tool_on_every_server_is_not_narrowed_on_one_servers_evidence() {
    let agent =
        |servers: &str| format!("metadata: {{id: bot}}\naction_space:\n  mcp_servers:\n{servers}");
    let gh = "    - alias: gh\n      allowed_tools: [git_push]\n";
    let gov = |server: &str| {
        format!(
            "policies:\n  - id: acme.dev-v1\n    selector: {{agents: [bot]}}\n    rules:\n      - tool: git_push\n{server}        approval: true\n"
        )
    };
    let on_gh: Vec<Recorded> = pushes_named(|i| format!("feature/f{i}"))
        .into_iter()
        .map(|mut r| {
            let (tool, args) = (r.call.tool.clone(), r.call.arguments.clone());
            r.call = crate::canonical::ToolCall::new(tool, Some("gh".into()), args).unwrap();
            r
        })
        .collect();
    let removals = |agent_file: String, gov_file: String| {
        let f = PolicyFiles {
            agents: vec![("bot.agf.yaml".into(), agent_file)],
            governance: vec![("gov.yaml".into(), gov_file)],
        };
        suggest(&registry(&f), &f, &on_gh, Settings::with_min(10))
            .into_iter()
            .filter(|s| s.kind == Kind::RemovePrompt)
            .count()
    };
    let gl = format!("{gh}    - alias: gl\n");
    assert_eq!(removals(agent(&gl), gov("")), 0, "gl's pushes unasked");
    let gl_listing = format!("{gh}    - alias: gl\n      allowed_tools: [git_push]\n");
    assert_eq!(
        removals(agent(&gl_listing), gov("")),
        0,
        "gl's pushes unasked"
    );
    // Where the tool can be called nowhere else, or the rule is limited to `gh`, it narrows.
    assert_eq!(removals(agent(gh), gov("")), 1);
    assert_eq!(removals(agent(&gl), gov("        server: gh\n")), 1);
}

//! Quorum approvals (issue 14 §1): reading `approvers`, merging covering rules' quorums, and
//! the tally — distinct people, each counted once, placed where they are needed.

use assent_core::quorum::{Ballot, DenyRule, Quorum, QuorumGroup, merge, parse_approvers, tally};
use serde_json::json;

fn roles(r: &[&str]) -> Vec<String> {
    r.iter().map(|s| s.to_string()).collect()
}

fn group(r: &[&str], count: u32) -> QuorumGroup {
    QuorumGroup {
        roles: roles(r),
        count,
        escalation: None,
    }
}

#[test]
fn approvers_read_every_form_and_the_plain_ones_need_no_quorum() {
    let plain = parse_approvers(&json!(["ops", "cfo", "ops"])).unwrap();
    assert_eq!(plain.roles, ["ops", "cfo"]);
    assert_eq!(plain.quorum, None);
    let one = parse_approvers(&json!({"roles": ["ops"], "count": 1})).unwrap();
    assert_eq!((one.roles, one.quorum), (roles(&["ops"]), None));
    let two = parse_approvers(&json!({"roles": ["finance-admin"], "count": 2})).unwrap();
    assert_eq!(
        two.quorum,
        Some(Quorum {
            groups: vec![group(&["finance-admin"], 2)],
            deny: DenyRule::Any
        })
    );
    let both = parse_approvers(&json!([
        {"role": "finance-admin", "count": 1},
        {"role": "security"}
    ]))
    .unwrap();
    assert_eq!(both.roles, ["finance-admin", "security"]);
    assert_eq!(
        both.quorum.unwrap().groups,
        [group(&["finance-admin"], 1), group(&["security"], 1)]
    );
    let deny =
        parse_approvers(&json!({"groups": [{"role": "a"}, {"role": "b"}], "deny": "quorum"}))
            .unwrap();
    assert_eq!(deny.quorum.unwrap().deny, DenyRule::Quorum);
    let anyone = parse_approvers(&json!({"count": 2})).unwrap();
    assert!(anyone.roles.is_empty(), "any operator");
    assert_eq!(anyone.quorum.unwrap().groups, [group(&[], 2)]);
}

#[test]
fn bad_approvers_are_refused_with_what_is_wrong() {
    for (v, want) in [
        (json!({"roles": ["a"], "count": 0}), "count must be 1 to 16"),
        (
            json!({"roles": ["a"], "count": 17}),
            "count must be 1 to 16",
        ),
        (
            json!({"roles": ["a"], "count": 2.5}),
            "count must be 1 to 16",
        ),
        (json!({"roles": ["a"], "cuont": 2}), "unknown key `cuont`"),
        (json!({"roles": ["a"], "role": "b"}), "not both"),
        (json!(["a", {"role": "b"}]), "not both"),
        (json!({"roles": [""]}), "1 to 128 bytes"),
        (json!({"roles": "a"}), "must be a list"),
        (json!({"roles": ["a"], "deny": "all"}), "deny must be"),
        (json!({"groups": []}), "1 to 8 groups"),
        (json!(7), "approvers must be"),
    ] {
        let e = parse_approvers(&v).unwrap_err();
        assert!(e.contains(want), "{v}: {e}");
    }
}

#[test]
fn two_of_three_needs_two_distinct_principals() {
    let q = parse_approvers(&json!({"roles": ["finance"], "count": 2}))
        .unwrap()
        .quorum
        .unwrap();
    let fin = roles(&["finance"]);
    let alice = Ballot {
        principal: "alice",
        roles: &fin,
    };
    let bob = Ballot {
        principal: "bob",
        roles: &fin,
    };
    assert!(!tally(&q, &[alice]).met);
    assert!(
        !tally(&q, &[alice, alice]).met,
        "the same principal counts once"
    );
    let t = tally(&q, &[alice, alice, bob]);
    assert!(t.met);
    assert_eq!(t.groups[0].counted, ["alice", "bob"]);
    let other = roles(&["ops"]);
    assert!(!q.qualifies(&other));
    assert!(
        !tally(
            &q,
            &[
                alice,
                Ballot {
                    principal: "eve",
                    roles: &other
                }
            ]
        )
        .met
    );
}

#[test]
fn a_principal_with_two_roles_fills_one_place_and_is_placed_where_needed() {
    let q = Quorum {
        groups: vec![group(&["finance"], 1), group(&["security"], 1)],
        deny: DenyRule::Any,
    };
    let both = roles(&["finance", "security"]);
    let fin = roles(&["finance"]);
    let carol = Ballot {
        principal: "carol",
        roles: &both,
    };
    assert!(
        !tally(&q, &[carol]).met,
        "one person never fills two groups"
    );
    // carol voted first and would take the finance place; dave can only fill finance, so
    // carol is moved to security.
    let t = tally(
        &q,
        &[
            carol,
            Ballot {
                principal: "dave",
                roles: &fin,
            },
        ],
    );
    assert!(t.met);
    assert_eq!(t.groups[0].counted, ["dave"]);
    assert_eq!(t.groups[1].counted, ["carol"]);
    assert_eq!(
        t.describe(),
        "2 of 2 approvals (finance 1 of 1: dave; security 1 of 1: carol)"
    );
    let open = Quorum {
        groups: vec![group(&[], 2)],
        deny: DenyRule::Any,
    };
    assert_eq!(
        tally(&open, &[carol]).describe(),
        "1 of 2 approvals (any operator 1 of 2: carol)"
    );
}

#[test]
fn covering_rules_quorums_merge_and_escalation_widens_the_groups() {
    let a = Quorum {
        groups: vec![group(&["finance"], 2)],
        deny: DenyRule::Quorum,
    };
    let b = Quorum {
        groups: vec![group(&["finance"], 3), group(&["security"], 1)],
        deny: DenyRule::Quorum,
    };
    let m = merge([&a, &b], &roles(&["ops"]), None).unwrap();
    assert_eq!(
        m.groups,
        [
            group(&["finance"], 3),
            group(&["security"], 1),
            group(&["ops"], 1)
        ]
    );
    assert_eq!(m.deny, DenyRule::Quorum);
    assert_eq!(m.required(), 5);
    let any = Quorum {
        deny: DenyRule::Any,
        ..a.clone()
    };
    assert_eq!(merge([&a, &any], &[], None).unwrap().deny, DenyRule::Any);
    assert_eq!(
        merge([], &roles(&["ops"]), None),
        None,
        "no quorum: one approval"
    );
    let w = m.widened(&roles(&["cfo"]));
    assert!(
        w.groups
            .iter()
            .all(|g| g.roles.contains(&"cfo".to_string()))
    );
    assert_eq!(w.required(), 5, "escalation widens who, not how many");
    // Found by review: the plain rules' roles were matched in their order, so `[b, a]` beside
    // a quorum of `[a, b]` made a group of its own and asked one more person.
    let pair = Quorum {
        groups: vec![group(&["a", "b"], 2)],
        deny: DenyRule::Quorum,
    };
    let m = merge([&pair], &roles(&["b", "a"]), None).unwrap();
    assert_eq!((m.groups.len(), m.required()), (1, 2), "{m:?}");
}

/// Attack (found by review): an explicit empty approvers list — `approvers: []`, a group's
/// `roles: []`, or `approvers:` with no value, as a template or an edit that emptied the list
/// leaves it — meant "any operator", so a rule meant for named roles let every operator
/// decide. Each is now a load error with the file, the rule's line and the way out; a missing
/// key, and a group that names no roles at all (`{count: 2}`, documented as any two
/// operators), keep their meaning.
#[test]
fn an_empty_approvers_list_does_not_open_the_rule_to_any_operator() {
    use crate::kit::rule_err;
    for keys in [
        "        approvers: []\n",
        "        approvers: {roles: [], count: 2}\n",
        "        approvers: {roles: []}\n",
        "        approvers: [{role: finance}, {roles: []}]\n",
        "        approvers: {groups: [{roles: []}], deny: quorum}\n",
        "        approvers:\n",
        "        approvers: null\n",
    ] {
        let e = rule_err(keys);
        assert!(
            e.starts_with("g.yaml:4: policy `a.b-v1` rules[0]: ")
                && e.contains("an empty approvers list would let any operator decide")
                && e.contains("remove the key to mean any operator, or name roles"),
            "{keys}: {e}"
        );
    }
    for keys in [
        "",
        "        approvers: {count: 2}\n",
        "        approvers: [finance]\n",
    ] {
        assert_eq!(rule_err(keys), "", "{keys}");
    }
    let e = parse_approvers(&json!([])).unwrap_err();
    assert!(e.contains("would let any operator decide"), "{e}");
}

/// Attack (found by review): a group object naming neither roles nor a count — `approvers:
/// {}`, `approvers: [{}]`, a lone `{deny: quorum}`, `{groups: [{}]}` — still meant "any
/// operator" after the explicit empty lists were refused, so an emptied group opened a rule
/// to every operator. Each is a load error with the file, the rule's line and what to write
/// instead; a group with a `count` and no roles (`{count: 2}`, documented as any two
/// operators) and one naming a role keep their meaning.
#[test]
fn an_empty_approvers_group_does_not_open_the_rule_to_any_operator() {
    use crate::kit::rule_err;
    for keys in [
        "        approvers: {}\n",
        "        approvers: [{}]\n",
        "        approvers: [{role: finance}, {}]\n",
        "        approvers: {deny: quorum}\n",
        "        approvers: {groups: [{}], deny: quorum}\n",
    ] {
        let e = rule_err(keys);
        assert!(
            e.starts_with("g.yaml:4: policy `a.b-v1` rules[0]: ")
                && e.contains("names neither `roles` (or `role`) nor `count`")
                && e.contains("would let any operator decide")
                && e.contains("write `{count: N}` for any N operators"),
            "{keys}: {e}"
        );
    }
    for keys in [
        "        approvers: {count: 1}\n",
        "        approvers: [{count: 2}]\n",
        "        approvers: {role: finance}\n",
    ] {
        assert_eq!(rule_err(keys), "", "{keys}");
    }
    let anyone = parse_approvers(&json!({"count": 2})).unwrap();
    assert!(anyone.roles.is_empty(), "{{count: 2}}: any two operators");
    let e = parse_approvers(&json!({})).unwrap_err();
    assert!(e.contains("would let any operator decide"), "{e}");
}

/// Attack (found by review): a rule asking for one finance approver per seat,
/// `[{role: finance}, {role: finance}]`, was read — through the merge that keeps the larger
/// count of two covering rules' groups of the same roles — as one finance approver, so one
/// person approved what asked for two. Two groups of the same roles in one rule are a load
/// error saying to write one group with their counts added.
#[test]
fn two_groups_of_the_same_roles_in_one_rule_are_refused_not_read_as_one() {
    for (v, count) in [
        (json!([{"role": "finance"}, {"role": "finance"}]), 2),
        (
            json!({"groups": [{"roles": ["a", "b"], "count": 2}, {"roles": ["b", "a"], "count": 2}]}),
            4,
        ),
        (json!([{"count": 1}, {"count": 2}]), 3),
    ] {
        let e = parse_approvers(&v).unwrap_err();
        assert!(
            e.contains("name the same roles") && e.contains(&format!("count: {count}")),
            "{v}: {e}"
        );
    }
    // Different roles, or the same roles in two covering rules (the larger count), stand.
    assert!(parse_approvers(&json!([{"role": "finance"}, {"role": "legal"}])).is_ok());
    let q = quorum_of(
        "      - tool: pay\n        approvers: {role: finance, count: 2}\n      - tool: pay\n        approvers: {role: finance, count: 1}\n",
    );
    assert_eq!(q.required(), 2, "{q:?}");
}

/// The quorum of a `pay` call for agent `bot` under the governance `rules` (YAML rule list).
fn quorum_of(rules: &str) -> Quorum {
    let agent = "metadata: {id: bot}\naction_space:\n  local_tools:\n    - alias: pay\n";
    let gov =
        format!("policies:\n  - id: a.q-v1\n    selector: {{agents: [bot]}}\n    rules:\n{rules}");
    let reg = assent_core::policy::Registry::load(
        &[("a.yaml".into(), agent.into())],
        &[("g.yaml".into(), gov)],
    )
    .unwrap();
    let call = assent_core::ToolCall::new("pay", None, json!({})).unwrap();
    assent_core::evaluate(&reg, "bot", &call)
        .terms
        .quorum
        .unwrap()
}

/// Attack (found by review): rule A asks two finance approvers and escalates nothing; rule B
/// on the same tool is plain (`[ops]`) and escalates to `intern`. Once B's step was taken,
/// `intern` joined every group, so three interns approved a payment no finance approver saw.
/// Each group now allows only its own rule's escalation roles.
#[test]
fn another_rules_escalation_does_not_open_a_quorum_group_to_its_roles() {
    let q = quorum_of(
        "      - tool: pay
        approvers: {roles: [finance], count: 2}
      - tool: pay
        approvers: [ops]
        on_timeout: {escalate_to: [intern], after_seconds: 60}
",
    );
    assert_eq!(q.groups[0].escalation, Some(vec![]), "{q:?}");
    assert_eq!(q.groups[1].escalation, None, "ops: its own rule's intern");
    let w = assent_core::quorum::in_force(Some(&q), &roles(&["intern"])).unwrap();
    assert_eq!(w.groups[0].roles, ["finance"], "{w:?}");
    assert_eq!(w.groups[1].roles, ["ops", "intern"], "{w:?}");
    let ballots = [
        Ballot {
            principal: "i1",
            roles: &roles(&["intern"]),
        },
        Ballot {
            principal: "i2",
            roles: &roles(&["intern"]),
        },
        Ballot {
            principal: "i3",
            roles: &roles(&["intern"]),
        },
    ];
    assert!(
        !tally(&w, &ballots).met,
        "three interns fill no finance place"
    );
    // A single rule's escalation still widens its own group, as before.
    let q = quorum_of(
        "      - tool: pay
        approvers: {roles: [finance], count: 2}
        on_timeout: {escalate_to: [cfo], after_seconds: 60}
",
    );
    assert_eq!(
        q.groups,
        [group(&["finance"], 2)],
        "nothing to narrow: no field"
    );
    assert_eq!(
        q.widened(&roles(&["cfo"])).groups[0].roles,
        ["finance", "cfo"]
    );
}

/// Two rules asking for the same group keep the escalation roles both allow (fail closed), and
/// a plain rule whose roles match a quorum group narrows that group's escalation too: neither
/// rule's demand is met by a role only the other escalates to.
#[test]
fn the_same_group_from_two_rules_keeps_only_the_escalation_both_allow() {
    let q = quorum_of(
        "      - tool: pay
        approvers: {roles: [finance], count: 2}
        on_timeout: {escalate_to: [cfo, lead], after_seconds: 60}
      - tool: pay
        approvers: {roles: [finance], count: 1, deny: quorum}
        escalation: [{after: 30, approvers: [lead]}, {after: 90, approvers: [intern]}]
      - tool: pay
        approvers: {roles: [ops], count: 2}
        on_timeout: {escalate_to: [intern], after_seconds: 60}
      - tool: pay
        approvers: [ops]
",
    );
    let all = roles(&["cfo", "lead", "intern"]);
    let w = q.widened(&all);
    assert_eq!(
        w.groups[0],
        QuorumGroup {
            escalation: Some(roles(&["lead"])),
            ..group(&["finance", "lead"], 2)
        }
    );
    assert_eq!(
        w.groups[1].roles,
        ["ops"],
        "the plain [ops] rule escalates nothing: {w:?}"
    );
    assert_eq!(w.groups.len(), 2, "{w:?}");
    // A quorum stored before the field existed (none on its groups) widens every group.
    let legacy = Quorum {
        groups: vec![group(&["finance"], 2)],
        deny: DenyRule::Any,
    };
    assert_eq!(
        legacy.widened(&roles(&["intern"])).groups[0].roles,
        ["finance", "intern"]
    );
}

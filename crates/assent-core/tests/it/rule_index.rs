//! The rule index (issue 13 item 5): [`Registry::covering_rules`] answers from an index of the
//! rules by tool name and server, built at load. These tests prove it finds exactly the rules a
//! scan of every rule finds ([`Registry::policies_for`] then [`Rule::covers`]), in the same
//! order, over random rule sets (exact names, globs, servers set or not, several policies and
//! files, selectors and references), that the verdict's reasons follow that order, and that
//! [`Registry::policies_behind`] (by rule label, through the index) names the policies a scan
//! names.

use assent_core::policy::{Agent, Registry, Rule, Selector};
use assent_core::{Reason, ToolCall, Verdict, VerdictKind, evaluate};
use proptest::prelude::*;
use serde_json::json;

/// Tool names and globs a rule's `tool` is drawn from: exact names, prefix and suffix globs,
/// `*`, `?` and bracket classes, and names with a path separator (which the index keeps with
/// the globs).
const RULE_TOOLS: &[&str] = &[
    "pay", "payment", "pay_out", "fs_read", "fs_write", "x", "pay*", "*", "fs_*", "*_out", "?ay",
    "[pf]ay", "fs_[!r]*", "a/b", "a*b",
];

/// Tool names calls are drawn from: some covered exactly, some only by globs, some by nothing.
const CALL_TOOLS: &[&str] = &[
    "pay", "payment", "pay_out", "fs_read", "fs_write", "x", "zz", "fay", "a/b", "axb", "pay*",
];

/// Servers a rule is limited to or a call is made on (`None`: no server, a local tool).
const SERVERS: &[Option<&str>] = &[None, Some("s1"), Some("s2"), Some("s3")];

/// Selectors a policy may have (the empty one selects no agent).
const SELECTORS: &[&str] = &[
    "",
    "    selector: {agents: [bot]}\n",
    "    selector: {agents: [\"*\"]}\n",
    "    selector: {agents: [other]}\n",
    "    selector: {labels: {team: t}}\n",
    "    selector: {labels: {team: u}}\n",
];

/// One generated policy: a sort key for its id (so ids do not follow generation order), its
/// selector, whether the agent references it, the file it goes to, and its rules as
/// (tool, server, risk tier R1?) triples.
#[derive(Debug, Clone)]
struct GenPolicy {
    key: char,
    selector: usize,
    referenced: bool,
    file: usize,
    rules: Vec<(usize, usize, bool)>,
}

fn gen_policy() -> impl Strategy<Value = GenPolicy> {
    let rule = (0..RULE_TOOLS.len(), 0..SERVERS.len(), any::<bool>());
    (
        prop::char::range('a', 'f'),
        0..SELECTORS.len(),
        any::<bool>(),
        0..3usize,
        prop::collection::vec(rule, 0..10),
    )
        .prop_map(|(key, selector, referenced, file, rules)| GenPolicy {
            key,
            selector,
            referenced,
            file,
            rules,
        })
}

/// Whether `tool` may be a local tool alias (`^[a-zA-Z_][a-zA-Z0-9_]*$`); the other call tools
/// are called on MCP servers only.
fn local_alias(tool: &str) -> bool {
    tool.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The agent `bot` (label `team: t`), declaring every call tool that may be a local alias and
/// servers `s1`–`s3` with every tool, and referencing the policies `refs` (optional
/// references).
fn agent_yaml(refs: &[String]) -> String {
    let mut s = String::from("metadata: {id: bot, labels: {team: t}}\n");
    if !refs.is_empty() {
        s.push_str("constraints:\n  governance_policies:\n");
        for r in refs {
            s.push_str(&format!("    - {{policy_ref: {r}, required: false}}\n"));
        }
    }
    s.push_str("action_space:\n  local_tools:\n");
    for t in CALL_TOOLS.iter().filter(|t| local_alias(t)) {
        s.push_str(&format!("    - alias: \"{t}\"\n"));
    }
    s.push_str("  mcp_servers:\n    - alias: s1\n    - alias: s2\n    - alias: s3\n");
    s
}

/// One item of a governance file's `policies:` list: `id`, its `selector` line (one of
/// [`SELECTORS`]), and a rule for each (tool pattern, server, risk tier R1?) of `rules`.
fn policy_item(id: &str, selector: &str, rules: &[(&str, Option<&str>, bool)]) -> String {
    let mut f = format!("  - id: {id}\n{selector}    rules:\n");
    if rules.is_empty() {
        f.push_str("      []\n");
    }
    for &(tool, server, tier) in rules {
        f.push_str(&format!("      - tool: \"{tool}\"\n"));
        if let Some(s) = server {
            f.push_str(&format!("        server: {s}\n"));
        }
        if tier {
            f.push_str("        risk_tier: R1\n");
        }
    }
    f
}

/// The registry of `policies`, spread over three governance files by their `file`.
fn registry(policies: &[GenPolicy]) -> Registry {
    let mut files = vec![String::from("policies:\n"); 3];
    let mut refs = Vec::new();
    for (i, p) in policies.iter().enumerate() {
        let id = format!("{}{i}.gen-v1", p.key);
        // A reference to a policy whose selector does not pick `bot` is a load error.
        // (`{agents: [other]}`, `{labels: {team: u}}`).
        let foreign = matches!(p.selector, 3 | 5);
        if p.referenced && !foreign {
            refs.push(id.clone());
        }
        let rules: Vec<_> = p
            .rules
            .iter()
            .map(|&(tool, server, tier)| (RULE_TOOLS[tool], SERVERS[server], tier))
            .collect();
        files[p.file].push_str(&policy_item(&id, SELECTORS[p.selector], &rules));
    }
    let gov: Vec<(String, String)> = files
        .into_iter()
        .enumerate()
        .filter(|(_, text)| text != "policies:\n")
        .map(|(i, text)| (format!("g{i}.yaml"), text))
        .collect();
    Registry::load(&[("a.agf.yaml".into(), agent_yaml(&refs))], &gov)
        .unwrap_or_else(|e| panic!("{e}\n{gov:?}"))
}

/// (policy id, rule label) of each covering rule the plain scan finds: every policy that
/// applies to the agent, in order, and each of its rules that covers the call, in file order.
fn scan(reg: &Registry, tool: &str, server: Option<&str>) -> Vec<(String, String)> {
    let agent = &reg.agents["bot"];
    reg.policies_for(agent)
        .flat_map(|p| {
            p.rules
                .iter()
                .filter(|r: &&Rule| r.covers(tool, server))
                .map(|r| (p.id.clone(), r.label.clone()))
        })
        .collect()
}

/// (policy id, rule label) of each rule the index answers.
fn indexed(reg: &Registry, tool: &str, server: Option<&str>) -> Vec<(String, String)> {
    reg.covering_rules(&reg.agents["bot"], tool, server)
        .into_iter()
        .map(|(p, r)| (p.id.clone(), r.label.clone()))
        .collect()
}

/// The ids of the policies behind `reasons` as a scan of every rule finds them: each policy
/// with a rule labelled as a reason's rule, in that reason's file; sorted, each once.
fn behind_scan(reg: &Registry, reasons: &[Reason]) -> Vec<String> {
    reg.policies()
        .values()
        .filter(|p| {
            reasons
                .iter()
                .any(|r| r.file == p.file && p.rules.iter().any(|x| x.label == r.rule))
        })
        .map(|p| p.id.clone())
        .collect()
}

/// The rule labels among `v`'s reasons, in order.
fn rule_reasons(v: &Verdict) -> Vec<String> {
    v.terms
        .reasons
        .iter()
        .filter(|r| r.rule.contains(" rules["))
        .map(|r| r.rule.clone())
        .collect()
}

/// An agent with id `id` and nothing else.
fn bare_agent(id: &str) -> Agent {
    Agent {
        id: id.into(),
        name: id.into(),
        namespace: None,
        labels: Default::default(),
        orchestrators: vec![],
        file: "a.agf.yaml".into(),
        local_tools: vec![],
        mcp_servers: vec![],
        delegates: vec![],
        policy_refs: vec![],
        refused: None,
    }
}

/// Short strings over an alphabet of id characters, glob metacharacters and separators.
fn pattern_text() -> impl Strategy<Value = String> {
    let ch = prop::sample::select(vec![
        'a', 'b', '-', '.', '_', '*', '?', '[', ']', '!', '/', '\\', 'é',
    ]);
    prop::collection::vec(ch, 0..6).prop_map(String::from_iter)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A selector's agent pattern selects exactly the ids its glob matches (a literal one is
    /// compared without being compiled; a pattern that does not compile selects nothing).
    #[test]
    fn a_selector_pattern_selects_exactly_what_its_glob_matches(
        pattern in pattern_text(),
        id in pattern_text(),
    ) {
        let selector = Selector { agents: vec![pattern.clone()], ..Selector::default() };
        let glob = glob::Pattern::new(&pattern).map(|g| g.matches(&id)).unwrap_or(false);
        prop_assert_eq!(selector.selects(&bare_agent(&id)), glob);
    }

    /// The index finds the same covering rules as the scan, in the same order, for every call;
    /// the verdict of a declared call lists exactly those rules as reasons, in that order, and
    /// the policies behind its reasons are those a scan finds.
    #[test]
    fn the_rule_index_finds_what_a_scan_of_every_rule_finds_in_the_same_order(
        policies in prop::collection::vec(gen_policy(), 0..8),
        calls in prop::collection::vec((0..CALL_TOOLS.len(), 0..SERVERS.len()), 1..12),
    ) {
        let reg = registry(&policies);
        for (tool, server) in calls {
            let (tool, server) = (CALL_TOOLS[tool], SERVERS[server]);
            let want = scan(&reg, tool, server);
            prop_assert_eq!(&indexed(&reg, tool, server), &want, "{} on {:?}", tool, server);
            let call = ToolCall::new(tool, server.map(String::from), json!({})).unwrap();
            let v = evaluate(&reg, "bot", &call);
            if server.is_none() && !local_alias(tool) {
                prop_assert_eq!(v.kind, VerdictKind::Deny, "undeclared {}", tool);
                continue;
            }
            let labels: Vec<String> = want.into_iter().map(|(_, l)| l).collect();
            prop_assert_eq!(rule_reasons(&v), labels);
            // The policies behind the reasons, also when a reason names a rule of another
            // file (which names no policy).
            let mut reasons = v.terms.reasons.clone();
            reasons.extend(v.terms.reasons.iter().map(|r| Reason { file: "g9.yaml".into(), ..r.clone() }));
            prop_assert_eq!(reg.policies_behind(&v.terms.reasons), behind_scan(&reg, &v.terms.reasons));
            prop_assert_eq!(reg.policies_behind(&reasons), behind_scan(&reg, &reasons));
            let wrong_file: Vec<Reason> = reasons.into_iter().filter(|r| r.file == "g9.yaml").collect();
            prop_assert!(reg.policies_behind(&wrong_file).is_empty());
        }
    }
}

/// Exact-name and glob rules of several policies in several files interleave in the verdict's
/// reasons by policy id, then file order: the index keeps them apart but must not reorder them.
#[test]
fn exact_and_glob_rules_keep_policy_then_file_order_in_the_reasons() {
    let rule = |tool, server| (tool, server, false);
    let gov_b = [
        "policies:\n".to_string(),
        policy_item(
            "b.late-v1",
            SELECTORS[1], // agents: [bot]
            &[
                rule("pay*", None),
                rule("pay", Some("s1")),
                rule("pay", None),
            ],
        ),
        policy_item(
            "a.early-v1",
            SELECTORS[2], // agents: ["*"]
            &[rule("pay", None), rule("*", None), rule("fs_read", None)],
        ),
    ]
    .concat();
    let gov_a = format!(
        "policies:\n{}",
        policy_item(
            "c.last-v1",
            SELECTORS[4], // labels: {team: t}
            &[rule("?ay", Some("s2")), rule("pay", None)],
        )
    );
    let reg = Registry::load(
        &[("a.agf.yaml".into(), agent_yaml(&[]))],
        &[("gb.yaml".into(), gov_b), ("ga.yaml".into(), gov_a)],
    )
    .unwrap();
    let v = evaluate(&reg, "bot", &ToolCall::new("pay", None, json!({})).unwrap());
    let rules = rule_reasons(&v);
    let short: Vec<&str> = rules
        .iter()
        .map(|l| &l[..l.find(" (line").unwrap()])
        .collect();
    assert_eq!(
        short,
        [
            "a.early-v1 rules[0]",
            "a.early-v1 rules[1]",
            "b.late-v1 rules[0]",
            "b.late-v1 rules[2]",
            "c.last-v1 rules[1]",
        ]
    );
    let on_s2 = indexed(&reg, "pay", Some("s2"));
    let labels: Vec<&str> = on_s2
        .iter()
        .map(|(_, l)| &l[..l.find(" (line").unwrap()])
        .collect();
    assert_eq!(
        labels,
        [
            "a.early-v1 rules[0]",
            "a.early-v1 rules[1]",
            "b.late-v1 rules[0]",
            "b.late-v1 rules[2]",
            "c.last-v1 rules[0]",
            "c.last-v1 rules[1]",
        ]
    );
}

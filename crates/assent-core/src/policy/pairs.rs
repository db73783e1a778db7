//! The load's pair warnings: rules of the loaded governance that may meet one call and
//! together do what neither says alone (a quorum beside an approving default, an approving
//! default beside thresholds, scope or a high tier naming no default). Approximate, bounded
//! in what it names and in what it compares ([`PAIR_BUDGET`]). Part of [`super`]'s loading.

use super::model::{Policy, Rule};
use crate::approval::{DefaultDecision, QUORUM_DEFAULT_NOTE};
use crate::risk::RiskTier;
use crate::triggers::{ScopeSpec, Thresholds};
use std::collections::BTreeMap;

/// Partners a pair warning lists by name; the rest are counted (`… and N more`).
const PARTNERS_NAMED: usize = 3;

/// Most rule pairs one load compares ([`may_meet`]) for its pair warnings; past it the check
/// stops with a warning saying so (found by review: the comparisons grew as the square of the
/// rules, and a million rules held a reload for hours).
pub const PAIR_BUDGET: usize = 2_000_000;

/// The rules of `partners` (each with its file) that meet `rule` ([`may_meet`], itself
/// excluded), named as `LABEL (FILE)`: at most [`PARTNERS_NAMED`] of them, then `and N more`;
/// `None` when there is none. Its cost is one [`may_meet`] a partner, taken from `budget`
/// (none once it is spent).
fn partners_of(rule: &Rule, partners: &[(&Rule, &str)], budget: &mut usize) -> Option<String> {
    let mut named = Vec::new();
    let mut more = 0usize;
    for (o, file) in partners {
        if *budget == 0 {
            break;
        }
        *budget -= 1;
        if std::ptr::eq(rule, *o) || !may_meet(rule, o) {
            continue;
        }
        if named.len() < PARTNERS_NAMED {
            named.push(format!("{} ({file})", o.label));
        } else {
            more += 1;
        }
    }
    if more > 0 {
        named.push(format!("{more} more"));
    }
    match named.len() {
        0 => None,
        1 => named.pop(),
        n => {
            let last = named.pop().unwrap_or_default();
            Some(format!("{} and {last}", named[..n - 1].join(", ")))
        }
    }
}

/// The pair warnings of the loaded governance `policies`, once every file is loaded: one for
/// each rule that needs a quorum and may cover a call with rules that say `default_decision:
/// approve` ([`QUORUM_DEFAULT_NOTE`]), and one for each rule saying `default_decision:
/// approve` that may cover a call with other rules whose `thresholds` or `scope` hold it (a
/// call a trigger holds defaults to reject; the rule's own are warned of by `build_rule`) or
/// that hold at R3/R4 without naming a default (the approving default applies to their calls).
/// Each names the rule and at most [`PARTNERS_NAMED`] partners (`… and N more`), so a file of
/// N quorum rules and N approving ones gives N warnings, not N² (found by review: 3,000 and
/// 3,000 rules made 9 M warnings, gigabytes that killed the gateway on reload). Warnings,
/// not errors: the gatekeeper and the expiry sweep make such a call's timeout reject
/// ([`crate::approval::default_at_timeout`], [`crate::grant::default_on_timeout`]).
/// Approximate: selectors are not compared and two tool globs meet when either matches the
/// other's text, so it may warn for rules that never cover one call and misses globs that
/// meet otherwise (`pay*`, `*ment`).
pub(super) fn pair_warnings(policies: &BTreeMap<String, Policy>) -> Vec<String> {
    let rules = || {
        policies
            .values()
            .flat_map(|p| p.rules.iter().map(move |r| (r, p.file.as_str())))
    };
    let approving: Vec<(&Rule, &str)> = rules()
        .filter(|(r, _)| r.default_decision == Some(DefaultDecision::Approve))
        .collect();
    let holding: Vec<(&Rule, &str)> = rules()
        .filter(|(r, _)| holds(&r.thresholds, &r.scope))
        .collect();
    // Found by review: a broad `default_decision: approve` composes onto a call a specific
    // rule holds at R3/R4 naming no default (read as "reject when omitted"): only rules that
    // name a default vote on it, so the approving one applies at the high tier's timeout.
    let silent_high: Vec<(&Rule, &str)> = rules()
        .filter(|(r, _)| r.default_decision.is_none() && r.risk_tier >= Some(RiskTier::R3))
        .collect();
    let mut out = Vec::new();
    let mut budget = PAIR_BUDGET;
    for (a, file) in &approving {
        if let Some(named) = partners_of(a, &silent_high, &mut budget) {
            out.push(format!(
                "{file}: {} says `default_decision: approve` and {named} hold at R3 or above naming no default, and they may cover the same call: only rules that name a default vote on it, so their calls are approved at their timeout; say `default_decision: reject` on them to keep a person's say",
                a.label
            ));
        }
    }
    for (q, file) in rules().filter(|(r, _)| r.quorum.is_some()) {
        if let Some(named) = partners_of(q, &approving, &mut budget) {
            out.push(format!(
                "{file}: {} needs a quorum and {named} say `default_decision: approve`, and they may cover the same call: {QUORUM_DEFAULT_NOTE}",
                q.label
            ));
        }
    }
    for (a, file) in &approving {
        if let Some(named) = partners_of(a, &holding, &mut budget) {
            out.push(format!(
                "{file}: {} says `default_decision: approve` and the thresholds or scope of {named} may hold the same call: a call held by a trigger is held so a person decides, and its default on timeout is reject",
                a.label
            ));
        }
    }
    if budget == 0 {
        out.insert(0, format!(
            "the check for rules that may meet stopped after {PAIR_BUDGET} comparisons: some of its warnings may be missing (split the rules into fewer, broader ones)"
        ));
    }
    out
}

/// Whether `thresholds` or `scope` may hold a call ([`trigger_default_warning`]'s keys).
fn holds(t: &Thresholds, scope: &ScopeSpec) -> bool {
    t.rate.is_some()
        || t.cost.is_some()
        || t.output_bytes.is_some()
        || scope.paths.is_some()
        || scope.domains.is_some()
}

/// Whether rules `a` and `b` may cover one call: no server, or the same, and either's tool
/// glob matches the other's text.
fn may_meet(a: &Rule, b: &Rule) -> bool {
    let servers = a.server.is_none() || b.server.is_none() || a.server == b.server;
    servers && (a.tool.matches(b.tool.as_str()) || b.tool.matches(a.tool.as_str()))
}

#[cfg(test)]
mod tests {
    use crate::policy::Registry;

    const AGENT: &str = "metadata: {id: bot}\naction_space:\n  local_tools:\n    - alias: pay\n";

    /// The trap across rules: rule A says `default_decision: approve` for `pay*`; rule B of
    /// another policy holds `pay` by a cost threshold, so a call B holds defaults to reject
    /// whatever A says. The load warns at A, naming B; a rule whose tools B never covers,
    /// and B itself (no approving default), do not.
    #[test]
    fn an_approving_default_beside_another_rules_thresholds_is_a_load_warning() {
        let gov = "policies:
  - id: a.lenient-v1
    selector: {agents: [bot]}
    rules:
      - {tool: \"pay*\", approval: true, default_decision: approve}
      - {tool: note, approval: true, default_decision: approve}
  - id: b.cost-v1
    selector: {agents: [bot]}
    rules:
      - {tool: pay, thresholds: {cost: {argument: amount, max_per_session: 100}}}
";
        let reg = Registry::of(AGENT, gov);
        let warned = reg.warnings_with("may hold the same call");
        assert_eq!(warned.len(), 1, "{:?}", reg.warnings);
        assert!(
            warned[0].starts_with("g.yaml: a.lenient-v1 rules[0] (line 5) says")
                && warned[0].contains("b.cost-v1 rules[0] (line 10) (g.yaml)")
                && warned[0].contains("default on timeout is reject"),
            "{warned:?}"
        );
    }

    /// The trap (found by review): a baseline `{tool: "*", default_decision: approve}` and a
    /// specific `wire` rule at R3 naming no default: the author reads "reject when omitted",
    /// but only rules naming a default vote on it, so a held `wire` call is approved at its
    /// timeout. The load warns at the baseline, naming the R3 rule; one saying `reject` is
    /// not named.
    #[test]
    fn an_approving_default_beside_a_silent_high_tier_rule_is_a_load_warning() {
        let gov = "policies:
  - id: a.base-v1
    selector: {agents: [bot]}
    rules:
      - {tool: \"*\", risk_tier: R1, default_decision: approve}
      - {tool: wire, risk_tier: R3, approvers: [finance]}
      - {tool: pay, risk_tier: R4, approvers: [finance], default_decision: reject}
";
        let reg = Registry::of(AGENT, gov);
        let warned = reg.warnings_with("hold at R3 or above naming no default");
        assert_eq!(warned.len(), 1, "{:?}", reg.warnings);
        assert!(
            warned[0].starts_with("g.yaml: a.base-v1 rules[0] (line 5) says")
                && warned[0].contains("a.base-v1 rules[1] (line 6) (g.yaml)")
                && !warned[0].contains("rules[2]"),
            "{warned:?}"
        );
    }

    /// The attack: N rules needing a quorum and N approving rules for the same tool gave N²
    /// warnings (3,000 each: 9 M, gigabytes copied into the reload reply and the log). One
    /// warning a quorum rule, naming three partners and counting the rest, one an approving
    /// rule beside thresholds; and never more than 1,000 warnings in all.
    #[test]
    fn many_quorum_and_approving_rules_give_a_bounded_number_of_warnings() {
        let gov = |n: usize| {
            let mut g = String::from(
                "policies:\n  - id: a.many-v1\n    selector: {agents: [bot]}\n    rules:\n",
            );
            for _ in 0..n {
                g.push_str("      - {tool: pay, approvers: {roles: [finance], count: 2}}\n");
                g.push_str("      - {tool: pay, default_decision: approve, thresholds: {output_bytes: 10}}\n");
            }
            g
        };
        let load = |n| Registry::of(AGENT, &gov(n));
        let reg = load(5);
        let quorum = reg.warnings_with("needs a quorum");
        assert_eq!(quorum.len(), 5, "{:?}", reg.warnings);
        assert!(
            quorum[0].contains("rules[5] (line 10) (g.yaml) and 2 more say"),
            "{quorum:?}"
        );
        let beside = reg.warnings_with("may hold the same call");
        assert_eq!(beside.len(), 5, "{:?}", reg.warnings);
        assert!(beside[0].contains(" and 1 more may hold"), "{beside:?}");
        let reg = load(1_500);
        assert_eq!(reg.warnings.len(), 1_000);
        let last = &reg.warnings[999];
        assert!(last.ends_with("more warnings not shown"), "{last}");
    }

    /// Found by review: the pair check compared every approving rule with every other rule,
    /// so a million rules held a reload for hours. It stops after [`super::PAIR_BUDGET`]
    /// comparisons and says so, first among its warnings.
    #[test]
    fn the_pair_check_stops_at_its_budget_and_says_so() {
        let mut g = String::from("policies:\n  - id: a.many-v1\n    rules:\n");
        for i in 0..1_500 {
            g.push_str(&format!(
                "      - {{tool: a{i}, default_decision: approve}}\n"
            ));
            g.push_str(&format!("      - {{tool: h{i}, risk_tier: R3}}\n"));
        }
        let pairs = super::pair_warnings(&Registry::of(AGENT, &g).policies);
        assert_eq!(pairs.len(), 1, "{pairs:?}");
        assert!(
            pairs[0].contains("stopped after 2000000 comparisons"),
            "{pairs:?}"
        );
        let mut g = String::from("policies:\n  - id: a.few-v1\n    rules:\n");
        g.push_str(
            "      - {tool: a, default_decision: approve}\n      - {tool: h, risk_tier: R3}\n",
        );
        assert!(super::pair_warnings(&Registry::of(AGENT, &g).policies).is_empty());
    }
}

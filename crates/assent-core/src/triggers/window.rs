//! The session window (issue 13 §5): what the rate and cost thresholds of a policy set need
//! from a session's earlier calls, so that the store can keep it incrementally and hand the
//! gatekeeper a short list instead of the whole history.
//!
//! The gatekeeper reads the session's earlier calls as [`PriorCall`]s: a rate threshold counts
//! the covered ones in its window ([`rate_exceeded`](super::rate_exceeded)), a cost threshold
//! sums its argument over all covered ones ([`cost_exceeded`](super::cost_exceeded)). Both
//! only look at a call's tool and server (what a rule covers), its time and the numbers at the
//! cost arguments. So the history can be replaced by an equivalent list ([`compact`]):
//!
//! - one *folded* entry per tool and server carrying the session totals of each cost argument
//!   the policy set names ([`WindowNeeds::cost_arguments`]), dated before every window;
//! - the calls inside the longest rate window ([`WindowNeeds::rate_since`]), without
//!   arguments (their costs are in the totals);
//! - the calls whose approval may still change (pending), as they are.
//!
//! Whatever rule set asked, rate counts and cost totals over that list equal those over the
//! whole history (cost totals up to the rounding of adding the same numbers in another order;
//! integers below 2^53 sum exactly).
//!
//! The agent-wide thresholds (`rate.per: agent`, `cost.max_per_agent`) read no session list:
//! they count the agent's calls in all its sessions inside their windows, read as they are
//! (with arguments) from the longest of them ([`WindowNeeds::agent_since`]), which costs the
//! calls in that window, not the history. Everything here is pure.

use crate::arg_path::lookup;
use crate::policy::{Registry, Rule};
use crate::triggers::{Per, PriorCall, window_start_ms};
use serde_json::{Map, Value};
use std::borrow::Cow;

/// The most of an agent's calls in an agent-wide window a proposal reads, newest first: the
/// store hands at most one more, and more than this many entries in
/// [`Observations::agent_calls`](crate::triggers::Observations::agent_calls) means the window
/// was not read whole (the store makes the list up past the cap with entries dated before every
/// window when it stopped looking early, among rows that do not count): then the agent-wide
/// thresholds that have not fired yet hold the call (their count is unknown; fail closed), so a proposal's cost does
/// not grow with how many calls the agent made in a long window (found by review: every
/// proposal read up to seven days of the agent's calls inside the write lock). A per-agent
/// `rate.max` must be below it.
pub const AGENT_CALLS_CAP: usize = 4096;

/// What a policy set's thresholds need from a session's history: the longest rate window and
/// the cost arguments. Computed once per loaded registry ([`WindowNeeds::of`]), narrowed to
/// one call's rules ([`WindowNeeds::for_call`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WindowNeeds {
    /// The longest `thresholds.rate.per_seconds` of any rule (seconds); `None` when no rule has
    /// a rate threshold.
    pub longest_rate_seconds: Option<u64>,
    /// Every `thresholds.cost.argument` of any rule, sorted, without repeats.
    pub cost_arguments: Vec<String>,
    /// The longest agent-wide window of any rule (seconds): `rate.per_seconds` of a
    /// `per: agent` rate, `cost.per_seconds` of a `max_per_agent` cost. `None` when no rule
    /// counts per agent: then the agent's other sessions are never read.
    pub longest_agent_seconds: Option<u64>,
}

impl WindowNeeds {
    /// The needs of every governance rule of `reg` (agent declarations carry no thresholds).
    pub fn of(reg: &Registry) -> WindowNeeds {
        let mut needs = WindowNeeds::default();
        for rule in reg.policies().values().flat_map(|p| &p.rules) {
            let longest = |old: Option<u64>, s: u64| Some(old.unwrap_or(0).max(s));
            if let Some(r) = &rule.thresholds.rate {
                needs.longest_rate_seconds = longest(needs.longest_rate_seconds, r.per_seconds);
                if r.per == Per::Agent {
                    needs.longest_agent_seconds =
                        longest(needs.longest_agent_seconds, r.per_seconds);
                }
            }
            if let Some(c) = &rule.thresholds.cost {
                needs.cost_arguments.push(c.argument.clone());
                if let (Some(_), Some(s)) = (c.max_per_agent, c.per_seconds) {
                    needs.longest_agent_seconds = longest(needs.longest_agent_seconds, s);
                }
            }
        }
        needs.cost_arguments.sort();
        needs.cost_arguments.dedup();
        needs
    }

    /// The start of the longest rate window ending at `now_ms` (Unix ms, exclusive: calls at
    /// or before it count in no window); `None` when no rule has a rate threshold.
    pub fn rate_since(&self, now_ms: i64) -> Option<i64> {
        self.longest_rate_seconds
            .map(|s| window_start_ms(now_ms, s))
    }

    /// These needs for one call of `tool` on `server` by agent `agent_id`: the agent-wide
    /// window only as long as the rules covering that call that count per agent need, `None`
    /// when none of them does, so the agent's other sessions are not read for it (found by
    /// review: every proposal of any tool read the agent's calls in the longest per-agent
    /// window of the whole policy set). Borrowed when nothing narrows.
    pub fn for_call<'a>(
        &'a self,
        reg: &Registry,
        agent_id: &str,
        tool: &str,
        server: Option<&str>,
    ) -> Cow<'a, WindowNeeds> {
        if self.longest_agent_seconds.is_none() {
            return Cow::Borrowed(self);
        }
        let seconds = reg
            .rules_covering(agent_id, tool, server)
            .into_iter()
            .filter_map(agent_seconds)
            .max();
        if seconds == self.longest_agent_seconds {
            return Cow::Borrowed(self);
        }
        Cow::Owned(WindowNeeds {
            longest_agent_seconds: seconds,
            ..self.clone()
        })
    }

    /// The start of the longest agent-wide window ending at `now_ms` (Unix ms, exclusive: the
    /// agent's calls after it, in any session, are what [`Observations::agent_calls`] must
    /// hold); `None` when no rule counts per agent (nothing to read).
    ///
    /// [`Observations::agent_calls`]: crate::triggers::Observations::agent_calls
    pub fn agent_since(&self, now_ms: i64) -> Option<i64> {
        self.longest_agent_seconds
            .map(|s| window_start_ms(now_ms, s))
    }
}

/// The longest agent-wide window `rule` counts over, in seconds: its `per: agent` rate's, its
/// `max_per_agent` cost's; `None` when it counts per session only.
fn agent_seconds(rule: &Rule) -> Option<u64> {
    let t = &rule.thresholds;
    let rate = t
        .rate
        .as_ref()
        .filter(|r| r.per == Per::Agent)
        .map(|r| r.per_seconds);
    let cost = t
        .cost
        .as_ref()
        .and_then(|c| c.max_per_agent.and(c.per_seconds));
    rate.max(cost)
}

/// The cost a call's `arguments` carry at `argument` (a dotted path, looked up as the cost
/// threshold looks it up): `None` when it is missing, not a number or not finite; a negative
/// value counts as 0 (a call that ran with one — confirmed by a person — never lowers the
/// session's total for the calls after it).
pub fn cost_of(arguments: &Value, argument: &str) -> Option<f64> {
    lookup(arguments, argument)
        .and_then(Value::as_f64)
        .filter(|x| x.is_finite())
        .map(|x| x.max(0.0))
}

/// `total` plus the cost of `arguments` at `argument` (unchanged when it carries none).
pub fn add_cost(total: f64, arguments: &Value, argument: &str) -> f64 {
    total + cost_of(arguments, argument).unwrap_or(0.0)
}

/// The running totals of one tool (on one server) of a session: `(argument, total)` pairs.
#[derive(Debug, Clone, PartialEq)]
pub struct Folded {
    /// Tool name.
    pub tool: String,
    /// MCP server alias.
    pub server: Option<String>,
    /// Session total of each cost argument over the tool's folded calls.
    pub totals: Vec<(String, f64)>,
}

impl Folded {
    /// The entry standing for these calls in a [`compact`] list: dated `i64::MIN` (before every
    /// rate window, whose start is never below it and which counts calls strictly after it),
    /// with an object mapping each argument path, as a literal key (which the cost lookup
    /// tries first), to its total. A total too large to represent is `f64::MAX`, so it still
    /// exceeds every finite limit.
    pub fn entry(&self) -> PriorCall {
        let totals: Map<String, Value> = self
            .totals
            .iter()
            .map(|(a, t)| {
                let t = if t.is_finite() { *t } else { f64::MAX };
                (a.clone(), Value::from(t))
            })
            .collect();
        PriorCall {
            tool: self.tool.clone(),
            server: self.server.clone(),
            at_ms: i64::MIN,
            arguments: Value::Object(totals),
        }
    }
}

/// The list the gatekeeper is given instead of the whole history: the `folded` totals, the
/// calls of `recent` (settled calls inside [`WindowNeeds::rate_since`], given with their times
/// and no arguments) and the calls of `live` (calls that may still change, as they are).
/// `recent` and `live` must not share a call.
pub fn compact(folded: &[Folded], recent: Vec<PriorCall>, live: Vec<PriorCall>) -> Vec<PriorCall> {
    let mut out: Vec<PriorCall> = folded.iter().map(Folded::entry).collect();
    out.extend(recent.into_iter().map(|c| PriorCall {
        arguments: Value::Null,
        ..c
    }));
    out.extend(live);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::triggers::{CostLimit, RateLimit, cost_exceeded, rate_exceeded};
    use serde_json::json;

    fn call(tool: &str, at_ms: i64, amount: f64) -> PriorCall {
        PriorCall {
            tool: tool.into(),
            server: None,
            at_ms,
            arguments: json!({"amount": amount, "order": {"n": amount}}),
        }
    }

    /// The compact list gives the same rate and cost answers as the history it replaces, for
    /// every window up to the longest and both arguments (a plain key and a dotted path).
    #[test]
    fn compact_answers_as_the_whole_history() {
        let now = 1_000_000;
        let history: Vec<PriorCall> = (0..40)
            .map(|i| {
                call(
                    if i % 3 == 0 { "a" } else { "b" },
                    now - i * 7_000,
                    i as f64,
                )
            })
            .collect();
        let needs = WindowNeeds {
            longest_rate_seconds: Some(120),
            cost_arguments: vec!["amount".into(), "order.n".into()],
            longest_agent_seconds: None,
        };
        let since = needs.rate_since(now).unwrap();
        // The last 5 calls may still change: they are live; the others are settled.
        let (live, settled) = history.split_at(5);
        let mut folded: Vec<Folded> = Vec::new();
        for c in settled {
            let f = match folded.iter_mut().find(|f| f.tool == c.tool) {
                Some(f) => f,
                None => {
                    folded.push(Folded {
                        tool: c.tool.clone(),
                        server: None,
                        totals: needs
                            .cost_arguments
                            .iter()
                            .map(|a| (a.clone(), 0.0))
                            .collect(),
                    });
                    folded.last_mut().unwrap()
                }
            };
            for (a, t) in &mut f.totals {
                *t = add_cost(*t, &c.arguments, a);
            }
        }
        let recent = settled
            .iter()
            .filter(|c| c.at_ms > since)
            .cloned()
            .collect();
        let small = compact(&folded, recent, live.to_vec());
        assert!(small.len() < history.len());
        for tool in ["a", "b"] {
            let covered = |l: &[PriorCall]| -> Vec<PriorCall> {
                l.iter().filter(|c| c.tool == tool).cloned().collect()
            };
            let (full, part) = (covered(&history), covered(&small));
            for per_seconds in [1, 7, 30, 60, 120] {
                for max in [1, 3, 5, 100] {
                    let l = RateLimit {
                        max,
                        per_seconds,
                        per: Per::Session,
                    };
                    assert_eq!(
                        rate_exceeded(&l, full.iter(), now),
                        rate_exceeded(&l, part.iter(), now),
                        "{tool} {per_seconds} {max}"
                    );
                }
            }
            for argument in ["amount", "order.n"] {
                for max in [0.0, 100.0, 250.0, 1000.0] {
                    let l = CostLimit {
                        argument: argument.into(),
                        max_per_session: Some(max),
                        max_per_agent: None,
                        per_seconds: None,
                    };
                    let args = json!({"amount": 1, "order": {"n": 1}});
                    assert_eq!(
                        cost_exceeded(&l, full.iter(), &args),
                        cost_exceeded(&l, part.iter(), &args),
                        "{tool} {argument} {max}"
                    );
                }
            }
        }
    }

    #[test]
    fn an_overflowing_total_still_exceeds_every_limit() {
        let f = Folded {
            tool: "a".into(),
            server: None,
            totals: vec![("amount".into(), f64::INFINITY)],
        };
        let l = CostLimit {
            argument: "amount".into(),
            max_per_session: Some(1e300),
            max_per_agent: None,
            per_seconds: None,
        };
        assert!(cost_exceeded(&l, [f.entry()].iter(), &json!({"amount": 0})).is_some());
    }

    #[test]
    fn costs_are_read_as_the_threshold_reads_them() {
        let args = json!({"a.b": 2, "a": {"b": 3}, "s": "7", "n": null});
        assert_eq!(cost_of(&args, "a.b"), Some(2.0));
        assert_eq!(cost_of(&args, "s"), None);
        assert_eq!(cost_of(&args, "n"), None);
        assert_eq!(add_cost(1.5, &args, "missing"), 1.5);
    }

    #[test]
    fn needs_of_a_registry_are_the_longest_window_and_every_cost_argument() {
        let gov = "policies:\n  - id: a.b-v1\n    rules:\n      - tool: x\n        thresholds: {rate: {max: 5, per_seconds: 60}, cost: {argument: amount, max_per_session: 9}}\n      - tool: y\n        thresholds: {rate: {max: 5, per_seconds: 600}, cost: {argument: amount, max_per_session: 1}}\n      - tool: z\n        thresholds: {cost: {argument: order.n, max_per_session: 1}}\n";
        let reg = Registry::load(&[], &[("g".into(), gov.into())]).unwrap();
        let needs = WindowNeeds::of(&reg);
        assert_eq!(needs.longest_rate_seconds, Some(600));
        assert_eq!(needs.cost_arguments, vec!["amount", "order.n"]);
        assert_eq!(needs.rate_since(1_000_000), Some(400_000));
        assert_eq!(WindowNeeds::default().rate_since(5), None);
        assert_eq!(needs.longest_agent_seconds, None);
        assert_eq!(WindowNeeds::default().agent_since(5), None);
    }

    /// Only `per: agent` rates and `max_per_agent` costs ask for the agent's other sessions,
    /// and the longest of their windows is read.
    #[test]
    fn agent_wide_windows_are_read_only_when_a_rule_counts_per_agent() {
        let gov = "policies:\n  - id: a.b-v1\n    rules:\n      - tool: x\n        thresholds: {rate: {max: 5, per_seconds: 60, per: agent}, cost: {argument: amount, max_per_session: 9}}\n      - tool: y\n        thresholds: {rate: {max: 5, per_seconds: 9000}, cost: {argument: amount, max_per_agent: 1, per_seconds: 600}}\n";
        let reg = Registry::load(&[], &[("g".into(), gov.into())]).unwrap();
        let needs = WindowNeeds::of(&reg);
        assert_eq!(needs.longest_agent_seconds, Some(600));
        assert_eq!(needs.agent_since(1_000_000), Some(400_000));
        assert_eq!(needs.longest_rate_seconds, Some(9000));
    }

    /// Found by review: every proposal of any tool read the agent's calls in the longest
    /// per-agent window of the whole policy set. A call's needs keep only the per-agent window
    /// of the rules that cover it: none for a tool no per-agent rule covers.
    #[test]
    fn a_calls_needs_read_the_agent_window_only_for_the_rules_that_cover_it() {
        let agent = "metadata: {id: bot}\naction_space:\n  local_tools:\n    - alias: x\n    - alias: y\n    - alias: z\n";
        let gov = "policies:\n  - id: a.b-v1\n    selector: {agents: [\"*\"]}\n    rules:\n      - tool: x\n        thresholds: {rate: {max: 5, per_seconds: 60, per: agent}}\n      - tool: y\n        thresholds: {cost: {argument: amount, max_per_agent: 1, per_seconds: 600}}\n      - tool: z\n        thresholds: {rate: {max: 5, per_seconds: 9000}}\n";
        let reg = Registry::load(
            &[("a.agf.yaml".into(), agent.into())],
            &[("g".into(), gov.into())],
        )
        .unwrap();
        let needs = WindowNeeds::of(&reg);
        assert_eq!(needs.longest_agent_seconds, Some(600));
        let of = |tool: &str| {
            needs
                .for_call(&reg, "bot", tool, None)
                .longest_agent_seconds
        };
        assert_eq!(of("x"), Some(60));
        assert_eq!(of("y"), Some(600));
        assert_eq!(of("z"), None, "per session only");
        assert_eq!(
            needs
                .for_call(&reg, "stranger", "y", None)
                .longest_agent_seconds,
            None
        );
        assert!(matches!(
            needs.for_call(&reg, "bot", "y", None),
            Cow::Borrowed(_)
        ));
    }
}

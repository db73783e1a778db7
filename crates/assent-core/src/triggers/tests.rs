//! Unit tests of the thresholds: window arithmetic, and the agent-wide rate and cost totals
//! against an agent that changes its session id.

use super::*;
use serde_json::json;

fn call(session_tool: &str, at_ms: i64, amount: f64) -> PriorCall {
    PriorCall {
        tool: session_tool.into(),
        server: None,
        at_ms,
        arguments: json!({"amount": amount}),
    }
}

fn thresholds(yaml: &str) -> Thresholds {
    let t: Thresholds = serde_saphyr::from_str(yaml).unwrap();
    t.validate().unwrap();
    t
}

fn fired(
    t: &Thresholds,
    args: Value,
    session: &[PriorCall],
    agent: &[PriorCall],
) -> Vec<&'static str> {
    let obs = Observations {
        prior_calls: session,
        agent_calls: agent,
        ..Observations::none(1_000_000)
    };
    threshold_triggers(t, |c| c.tool == "pay", &args, &obs)
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}

/// An agent that sends each call under a new session id has an empty session list; a
/// `per: agent` rate counts its calls in the other sessions, a `per: session` one does not.
#[test]
fn a_per_agent_rate_counts_calls_a_fresh_session_id_hides() {
    let others = [call("pay", 990_000, 1.0), call("other", 995_000, 1.0)];
    let agent = thresholds("rate: {max: 1, per_seconds: 60, per: agent}");
    assert_eq!(fired(&agent, json!({}), &[], &others), ["rate"]);
    let session = thresholds("rate: {max: 1, per_seconds: 60}");
    assert_eq!(session.rate.as_ref().unwrap().per, Per::Session);
    assert!(fired(&session, json!({}), &[], &others).is_empty());
    // Outside the window, or of a tool the rule does not cover, a call does not count.
    let old = [call("pay", 940_000, 1.0), call("other", 999_000, 1.0)];
    assert!(fired(&agent, json!({}), &[], &old).is_empty());
}

/// `max_per_agent` sums the agent's calls in all its sessions inside `per_seconds`;
/// `max_per_session` alone checks this call against an empty fresh session.
#[test]
fn a_per_agent_cost_total_sums_across_sessions_in_its_window() {
    let others = [call("pay", 990_000, 6000.0), call("pay", 100_000, 1e9)];
    let agent = thresholds("cost: {argument: amount, max_per_agent: 10000, per_seconds: 60}");
    assert_eq!(
        fired(&agent, json!({"amount": 5000}), &[], &others),
        ["cost"]
    );
    assert!(fired(&agent, json!({"amount": 4000}), &[], &others).is_empty());
    let session = thresholds("cost: {argument: amount, max_per_session: 10000}");
    assert!(fired(&session, json!({"amount": 5000}), &[], &others).is_empty());
    // Both totals: each may fire, the trigger is named by each.
    let both = thresholds(
        "cost: {argument: amount, max_per_session: 1, max_per_agent: 10000, per_seconds: 60}",
    );
    let f = fired(
        &both,
        json!({"amount": 5000}),
        &[call("pay", 999_000, 1.0)],
        &others,
    );
    assert_eq!(f, ["cost", "cost"]);
}

/// A missing, non-numeric or negative cost holds the call under an agent-wide total too,
/// and says so once.
#[test]
fn an_uncountable_cost_holds_the_call_under_an_agent_total() {
    let agent = thresholds("cost: {argument: amount, max_per_agent: 10000, per_seconds: 60}");
    for args in [json!({}), json!({"amount": "5"}), json!({"amount": -5})] {
        assert_eq!(fired(&agent, args.clone(), &[], &[]), ["cost"], "{args}");
    }
}

/// Attack (found by review): with a limit of `1e16` (a budget in micro-units), once the total
/// stood at it every call of cost 1 added nothing (`1e16 + 1 == 1e16` in a double), so it never
/// went over and the agent spent without limit. A cost the total cannot count holds the call,
/// per session and per agent; a cost of 0 adds nothing and holds nothing.
#[test]
fn a_cost_too_small_for_the_total_to_count_holds_the_call() {
    let both = thresholds(
        "cost: {argument: amount, max_per_session: 1e16, max_per_agent: 1e16, per_seconds: 60}",
    );
    let spent = [call("pay", 999_000, 1e16)];
    assert_eq!(
        fired(&both, json!({"amount": 1}), &spent, &spent),
        ["cost", "cost"]
    );
    assert!(fired(&both, json!({"amount": 0}), &spent, &spent).is_empty());
    // Below 2^53 a cost of 1 counts, and the call under the limit runs.
    let under = [call("pay", 999_000, 1e15)];
    assert!(fired(&both, json!({"amount": 1}), &under, &under).is_empty());
}

/// An agent total too large to represent is infinite and exceeds every limit; a window too
/// long to represent counts every earlier call (fail closed).
#[test]
fn agent_wide_arithmetic_overflow_counts_more_never_less() {
    let huge = [
        call("pay", 999_000, f64::MAX),
        call("pay", 999_500, f64::MAX),
    ];
    let l = CostLimit {
        argument: "amount".into(),
        max_per_session: None,
        max_per_agent: Some(f64::MAX),
        per_seconds: Some(60),
    };
    assert!(agent_cost_exceeded(&l, huge.iter(), &json!({"amount": 0}), 1_000_000).is_some());
    let l = CostLimit {
        per_seconds: Some(u64::MAX),
        max_per_agent: Some(1.0),
        ..l
    };
    let ancient = [call("pay", i64::MIN + 1, 2.0)];
    assert!(agent_cost_exceeded(&l, ancient.iter(), &json!({"amount": 0}), 0).is_some());
    assert_eq!(l.agent_since(0), Some(i64::MIN));
}

/// Written back, a rule keeps its old form: `per: session` and absent totals are left out.
#[test]
fn default_per_and_absent_totals_are_not_written_back() {
    let t = thresholds("rate: {max: 1, per_seconds: 5}\ncost: {argument: a, max_per_session: 3}");
    let v = serde_json::to_value(&t).unwrap();
    assert_eq!(v["rate"], json!({"max": 1, "per_seconds": 5}));
    assert_eq!(v["cost"], json!({"argument": "a", "max_per_session": 3.0}));
}

#[test]
fn window_arithmetic_is_checked() {
    let now = 1_700_000_000_000;
    assert_eq!(window_start_ms(now, 60), now - 60_000);
    assert_eq!(window_start_ms(now, u64::MAX), i64::MIN);
    assert_eq!(window_start_ms(now, 1 << 62), i64::MIN);
    assert_eq!(window_start_ms(i64::MIN + 5, 60), i64::MIN);
}

/// Found by review: every proposal read the agent's calls in the whole agent-wide window,
/// however many. The store reads at most one more than [`window::AGENT_CALLS_CAP`]: a list
/// longer than the cap says the window was not read whole, and an agent-wide count or total
/// that has not fired on what was read holds the call. Per-session limits are unaffected, and a
/// per-agent `rate.max` at or above the cap is refused at load.
#[test]
fn an_agent_window_past_the_cap_holds_what_it_cannot_count() {
    let many: Vec<PriorCall> = (0..=window::AGENT_CALLS_CAP)
        .map(|i| call("other", 999_000 - i as i64, 1.0))
        .collect();
    let rate = thresholds("rate: {max: 5, per_seconds: 60, per: agent}");
    assert_eq!(fired(&rate, json!({}), &[], &many), ["rate"]);
    assert!(
        fired(&rate, json!({}), &[], &many[1..]).is_empty(),
        "at the cap"
    );
    let cost = thresholds("cost: {argument: amount, max_per_agent: 10000, per_seconds: 60}");
    assert_eq!(fired(&cost, json!({"amount": 1}), &[], &many), ["cost"]);
    let session = thresholds("rate: {max: 5, per_seconds: 60}");
    assert!(fired(&session, json!({}), &[], &many).is_empty());
    let too_high: Thresholds =
        serde_saphyr::from_str("rate: {max: 4096, per_seconds: 60, per: agent}").unwrap();
    assert!(too_high.validate().unwrap_err().contains("below 4096"));
}

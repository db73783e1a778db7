//! B1c (issue 13 §5, item 6): the cost of one proposal at call 10, 1,000 and 10,000 of one
//! session, through the real store on a real SQLite file (WAL, `synchronous=FULL`) and the
//! real gatekeeper with a rate and a cost threshold. `window` is `Store::propose_within` (the
//! session window kept incrementally); `history` is `Store::propose`, which hands the
//! gatekeeper the session's whole history (what every proposal did before issue 13 §5).
//!
//! The session is filled with allowed calls, one a second (so a 60 s rate window holds 60 of
//! them). The measured proposal is evaluated for real and then recorded as denied, so the
//! session keeps its length however many times criterion runs it (a denial reads the window
//! and appends its audit record, like any proposal; it adds no call).

use assent_bench::{open_store, proposal};
use assent_core::policy::Registry;
use assent_core::triggers::window::WindowNeeds;
use assent_core::triggers::{Observations, PriorCall};
use assent_core::{CanonicalCall, ToolCall, VerdictKind, evaluate_in};
use assent_store::Store;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use serde_json::json;
use std::time::Duration;

const AGENT: &str =
    "metadata: {id: bot}\naction_space:\n  local_tools:\n    - {alias: pay, approval: false}\n";
const GOVERNANCE: &str = "policies:\n  - id: b1c.pay-v1\n    rules:\n      - tool: pay\n        thresholds: {rate: {max: 1000000, per_seconds: 60}, cost: {argument: amount, max_per_session: 1000000000000}}\n";

/// One proposal of `pay {amount: 3}` at `now`, through the window (`needs`) or the history;
/// recorded as allowed (`keep`) or as denied (the session does not grow).
fn propose(s: &Store, reg: &Registry, needs: Option<&WindowNeeds>, now: i64, keep: bool) {
    let call = CanonicalCall::new(measured_call()).unwrap();
    let timeout = |_: &assent_core::gatekeeper::Verdict| 60_000;
    let p = proposal(&call, now, &timeout, 64);
    let evaluate = |prior: &[PriorCall]| {
        let obs = observing(prior, now);
        let mut v = evaluate_in(reg, "bot", call.call(), Some(call.arguments()), &obs);
        assert_eq!(v.kind, VerdictKind::Allow, "{:?}", v.terms.reasons);
        if !keep {
            v.kind = VerdictKind::Deny;
        }
        v
    };
    match needs {
        Some(n) => s.propose_within(&p, n, evaluate),
        None => s.propose(&p, evaluate),
    }
    .unwrap();
}

/// The gatekeeper's verdict on the measured call with the session's earlier calls `prior`.
fn verdict(reg: &Registry, prior: &[PriorCall], now: i64) -> VerdictKind {
    let call = measured_call();
    let a = call.canonical_arguments().unwrap();
    evaluate_in(reg, "bot", &call, Some(&a), &observing(prior, now)).kind
}

/// The measured call: `pay {amount: 3, memo: "b1c"}`.
fn measured_call() -> ToolCall {
    ToolCall::new("pay", None, json!({"amount": 3, "memo": "b1c"})).unwrap()
}

/// What the gatekeeper observes at `now` (Unix ms) given the session's earlier calls `prior`:
/// no other calls of the agent, a clean session, paths checked lexically.
fn observing(prior: &[PriorCall], now: i64) -> Observations<'_> {
    Observations {
        now_ms: now,
        prior_calls: prior,
        agent_calls: &[],
        session: &assent_core::session_risk::CLEAN_SESSION,
        resolve_path: &assent_core::triggers::lexical_only,
    }
}

fn bench(c: &mut Criterion) {
    let reg = Registry::load(
        &[("a".into(), AGENT.into())],
        &[("g".into(), GOVERNANCE.into())],
    )
    .unwrap();
    let needs = WindowNeeds::of(&reg);
    let mut g = c.benchmark_group("b1c_proposal_at_call");
    g.sample_size(20).measurement_time(Duration::from_secs(4));
    for calls in [10_i64, 1_000, 10_000] {
        let dir = tempfile::tempdir().unwrap();
        let s = open_store(dir.path());
        for i in 1..calls {
            propose(&s, &reg, Some(&needs), i * 1000, true);
        }
        let now = calls * 1000;
        g.bench_function(BenchmarkId::new("window", calls), |b| {
            b.iter(|| propose(&s, &reg, Some(&needs), now, false))
        });
        g.bench_function(BenchmarkId::new("history", calls), |b| {
            b.iter(|| propose(&s, &reg, None, now, false))
        });
        // The part of a proposal that may grow with the session, without the commit's fsync
        // (which dominates the figures above and varies with the disk): the read of what the
        // thresholds need, and the verdict over it.
        g.bench_function(BenchmarkId::new("window_read_and_verdict", calls), |b| {
            b.iter(|| {
                let prior = s.session_window("bot", "s", None, &needs, now).unwrap();
                verdict(&reg, &prior, now)
            })
        });
        g.bench_function(BenchmarkId::new("history_read_and_verdict", calls), |b| {
            b.iter(|| {
                let prior = s.session_calls("bot", "s", None).unwrap();
                verdict(&reg, &prior, now)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

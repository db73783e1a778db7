//! Issue 16 §1: how fast a candidate policy is replayed over a recorded history, beside the
//! machine's ceilings measured in the same run:
//!
//! - `replay` — [`assent_core::replay::replay`] over 10,000 recorded ~1 KiB `transfer` calls
//!   (half that the policy holds), against `gatekeeper_alone`: the bare verdict loop over the
//!   same calls (what replay cannot be faster than), with the 50- and the 10,000-rule policy of
//!   B1;
//! - `sessions` — the same 10,000 calls under a rate and a cost threshold, as 100 sessions of
//!   100 calls and as one session of 10,000: the replay keeps each session's window, so the
//!   cost per call must not grow with the session's length;
//! - `read` — reading the 10,000 proposals back from a real SQLite file
//!   (`assent_store::history::for_each_offline`) against `read_raw`: the bare rusqlite loop
//!   over the same audit rows, parsing each row's JSON.

use assent_bench::{
    PolicySize, agent_yaml, allowed_call_arguments, call_arguments, governance_yaml, open_store,
};
use assent_core::approval::ApprovalStatus;
use assent_core::policy::Registry;
use assent_core::replay::{Options, Recorded, Was, replay};
use assent_core::{RiskTier, ToolCall, VerdictKind, evaluate_with};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::time::Duration;

const CALLS: usize = 10_000;

/// `CALLS` recorded `transfer` proposals in sessions of `per_session`, one a second: even ones
/// allowed, odd ones held and approved.
fn history(per_session: usize) -> Vec<Recorded> {
    (0..CALLS)
        .map(|i| {
            let held = i % 2 == 1;
            let args = if held {
                call_arguments()
            } else {
                allowed_call_arguments()
            };
            Recorded {
                seq: i as i64 + 1,
                at_ms: 1_700_000_000_000 + i as i64 * 1000,
                agent: "bot".into(),
                session_id: format!("s{}", i / per_session),
                call: ToolCall::new("transfer", None, args).unwrap(),
                risk_tier: RiskTier::R2,
                reasons: vec![],
                was: if held {
                    Was::Held {
                        status: ApprovalStatus::Approved,
                        decided_by: Some("alice".into()),
                        decided_at_ms: None,
                        edited: false,
                    }
                } else {
                    Was::Allowed
                },
                redeemed_at_ms: None,
            }
        })
        .collect()
}

fn registry(gov: &str) -> Registry {
    Registry::load(&[("a".into(), agent_yaml())], &[("g".into(), gov.into())]).unwrap()
}

/// The B1 policy of `rules` rules (4 of them globs), plus a rule with a rate and a cost threshold on `transfer`
/// when `thresholds`.
fn policy(rules: usize, thresholds: bool) -> Registry {
    let mut gov = governance_yaml(PolicySize { rules, globs: 4 });
    if thresholds {
        gov.push_str("  - id: bench.thresholds-v1\n    selector: {agents: [bot]}\n    rules:\n      - tool: transfer\n        thresholds: {rate: {max: 1000000, per_seconds: 60}, cost: {argument: amount, max_per_session: 1000000000000}}\n");
    }
    registry(&gov)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("replay");
    g.sample_size(10).measurement_time(Duration::from_secs(6));
    g.throughput(Throughput::Elements(CALLS as u64));
    let h = history(100);
    for rules in [50, 10_000] {
        let reg = policy(rules, false);
        g.bench_function(BenchmarkId::new("replay", rules), |b| {
            b.iter(|| replay(&reg, &h, Options::default()).overall.calls)
        });
        g.bench_function(BenchmarkId::new("gatekeeper_alone", rules), |b| {
            b.iter(|| {
                h.iter()
                    .filter(|r| {
                        evaluate_with(&reg, "bot", &r.call, None).kind == VerdictKind::Allow
                    })
                    .count()
            })
        });
    }
    let reg = policy(50, true);
    for per_session in [100, CALLS] {
        let h = history(per_session);
        g.bench_function(BenchmarkId::new("sessions_of", per_session), |b| {
            b.iter(|| replay(&reg, &h, Options::default()).overall.calls)
        });
    }
    // The store read, on a real SQLite file of CALLS proposals written by 16 writers.
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(open_store(dir.path()));
    let verdict = evaluate_with(&policy(50, false), "bot", &h[0].call, None);
    std::thread::scope(|s| {
        for w in 0..16 {
            let (store, h, verdict) = (store.clone(), &h, &verdict);
            s.spawn(move || {
                for r in h.iter().skip(w).step_by(16) {
                    store
                        .record_verdict("bot", &r.session_id, &r.call, "h", verdict, r.at_ms)
                        .unwrap();
                }
            });
        }
    });
    let db = assent_store::db::Database::Sqlite {
        path: dir.path().join("assent.db"),
    };
    g.bench_function("read", |b| {
        b.iter(|| {
            let mut n = 0;
            assent_store::history::for_each_offline(&db, None, None, &mut |p| {
                n += p.len();
                true
            })
            .unwrap();
            assert_eq!(n, CALLS);
        })
    });
    g.bench_function("read_raw", |b| {
        b.iter(|| {
            let c = rusqlite::Connection::open(dir.path().join("assent.db")).unwrap();
            let mut st = c.prepare("SELECT seq, at, kind, actor, data FROM audit WHERE kind = 'call.allowed' ORDER BY seq").unwrap();
            let rows = st.query_map([], |r| r.get::<_, String>(4)).unwrap();
            let mut n = 0;
            for d in rows {
                std::hint::black_box(serde_json::from_str::<serde_json::Value>(&d.unwrap()).unwrap());
                n += 1;
            }
            assert_eq!(n, CALLS);
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

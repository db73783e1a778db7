//! The bare-write ceiling of B3 over HTTP (issue 13 item 6), measured in the same run as the
//! HTTP figures: `bench/replicas.py` runs this program and divides each of its rows by the
//! ceiling at the same number of agents.
//!
//! One cycle is the two durable writes of `bench/replicas.py`'s agent: the held call (its
//! approval row, the `approval.requested` and `confirm.requested` audit records, the AAEP
//! event) and the decision (the status update, the decision row, the token, the
//! `confirm.approved`, `decision` and `token.minted` audit records, the AAEP event). The loop
//! makes them with rusqlite on a real SQLite file with the store's own schema (a `Store` opens
//! it first and runs every migration; WAL, `synchronous=FULL`), with ideal group commit: with
//! N agents, the N held calls share one `COMMIT` and then the N decisions share one. No HTTP,
//! no JSON, no policy, no hashing: what the writes alone cost.
//!
//! The latency ceiling beside it (issue 13 §4, the decision-to-wake-up figure's peer): for each
//! group of decisions, the time from the group's start (`BEGIN IMMEDIATE`) to its `COMMIT`
//! returning (`decide`), and to a thread blocked on a channel receiving the group's wake, sent
//! right after that `COMMIT` (`wake`: what a waiting long-poll could at best see). Every
//! decision of a group has its group's figures; p50 and p99 are over the groups of all three
//! runs.
//!
//! `cargo bench -p assent-bench --bench ceiling -- [--agents 1,16,64] [--cycles 1536]`: one
//! line per agent count, then one JSON line `[{"agents": N, "cycles_per_s": X,
//! "decide_p50_ms": …, "decide_p99_ms": …, "wake_p50_ms": …, "wake_p99_ms": …}, …]`; the
//! rate is the best of three runs.

use rusqlite::{Connection, TransactionBehavior, params};
use std::time::Instant;

/// A `Store`'s envelope renderer, needed only to open it (nothing is written through it).
fn envelopes() -> std::sync::Arc<dyn assent_store::Envelopes> {
    std::sync::Arc::new(assent_server::WireEnvelopes)
}

/// What one run of the bare loop measured: cycles per second, and per decision group the
/// time (ms) from its start to its `COMMIT` returning and to its wake being received.
struct Run {
    rate: f64,
    decide: Vec<f64>,
    wake: Vec<f64>,
}

/// One run of the bare loop with `agents` cycles per group commit.
fn rate(agents: usize, cycles: usize) -> Run {
    let dir = tempfile::tempdir().unwrap();
    drop(assent_store::Store::open(dir.path(), 60_000, envelopes()).unwrap());
    let conn = Connection::open(dir.path().join("assent.db")).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn.pragma_update(None, "foreign_keys", "ON").unwrap();
    let h = "ab".repeat(32);
    let data = r#"{"call":{"arguments":{"n":1},"tool":"pay"},"session_id":"s"}"#;
    let mut seq = 0;
    let mut audit = |tx: &rusqlite::Transaction<'_>, kind: &str, id: &str| {
        seq += 1;
        tx.prepare_cached("INSERT INTO audit (seq, at, kind, approval_id, actor, data, prev_hash, hash) VALUES (?1, 0, ?2, ?3, 'bench', ?4, ?5, ?5)")
            .unwrap()
            .execute(params![seq, kind, id, data, h])
            .unwrap();
    };
    let event = |tx: &rusqlite::Transaction<'_>, id: &str| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let eid = assent_store::ordered_id("evt_", now);
        tx.prepare_cached("INSERT INTO aaep_events (event_id, type, critical, subscription_id, approval_id, at, data) VALUES (?1, 'aaep:x', 0, NULL, ?2, 0, ?3)")
            .unwrap()
            .execute(params![eid, id, data])
            .unwrap();
    };
    // The waiting side of a decision: a thread blocked on a channel, told each group's start
    // once its `COMMIT` returned.
    let (wake, woken) = std::sync::mpsc::channel::<Instant>();
    let waiter = std::thread::spawn(move || {
        woken
            .iter()
            .map(|t| t.elapsed().as_secs_f64() * 1000.0)
            .collect::<Vec<f64>>()
    });
    let mut decide = Vec::new();
    let start = Instant::now();
    let mut done = 0;
    let mut conn = conn;
    while done < cycles {
        let ids: Vec<String> = (0..agents.min(cycles - done))
            .map(|_| assent_store::ordered_uuid(unix_ms()))
            .collect();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        for id in &ids {
            tx.prepare_cached(
                "INSERT INTO approvals (id, agent, session_id, tool, server, arguments, canonical, call_hash, message, risk_tier, irreversible, reasons, approvers, default_decision, requested_at, expires_at, status)
                 VALUES (?1,'bench','s','pay',NULL,'{}','{}',?2,'m','R3',0,'[]','[\"finance-admin\"]','reject',0,300000,'pending')",
            )
            .unwrap()
            .execute(params![id, h])
            .unwrap();
            audit(&tx, "approval.requested", id);
            audit(&tx, "confirm.requested", id);
            event(&tx, id);
        }
        tx.commit().unwrap();
        let group = Instant::now();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        for id in &ids {
            tx.prepare_cached("UPDATE approvals SET status = 'approved', decided_at = 1 WHERE id = ?1 AND status = 'pending'")
                .unwrap()
                .execute([id])
                .unwrap();
            tx.prepare_cached("INSERT INTO decisions (approval_id, decision, reason, actor, at) VALUES (?1, 'approve', NULL, 'op', 1)")
                .unwrap()
                .execute([id])
                .unwrap();
            let tid = assent_store::ordered_uuid(unix_ms());
            tx.prepare_cached("INSERT INTO tokens (token_id, approval_id, agent, call_hash, issued_at, expires_at) VALUES (?1, ?2, 'bench', ?3, 1, 2)")
                .unwrap()
                .execute(params![tid, id, h])
                .unwrap();
            for kind in ["confirm.approved", "decision", "token.minted"] {
                audit(&tx, kind, id);
            }
            event(&tx, id);
        }
        tx.commit().unwrap();
        decide.push(group.elapsed().as_secs_f64() * 1000.0);
        wake.send(group).unwrap();
        done += ids.len();
    }
    let rate = done as f64 / start.elapsed().as_secs_f64();
    drop(wake);
    let wake = waiter.join().unwrap();
    Run { rate, decide, wake }
}

/// The `p` quantile (0..1) of `xs`, sorted here; NaN when empty.
fn pct(xs: &mut [f64], p: f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => f64::NAN,
        n => xs[((n as f64 * p) as usize).min(n - 1)],
    }
}

/// The value after `flag` in the arguments, if any.
fn arg(flag: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let agents: Vec<usize> = arg("--agents")
        .unwrap_or_else(|| "1,16,64".into())
        .split(',')
        .map(|a| {
            a.trim()
                .parse()
                .expect("--agents: numbers separated by commas")
        })
        .collect();
    let cycles: usize = arg("--cycles").map_or(1_536, |c| c.parse().expect("--cycles: a number"));
    let mut rows = Vec::new();
    for n in agents {
        let (mut best, mut decide, mut wake) = (0.0f64, Vec::new(), Vec::new());
        for _ in 0..3 {
            let r = rate(n, cycles);
            best = best.max(r.rate);
            decide.extend(r.decide);
            wake.extend(r.wake);
        }
        let (d50, d99) = (pct(&mut decide, 0.5), pct(&mut decide, 0.99));
        let (w50, w99) = (pct(&mut wake, 0.5), pct(&mut wake, 0.99));
        println!(
            "ceiling agents={n:3} cycles/s={best:9.1} decide p50={d50:.3} p99={d99:.3} ms wake p50={w50:.3} p99={w99:.3} ms"
        );
        rows.push(serde_json::json!({"agents": n, "cycles_per_s": best,
            "decide_p50_ms": d50, "decide_p99_ms": d99, "wake_p50_ms": w50, "wake_p99_ms": w99}));
    }
    println!("{}", serde_json::Value::Array(rows));
}

/// Now in Unix milliseconds: the time the gateway's time-ordered ids
/// ([`assent_store::ordered_uuid`]) lead with, so that this loop's indexes take the gateway's
/// inserts' places (at their ends), not random ones.
fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

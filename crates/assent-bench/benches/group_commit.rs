//! B3, store level (issue 13 §4, item 6): durable decisions per second with 1, 16 and 64
//! concurrent writers through `Store::decide` (group-committed `Store::write`) on a real
//! SQLite file (WAL, `synchronous=FULL`), beside the ceiling: a bare rusqlite loop making the
//! same decision writes (the approval's status, the decision row, the token, two audit
//! records) with ideal group commit — as many decisions per `COMMIT` as there are writers.
//!
//! Beside them, the store with its writers taking turns: each decision commits alone, as
//! before group commit. A plain program (`cargo bench -p assent-bench --bench group_commit`):
//! each figure is the best of three runs of `DECISIONS` decisions.

use assent_bench::{open_store, proposal};
use assent_core::gatekeeper::Verdict;
use assent_core::policy::Registry;
use assent_core::{CanonicalCall, ToolCall};
use assent_store::{DecisionInput, Store};
use rusqlite::{Connection, TransactionBehavior, params};
use serde_json::json;
use std::time::Instant;

const AGENT: &str =
    "metadata: {id: bot}\naction_space:\n  local_tools:\n    - {alias: pay, approval: true}\n";
const SCHEMA: &str = include_str!("../../assent-store/migrations/sqlite/0001_init.sql");
/// Decisions per run.
const DECISIONS: usize = 1_536;
const WRITERS: [usize; 3] = [1, 16, 64];

/// Holds `n` calls as pending approvals (64 threads at once: group-committed too).
fn hold_many(s: &Store, n: usize) -> Vec<String> {
    let reg = Registry::load(&[("a".into(), AGENT.into())], &[]).unwrap();
    let per = n.div_ceil(64);
    std::thread::scope(|scope| {
        let hs: Vec<_> = (0..64)
            .map(|t| {
                let reg = &reg;
                scope.spawn(move || {
                    (0..per)
                        .filter(|i| t * per + i < n)
                        .map(|i| {
                            let call =
                                ToolCall::new("pay", None, json!({"amount": t * per + i})).unwrap();
                            let v = assent_core::evaluate(reg, "bot", &call);
                            hold(s, &call, &v)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    })
}

/// Holds `call` with verdict `v` at 1 000 for an hour ([`Store::create_approval`]): its id.
fn hold(s: &Store, call: &ToolCall, v: &Verdict) -> String {
    let call = CanonicalCall::new(call.clone()).unwrap();
    let ttl = |_: &Verdict| 3_600_000;
    s.create_approval(&proposal(&call, 1_000, &ttl, u64::MAX), v)
        .unwrap()
        .id
}

/// Decisions per second through the store with `writers` threads; `serial`: the writers take
/// turns (one at a time), so each decision commits alone, as every write did before group
/// commit.
fn store_rate(writers: usize, serial: bool) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let s = open_store(dir.path());
    let ids = hold_many(&s, DECISIONS);
    let turns = std::sync::Mutex::new(());
    let start = Instant::now();
    std::thread::scope(|scope| {
        for chunk in ids.chunks(DECISIONS / writers) {
            let (s, turns) = (&s, &turns);
            scope.spawn(move || {
                for id in chunk {
                    let turn = serial.then(|| turns.lock().unwrap());
                    s.decide(id, &DecisionInput::approve(), "alice", &[], 2_000)
                        .unwrap();
                    drop(turn);
                }
            });
        }
    });
    DECISIONS as f64 / start.elapsed().as_secs_f64()
}

/// Decisions per second of the bare loop committing `group` decisions at a time.
fn bare_rate(group: usize) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = Connection::open(dir.path().join("bare.db")).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn.execute_batch(SCHEMA).unwrap();
    let h = "ab".repeat(32);
    let ids: Vec<String> = (0..DECISIONS).map(|i| format!("a{i}")).collect();
    let tx = conn.transaction().unwrap();
    for id in &ids {
        tx.execute(
            "INSERT INTO approvals (id, agent, session_id, tool, server, arguments, canonical, call_hash, message, risk_tier, irreversible, reasons, approvers, default_decision, requested_at, expires_at, status)
             VALUES (?1,'bot','s','pay',NULL,'{}','{}',?2,'m','R2',0,'[]','[]','reject',0,1,'pending')",
            params![id, h],
        )
        .unwrap();
    }
    tx.commit().unwrap();
    let mut seq = 0;
    let start = Instant::now();
    for chunk in ids.chunks(group) {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        for id in chunk {
            tx.execute("UPDATE approvals SET status = 'approved', decided_at = 1 WHERE id = ?1 AND status = 'pending'", [id]).unwrap();
            tx.execute("INSERT INTO decisions (approval_id, decision, reason, actor, at) VALUES (?1, 'approve', NULL, 'alice', 1)", [id]).unwrap();
            let tid = assent_store::ordered_uuid(unix_ms());
            tx.execute("INSERT INTO tokens (token_id, approval_id, agent, call_hash, issued_at, expires_at) VALUES (?1, ?2, 'bot', ?3, 1, 2)", params![tid, id, h]).unwrap();
            for kind in ["decision", "token.minted"] {
                seq += 1;
                tx.execute(
                    "INSERT INTO audit (seq, at, kind, approval_id, actor, data, prev_hash, hash) VALUES (?1, 0, ?2, ?3, 'alice', '{}', ?4, ?4)",
                    params![seq, kind, id, h],
                )
                .unwrap();
            }
        }
        tx.commit().unwrap();
    }
    DECISIONS as f64 / start.elapsed().as_secs_f64()
}

fn best(f: impl Fn() -> f64) -> f64 {
    (0..3).map(|_| f()).fold(0.0, f64::max)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    println!("writers  store/s  one commit each/s  bare ceiling/s  store/ceiling");
    for w in WRITERS {
        let store = best(|| store_rate(w, false));
        let alone = best(|| store_rate(w, true));
        let bare = best(|| bare_rate(w));
        println!(
            "{w:>7}  {store:>7.0}  {alone:>17.0}  {bare:>14.0}  {:>13.2}",
            store / bare
        );
    }
}

/// Now in Unix milliseconds: the time the gateway's time-ordered ids
/// ([`assent_store::ordered_uuid`]) lead with, so that this loop's indexes take the gateway's
/// inserts' places (at their ends), not random ones.
fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

//! propose → approve → redeem over HTTP with SQLite, beside a bare loop doing the same SQLite
//! writes (same schema, WAL, synchronous=FULL, same three write transactions).

use assent_bench::call_arguments;
use assent_core::policy::Registry;
use assent_server::AppState;
use assent_server::config::{Principal, PrincipalKind};
use assent_store::Store;
use criterion::{Criterion, criterion_group, criterion_main};
use rusqlite::{Connection, TransactionBehavior, params};
use serde_json::{Value, json};
use std::time::Duration;

const AGENT: &str =
    "metadata: {id: bot}\naction_space:\n  local_tools:\n    - {alias: transfer, approval: true}\n";
const SCHEMA: &str = include_str!("../../assent-store/migrations/sqlite/0001_init.sql");

fn principal(name: &str, key: &str, kind: PrincipalKind) -> Principal {
    Principal::with_key(name, key, kind)
}

fn bare_cycle(conn: &mut Connection, n: i64, args: &str) {
    let id = assent_store::ordered_uuid(unix_ms());
    let h = "ab".repeat(32);
    let audit = |tx: &rusqlite::Transaction<'_>, seq: i64, kind: &str| {
        tx.execute(
            "INSERT INTO audit (seq, at, kind, approval_id, actor, data, prev_hash, hash) VALUES (?1, 0, ?2, ?3, 'bot', ?4, ?5, ?5)",
            params![seq, kind, id, args, h],
        )
        .unwrap();
    };
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    tx.execute(
        "INSERT INTO approvals (id, agent, session_id, tool, server, arguments, canonical, call_hash, message, risk_tier, irreversible, reasons, approvers, default_decision, requested_at, expires_at, status)
         VALUES (?1,'bot','s','transfer',NULL,?2,?2,?3,'m','R2',0,'[]','[]','reject',0,1,'pending')",
        params![id, args, h],
    )
    .unwrap();
    audit(&tx, n * 5 + 1, "approval.requested");
    tx.commit().unwrap();
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    tx.execute("UPDATE approvals SET status = 'approved', decided_at = 1 WHERE id = ?1 AND status = 'pending'", [&id]).unwrap();
    tx.execute("INSERT INTO decisions (approval_id, decision, reason, actor, at) VALUES (?1, 'approve', NULL, 'alice', 1)", [&id]).unwrap();
    audit(&tx, n * 5 + 2, "decision");
    let tid = assent_store::ordered_uuid(unix_ms());
    tx.execute("INSERT INTO tokens (token_id, approval_id, agent, call_hash, issued_at, expires_at) VALUES (?1, ?2, 'bot', ?3, 1, 2)", params![tid, id, h]).unwrap();
    audit(&tx, n * 5 + 3, "token.minted");
    tx.commit().unwrap();
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    tx.execute(
        "UPDATE tokens SET used_at = 2 WHERE token_id = ?1 AND used_at IS NULL",
        [&tid],
    )
    .unwrap();
    audit(&tx, n * 5 + 4, "token.redeemed");
    tx.commit().unwrap();
}

/// Sends `req` and reads its JSON body (a benchmark run stops on any failure).
async fn body(req: reqwest::RequestBuilder) -> Value {
    req.send().await.unwrap().json().await.unwrap()
}

/// One cycle in session `session`. The bench starts a new session every 50 cycles: the server
/// still hands the gatekeeper a session's whole history on every proposal (`Store::propose`;
/// B1c), so one session growing over the run would make the cycle's cost grow with the run.
async fn assent_cycle(http: &reqwest::Client, url: &str, args: &Value, session: &str) {
    let propose = http
        .post(format!("{url}/v1/tool-calls"))
        .bearer_auth("bot-key")
        .json(
            &json!({"agent": "bot", "session_id": session, "tool": "transfer", "arguments": args}),
        );
    let b = body(propose).await;
    let id = b["approval_id"].as_str().expect("pending");
    let d = http
        .post(format!("{url}/v1/approvals/{id}/decision"))
        .bearer_auth("alice-key")
        .json(&json!({"decision": "approve"}))
        .send()
        .await
        .unwrap();
    assert!(d.status().is_success());
    let rec = body(
        http.get(format!("{url}/v1/approvals/{id}"))
            .bearer_auth("bot-key"),
    )
    .await;
    let r = http
        .post(format!("{url}/v1/tokens/redeem"))
        .bearer_auth("bot-key")
        .json(&json!({"token": rec["token"], "tool": "transfer", "arguments": args}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
}

fn bench(c: &mut Criterion) {
    let args = call_arguments();
    let args_text = serde_json::to_string(&args).unwrap();
    let mut g = c.benchmark_group("propose_approve_redeem");
    g.sample_size(30).measurement_time(Duration::from_secs(15));

    let bare_dir = tempfile::tempdir().unwrap();
    let mut conn = Connection::open(bare_dir.path().join("bare.db")).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn.execute_batch(SCHEMA).unwrap();
    let mut n = 0;
    g.bench_function("bare_sqlite_same_writes", |b| {
        b.iter(|| {
            n += 1;
            bare_cycle(&mut conn, n, &args_text)
        })
    });

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (url, http, _served) = rt.block_on(async {
        let reg = Registry::load(&[("a".into(), AGENT.into())], &[]).unwrap();
        let principals = vec![
            principal(
                "alice",
                "alice-key",
                PrincipalKind::Operator { roles: vec![] },
            ),
            principal(
                "bot",
                "bot-key",
                PrincipalKind::Agent {
                    agent_id: "bot".into(),
                },
            ),
        ];
        let state = AppState::new(
            Store::open(
                dir.path(),
                300_000,
                std::sync::Arc::new(assent_server::WireEnvelopes),
            )
            .unwrap(),
            reg,
            principals,
            assent_server::Settings::default(),
        );
        // Serves until the benchmark process ends.
        let served = assent_server::Loopback::start(state).await.unwrap();
        (served.url.clone(), reqwest::Client::new(), served)
    });
    g.bench_function("assent_http_sqlite", |b| {
        let mut n = 0_u64;
        b.iter(|| {
            n += 1;
            let session = format!("s{}", n / 50);
            rt.block_on(assent_cycle(&http, &url, &args, &session))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

/// Now in Unix milliseconds: the time the gateway's time-ordered ids
/// ([`assent_store::ordered_uuid`]) lead with, so that this loop's indexes take the gateway's
/// inserts' places (at their ends), not random ones.
fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

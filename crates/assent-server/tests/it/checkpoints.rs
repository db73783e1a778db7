//! Signed audit checkpoints through a running server: signed when due and at shutdown,
//! appended to the JSONL sink, listed to operators only (`GET /v1/audit/checkpoints`), and
//! carried on every webhook delivery — evidence of how far the audit log reached that an
//! attacker who can write the database does not control.

use crate::kit::{BOT, OP, off_runtime, start_tuned};
use assent_server::config::{AuditCheckpoints, Webhook, WebhookFormat};
use assent_store::checkpoint::{Checkpoint, parse_public_key};
use axum::http::HeaderMap;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Got = Arc<Mutex<Vec<(HeaderMap, String)>>>;

async fn receiver() -> (String, Got) {
    let got: Got = Arc::default();
    let g = got.clone();
    let app = axum::Router::new().fallback(axum::routing::post(
        move |headers: HeaderMap, body: String| {
            let g = g.clone();
            async move {
                g.lock().unwrap().push((headers, body));
                axum::http::StatusCode::NO_CONTENT
            }
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, got)
}

async fn wait_for<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn checkpoints_are_signed_listed_to_operators_and_carried_on_webhooks() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("checkpoints.jsonl");
    let (hook_url, got) = receiver().await;
    let f = file.clone();
    let gw = start_tuned(dir.path(), move |st| {
        st.checkpoints = Arc::new(AuditCheckpoints {
            every_records: 1,
            every_seconds: 1,
            file: Some(f),
        });
        st.webhooks = Arc::new(vec![Webhook {
            name: "ops".into(),
            url: hook_url,
            secret_env: "UNUSED".into(),
            secret: "s".into(),
            format: WebhookFormat::Json,
            events: vec!["approval.requested".into(), "approval.resolved".into()],
            max_attempts: 3,
            retry_initial_ms: 50,
            line: None,
        }]);
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, a) = gw
        .propose("pay", json!({"amount": 500, "to": "acme"}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{a}");
    let id = a["approval_id"].as_str().unwrap().to_string();
    let head = gw.with_store(|s| s.audit_head_seq()).unwrap();

    // Only operators read checkpoints; the listing carries the public key and signatures.
    let (s, _) = gw.get("/v1/audit/checkpoints", BOT).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _) = gw.req("GET", "/v1/audit/checkpoints", None, None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let list = wait_for("a checkpoint covering the request", async || {
        let (s, v) = gw.get("/v1/audit/checkpoints", OP).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        (v["checkpoints"][0]["seq"].as_i64() >= Some(head)).then_some(v)
    })
    .await;
    let key = parse_public_key(list["public_key"].as_str().unwrap()).unwrap();
    assert_eq!(key, gw.state.store.audit_public_key());
    let newest: Checkpoint = serde_json::from_value(list["checkpoints"][0].clone()).unwrap();
    assert!(newest.verifies(&key), "{list}");
    assert!(
        list["checkpoints"][0]["at"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    let (s, v) = gw.get("/v1/audit/checkpoints?limit=x", OP).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");

    // The resolution's webhook carries the newest checkpoint in the body and a header.
    let (s, _) = gw.decide(&id, OP, "approve").await;
    assert_eq!(s, StatusCode::OK);
    let (h, body) = wait_for("the resolution webhook", async || {
        got.lock()
            .unwrap()
            .iter()
            .find(|(_, b)| b.contains("approval.resolved"))
            .cloned()
    })
    .await;
    let body: Value = serde_json::from_str(&body).unwrap();
    let carried: Checkpoint = serde_json::from_value(body["checkpoint"].clone()).unwrap();
    assert!(
        carried.verifies(&key) && carried.seq >= newest.seq,
        "{body}"
    );
    let header: Checkpoint =
        serde_json::from_str(h["x-assent-checkpoint"].to_str().unwrap()).unwrap();
    assert_eq!(header, carried);

    // Shutdown signs the rest of the chain; the sink file holds every checkpoint, signed.
    let store = gw.state.store.clone();
    gw.stop().await;
    let (last, head, stored) = off_runtime(|| {
        let last = store.latest_checkpoint().unwrap().unwrap();
        (
            last,
            store.audit_head_seq().unwrap(),
            store.checkpoints().unwrap(),
        )
    });
    assert_eq!(last.seq, head);
    let lines: Vec<Checkpoint> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines, stored);
    assert!(lines.iter().all(|c| c.verifies(&key)));
    assert_eq!(lines.last(), Some(&last));
}

/// Found by review: without a checkpoint file the signer trusted the stored checkpoints alone,
/// so whoever could write the database deleted them with the chain's newest record and let
/// the next proposal take its place: the chain still linked, and the next tick signed the
/// rewritten history (`audit verify --max-unsigned` then passed). The running gateway now
/// remembers what it signed and signs nothing that does not extend it.
#[tokio::test]
async fn a_gateway_without_a_checkpoint_file_does_not_sign_history_rewritten_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_tuned(dir.path(), |st| {
        st.checkpoints = Arc::new(AuditCheckpoints {
            every_records: 1,
            every_seconds: 1,
            file: None,
        });
    })
    .await;
    gw.held("s1", "pay", json!({"amount": 500, "to": "acme"}))
        .await;
    let head = gw.with_store(|s| s.audit_head_seq()).unwrap();
    wait_for("a checkpoint covering the head", async || {
        let newest = gw.with_store(|s| s.latest_checkpoint()).unwrap();
        newest.filter(|c| c.seq >= head)
    })
    .await;
    let mut sql = gw.sql();
    sql.exec("DELETE FROM audit_checkpoints", &[]);
    sql.exec(&format!("DELETE FROM audit WHERE seq = {head}"), &[]);
    // The next record takes the deleted one's number and links to the one before it.
    gw.held("s1", "pay", json!({"amount": 501, "to": "acme"}))
        .await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let signed = sql.rows("SELECT CAST(seq AS TEXT) FROM audit_checkpoints", &[]);
    assert!(
        signed.is_empty(),
        "the rewritten chain was signed: {signed:?}"
    );
    gw.stop().await;
}

//! The life cycle under stress: 50 concurrent decisions or redemptions (exactly one wins),
//! pending approvals and minted tokens surviving a restart, expiry that fell due while the
//! server was down, and a store that cannot be written (nothing is allowed).

use crate::kit::{BOT, OP, Sql, assert_error, audit_count, block_writes, serve, start};
use reqwest::StatusCode;
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn first_of_50_concurrent_decisions_wins() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let id = gw.pending("pay", json!({"amount": 500, "to": "bob"})).await;
    let bodies = (0..50).map(|i| json!({"decision": if i % 2 == 0 { "approve" } else { "deny" }}));
    let results = gw
        .post_all(&format!("/v1/approvals/{id}/decision"), OP, bodies)
        .await;
    let ok: Vec<_> = results
        .iter()
        .filter(|(s, _)| *s == StatusCode::OK)
        .collect();
    let conflicts = results
        .iter()
        .filter(|(s, b)| *s == StatusCode::CONFLICT && b["code"] == "ALREADY_DECIDED")
        .count();
    assert_eq!(ok.len(), 1, "{results:?}");
    assert_eq!(
        conflicts, 49,
        "every other request is ALREADY_DECIDED, none is a 5xx: {results:?}"
    );
    let winner = ok[0].1["status"].as_str().unwrap().to_string();
    let (_, rec) = gw.approval(&id, OP).await;
    assert_eq!(rec["status"].as_str(), Some(winner.as_str()));
    assert_eq!(rec["decisions"].as_array().unwrap().len(), 1);
    let late = audit_count(dir.path(), "decision.late");
    assert_eq!(late, 49);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_redeems_once_under_50_concurrent_redemptions() {
    let gw = serve().await;
    let args = json!({"amount": 500, "to": "bob"});
    let id = gw.pending("pay", args.clone()).await;
    gw.decide(&id, OP, "approve").await;
    let (_, rec) = gw.approval(&id, BOT).await;
    let body = json!({"token": rec["token"], "tool": "pay", "arguments": args});
    let results = gw
        .post_all("/v1/tokens/redeem", BOT, (0..50).map(|_| body.clone()))
        .await;
    assert_eq!(
        results.iter().filter(|(s, _)| *s == StatusCode::OK).count(),
        1,
        "{results:?}"
    );
    assert_eq!(
        results
            .iter()
            .filter(|(s, b)| *s == StatusCode::CONFLICT && b["code"] == "TOKEN_USED")
            .count(),
        49,
        "{results:?}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn pending_approvals_survive_a_restart_and_tokens_stay_valid() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let id = gw.pending("pay", json!({"amount": 500, "to": "bob"})).await;
    let id2 = gw.pending("pay", json!({"amount": 700, "to": "eve"})).await;
    gw.decide(&id2, OP, "approve").await;
    let (_, rec2) = gw.approval(&id2, BOT).await;
    gw.stop().await;

    let gw = start(dir.path()).await;
    let (_, b) = gw.get("/v1/approvals?status=pending", OP).await;
    assert_eq!(b["approvals"][0]["id"].as_str(), Some(id.as_str()));
    let (s, _) = gw.decide(&id, OP, "approve").await;
    assert_eq!(s, StatusCode::OK);
    // A token minted before the restart still redeems: the key is in the data dir.
    let eve = json!({"amount": 700, "to": "eve"});
    let (s, b) = gw.redeem_as(BOT, &rec2["token"], "pay", eve).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    gw.stop().await;
}

#[tokio::test]
async fn expiry_while_the_server_was_down_applies_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let reject_id = gw.pending("quick", json!({})).await;
    let approve_id = gw.pending("lenient", json!({"n": 1})).await;
    // Stop the server before the timer can run and wait past the 1 s timeout.
    gw.stop().await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let pending = Sql::open(dir.path()).int(
        "SELECT count(*) FROM approvals WHERE status = 'pending'",
        &[],
    );
    assert_eq!(pending, 2, "nothing expired while the server was down");
    let gw = start(dir.path()).await;
    let (_, rec) = gw.approval(&reject_id, BOT).await;
    assert_eq!(rec["status"], "expired");
    assert_eq!(rec["decisions"][0]["default_applied"], "reject");
    assert!(rec.get("token").is_none());
    let (_, rec) = gw.approval(&approve_id, BOT).await;
    assert_eq!(
        (
            rec["status"].as_str(),
            rec["decisions"][0]["default_applied"].as_str()
        ),
        (Some("expired"), Some("approve"))
    );
    let (s, _) = gw
        .redeem_as(BOT, &rec["token"], "lenient", json!({"n": 1}))
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, b) = gw.decide(&reject_id, OP, "approve").await;
    assert_error(s, &b, StatusCode::CONFLICT, "ALREADY_DECIDED");
    gw.stop().await;
}

#[tokio::test]
async fn a_store_that_cannot_be_written_allows_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    gw.with_store(|s| s.set_busy_timeout(Duration::from_millis(200)))
        .unwrap();
    // Another program holds the write lock past the busy (lock) timeout.
    let blocker = block_writes(dir.path());
    let (s, b) = gw.propose("read", json!({})).await;
    assert_error(s, &b, StatusCode::SERVICE_UNAVAILABLE, "STORE_UNAVAILABLE");
    assert_ne!(b["decision"], "allow");
    let (s, _) = gw.propose("pay", json!({"amount": 500, "to": "bob"})).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    drop(blocker);
    let (s, _) = gw.propose("read", json!({})).await;
    assert_eq!(s, StatusCode::OK);
    gw.stop().await;
}

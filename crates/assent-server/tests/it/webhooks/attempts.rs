//! A webhook event's attempts are counted in the database, so a restart of the gateway (or a
//! lease taken over by another replica) goes on counting towards `max_attempts`.

use super::{Receiver, hook, serve_receiver, with_links_and_hooks};
use crate::kit::{Gw, OP, policy, start_gov};
use assent_server::config::WebhookFormat;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// A gateway over `dir` with webhook `ops` to the receiver on `port`: tried twice, the second
/// time 60 s after the first.
async fn hooked(dir: &std::path::Path, port: u16) -> Gw {
    let gov = policy(
        "acme.test.attempts",
        "- tool: pay\n  approvers: [finance]\n",
    );
    start_gov(dir, &gov, |st| {
        let url = format!("http://127.0.0.1:{port}/hook");
        with_links_and_hooks(st, vec![hook("ops", url, WebhookFormat::Json, 2, 60_000)]);
    })
    .await
}

/// Waits (at most `secs`) until `done` holds, failing with `what`.
async fn until(secs: u64, what: &str, mut done: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !done().await {
        assert!(start.elapsed() < Duration::from_secs(secs), "{what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A gateway over `dir` with webhook `ops` to `recv` (served on a port of its own) holds a
/// `pay` call of 500, the receiver is tried once, and the gateway is stopped: the port.
async fn tried_then_stopped(dir: &std::path::Path, recv: &Receiver) -> u16 {
    let port = serve_receiver(recv, 0).await;
    let gw = hooked(dir, port).await;
    gw.pending("pay", json!({"amount": 500, "to": "acme"}))
        .await;
    let tried = || recv.tried.lock().unwrap().len();
    until(30, "never attempted", async || tried() >= 1).await;
    gw.stop().await;
    port
}

/// Attack (found by review): the attempt count and the backoff lived in the delivering task,
/// so a restart — or a lease taken over by another replica, or a renewal the store failed
/// during the backoff — began the event again at attempt 1 with the first wait: a receiver
/// failing for good was tried past `max_attempts`, never dead-lettered, and every later event
/// waited behind it. The count is kept with the cursor: the receiver fails the first attempt,
/// the gateway is restarted during the 60 s wait, and its second attempt — the last of two —
/// is dead-lettered at once, not waited for and counted as a first again.
#[tokio::test]
async fn a_restart_mid_backoff_does_not_reset_the_attempt_count() {
    let dir = tempfile::tempdir().unwrap();
    let recv = Receiver::default();
    *recv.fail.lock().unwrap() = 100;
    let port = tried_then_stopped(dir.path(), &recv).await;
    let failed = || *recv.failed.lock().unwrap();
    assert_eq!(failed(), 1);

    let gw = hooked(dir.path(), port).await;
    let mut dead: Vec<Value> = Vec::new();
    until(45, "the second attempt was not dead-lettered", async || {
        let (_, v) = gw.get("/v1/webhooks/dead-letters", OP).await;
        dead = v["dead_letters"].as_array().cloned().unwrap_or_default();
        !dead.is_empty()
    })
    .await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["attempts"], 2, "{dead:?}");
    assert_eq!(failed(), 2, "tried once before the restart, once after");
    gw.stop().await;
}

/// Attack (found by review): a stopping gateway aborted its delivery tasks mid-send, so an
/// event the receiver had already taken was sent again after the restart (for the Slack bot:
/// a second card of one approval, the first left showing live buttons), and a receiver slow
/// to answer saw every restart as a fresh delivery. A stopping gateway now lets the delivery
/// in flight end: the receiver holds its answer 1.5 s, the gateway is stopped meanwhile, and
/// after the restart the event is not sent again — the next one is.
#[tokio::test]
async fn a_delivery_in_flight_at_shutdown_ends_and_is_not_sent_again_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let recv = Receiver::default();
    *recv.slow.lock().unwrap() = 1;
    let port = tried_then_stopped(dir.path(), &recv).await;
    let tried = || recv.tried.lock().unwrap().len();
    assert_eq!(
        recv.bodies("/hook", 1).await.len(),
        1,
        "answered before the stop ended"
    );

    let gw = hooked(dir.path(), port).await;
    gw.pending("pay", json!({"amount": 501, "to": "acme"}))
        .await;
    let got = recv.bodies("/hook", 2).await;
    let amounts: Vec<&Value> = got
        .iter()
        .map(|b| &b["approval"]["arguments"]["amount"])
        .collect();
    assert_eq!(amounts, [&json!(500), &json!(501)], "{got:#?}");
    assert_eq!(tried(), 2, "the first event was sent once");
    gw.stop().await;
}

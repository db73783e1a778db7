//! The gateway's streams keeper (`aaep_streams::keep`): the subscriptions of every AAEP stream
//! open in a gateway are marked seen together, in one store write per interval (found by
//! review: each bare stream wrote its own mark every 5 s, through the one write lock), and a
//! stream kept open keeps its subscription past retention's cut-off.

use super::kit::Sse;
use crate::kit::{Gw, OP, serve};
use serde_json::json;
use std::time::{Duration, Instant};

/// The number of store commits so far (`assent_store_commit_duration_seconds_count` of
/// `GET /metrics`).
async fn commits(gw: &Gw) -> f64 {
    let text = gw.get_text("/metrics", OP).await;
    text.lines()
        .find_map(|l| {
            l.strip_prefix("assent_store_commit_duration_seconds_count ")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no commit count in {text}"))
}

/// Opens a bare stream as the operator with `key` and reads its announcement.
async fn bare(gw: &Gw, key: &str) -> (Sse, String) {
    let mut sse = Sse::open(gw, key, "/aaep/v1/events", None).await;
    let first = sse.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(first.event, "aaep.subscription");
    let sub = first.data["subscription_id"].as_str().unwrap().to_string();
    (sse, sub)
}

/// Attack (found by review): each open bare stream marked its subscription seen on its own
/// every 5 s, one serialised write each, so an operator's streams (1,000 of them: 200 writes a
/// second) held the write lock from every agent's call. With 32 streams open — their
/// openings spread over one marking interval, so no two mark at once — the gateway commits a
/// handful of times more in 10 s than with none, not the 64 more their own marks would take.
#[tokio::test]
async fn many_open_streams_cost_a_bounded_number_of_store_writes_per_interval() {
    let gw = serve().await;
    // What the idle gateway commits in 10 s (its sweeps' bookkeeping).
    let before = commits(&gw).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle = commits(&gw).await - before;
    let mut open = Vec::new();
    for i in 0..32 {
        let key = if i % 2 == 0 { OP } else { "olaf-key" };
        open.push(bare(&gw, key).await);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = commits(&gw).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let during = commits(&gw).await - before;
    // Two marking intervals: two writes, with room for one more.
    assert!(
        during <= idle + 3.0,
        "{during} commits in 10 s with 32 streams open, {idle} with none"
    );
    // Every one was marked meanwhile.
    for (_, sub) in &open {
        let marks = gw.sql().int(
            "SELECT stream_marks FROM aaep_subscriptions WHERE id = ?1",
            &[sub.as_str().into()],
        );
        assert!(marks >= 1, "{sub} never marked");
    }
    drop(open);
    gw.stop().await;
}

/// A stream kept open keeps its subscription through retention: marked seen while it stays
/// open, it is not pruned with a cut-off after its opening, while a subscription no stream
/// was open on, made at the same time, is.
#[tokio::test]
async fn a_stream_kept_open_keeps_its_subscription_past_the_retention_cutoff() {
    let gw = serve().await;
    let opened = chrono_ms();
    let (sse, sub) = bare(&gw, OP).await;
    let body = json!({"type": "subscription.request", "aaep_version": "1.0.0",
                      "subscriber_id": "app", "capabilities": {}});
    let (s, idle) = gw.post("/aaep/v1/subscriptions", OP, body).await;
    assert_eq!(s, reqwest::StatusCode::CREATED, "{idle}");
    let idle = idle["subscription_id"].as_str().unwrap().to_string();
    let cutoff = opened + 6_000;
    let start = Instant::now();
    let seen = |gw: &Gw| {
        gw.sql().int(
            "SELECT coalesce(last_seen_at, 0) FROM aaep_subscriptions WHERE id = ?1",
            &[sub.as_str().into()],
        )
    };
    while seen(&gw) < cutoff {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never marked seen"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    gw.with_store(|s| s.prune_aaep(cutoff, 100)).unwrap();
    let left = |id: &str| {
        gw.sql().int(
            "SELECT count(*) FROM aaep_subscriptions WHERE id = ?1",
            &[id.into()],
        )
    };
    assert_eq!(left(&sub), 1, "pruned under its open stream");
    assert_eq!(left(&idle), 0, "the unstreamed one is kept");
    drop(sse);
    gw.stop().await;
}

/// Unix milliseconds now.
fn chrono_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

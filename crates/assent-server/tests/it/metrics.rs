//! `GET /metrics` (issue 15 §2) through the HTTP API: who may read it, and an approval that
//! expires while its agent long-polls counted once as `expired` — whichever of the poll and
//! the expiry sweep settled it — with its time to decision.

use crate::kit::{AGENTS, BOT, Gw, OP, assert_answer, policy, start_custom, start_gov};
use assent_server::Settings;
use reqwest::StatusCode;
use serde_json::json;

/// The text exposition with `key`: (status, body).
async fn scrape(gw: &Gw, key: Option<&str>) -> (StatusCode, String) {
    let mut r = gw.http.get(format!("{}/metrics", gw.url));
    if let Some(k) = key {
        r = r.bearer_auth(k);
    }
    let r = r.send().await.unwrap();
    (r.status(), r.text().await.unwrap())
}

/// The value of the sample line that starts with `name` (labels included), 0 when absent.
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn an_approval_expiring_under_a_long_poll_is_counted_once_as_expired() {
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings {
        approval_timeout_ms: Some(1_000),
        ..Settings::default()
    };
    let gov = policy("acme.test.metrics", "- tool: pay\n  approvers: [finance]\n");
    let gw = start_custom(dir.path(), 300_000, settings, AGENTS, &gov, |_| {}).await;
    let id = gw
        .held("s1", "pay", json!({"amount": 500, "to": "acme"}))
        .await;
    let (_, text) = scrape(&gw, Some(OP)).await;
    assert_eq!(
        sample(&text, "assent_pending_approvals{risk_tier=\"R2\"}"),
        1.0,
        "{text}"
    );
    // The agent waits; the approval expires under its long-poll.
    let (s, a) = gw.get(&format!("/v1/approvals/{id}?wait=10"), BOT).await;
    assert_answer(s, &a, "status", StatusCode::OK, "expired");
    for _ in 0..100 {
        let text = scrape(&gw, Some(OP)).await.1;
        if sample(&text, "assent_decisions_total{outcome=\"expired\"}") >= 1.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Give a second bookkeeping (the sweep's, had it run too) time to show up.
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    let text = scrape(&gw, Some(OP)).await.1;
    assert_eq!(
        sample(&text, "assent_decisions_total{outcome=\"expired\"}"),
        1.0,
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "assent_time_to_decision_seconds_count{outcome=\"expired\"}"
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        sample(&text, "assent_pending_approvals{risk_tier=\"R2\"}"),
        0.0,
        "{text}"
    );
    gw.stop().await;
}

/// Attack: an agent (or anyone without a key) reads the gateway's metrics — pending counts by
/// tier, decision rates — to time its calls.
#[tokio::test]
async fn the_metrics_need_an_operator_key() {
    let dir = tempfile::tempdir().unwrap();
    let gov = policy("acme.test.metrics", "- tool: pay\n  approvers: [finance]\n");
    let gw = start_gov(dir.path(), &gov, |_| {}).await;
    assert_eq!(scrape(&gw, None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(scrape(&gw, Some(BOT)).await.0, StatusCode::FORBIDDEN);
    assert_eq!(
        scrape(&gw, Some("not-a-key")).await.0,
        StatusCode::UNAUTHORIZED
    );
    let r = gw.get_raw("/metrics", OP).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text; version=1.0.0"),
        "{:?}",
        r.headers()
    );
    let text = r.text().await.unwrap();
    assert!(
        text.contains("# TYPE assent_verdict_duration_seconds histogram"),
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
    gw.stop().await;
}

/// Found by review: every `GET /ui/l/{token}` (a card link, no credentials needed) ran a write
/// transaction, so anyone could keep the one writer every agent shares busy. An unknown link
/// is found by a read: 40 of them commit nothing (a few commits of the gateway's own may land
/// meanwhile; 40 would be one per request).
#[tokio::test]
async fn unknown_card_links_take_no_write_transaction() {
    let gw = crate::kit::serve().await;
    let commits = async || {
        let (_, text) = scrape(&gw, Some(OP)).await;
        sample(&text, "assent_store_commit_duration_seconds_count")
    };
    let before = commits().await;
    for n in 0..40 {
        let r = gw
            .http
            .get(format!("{}/ui/l/{n:064}", gw.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::GONE);
    }
    let after = commits().await;
    assert!(after - before < 10.0, "{before} then {after} commits");
}

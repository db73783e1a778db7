//! A receiver that refuses an event for good (`422`) has it dead-lettered at once: the events
//! after it are not held back for the refused one's retry schedule.

use super::{bodies, events, hooked_with};
use crate::kit::OP;
use serde_json::json;
use std::time::Duration;

/// Attack (found by review): every non-2xx answer was retried for its whole schedule, and
/// delivery is in order, so an agent able to make a receiver refuse its events (text the
/// receiver rejects) held back every other notification, about 8.5 minutes an event with the
/// defaults. Here the first retry would come after 60 s: the refused `approval.requested` is
/// dead-lettered after one attempt, and the decision's `approval.resolved` arrives at once.
#[tokio::test]
async fn an_event_the_receiver_refuses_for_good_holds_back_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let rules = "- tool: pay\n  approvers: [finance]\n";
    let extra = ("fred", &[][..]);
    let (recv, gw) = hooked_with(dir.path(), rules, extra, "approval.vote", 60_000).await;
    *recv.refuse.lock().unwrap() = 1;
    let id = gw
        .pending("pay", json!({"amount": 500, "to": "acme"}))
        .await;
    let start = std::time::Instant::now();
    let dead = loop {
        let (_, v) = gw.get("/v1/webhooks/dead-letters", OP).await;
        if let Some(d) = v["dead_letters"]
            .as_array()
            .and_then(|l| l.first())
            .cloned()
        {
            break d;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "never dead-lettered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(dead["event"], "approval.requested", "{dead}");
    assert_eq!(dead["attempts"], 1, "{dead}");
    assert_eq!(dead["last_error"], "HTTP 422", "{dead}");
    let (s, _) = gw.decide(&id, OP, "deny").await;
    assert!(s.is_success(), "{s}");
    let got = bodies(&recv, 1).await;
    assert_eq!(events(&got), ["approval.resolved"]);
    assert!(start.elapsed() < Duration::from_secs(30));
    assert_eq!(recv.tried.lock().unwrap().len(), 2, "one attempt each");
    gw.stop().await;
}

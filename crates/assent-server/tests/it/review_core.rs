//! Attacks on the core path found by the review of 2026-11-30, over the HTTP API: a call
//! joining a pending approval held for another person or device, and a result over its
//! `output_bytes` limit released for a call the policy now denies. (The executor bound to its
//! agents is `assent-verify`'s `executors.rs`; a dotted skill argument is `delegation.rs`.)

use crate::quorum::{args, gateway_rules};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Attack: the agent front-runs, proposing a call for no one; the trusted front end
/// (`assent mcp --on-behalf-of alice`) then proposes the same call for alice, and it joined
/// the approval held for no one — so alice, whom separation of duties keeps from approving
/// a call made for her, could approve it, and the front end ran it. Likewise a call from a
/// device joined one held with none. A call joins only an approval held for the same person
/// and device.
#[tokio::test]
async fn a_call_for_another_person_or_device_does_not_join_a_pending_approval() {
    let dir = tempfile::tempdir().unwrap();
    let rules = "- tool: pay\n  approvers: [finance]\n  separation_of_duties: true\n";
    let gw = gateway_rules(dir.path(), rules).await;
    let held = async |extra: Value| {
        let (s, b) = gw.call("s1", "pay", args(), extra).await;
        assert_eq!(s, StatusCode::ACCEPTED, "{b}");
        (
            b["approval_id"].as_str().unwrap().to_string(),
            b["joined"] == true,
        )
    };
    let (for_no_one, _) = held(json!({})).await;
    let (again, joined) = held(json!({})).await;
    assert!(
        joined && again == for_no_one,
        "the same call for no one joins"
    );
    let (for_alice, joined) = held(json!({"on_behalf_of": "alice"})).await;
    assert!(
        !joined && for_alice != for_no_one,
        "joined the approval held for no one"
    );
    let (s, b) = gw.decide(&for_alice, "alice-key", "approve").await;
    assert_eq!(
        (s, b["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("SELF_APPROVAL")),
        "{b}"
    );
    let (on_device, joined) = held(json!({"device_id": "laptop-1"})).await;
    assert!(
        !joined && on_device != for_no_one,
        "joined the approval held with no device"
    );
    let (again, joined) = held(json!({"device_id": "laptop-1"})).await;
    assert!(
        joined && again == on_device,
        "the same call from the same device joins"
    );
    gw.stop().await;
}

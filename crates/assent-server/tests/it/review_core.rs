//! Attacks on the core path found by the review of 2026-11-30, over the HTTP API: a call
//! joining a pending approval held for another person or device, and a result over its
//! `output_bytes` limit released for a call the policy now denies, and separation of duties
//! skipped by an in-client approval. (The executor bound to its
//! agents is `assent-verify`'s `executors.rs`; a dotted skill argument is `delegation.rs`.)

use crate::kit::{BOT, assert_answer, policy, serve_policy};
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

const AGENT: &str = "metadata: {id: bot}\naction_space:\n  local_tools:\n    - alias: read\n";

/// Attack: a call the policy now denies (here `/secret`; in life, a reload after the call
/// ran) reports a result over the `output_bytes` limit of the call's other rule, and the
/// gateway answered `allow`: released unasked (a deny verdict has no limit). The result of a
/// denied call is refused (`403 TOOL_DENIED`), whatever its size, and nothing is held.
#[tokio::test]
async fn a_large_result_of_a_call_the_policy_denies_is_not_released() {
    let rules = "- tool: read\n  thresholds: {output_bytes: 100}\n- tool: read\n  deny: {condition: {args_match: {path: /secret}}, message_template: no secrets}\n";
    let gw = serve_policy(AGENT, &policy("acme.test.denied-result-v1", rules)).await;
    let report = |path: &str| {
        json!({"agent": "bot", "session_id": "s1", "tool": "read", "arguments": {"path": path},
               "output_bytes": 5000, "result_sha256": "ab".repeat(32)})
    };
    let (s, b) = gw.post("/v1/tool-results", BOT, report("/open")).await;
    assert_answer(s, &b, "decision", StatusCode::ACCEPTED, "pending");
    let (s, b) = gw.post("/v1/tool-results", BOT, report("/secret")).await;
    assert_answer(s, &b, "decision", StatusCode::FORBIDDEN, "deny");
    assert!(
        b["message"].as_str().unwrap().contains("not released"),
        "{b}"
    );
    gw.stop().await;
}

/// Attack (found by review): one rule turns on `separation_of_duties` for `post`, another
/// lets its calls be approved in the MCP client; the agent proposes for alice and the
/// client's user — alice, the person the call acts for — approves it in the client. The
/// in-client route skipped the duty check (its decider is the agent's user, who owns nothing).
/// Separation of duties now turns in-client approval off, and the user's decision is refused.
#[tokio::test]
async fn separation_of_duties_turns_off_in_client_approval() {
    let agent = "metadata: {id: bot}\naction_space:\n  local_tools:\n    - alias: post\n";
    let rules = "- tool: post\n  approval: true\n  in_client_approval: true\n  risk_tier: R2\n- tool: post\n  separation_of_duties: true\n";
    let gw = serve_policy(agent, &policy("acme.test.duties-in-client-v1", rules)).await;
    let (s, b) = gw
        .post(
            "/v1/tool-calls",
            BOT,
            json!({"agent": "bot", "session_id": "s1", "tool": "post",
                   "arguments": {"to": "x"}, "on_behalf_of": "alice"}),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    assert_eq!(b["in_client_approval"], false, "{b}");
    let id = b["approval_id"].as_str().unwrap();
    let (s, d) = gw
        .post(
            &format!("/v1/approvals/{id}/user-decision"),
            BOT,
            json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{d}");
    let (_, a) = gw.approval(id, BOT).await;
    assert_eq!(a["status"], "pending", "{a}");
    gw.stop().await;
}

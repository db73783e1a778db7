//! Attacks on deciding found by review, over the HTTP API: an identical call joining an
//! approval held under weaker terms (an in-client approval held before the session took in
//! untrusted output), and an operator's cancel saying alone the no that `deny: quorum` leaves
//! to a quorum. (A decision after the deadline is refused by the store: its own tests.)

use crate::backend::audit_count;
use crate::kit::{BOT, assert_answer, assert_error, policy, serve_policy, token_of};
use crate::quorum::{args, held_under};
use reqwest::StatusCode;
use serde_json::json;

const AGENT: &str = "metadata: {id: bot}
action_space:
  local_tools:
    - alias: fetch
    - alias: post
";

const RULES: &str = "- tool: fetch
  untrusted_output: true
- tool: post
  egress: true
  approval: true
  in_client_approval: true
  risk_tier: R2
";

/// The attack: `post` is held for the agent's user to approve in the client; the session then
/// takes in untrusted output (`fetch`), after which `post` needs an operator (R3,
/// `session_untrusted`). Posting the identical call again must not join the in-client approval
/// held before, and the agent's user may approve neither.
#[tokio::test]
async fn an_identical_call_after_untrusted_output_does_not_join_the_in_client_approval() {
    let gw = serve_policy(AGENT, &policy("t.decide-holes", RULES)).await;
    let call = json!({"to": "x@example.com"});
    let (s, first) = gw.propose_in("s1", "post", call.clone()).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{first}");
    assert_eq!(first["in_client_approval"], true, "{first}");
    let old = first["approval_id"].as_str().unwrap().to_string();
    let (s, b) = gw
        .propose_in("s1", "fetch", json!({"url": "https://evil"}))
        .await;
    assert_answer(s, &b, "decision", StatusCode::OK, "allow");

    let (s, again) = gw.propose_in("s1", "post", call.clone()).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{again}");
    let new = again["approval_id"].as_str().unwrap().to_string();
    assert_ne!(
        new, old,
        "the tainted call joined the in-client approval: {again}"
    );
    assert_eq!(again["in_client_approval"], false, "{again}");
    assert!(
        again["triggers"].to_string().contains("session_untrusted"),
        "{again}"
    );

    // Neither approval may be approved by the agent's own key now.
    for id in [&new, &old] {
        let path = format!("/v1/approvals/{id}/user-decision");
        let (s, e) = gw.post(&path, BOT, json!({"decision": "approve"})).await;
        assert_error(s, &e, StatusCode::FORBIDDEN, "IN_CLIENT_NOT_ALLOWED");
    }
    // The user may still say no; an operator may approve the new one.
    let path = format!("/v1/approvals/{old}/user-decision");
    let (s, a) = gw.post(&path, BOT, json!({"decision": "deny"})).await;
    assert_answer(s, &a, "status", StatusCode::OK, "rejected");
    let (s, a) = gw.decide(&new, "olaf-key", "approve").await;
    assert_answer(s, &a, "status", StatusCode::OK, "approved");
    let token = token_of(&gw.as_agent(&new).await);
    let (s, r) = gw.redeem(&token, "post", call, None).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    gw.stop().await;
}

/// The attack: under `deny: quorum` one operator's deny vote leaves the approval pending, and
/// their cancel must not settle it alone. The agent may still withdraw its own request.
#[tokio::test]
async fn an_operator_cannot_cancel_alone_what_only_a_quorum_may_deny() {
    let rules = "- tool: pay\n  approvers: {roles: [finance], count: 2, deny: quorum}\n";
    let (_dir, gw, id) = held_under(rules).await;
    let (s, a) = gw.decide(&id, "alice-key", "deny").await;
    assert_answer(s, &a, "status", StatusCode::OK, "pending");
    let refused = audit_count(&gw.data_dir, "decision.refused");
    let (s, e) = gw.cancel(&id, "alice-key", None).await;
    assert_error(s, &e, StatusCode::FORBIDDEN, "DENY_NEEDS_QUORUM");
    assert_eq!(audit_count(&gw.data_dir, "decision.refused"), refused + 1);
    // Nor through the session: it is listed as refused and stays pending.
    let (s, b) = gw.cancel_session("s1", "fred-key").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["refused"], json!([id]), "{b}");
    assert_eq!(gw.as_agent(&id).await["status"], "pending");
    // A second deny vote makes the quorum's no.
    let (s, a) = gw.decide(&id, "fred-key", "deny").await;
    assert_answer(s, &a, "status", StatusCode::OK, "rejected");

    // The agent's own cancel of its own request stays allowed.
    let (s, b) = gw.propose_in("s2", "pay", args()).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let mine = b["approval_id"].as_str().unwrap();
    let (s, a) = gw.cancel(mine, BOT, None).await;
    assert_answer(s, &a, "status", StatusCode::OK, "cancelled");
    gw.stop().await;
}

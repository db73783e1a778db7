//! AAEP confirmations of calls whose rule redacts an argument (issue 5, AAEP §6.3.4): the
//! confirmation shows `[redacted]`, so it cannot be accepted where it is shown.

use super::confirmations::{accept_decides_nothing, reject_is_taken};
use super::kit::AWAITING;
use crate::kit::{AGENTS, redacting_gov, serve_policy};
use reqwest::StatusCode;
use serde_json::json;

/// Attack (found by review): a rule redacts `card.number`; the agent proposes a payment to a
/// card of its own. The confirmation showed `[redacted]` yet offered `accept`, and an accept
/// reply approved the real number (the call hash binds it), which whoever answered the event
/// never saw. A confirmation that masks any argument offers only `reject`; an `accept` is
/// ignored and the approval stays pending; the operator approves in assent, which shows the
/// real arguments.
#[tokio::test]
async fn an_aaep_accept_cannot_approve_a_card_number_the_confirmation_showed_as_redacted() {
    let gw = serve_policy(AGENTS, &redacting_gov()).await;
    let (sub, mut sse) = gw.listen().await;
    let args = json!({"amount": 500, "to": "acme", "card": {"number": "4000999988887777"}});
    let (s, b) = gw.propose("pay", args).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let id = b["approval_id"].as_str().unwrap().to_string();
    let ev = sse.expect(AWAITING).await.data;
    assert!(!ev.to_string().contains("4000999988887777"), "{ev}");
    assert_eq!(ev["allowed_replies"], json!(["reject"]), "{ev}");
    let token = ev["reply_token"].as_str().unwrap();
    let st = accept_decides_nothing(&gw, &sub, &id, token).await;
    assert!(st["decisions"].as_array().is_none_or(Vec::is_empty), "{st}");
    // A reject is still taken.
    reject_is_taken(&gw, &sub, &id, token).await;
}

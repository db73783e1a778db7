//! AAEP confirmations of calls whose rule redacts an argument (issue 5, AAEP §6.3.4): the
//! confirmation shows `[redacted]`, so it cannot be accepted where it is shown.

use super::confirmations::{accept_decides_nothing, reject_is_taken};
use super::kit::AWAITING;
use crate::kit::{AGENTS, OP, redacting_gov, serve_policy};
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

/// Attack (found by review): the confirmation carried `call_hash` (in `summary_detailed` and
/// `extra_context`), a plain SHA-256 of the canonical call with the real arguments, while it
/// showed every other argument: a reader of the stream hashed candidate card numbers (or the
/// 10^4 PINs of `redact: [pin]`) offline until one matched. A confirmation that masks a value
/// carries no hash (one that masks nothing still does:
/// `a_confirmation_is_announced_answered_and_resolved_with_valid_events`).
#[tokio::test]
async fn an_aaep_confirmation_masking_a_value_carries_no_call_hash_to_test_guesses_against() {
    let gw = serve_policy(AGENTS, &redacting_gov()).await;
    let (_sub, mut sse) = gw.listen().await;
    let args = json!({"amount": 500, "to": "acme", "card": {"number": "4000999988887777"}});
    let (s, b) = gw.propose("pay", args).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let id = b["approval_id"].as_str().unwrap();
    let ev = sse.expect(AWAITING).await.data;
    let (_, a) = gw.approval(id, OP).await;
    let hash = a["call_hash"].as_str().unwrap();
    assert_eq!(hash.len(), 64, "{a}");
    assert!(!ev.to_string().contains(hash), "{ev}");
    assert!(ev["extra_context"].get("call_hash").is_none(), "{ev}");
}

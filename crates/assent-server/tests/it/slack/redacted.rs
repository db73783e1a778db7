//! Approving from Slack a call whose rule redacts an argument (issue 5, issue 15 §4): the card
//! shows `[redacted]` (Slack is a shared channel), so it offers no approve button and an
//! approve click is refused; the call is approved in assent, which shows operators the real
//! arguments.

use super::refusals::only_deny_offered_and_approve_refused;
use super::{FakeSlack, assert_code, buttons, click, gateway, signed, value_of};
use crate::kit::assert_answer;
use reqwest::StatusCode;
use serde_json::json;

/// `pay`, approved by finance, its card number redacted.
const PAY_REDACTED: &str = "- tool: pay\n  approvers: [finance]\n  redact: [card.number]\n";

/// Attack (found by review): a rule redacts `card.number`; the agent proposes a payment to a
/// card of its own. The card showed `[redacted]` yet offered "Approve once", and the click
/// approved the real number (the call hash binds it), which no approver had seen. A card that
/// hides any argument offers only "Deny…" (and "Open in assent"), and an approve click forged
/// from the deny button's value is refused `CARD_REDACTED`; the approval stays pending.
#[tokio::test]
async fn a_slack_card_hiding_a_redacted_card_number_offers_no_approve_and_refuses_one() {
    let (dir, fake) = (tempfile::tempdir().unwrap(), FakeSlack::start().await);
    let gw = gateway(dir.path(), &fake, PAY_REDACTED).await;
    let number = "4000999988887777";
    let args = json!({"amount": 500, "to": "acme", "card": {"number": number}});
    let id = gw.held("s1", "pay", args).await;
    let card = fake.wait_for("/api/chat.postMessage", &id).await;
    let text = card.to_string();
    assert!(
        !text.contains(number) && text.contains("[redacted]"),
        "{text}"
    );
    assert!(text.contains("hidden here (redacted)"), "{text}");
    only_deny_offered_and_approve_refused(&gw, &fake, &id, "CARD_REDACTED").await;
    // The same rule's call with nothing to hide keeps its approve button.
    let plain = gw
        .held("s2", "pay", json!({"amount": 500, "to": "acme"}))
        .await;
    let b = buttons(&fake, &plain).await;
    assert!(b.iter().any(|(a, _)| a == "assent_approve_once"), "{b:?}");
    gw.stop().await;
}

/// Attack (found by review): a button's value carried the call's `call_hash`, a plain SHA-256
/// of the canonical call with the real arguments, while the card showed every other argument:
/// anyone in the channel could hash candidate card numbers (or the 10^4 PINs of `redact:
/// [pin]`) offline until one matched. A card hiding a value carries no hash anywhere (its
/// buttons name `ID|redacted`, nor does the deny modal's metadata), and its deny still decides;
/// a card with nothing hidden keeps the hash binding its buttons to the call.
#[tokio::test]
async fn a_slack_card_hiding_a_redacted_value_carries_no_call_hash_to_test_guesses_against() {
    let (dir, fake) = (tempfile::tempdir().unwrap(), FakeSlack::start().await);
    let gw = gateway(dir.path(), &fake, PAY_REDACTED).await;
    let args = json!({"amount": 500, "to": "acme", "card": {"number": "4000999988887777"}});
    let id = gw.held("s1", "pay", args).await;
    let card = fake.wait_for("/api/chat.postMessage", &id).await;
    let (_, a) = gw.approval(&id, "alice-key").await;
    let hash = a["call_hash"].as_str().unwrap().to_string();
    assert_eq!(hash.len(), 64, "{a}");
    assert!(!card.to_string().contains(&hash), "{card}");
    let value = value_of(&buttons(&fake, &id).await, "assent_deny");
    assert_eq!(value, format!("{id}|redacted"));
    // Deny from the card still works: the modal, then its submission.
    let reply = signed(&gw, &click(&fake, "U0ALICE", "assent_deny", &value)).await;
    assert_code(&reply, StatusCode::OK, "MODAL_OPENED");
    let open = fake.wait_for("/api/views.open", "assent_deny").await;
    assert!(!open.to_string().contains(&hash), "{open}");
    let submission = json!({
        "type": "view_submission", "team": {"id": "T0TEAM"},
        "user": {"id": "U0ALICE", "username": "alice", "team_id": "T0TEAM"},
        "view": {"id": "V0MODAL", "type": "modal", "callback_id": open["view"]["callback_id"],
            "private_metadata": open["view"]["private_metadata"],
            "state": {"values": {"reason": {"reason": {"type": "plain_text_input", "value": "no"}}}}},
    });
    let (s, r) = signed(&gw, &submission).await;
    assert_answer(s, &r, "response_action", StatusCode::OK, "clear");
    let (_, a) = gw.approval(&id, "alice-key").await;
    assert_eq!(a["status"], "rejected", "{a}");
    // A card with nothing hidden keeps the hash.
    let plain = gw
        .held("s2", "pay", json!({"amount": 500, "to": "acme"}))
        .await;
    let (_, p) = gw.approval(&plain, "alice-key").await;
    let b = buttons(&fake, &plain).await;
    let plain_hash = p["call_hash"].as_str().unwrap();
    assert_eq!(
        value_of(&b, "assent_approve_once"),
        format!("{plain}|{plain_hash}")
    );
    gw.stop().await;
}

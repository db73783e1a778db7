//! Approving from Slack a call whose rule redacts an argument (issue 5, issue 15 §4): the card
//! shows `[redacted]` (Slack is a shared channel), so it offers no approve button and an
//! approve click is refused; the call is approved in assent, which shows operators the real
//! arguments.

use super::refusals::only_deny_offered_and_approve_refused;
use super::{FakeSlack, buttons, gateway};
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

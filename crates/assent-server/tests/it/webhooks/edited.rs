//! An approval approved with an edit, as webhooks report it: the JSON body and the Slack card
//! say the arguments changed and carry the arguments that run, redacted as the proposed ones.

use super::{Receiver, ops_and_chat, serve_receiver, with_links_and_hooks};
use crate::kit::{OP, redacting_gov, start_gov};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Attack (a misleading record, found by review): an operator approved `pay 500` edited to
/// `pay 400`; the `approval.resolved` webhook and the Slack card showed 500 beside
/// "Approved", so the receiver's log and the channel recorded a call that never ran and never
/// saw the one that did. Both now say it was edited and show the arguments that run, with
/// the card number still redacted; an approval without an edit says `arguments_changed: false`.
#[tokio::test]
async fn an_approval_approved_with_an_edit_is_reported_with_the_arguments_that_run() {
    let dir = tempfile::tempdir().unwrap();
    let recv = Receiver::default();
    let port = serve_receiver(&recv, 0).await;
    let gw = start_gov(dir.path(), &redacting_gov(), |st| {
        with_links_and_hooks(st, ops_and_chat(port, 5));
    })
    .await;
    let card = json!({"number": "4111111111111111", "exp": "12/30"});
    let (s, b) = gw
        .propose("pay", json!({"amount": 500, "to": "acme", "card": card}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let edited_id = b["approval_id"].as_str().unwrap().to_string();
    let (s, b) = gw
        .edit(
            &edited_id,
            json!({"amount": 400, "to": "acme", "card": card}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, b) = gw
        .propose("pay", json!({"amount": 700, "to": "acme", "card": card}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let plain_id = b["approval_id"].as_str().unwrap().to_string();
    assert_eq!(gw.decide(&plain_id, OP, "approve").await.0, StatusCode::OK);

    let resolved = |bodies: &[Value], id: &str| -> Value {
        bodies
            .iter()
            .find(|v| v["event"] == "approval.resolved" && v["approval"]["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no approval.resolved for {id}: {bodies:?}"))
    };
    let hook = recv.bodies("/hook", 4).await;
    let edited = &resolved(&hook, &edited_id)["approval"];
    assert_eq!(edited["arguments"]["amount"], 500, "as proposed: {edited}");
    assert_eq!(edited["arguments_changed"], true, "{edited}");
    assert_eq!(
        edited["edited_arguments"]["amount"], 400,
        "what runs: {edited}"
    );
    assert_eq!(
        edited["edited_arguments"]["card"]["number"], "[redacted]",
        "{edited}"
    );
    assert_eq!(edited["edited_arguments_bytes"], Value::Null, "{edited}");
    let plain = &resolved(&hook, &plain_id)["approval"];
    assert_eq!(plain["arguments_changed"], false, "{plain}");
    assert_eq!(plain["edited_arguments"], Value::Null, "{plain}");
    assert!(
        hook.iter()
            .all(|b| !b.to_string().contains("4111111111111111"))
    );

    let slack: Vec<String> = recv
        .bodies("/slack", 4)
        .await
        .iter()
        .map(Value::to_string)
        .collect();
    // A settled card, by the amount its agent proposed (as the card's arguments show it).
    let card_of = |amount: u32| {
        let proposed = format!(r#"Arguments:\n{{\"amount\":{amount}"#);
        slack
            .iter()
            .find(|b| b.contains(&proposed) && b.contains(":white_check_mark:"))
            .cloned()
            .unwrap_or_else(|| panic!("no settled card for {amount}: {slack:?}"))
    };
    let edited_card = card_of(500);
    assert!(
        edited_card.contains("Approved with an edit"),
        "{edited_card}"
    );
    assert!(
        edited_card.contains(r#"Runs with, as edited:\n{\"amount\":400"#),
        "{edited_card}"
    );
    let plain_card = card_of(700);
    assert!(
        !plain_card.contains("with an edit") && !plain_card.contains("Runs with"),
        "{plain_card}"
    );
    assert!(slack.iter().all(|b| !b.contains("4111111111111111")));
    gw.stop().await;
}

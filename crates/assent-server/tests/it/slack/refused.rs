//! Messages Slack refuses for what they are, not for the moment (issue 15 §4): the bot
//! never sends a blank message, and one Slack refuses for good is dead-lettered at once
//! instead of holding up every other approval's message on the bot's one cursor.

use super::{FakeSlack, PAY, held_behind, slack, slack_dead_letter, with_slack};
use crate::kit::{AGENTS, policy, start_custom};
use assent_server::Settings;
use serde_json::json;

/// Attack (found by review): a rule's message template that an agent's arguments render
/// blank (`{{tool_args.note}}` with `note: ""`) was posted as an empty text, which Slack
/// refuses (`invalid_blocks`), so the approval's message never reached Slack and, retried,
/// held up every other one. A blank message is posted as the call's summary, as the AAEP and
/// MPLP views show it.
#[tokio::test]
async fn a_message_template_rendered_blank_is_posted_as_the_calls_summary() {
    let (dir, fake) = (tempfile::tempdir().unwrap(), FakeSlack::start().await);
    let agents = AGENTS.replace(
        "Pay {{tool_args.amount}} to {{tool_args.to}}?",
        "{{tool_args.note}}",
    );
    assert_ne!(agents, AGENTS);
    let gov = policy("acme.test.slack", PAY);
    let s = slack(&fake, true);
    let gw = start_custom(
        dir.path(),
        300_000,
        Settings::default(),
        &agents,
        &gov,
        |st| with_slack(st, s),
    )
    .await;
    let id = gw
        .held(
            "s1",
            "pay",
            json!({"amount": 500, "to": "acme", "note": "   "}),
        )
        .await;
    let posted = fake.wait_for("/api/chat.postMessage", &id).await;
    let text = posted["blocks"][1]["text"]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        !text.trim().is_empty() && text.contains("pay") && text.contains("500"),
        "{posted}"
    );
    gw.stop().await;
}

/// Attack (found by review): Slack refuses a message it cannot take (`invalid_blocks`…) the
/// same way at every attempt, yet the bot tried it six times over about half a minute, and
/// every other approval's message waited behind it on the bot's one cursor. An answer Slack
/// gives for good is dead-lettered at the first attempt.
#[tokio::test]
async fn a_message_slack_refuses_for_good_is_dead_lettered_at_its_first_answer() {
    let answer = json!({"ok": false, "error": "invalid_blocks"}).to_string();
    let app = axum::Router::new().fallback(move || {
        let answer = answer.clone();
        async move { answer }
    });
    let (gw, _dir, id) = held_behind(app).await;
    let dead = slack_dead_letter(&gw).await;
    assert_eq!(
        (&dead["body"]["approval_id"], &dead["attempts"]),
        (&json!(id), &json!(1)),
        "{dead}"
    );
    assert_eq!(dead["last_error"], "chat.postMessage: invalid_blocks");
    gw.stop().await;
}

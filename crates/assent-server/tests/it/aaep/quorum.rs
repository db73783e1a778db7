//! AAEP replies on a confirmation that needs a quorum (issue 14 §1; docs/conformance.md reads
//! it against §6.3.5): each valid `confirmation.reply` is one vote from its authenticated
//! sender; a vote that leaves the quorum unmet is announced as `agent.progress.updated`; the
//! reply that meets it resolves the confirmation; a second reply from the same sender counts
//! for nothing.

use super::kit::{AWAITING, confirm, core};
use crate::quorum::{args, gateway};
use crate::schemas::assert_valid;
use reqwest::StatusCode;
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn replies_from_two_distinct_senders_meet_a_quorum_and_the_stream_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "{roles: [finance], count: 2}").await;
    let (a, mut sa) = gw.subscribe("alice-key", true, json!({})).await;
    let (f, _sf) = gw.subscribe("fred-key", true, json!({})).await;
    let id = gw.held("s1", "pay", args()).await;
    let token = sa.reply_token(AWAITING).await;

    let reply = confirm(&token, &a, "accept");
    assert_eq!(
        gw.reply(Some("alice-key"), reply.clone()).await,
        StatusCode::NO_CONTENT
    );
    let ev = sa.expect("aaep:agent.progress.updated").await.data;
    assert_valid(&core("agent.progress.updated"), &ev, "vote counted");
    let votes = &ev["extensions"]["assent"]["votes"];
    assert_eq!(
        (votes["by"].as_str(), votes["counted"].as_u64()),
        (Some("alice"), Some(1))
    );
    assert_eq!(votes["required"], 2);
    assert_eq!(ev["progress"]["percent"], 50, "{ev}");
    assert_eq!(gw.status(&id).await["status"], "pending");

    // The same sender replying again is no second vote (§6.3.5: one reply counts).
    assert_eq!(
        gw.reply(Some("alice-key"), reply).await,
        StatusCode::NO_CONTENT
    );
    sa.none_of("aaep:agent.progress.updated", Duration::from_millis(300))
        .await;
    let a_now = gw.status(&id).await;
    assert_eq!(
        a_now["votes"]["cast"].as_array().unwrap().len(),
        1,
        "{a_now}"
    );

    assert_eq!(
        gw.reply(Some("fred-key"), confirm(&token, &f, "accept"))
            .await,
        StatusCode::NO_CONTENT
    );
    let ev = sa.expect("aaep:agent.state.changed").await.data;
    assert_eq!(ev["to_state"], "calling_tool", "{ev}");
    let done = gw.status(&id).await;
    assert_eq!(done["status"], "approved", "{done}");
    assert_eq!(done["votes"]["approvals"]["met"], true);
    gw.stop().await;
}

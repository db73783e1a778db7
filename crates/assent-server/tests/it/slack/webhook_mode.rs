//! Slack without a bot token (an incoming webhook posts the messages, a click is answered on
//! its `response_url`): what a redrawn message shows.

use super::{FakeSlack, args, assert_code, click, signed, webhook_gateway};
use reqwest::StatusCode;

/// Attack: someone with write access to the database overwrites a held call's seal, then a
/// deny vote of a quorum that needs two denies redraws the message. The first message said the
/// record is not as assent sealed it; the redraw read the record plainly (found by review), so
/// the warning went away while the approval was still pending. The redraw is checked too.
#[tokio::test]
async fn a_vote_redraws_a_damaged_records_message_with_its_warning() {
    let (dir, fake) = (tempfile::tempdir().unwrap(), FakeSlack::start().await);
    let rules = "- tool: pay\n  approvers: {roles: [finance], count: 2, deny: quorum}\n";
    let gw = webhook_gateway(dir.path(), &fake, rules).await;
    let id = gw.held("s1", "pay", args()).await;
    let m = fake.wait_for("/hook", &id).await;
    let v = m["blocks"][3]["elements"][0]["value"]
        .as_str()
        .unwrap()
        .to_string();
    let forge = format!("UPDATE approvals SET seal = 'forged' WHERE id = '{id}'");
    assert_eq!(gw.sql().exec(&forge, &[]), 1);
    let reply = signed(&gw, &click(&fake, "U0ALICE", "assent_deny", &v)).await;
    assert_code(&reply, StatusCode::OK, "VOTE_COUNTED");
    let redrawn = fake.wait_for("/respond/U0ALICE", &id).await.to_string();
    assert!(
        redrawn.contains("not as assent sealed it* (seal)") && !redrawn.contains("assent_approve"),
        "{redrawn}"
    );
    assert_eq!(gw.approval(&id, "alice-key").await.1["status"], "pending");
    gw.stop().await;
}

//! Webhook events of an approval's steps: a quorum vote with its progress, a vote withdrawn
//! with the tally it leaves, and each
//! escalation step (with the roles that joined), whose card link lasts to the announced
//! deadline, not to the first step; and a held call edited in the database, announced as
//! damaged.

use crate::kit::{Gw, OP, assert_answer};
use crate::webhooks::{Receiver, bodies, events, hooked, open_link};
use reqwest::StatusCode;
use serde_json::json;

/// [`hooked`]'s receiver and gateway (with operator `extra` and `event` besides requests and
/// resolutions) under `rules`, and the id of a `pay` of 500 held there.
async fn pay_pending(
    dir: &std::path::Path,
    rules: &str,
    extra: (&str, &[&str]),
    event: &str,
) -> (Receiver, Gw, String) {
    let (recv, gw) = hooked(dir, rules, extra, event).await;
    let id = gw
        .pending("pay", json!({"amount": 500, "to": "acme"}))
        .await;
    (recv, gw, id)
}

/// [`pay_pending`] where `pay` needs two finance approvals (fred one of them), announced as
/// `approval.vote`.
async fn two_of_finance(dir: &std::path::Path) -> (Receiver, Gw, String) {
    let rules = "- tool: pay\n  approvers: {roles: [finance], count: 2}\n";
    pay_pending(dir, rules, ("fred", &["finance"]), "approval.vote").await
}

/// Issue 14 §1: a vote counted toward a quorum is an `approval.vote` event whose approval
/// carries the progress and the votes; the vote that meets the quorum resolves it.
#[tokio::test]
async fn a_quorum_vote_is_announced_to_webhooks_with_its_progress() {
    let dir = tempfile::tempdir().unwrap();
    let (recv, gw, id) = two_of_finance(dir.path()).await;
    gw.decide(&id, OP, "approve").await;
    gw.decide(&id, "fred-key", "approve").await;
    let got = bodies(&recv, 4).await;
    assert_eq!(
        events(&got),
        [
            "approval.requested",
            "approval.vote",
            "approval.vote",
            "approval.resolved"
        ]
    );
    let first_vote = &got[1]["approval"];
    assert_eq!(first_vote["votes"][0]["by"], "alice", "{first_vote}");
    let resolved = &got[3]["approval"];
    assert_eq!(resolved["status"], "approved");
    assert_eq!(
        resolved["quorum"],
        "2 of 2 approvals (finance 2 of 2: alice, fred)"
    );
    gw.stop().await;
}

/// Found by review: a vote withdrawn (a reload or restart took its voter's key or role) was
/// not announced, so receivers and the Slack card kept counting it. It is an `approval.vote`
/// event carrying the tally left.
#[tokio::test]
async fn a_withdrawn_vote_is_announced_with_the_tally_it_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let (recv, gw, id) = two_of_finance(dir.path()).await;
    gw.decide(&id, OP, "approve").await;
    let gone = gw.with_store(|s| {
        s.withdraw_votes(|p, _, _| p != "alice", "system:test", "alice removed", 1)
            .unwrap()
    });
    assert_eq!(gone, 1);
    let got = bodies(&recv, 3).await;
    assert_eq!(
        events(&got),
        ["approval.requested", "approval.vote", "approval.vote"]
    );
    // (Each body carries the approval as it is when delivered.)
    assert_eq!(got[2]["approval"]["votes"], json!([]), "{}", got[2]);
    gw.stop().await;
}

/// Issue 14 §3: each escalation step is a new `approval.escalated` notification naming the
/// roles that joined (for the people who can now decide), and those people may decide from
/// that step on — not before.
#[tokio::test]
async fn each_escalation_step_notifies_webhooks_and_lets_its_roles_decide() {
    let dir = tempfile::tempdir().unwrap();
    let rules = "- tool: pay\n  approvers: [finance]\n  timeout_seconds: 120\n  escalation:\n    - {after: 1s, approvers: [lead]}\n    - {after: 3s, approvers: [cfo]}\n";
    let (recv, gw, id) =
        pay_pending(dir.path(), rules, ("carl", &["cfo"]), "approval.escalated").await;
    // Three seconds before the cfo's step: carl may not decide yet.
    let (s, b) = gw
        .decide_with(&id, "carl-key", json!({"decision": "approve"}))
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{b}");
    let got = bodies(&recv, 3).await;
    assert_eq!(
        events(&got),
        [
            "approval.requested",
            "approval.escalated",
            "approval.escalated"
        ]
    );
    for (body, step, added, approvers) in [
        (&got[1], 1, json!(["lead"]), json!(["finance", "lead"])),
        (
            &got[2],
            2,
            json!(["cfo"]),
            json!(["finance", "lead", "cfo"]),
        ),
    ] {
        let e = &body["escalation"];
        assert_eq!(
            (&e["step"], &e["steps"], &e["added"], &e["approvers"]),
            (&json!(step), &json!(2), &added, &approvers),
            "{body}"
        );
        assert!(
            e["expires_at"].is_string() && e["deadline"].is_string(),
            "{body}"
        );
    }
    // Attack on availability (found by review): the single-use card link of the request
    // expired with the first escalation step (`expires_at`), so the people it was sent to
    // got 410 for an approval still waiting for them. It lasts to the announced deadline.
    let r = open_link(&gw, got[0]["links"]["open_once"].as_str().unwrap()).await;
    assert_eq!(
        r.status(),
        StatusCode::SEE_OTHER,
        "past two escalation steps"
    );
    let (s, b) = gw
        .decide_with(&id, "carl-key", json!({"decision": "approve"}))
        .await;
    assert_answer(s, &b, "status", StatusCode::OK, "approved");
    gw.stop().await;
}

/// Attack: someone with write access to the database edits a held call's arguments (the payee)
/// before its notification goes out, so that the reviewer reads the edited call as the agent's
/// request. Deciding it is refused as damaged, but the webhook and the dashboard's card showed
/// it as genuine. Now the body's `damaged` names what no seal vouches for (empty for a row the
/// gateway wrote), and the card warns (as the Slack card does, offering no decision).
#[tokio::test]
async fn a_call_edited_in_the_database_is_announced_as_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let rules = "- tool: pay\n  approvers: [finance]\n";
    let (recv, gw, first) = pay_pending(dir.path(), rules, ("fred", &[]), "approval.vote").await;
    let got = bodies(&recv, 1).await;
    assert_eq!(got[0]["approval"]["id"], first.as_str());
    assert_eq!(got[0]["approval"]["damaged"], json!([]), "{}", got[0]);
    // The cursor moves past the first event only once its receiver answered: the lease is
    // taken from the delivery after that, or the first event would be sent again.
    let seq = got[0]["audit_seq"].as_i64().unwrap();
    let passed = "SELECT last_seq FROM webhook_cursors WHERE webhook = 'ops'";
    let start = std::time::Instant::now();
    while gw.sql().int(passed, &[]) < seq {
        assert!(
            start.elapsed().as_secs() < 30,
            "the cursor never passed {seq}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Delivery is held by another holder's lease while the next call is held and edited.
    // Within the lease's length (a lease further ahead is taken for lapsed).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let lease = format!(
        "UPDATE webhook_cursors SET holder = 'elsewhere', lease_until = {} WHERE webhook = 'ops'",
        now + 20_000
    );
    assert_eq!(gw.sql().exec(&lease, &[]), 1);
    let evil = gw
        .pending("pay", json!({"amount": 501, "to": "acme"}))
        .await;
    assert_ne!(evil, first);
    let edit = format!(
        "UPDATE approvals SET arguments = '{{\"amount\":501,\"to\":\"mallory\"}}' WHERE id = '{evil}'"
    );
    assert_eq!(gw.sql().exec(&edit, &[]), 1);
    let release = "UPDATE webhook_cursors SET holder = NULL, lease_until = 0 WHERE webhook = 'ops'";
    assert_eq!(gw.sql().exec(release, &[]), 1);
    let got = bodies(&recv, 2).await;
    let shown = &got[1]["approval"];
    assert_eq!(shown["id"], evil.as_str(), "{shown}");
    let damaged = shown["damaged"].as_array().unwrap();
    assert!(damaged.contains(&json!("call")), "{shown}");
    // The operator's card says so too, above the call it shows; an intact one does not.
    let cookie = gw.dashboard_session().await;
    let card = gw
        .dashboard_page(&format!("/ui/approvals/{evil}"), &cookie)
        .await;
    assert!(
        card.contains(r#"id="damaged""#) && card.contains("not as assent sealed it (call)"),
        "{card}"
    );
    let fine = gw
        .dashboard_page(&format!("/ui/approvals/{first}"), &cookie)
        .await;
    assert!(
        fine.contains("acme") && !fine.contains(r#"id="damaged""#),
        "{fine}"
    );
    // And the operator's view over the API.
    let (_, view) = gw.get(&format!("/v1/approvals/{evil}"), OP).await;
    assert_eq!(view["damaged"], json!(["call"]), "{view}");
    // And deciding it is refused, as before.
    let (s, b) = gw.decide(&evil, OP, "approve").await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert_eq!(b["code"], "APPROVAL_DAMAGED", "{b}");
    // Settled, a token whose seal does not hold (as under a replaced audit key) is named as
    // not vouched for, not as tampered with: `assent audit verify` judges it.
    let (s, b) = gw.decide(&first, OP, "approve").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let forge = format!("UPDATE tokens SET seal = 'forged' WHERE approval_id = '{first}'");
    assert_eq!(gw.sql().exec(&forge, &[]), 1);
    let settled = gw
        .dashboard_page(&format!("/ui/approvals/{first}"), &cookie)
        .await;
    assert!(
        settled.contains("not vouched for by this gateway's seals (tokens.seal)")
            && !settled.contains("not as assent sealed it"),
        "{settled}"
    );
    gw.stop().await;
}

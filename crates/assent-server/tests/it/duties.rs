//! Separation of duties through the HTTP API (issue 14 §2): the owner of an agent
//! (`principals[].owns`) and the person a call acts for (`on_behalf_of`) may not approve it
//! when a covering rule says `separation_of_duties` (the default for R4); `403
//! SELF_APPROVAL`, audited; saying no stays open to them.

use crate::backend::audit_count;
use crate::kit::{assert_answer, assert_error};
use crate::quorum::{args, gateway_rules, held_under};
use reqwest::StatusCode;
use serde_json::json;

/// Attack: the operator who owns agent `bot` approves its R4 payment themself.
#[tokio::test]
async fn the_owner_of_an_agent_may_not_approve_its_r4_call() {
    let (_dir, gw, id) = held_under(
        "- tool: pay\n  approvers: [finance]\n  risk_tier: R4\n  require_passkey: false\n",
    )
    .await;
    let (s, b) = gw.decide(&id, "olga-key", "approve").await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "SELF_APPROVAL");
    assert!(
        b["message"].as_str().unwrap().contains("owns agent `bot`"),
        "{b}"
    );
    assert_eq!(audit_count(&gw.data_dir, "decision.refused"), 1);
    assert_eq!(gw.approval(&id, "alice-key").await.1["status"], "pending");
    let (s, a) = gw.decide(&id, "alice-key", "approve").await;
    assert_answer(s, &a, "status", StatusCode::OK, "approved");
    // Saying no stays open to the owner.
    let id = gw.held("s2", "pay", args()).await;
    let (s, a) = gw.decide(&id, "olga-key", "deny").await;
    assert_answer(s, &a, "status", StatusCode::OK, "rejected");
    gw.stop().await;
}

/// Attack: the person an agent acts for approves the call they asked the agent to make.
#[tokio::test]
async fn the_person_a_call_acts_for_may_not_approve_it() {
    let dir = tempfile::tempdir().unwrap();
    let rules = "- tool: pay\n  approvers: [finance]\n  separation_of_duties: true\n";
    let gw = gateway_rules(dir.path(), rules).await;
    let (s, b) = gw
        .call("s1", "pay", args(), json!({"on_behalf_of": "alice"}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let id = b["approval_id"].as_str().unwrap().to_string();
    let (_, a) = gw.approval(&id, "fred-key").await;
    assert_eq!(a["on_behalf_of"], "alice", "{a}");
    // The card says who may not approve it.
    let cookie = gw.dashboard_session().await;
    let page = gw
        .dashboard_page(&format!("/ui/approvals/{id}"), &cookie)
        .await;
    assert!(
        page.contains("Separation of duties: not to be approved by the owners of agent bot, nor alice (the call acts for them)."),
        "{page}"
    );
    let (s, b) = gw.decide(&id, "alice-key", "approve").await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "SELF_APPROVAL");
    // The owner is refused here too (the rule turns it on below R4).
    let (s, b) = gw.decide(&id, "olga-key", "approve").await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "SELF_APPROVAL");
    let (_, a) = gw.decide(&id, "fred-key", "approve").await;
    assert_eq!(a["status"], "approved", "{a}");
    // A bad on_behalf_of is refused before anything is held.
    let (s, b) = gw
        .call("s1", "pay", args(), json!({"on_behalf_of": ""}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    gw.stop().await;
}

#[tokio::test]
async fn separation_of_duties_is_off_below_r4_unless_a_rule_says_so_and_a_rule_may_turn_it_off() {
    for (rules, owner_may) in [
        ("- tool: pay\n  approvers: [finance]\n", true),
        (
            "- tool: pay\n  approvers: [finance]\n  risk_tier: R4\n  require_passkey: false\n  separation_of_duties: false\n",
            true,
        ),
        (
            "- tool: pay\n  approvers: [finance]\n  risk_tier: R4\n  require_passkey: false\n",
            false,
        ),
    ] {
        let (_dir, gw, id) = held_under(rules).await;
        let (s, b) = gw.decide(&id, "olga-key", "approve").await;
        assert_eq!(s == StatusCode::OK, owner_may, "{rules}: {b}");
        gw.stop().await;
    }
}

/// On a quorum, the owner's vote is refused and does not count.
#[tokio::test]
async fn an_owners_vote_on_a_quorum_is_refused() {
    let rules = "- tool: pay\n  approvers: {roles: [finance], count: 2}\n  risk_tier: R4\n  require_passkey: false\n";
    let (_dir, gw, id) = held_under(rules).await;
    let (s, b) = gw.decide(&id, "olga-key", "approve").await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "SELF_APPROVAL");
    gw.decide(&id, "alice-key", "approve").await;
    let (_, a) = gw.decide(&id, "fred-key", "approve").await;
    assert_eq!(a["status"], "approved", "{a}");
    let voters: Vec<&str> = a["votes"]["cast"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["by"].as_str().unwrap())
        .collect();
    assert_eq!(voters, ["alice", "fred"]);
    gw.stop().await;
}

/// Attack (found by review): an agent fronted by Slack knows the person it acts for by their
/// Slack user id and sends `on_behalf_of: U0ALICE`; alice, whose principal carries that
/// `slack_user_id`, approved her own request because only her name and SSO names were
/// compared. Her Slack id is one of the names she goes by.
#[tokio::test]
async fn the_person_a_call_acts_for_by_their_slack_id_may_not_approve_it() {
    let dir = tempfile::tempdir().unwrap();
    let rules = "- tool: pay\n  approvers: [finance]\n  separation_of_duties: true\n";
    let gov = crate::kit::policy("acme.test.slack_duties", rules);
    let gw = crate::kit::start_gov(dir.path(), &gov, |st| {
        let mut all = (*st.principals()).clone();
        for p in all.iter_mut().filter(|p| p.name == "alice") {
            p.slack_user_id = Some("U0ALICE".into());
        }
        st.swap_live(assent_server::Live::new((*st.registry()).clone(), all));
    })
    .await;
    let (s, b) = gw
        .call("s1", "pay", args(), json!({"on_behalf_of": "U0ALICE"}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let id = b["approval_id"].as_str().unwrap().to_string();
    let (s, b) = gw.decide(&id, "alice-key", "approve").await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "SELF_APPROVAL");
    assert_eq!(gw.approval(&id, "alice-key").await.1["status"], "pending");
    gw.stop().await;
}
